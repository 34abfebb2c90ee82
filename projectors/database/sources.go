package database

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// OutcomeRouter turns the journal's outcome watch into reconcile requests
// per kind: the record's object reference gives namespace/name.
type OutcomeRouter struct {
	Journal *journal.Store
	// Instances and Tenants receive requests for their kind.
	Instances chan reconcile.Request
	Tenants   chan reconcile.Request
}

// NewOutcomeRouter creates the channels.
func NewOutcomeRouter(j *journal.Store) *OutcomeRouter {
	return &OutcomeRouter{Journal: j, Instances: make(chan reconcile.Request, 1024), Tenants: make(chan reconcile.Request, 1024)}
}

// Start watches database outcomes until ctx is done (a manager Runnable).
func (o *OutcomeRouter) Start(ctx context.Context) error {
	ch, err := o.Journal.WatchOutcomes(ctx, "database")
	if err != nil {
		return err
	}
	for rec := range ch {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}}
		var target chan reconcile.Request
		switch rec.Object.Kind {
		case "PostgreSQLInstance":
			target = o.Instances
		case "PostgreSQLTenant":
			target = o.Tenants
		default:
			continue
		}
		select {
		case target <- req:
		default:
			// The projector requeues pending work on its own; dropping a
			// wake-up under back-pressure loses nothing.
		}
	}
	return nil
}

// NeedLeaderElection: only the leader runs projectors.
func (o *OutcomeRouter) NeedLeaderElection() bool { return true }

// channelSource adapts a request channel to a controller-runtime source.
func channelSource(ch <-chan reconcile.Request) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case req := <-ch:
					q.Add(req)
				}
			}
		}()
		return nil
	})
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
