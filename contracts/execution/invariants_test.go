package execution_test

import (
	"testing"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func note(seq uint64, op string) journal.Record {
	return journal.Record{ID: op, Type: journal.TypeNote, Operation: op, Sequence: seq, Attempt: 1,
		Object: journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ci", Name: "b", UID: "u"}}
}

func intent(seq uint64, op string) journal.Record {
	r := note(seq, op)
	r.ID, r.Type = op+"-intent", journal.TypeIntent
	return r
}

func ttlViolations(recs []journal.Record) int {
	var inv journal.Invariant
	for _, i := range execution.Invariants {
		if i.Rule == execution.RuleTTLBeforeFinished {
			inv = i
		}
	}
	check := inv.New()
	n := 0
	for _, r := range recs {
		n += len(check(r))
	}
	return n
}

// The TTL rule flags a TTL delete without the Job's result, but not a
// history that retention cut: a stream older than its MaxAge has lost
// every record of a Job before (and including) its Finished note while the
// TTLExpired note, one TTL later, is still there.
func TestTTLBeforeFinishedToleratesRetention(t *testing.T) {
	if n := ttlViolations([]journal.Record{intent(1, execution.OpEnsure), note(2, execution.NoteTTLExpired)}); n != 1 {
		t.Fatalf("a TTL delete after an Ensure without a Finished note: %d violations, want 1", n)
	}
	if n := ttlViolations([]journal.Record{intent(1, execution.OpEnsure), note(2, execution.NoteFinished), note(3, execution.NoteTTLExpired)}); n != 0 {
		t.Fatalf("a complete history: %d violations", n)
	}
	if n := ttlViolations([]journal.Record{note(7, execution.NoteTTLExpired), intent(8, execution.OpDelete)}); n != 0 {
		t.Fatalf("a history cut by retention before the TTL note: %d violations, want 0", n)
	}
}
