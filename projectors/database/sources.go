package database

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
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

// finalizerOrDeletionChanged passes updates that add a deletion timestamp
// or change finalizers (generation does not change for those).
type finalizerOrDeletionChanged struct{ predicate.Funcs }

func (finalizerOrDeletionChanged) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}
	return !e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp()) ||
		strings.Join(e.ObjectOld.GetFinalizers(), ",") != strings.Join(e.ObjectNew.GetFinalizers(), ",")
}

// statusWiped passes updates whose status lost its phase (a cleared status
// must be rebuilt) or whose phase changed from outside.
type statusWiped struct{ predicate.Funcs }

func (statusWiped) Update(e event.UpdateEvent) bool {
	switch n := e.ObjectNew.(type) {
	case *v1alpha1.PostgreSQLInstance:
		o, ok := e.ObjectOld.(*v1alpha1.PostgreSQLInstance)
		return ok && (n.Status.Phase == "" || len(n.Status.Conditions) == 0) && o.Status.Phase != ""
	case *v1alpha1.PostgreSQLTenant:
		o, ok := e.ObjectOld.(*v1alpha1.PostgreSQLTenant)
		return ok && (n.Status.Phase == "" || len(n.Status.Conditions) == 0) && o.Status.Phase != ""
	}
	return false
}

func isIndexConflict(err error) bool {
	return err != nil && strings.Contains(err.Error(), "indexer conflict")
}
