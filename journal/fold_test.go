package journal_test

import (
	"testing"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestFoldTakesNothingFromAnswersToUnknownIntents: an executor's answer to
// a record it could not attribute or decode carries the object name and
// operation that record's publisher chose; the fold keeps it among the
// orphans (and by its causation ID) but takes neither the object nor a
// step's last outcome from it.
func TestFoldTakesNothingFromAnswersToUnknownIntents(t *testing.T) {
	o := obj()
	in := intent(t, o, "ObserveInstance", 1)
	in.Sequence = 1
	out, err := journal.NewOutcome(*in, journal.Result{Class: journal.Succeeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.Sequence = 2
	forged := o
	forged.Namespace, forged.Name = "elsewhere", "forged"
	refused := journal.Record{ID: journal.UntrustedIntentID(o.UID, 3), Type: journal.TypeIntent, Operation: "DropDatabase", Object: forged, Attempt: 1}
	answer, err := journal.NewOutcome(refused, journal.Result{Class: journal.Failed, Reason: journal.ReasonUntrustedIntent}, nil)
	if err != nil {
		t.Fatal(err)
	}
	answer.Sequence = 4
	st := journal.Fold([]journal.Record{*in, out, answer})
	if st.Object != o {
		t.Errorf("object %v, want %v", st.Object, o)
	}
	if _, ok := st.LastOutcome["DropDatabase"]; ok || st.LastOutcome["ObserveInstance"].Sequence != 2 {
		t.Errorf("last outcomes %v", st.StepKeys())
	}
	if len(st.Orphans) != 1 || st.LastSequence != 4 {
		t.Errorf("orphans %d, last sequence %d", len(st.Orphans), st.LastSequence)
	}
	if _, ok := st.OutcomeOf(refused.ID); !ok {
		t.Error("the answer is not found by its causation ID")
	}
	// Only answers: the object is still named.
	if only := journal.Fold([]journal.Record{answer}); only.Object != forged {
		t.Errorf("object of an orphan-only fold %v", only.Object)
	}
}
