package journaled

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func cm(rv string, gen int64, ann map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "o", UID: "uid-1", ResourceVersion: rv, Generation: gen, Annotations: ann}}
}

// The watch event of this process's own last write is dropped; every
// other write (another resourceVersion, or one that changed what a
// decision reads outside the status) starts a pass.
func TestOwnWritesDropsOnlyTheOwnWritesEvent(t *testing.T) {
	var w OwnWrites
	p := w.Predicate()
	upd := func(old, new *corev1.ConfigMap) bool {
		return p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: new})
	}
	if !upd(cm("1", 1, nil), cm("2", 1, nil)) {
		t.Fatal("nothing recorded: the update must pass")
	}
	w.Record(cm("2", 1, nil))
	if upd(cm("1", 1, nil), cm("2", 1, nil)) {
		t.Fatal("the own write's event passed")
	}
	if !upd(cm("2", 1, nil), cm("3", 1, nil)) {
		t.Fatal("a later write by someone else (a forged status) was dropped")
	}
	if !upd(cm("1", 1, nil), cm("2", 2, nil)) {
		t.Fatal("a generation change was dropped")
	}
	if !upd(cm("1", 1, nil), cm("2", 1, map[string]string{"a": "b"})) {
		t.Fatal("an annotation change was dropped")
	}
	gone := cm("2", 1, nil)
	if !p.Delete(event.DeleteEvent{Object: gone}) {
		t.Fatal("a delete was dropped")
	}
	if !upd(cm("1", 1, nil), cm("2", 1, nil)) {
		t.Fatal("a deleted object's write is still remembered")
	}
	var none *OwnWrites
	none.Record(cm("2", 1, nil))
	if none.IsOwn(cm("1", 1, nil), cm("2", 1, nil)) {
		t.Fatal("a nil OwnWrites filtered an event")
	}
}
