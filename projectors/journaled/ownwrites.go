package journaled

import (
	"reflect"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// OwnWrites remembers, per object UID, the resourceVersion this process's
// last write of the object (the finalizer, the status) produced, so that
// the watch event of that very write does not start another pass: the pass
// that wrote it already decided on everything the event carries, and a
// redundant pass holds the object's key while the executor's outcome
// arrives (about one such pass per step). Any other write — a
// user's, a forged status, another replica's — has another
// resourceVersion and starts a pass as before. Safe for concurrent use;
// the zero value is ready. A nil *OwnWrites records nothing and filters
// nothing.
type OwnWrites struct {
	m sync.Map // UID -> resourceVersion
}

// Record notes obj's current resourceVersion as this process's own write.
func (w *OwnWrites) Record(obj client.Object) {
	if w == nil || obj.GetResourceVersion() == "" {
		return
	}
	w.m.Store(obj.GetUID(), obj.GetResourceVersion())
}

// Forget drops what is remembered of uid (the object is gone).
func (w *OwnWrites) Forget(obj client.Object) {
	if w != nil {
		w.m.Delete(obj.GetUID())
	}
}

// IsOwn reports whether an update from old to new is exactly this
// process's last recorded write: new's resourceVersion is the recorded one
// and nothing a decision reads outside the status changed in the event's
// view (generation, deletion, labels, annotations, owner references).
// Finalizer changes are this process's own by construction (its
// finalizer patch is the recorded write).
func (w *OwnWrites) IsOwn(old, new client.Object) bool {
	if w == nil || old == nil || new == nil {
		return false
	}
	rv, ok := w.m.Load(new.GetUID())
	if !ok || rv.(string) != new.GetResourceVersion() {
		return false
	}
	return old.GetGeneration() == new.GetGeneration() &&
		old.GetDeletionTimestamp().Equal(new.GetDeletionTimestamp()) &&
		reflect.DeepEqual(old.GetLabels(), new.GetLabels()) &&
		reflect.DeepEqual(old.GetAnnotations(), new.GetAnnotations()) &&
		reflect.DeepEqual(old.GetOwnerReferences(), new.GetOwnerReferences())
}

// Predicate drops the update events IsOwn recognises and forgets a
// deleted object; every other event passes.
func (w *OwnWrites) Predicate() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool { return !w.IsOwn(e.ObjectOld, e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool {
			w.Forget(e.Object)
			return true
		},
	}
}
