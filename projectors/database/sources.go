package database

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// Kinds of the database domain, as journal object references name them.
const (
	KindInstance = "PostgreSQLInstance"
	KindTenant   = "PostgreSQLTenant"
)

// OutcomeRouter routes the database domain's outcomes to its projectors
// (a journaled.OutcomeRouter; a manager Runnable).
type OutcomeRouter struct {
	*journaled.OutcomeRouter
	// Instances and Tenants receive requests for their kind.
	Instances, Tenants <-chan reconcile.Request
}

// NewOutcomeRouter creates the router and its channels.
func NewOutcomeRouter(j *journal.Store) *OutcomeRouter {
	o := journaled.NewOutcomeRouter(j, "database", KindInstance, KindTenant)
	return &OutcomeRouter{OutcomeRouter: o, Instances: o.For(KindInstance), Tenants: o.For(KindTenant)}
}

// isIndexConflict: the field index is already registered (a second
// controller of this manager registered it first). This is a text match
// because nothing typed exists: client-go's threadSafeMap.AddIndexers
// returns fmt.Errorf("indexer conflict: %v", ...) (tools/cache/
// thread_safe_store.go, client-go v0.37), controller-runtime's informer
// cache passes it through unwrapped, and neither exports a sentinel or an
// error type for it. The error never reaches a Condition: it only decides
// whether manager setup fails.
func isIndexConflict(err error) bool {
	return err != nil && strings.Contains(err.Error(), "indexer conflict")
}
