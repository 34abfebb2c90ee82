package database

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// setReady records the Ready condition for generation gen in conds and
// returns the previous one (zero when there was none).
func setReady(conds *[]metav1.Condition, gen int64, ready ReadyCondition) metav1.Condition {
	return journaled.SetCondition(conds, databasev1alpha1.ConditionReady, gen, ready)
}

// patchStatus writes obj's status (journaled.PatchStatus: merge patch with
// an optimistic lock). Once written, a change of the Ready condition's
// status or reason (from old) is announced as a Ready (Normal) or NotReady
// (Warning) Event.
func patchStatus(ctx context.Context, c client.Client, rec events.EventRecorder, obj, before client.Object, old metav1.Condition, ready ReadyCondition) error {
	if err := journaled.PatchStatus(ctx, c, obj, before); err != nil {
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
