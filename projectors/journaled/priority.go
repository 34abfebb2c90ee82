package journaled

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// PriorityReleasing is the work-queue priority of a pass over an object
// whose deletion started (controller-runtime's priority queue: higher goes
// first; 0 is the default, handler.LowPriority an informer's initial list
// or resync). A saturated projector then finishes what releases objects,
// and the backend resources behind them, before it starts new work, so a
// deletion does not wait behind every object created after it (issue 28:
// the TTL deletion lag). A requeue keeps the priority its pass was taken
// with. Without a priority queue every request goes in as before.
const PriorityReleasing = 10

// EnqueueReleasingFirst is the event handler of a projector's own kind:
// it enqueues the object of every event, with PriorityReleasing once its
// deletion started.
func EnqueueReleasingFirst() handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
		addReleasingFirst(q, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}, !o.GetDeletionTimestamp().IsZero())
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
	}
}

// ReleasingFirst adapts a request channel to a source (like Source) whose
// requests go in with PriorityReleasing when releasing reports that the
// object's deletion started (read from the informer cache: a hint for the
// order, never a decision).
func ReleasingFirst(ch <-chan reconcile.Request, releasing func(context.Context, reconcile.Request) bool) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case req := <-ch:
					addReleasingFirst(q, req, releasing(ctx, req))
				}
			}
		}()
		return nil
	})
}

func addReleasingFirst(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request, releasing bool) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && releasing {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(PriorityReleasing)}, req)
		return
	}
	q.Add(req)
}
