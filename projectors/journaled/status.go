package journaled

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// EventIntentAppended is the reason of the Event AnnounceIntent emits.
const EventIntentAppended = "IntentAppended"

// Condition is a desired condition without its type and generation.
type Condition struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// SetCondition records condition typ for generation gen in conds and
// returns the previous one (zero when there was none). The transition time
// changes only with the status (meta.SetStatusCondition).
func SetCondition(conds *[]metav1.Condition, typ string, gen int64, c Condition) metav1.Condition {
	var old metav1.Condition
	if prev := meta.FindStatusCondition(*conds, typ); prev != nil {
		old = *prev
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: c.Status, Reason: c.Reason, Message: c.Message, ObservedGeneration: gen})
	return old
}

// EqualConditions compares the fields projectors write (not the
// transition times, which only change with them).
func EqualConditions(a, b []metav1.Condition) bool {
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

// PatchStatus writes obj's status as a merge patch from before, with an
// optimistic lock: a status written meanwhile (by a user, or a forged one)
// makes the patch conflict, so the next pass decides on fresh data.
func PatchStatus(ctx context.Context, c client.Client, obj, before client.Object) error {
	return c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// AnnounceIntent emits an IntentAppended Event (Normal, action = the
// operation) for an intent the journal just stored, so `kubectl describe`
// shows each step as it is decided. A duplicate append (the record already
// existed) is not announced again. The note names the operation, attempt
// and stream sequence only: payloads never reach Events.
func AnnounceIntent(rec events.EventRecorder, obj runtime.Object, op string, attempt int, res journal.AppendResult) {
	if rec == nil || res.Duplicate {
		return
	}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, EventIntentAppended, op,
		"%s decided (attempt %d, journal sequence %d); an executor runs it next", op, attempt, res.Sequence)
}
