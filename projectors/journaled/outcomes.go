package journaled

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// OutcomeRouter turns one domain's outcome watch into reconcile requests
// per kind: the record's object reference gives namespace/name, its kind
// the projector. It is a manager Runnable (leader only).
type OutcomeRouter struct {
	journal *journal.Store
	domain  string
	routes  map[string]chan reconcile.Request
	// RetryInterval is the pause before the watch is opened again after
	// it could not be (the journal is unreachable); default 2 s.
	RetryInterval time.Duration
	// OnWatchError, when set, is told each failed attempt (for a log line).
	OnWatchError func(error)
}

// NewOutcomeRouter routes the outcomes of domain (journal subject token,
// e.g. "database") to one buffered channel per kind.
func NewOutcomeRouter(j *journal.Store, domain string, kinds ...string) *OutcomeRouter {
	o := &OutcomeRouter{journal: j, domain: domain, routes: map[string]chan reconcile.Request{}}
	for _, k := range kinds {
		o.routes[k] = make(chan reconcile.Request, 1024)
	}
	return o
}

// For returns the requests of one kind (nil for a kind not routed).
func (o *OutcomeRouter) For(kind string) <-chan reconcile.Request { return o.routes[kind] }

// Start watches the domain's outcomes until ctx is done; it returns nil
// then. A watch that cannot be opened (the journal is down, for instance
// when this replica wins the lease during an outage) is opened again every
// RetryInterval: the router never stops the manager. Outcomes appended
// while no watch was open are not routed; the projectors' periodic
// re-check reconciles them (a wake-up, never a decision, is lost).
func (o *OutcomeRouter) Start(ctx context.Context) error {
	wait := o.RetryInterval
	if wait <= 0 {
		wait = 2 * time.Second
	}
	for {
		ch, err := o.journal.WatchOutcomes(ctx, o.domain)
		if err == nil {
			o.route(ch)
			return nil // ch closes only when ctx is done
		}
		if ctx.Err() != nil {
			return nil
		}
		if o.OnWatchError != nil {
			o.OnWatchError(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (o *OutcomeRouter) route(ch <-chan journal.Record) {
	for rec := range ch {
		target, ok := o.routes[rec.Object.Kind]
		if !ok {
			continue
		}
		select {
		case target <- reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}}:
		default:
			// The projector requeues pending work on its own; dropping a
			// wake-up under back-pressure loses nothing.
		}
	}
}

// NeedLeaderElection: only the leader runs projectors.
func (o *OutcomeRouter) NeedLeaderElection() bool { return true }

// Source adapts a request channel to a controller-runtime source
// (Builder.WatchesRawSource).
func Source(ch <-chan reconcile.Request) source.Source {
	return ReleasingFirst(ch, func(context.Context, reconcile.Request) bool { return false })
}
