package execution_test

import (
	"strings"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

const fUID = "5b1e9f7a-2c4d-4e8f-8a1b-0000000f0001"

func fRef() journal.ObjectRef {
	return journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ci", Name: "x", UID: fUID, Generation: 1}
}

func fNote(t *testing.T, seq uint64, op string, payload any) journal.Record {
	t.Helper()
	r := journal.Record{ID: fUID + "/note/" + op, Type: journal.TypeNote, Operation: op, Object: fRef(), Attempt: 1,
		Sequence: seq, Time: time.Date(2026, 12, 1, 9, 0, int(seq), 0, time.UTC)}
	if err := r.SetPayload(payload); err != nil {
		t.Fatal(err)
	}
	return r
}

// A Job cancelled before any execution was created has a Finished note and
// nothing to clean up: its projector releases the finalizer without a
// Delete intent. Deleted by hand afterwards, it is gone as its journal
// says, not "without the projector".
func TestCompareLiveCancelledBeforeExecutionThenDeleted(t *testing.T) {
	recs := []journal.Record{fNote(t, 1, execution.NoteFinished, execution.FinishedNote{Reason: "Cancelled"})}
	c := execution.CompareLive(nil, fUID, recs)
	if len(c.Mismatches) != 0 {
		t.Fatalf("mismatches %q for a Job that finished without an execution and was deleted", c.Mismatches)
	}
	if !strings.Contains(c.Verdict, "deleted") {
		t.Fatalf("verdict %q, want it to say the Job was deleted", c.Verdict)
	}
	if s := execution.Summary(recs); s != "result=Failed reason=Cancelled" {
		t.Fatalf("summary %q", s)
	}
}

// A Job that had an execution, finished and is gone without a Delete of
// its backend resources went without its projector: that stays a mismatch.
func TestCompareLiveExecutedGoneWithoutDeleteIsMismatch(t *testing.T) {
	in, err := journal.NewIntent(fRef(), execution.OpEnsure, "", 1, execution.EnsureIntent{Adapter: execution.AdapterKubernetes, Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	in.Sequence = 1
	recs := []journal.Record{in, fNote(t, 2, execution.NoteFinished, execution.FinishedNote{Succeeded: true, Reason: "Completed"})}
	if c := execution.CompareLive(nil, fUID, recs); len(c.Mismatches) != 1 {
		t.Fatalf("mismatches %q, want one", c.Mismatches)
	}
}

// A Job whose backend Delete has not succeeded (the backend is unreachable:
// the finalizer holds the Job) is being deleted, not deleted: list must
// not tell the operator investigating it that it is gone.
func TestSummaryDeleteNotDoneIsNotDeleted(t *testing.T) {
	in, err := journal.NewIntent(fRef(), execution.OpEnsure, "", 1, execution.EnsureIntent{Adapter: execution.AdapterKubernetes, Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	in.Sequence = 1
	del, err := journal.NewIntent(fRef(), execution.OpDelete, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes})
	if err != nil {
		t.Fatal(err)
	}
	del.Sequence = 4
	out, err := journal.NewOutcome(del, journal.Result{Class: journal.ResultUnknown, Reason: "BackendUnavailable"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.Sequence = 5
	for _, ttlNote := range []bool{false, true} {
		recs := []journal.Record{in, fNote(t, 2, execution.NoteFinished, execution.FinishedNote{Succeeded: true, Reason: "Completed"})}
		if ttlNote {
			recs = append(recs, fNote(t, 3, execution.NoteTTLExpired, execution.TTLNote{TTLSecondsAfterFinished: 60}))
		}
		recs = append(recs, del, out)
		s := execution.Summary(recs)
		if strings.HasSuffix(s, ", deleted") || strings.HasSuffix(s, ", deleted by TTL") {
			t.Fatalf("summary %q for a Job whose backend Delete is not done", s)
		}
		if !strings.Contains(s, "being deleted") {
			t.Fatalf("summary %q, want it to say the Job is being deleted", s)
		}
	}
}
