package journaled

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A deleting object's pass goes before work queued earlier: from the
// kind's own events and from the outcome source alike.
func TestReleasingFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	obj := func(name string, deleting bool) *corev1.ConfigMap {
		o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "2"}}
		if deleting {
			now := metav1.Now()
			o.DeletionTimestamp = &now
		}
		return o
	}
	h := EnqueueReleasingFirst()
	h.Create(ctx, event.CreateEvent{Object: obj("new-1", false)}, q)
	old := obj("going", false)
	old.ResourceVersion = "1"
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: obj("going", true)}, q)
	h.Create(ctx, event.CreateEvent{Object: obj("new-2", false)}, q)

	ch := make(chan reconcile.Request, 2)
	releasing := func(_ context.Context, req reconcile.Request) bool { return req.Name == "outcome-of-going" }
	if err := ReleasingFirst(ch, releasing).Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	ch <- reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "outcome-of-running"}}
	ch <- reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "outcome-of-going"}}
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var got []string
	for q.Len() > 0 {
		item, prio, _ := q.GetWithPriority()
		got = append(got, item.Name)
		if want := 0; item.Name == "going" || item.Name == "outcome-of-going" {
			if prio != PriorityReleasing {
				t.Errorf("%s: priority %d, want %d", item.Name, prio, PriorityReleasing)
			}
		} else if prio != want {
			t.Errorf("%s: priority %d, want %d", item.Name, prio, want)
		}
		q.Done(item)
	}
	if len(got) != 5 || !(got[0] == "going" || got[0] == "outcome-of-going") || !(got[1] == "going" || got[1] == "outcome-of-going") {
		t.Fatalf("order %v, want the two releasing passes first", got)
	}
}
