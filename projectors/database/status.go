package database

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// setReady records the Ready condition for generation gen in conds and
// returns the previous one (zero when there was none).
func setReady(conds *[]metav1.Condition, gen int64, ready ReadyCondition) metav1.Condition {
	var old metav1.Condition
	if c := meta.FindStatusCondition(*conds, v1alpha1.ConditionReady); c != nil {
		old = *c
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionReady, Status: ready.Status,
		Reason: ready.Reason, Message: ready.Message, ObservedGeneration: gen})
	return old
}

// patchStatus writes obj's status as a merge patch from before, with an
// optimistic lock: a status written meanwhile (by a user, or a forged one)
// makes the patch conflict, so the next pass decides on fresh data. Once
// written, a change of the Ready condition's status or reason (from old)
// is announced as a Ready (Normal) or NotReady (Warning) Event.
func patchStatus(ctx context.Context, c client.Client, rec events.EventRecorder, obj, before client.Object, old metav1.Condition, ready ReadyCondition) error {
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if rec == nil || (old.Status == ready.Status && old.Reason == ready.Reason) {
		return nil
	}
	switch ready.Status {
	case metav1.ConditionTrue:
		rec.Eventf(obj, nil, corev1.EventTypeNormal, EventReady, "Reconcile", "%s", ready.Message)
	case metav1.ConditionFalse:
		rec.Eventf(obj, nil, corev1.EventTypeWarning, EventNotReady, "Reconcile", "%s: %s", ready.Reason, ready.Message)
	}
	return nil
}

// equalConditions compares the fields the projectors write (not the
// transition times, which only change with them).
func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// announceIntent emits an IntentAppended Event (Normal, action = the
// operation) for an intent the journal just stored, so `kubectl describe`
// shows each step as it is decided. A duplicate append (the record already
// existed) is not announced again. The note names the operation, attempt
// and stream sequence only: payloads never reach Events.
func announceIntent(rec events.EventRecorder, obj runtime.Object, op string, attempt int, res journal.AppendResult) {
	if rec == nil || res.Duplicate {
		return
	}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, EventIntentAppended, op,
		"%s decided (attempt %d, journal sequence %d); an executor runs it next", op, attempt, res.Sequence)
}

// statusBehind reports whether the API server's copy of the object (read
// into live, key of the cached object) has a status phase although the
// cached copy had none: then the "status was lost" decision is an artifact
// of the informer cache not having seen the projector's own last status
// write yet, and the pass is repeated instead of restarting every step.
// phase reads live's status phase. With a nil reader it trusts the cache.
func statusBehind(ctx context.Context, reader client.Reader, key client.ObjectKey, live client.Object, phase func() string) (bool, error) {
	if reader == nil {
		return false, nil
	}
	if err := reader.Get(ctx, key, live); err != nil {
		return false, err
	}
	return phase() != "", nil
}

// result returns res, or only err when there is one: controller-runtime
// ignores a result returned next to an error (the error's back-off wins)
// and warns about the pair.
func result(res reconcile.Result, err error) (reconcile.Result, error) {
	if err != nil {
		return reconcile.Result{}, err
	}
	return res, nil
}
