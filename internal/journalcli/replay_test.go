package journalcli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// compareLive: every disagreement between the live object and the journal
// that replay --kubeconfig reports, and none on agreement.
func TestCompareLive(t *testing.T) {
	obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "netbox", Name: "netbox",
		UID: "7d3c0e52-1c1a-4b8e-9a53-000000000002", Generation: 1}
	var recs []journal.Record
	add := func(r journal.Record) journal.Record {
		r.Sequence, r.Time = uint64(len(recs)+1), time.Date(2026, 11, 29, 10, 0, len(recs), 0, time.UTC)
		recs = append(recs, r)
		return r
	}
	intent := func(op string) journal.Record {
		r, err := journal.NewIntent(obj, op, "", 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		return add(r)
	}
	outcome := func(in journal.Record, c journal.ResultClass) {
		r, err := journal.NewOutcome(in, journal.Result{Class: c, Reason: string(c)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		add(r)
	}
	live := func(uid string, gen, observed int64, ready, reason string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetUID(types.UID(uid))
		u.SetGeneration(gen)
		_ = unstructured.SetNestedField(u.Object, observed, "status", "observedGeneration")
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Ready", "status": ready, "reason": reason}}, "status", "conditions")
		return u
	}
	claim := intent("ClaimOwnership")
	outcome(claim, journal.Succeeded)
	settled := journal.Fold(append([]journal.Record(nil), recs...))
	role := intent("CreateRole")
	pending := journal.Fold(append([]journal.Record(nil), recs...))
	outcome(role, journal.Failed)
	failed := journal.Fold(append([]journal.Record(nil), recs...))
	role = intent("CreateRole")
	outcome(role, journal.Succeeded)
	intent(dbcontract.OpObserveTenant)
	rechecking := journal.Fold(append([]journal.Record(nil), recs...))
	// The first step of a generation is no re-check, whatever its name.
	var first []journal.Record
	for _, r := range recs {
		if r.Operation == dbcontract.OpObserveTenant {
			first = append(first, r)
		}
	}
	firstStep := journal.Fold(first)

	cases := []struct {
		name string
		u    *unstructured.Unstructured
		st   *journal.State
		want string // substring of the only mismatch; "" for none
	}{
		{"gone", nil, settled, "no longer exists"},
		{"recreated", live("other-uid", 1, 1, "True", "Ready"), settled, "recreated"},
		{"ready while pending", live(obj.UID, 1, 1, "True", "Ready"), pending, "1 pending intent"},
		{"ready after a failure", live(obj.UID, 1, 1, "True", "Ready"), failed, "failed (CreateRole"},
		{"settled but not ready", live(obj.UID, 1, 1, "Unknown", "Reconciling"), settled, "next step has not been decided"},
		{"observed a generation the journal never saw", live(obj.UID, 3, 3, "Unknown", "Reconciling"), pending, "no intent for generations after 1"},
		{"agreement: reconciling while pending", live(obj.UID, 1, 1, "Unknown", "Reconciling"), pending, ""},
		{"agreement: failure shown", live(obj.UID, 1, 1, "False", "DependencyUnavailable"), failed, ""},
		{"agreement: Ready while its periodic re-check runs", live(obj.UID, 1, 1, "True", "Ready"), rechecking, ""},
		{"a re-check as the first step of the generation", live(obj.UID, 1, 1, "True", "Ready"), firstStep, "1 pending intent"},
		{"a re-check of a generation status has not observed", live(obj.UID, 2, 1, "True", "Ready"), rechecking, "1 pending intent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := compareLive(tc.u, tc.st)
			switch {
			case tc.want == "" && len(d.Mismatches) != 0:
				t.Fatalf("unexpected mismatches %q", d.Mismatches)
			case tc.want != "" && (len(d.Mismatches) != 1 || !strings.Contains(d.Mismatches[0], tc.want)):
				t.Fatalf("mismatches %q, want one containing %q", d.Mismatches, tc.want)
			}
		})
	}
}

// The execution domain's comparison of a live Job with its journal: the
// cases the recorded Job stream (TestReplayLiveJobs) does not reach.
func TestCompareLiveJob(t *testing.T) {
	obj := journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ci", Name: "x", UID: "job-uid", Generation: 1}
	var recs []journal.Record
	add := func(r journal.Record) journal.Record {
		r.Sequence, r.Time = uint64(len(recs)+1), time.Date(2026, 12, 2, 9, 0, len(recs), 0, time.UTC)
		recs = append(recs, r)
		return r
	}
	do := func(op string, obs execution.Observation) {
		in, err := journal.NewIntent(obj, op, "", 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		add(in)
		out, err := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, obs)
		if err != nil {
			t.Fatal(err)
		}
		add(out)
	}
	note := func(op string, payload any) {
		n := journal.Record{ID: obj.UID + "/note/" + op, Type: journal.TypeNote, Operation: op, Object: obj, Attempt: 1}
		if err := n.SetPayload(payload); err != nil {
			t.Fatal(err)
		}
		add(n)
	}
	refs := []execution.Reference{{Type: "Job", ID: "native"}}
	do(execution.OpEnsure, execution.Observation{State: execution.StatePending, Created: true, References: refs})
	running := append([]journal.Record(nil), recs...)
	zero := int32(0)
	do(execution.OpObserve, execution.Observation{State: execution.StateSucceeded, Terminal: true, ExitCode: &zero, Reason: "Completed", References: refs})
	observedEnd := append([]journal.Record(nil), recs...)
	note(execution.NoteFinished, execution.FinishedNote{Succeeded: true, Reason: "Completed", ExitCode: &zero})
	finished := append([]journal.Record(nil), recs...)
	note(execution.NoteTTLExpired, execution.TTLNote{TTLSecondsAfterFinished: 30})
	ttl := append([]journal.Record(nil), recs...)
	recs = append([]journal.Record(nil), finished...)
	do(execution.OpDelete, execution.Observation{State: execution.StateNotFound})
	deleted := recs

	live := func(succeeded, reason string, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetUID(types.UID(obj.UID))
		if deleting {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Succeeded", "status": succeeded, "reason": reason}}, "status", "conditions")
		if succeeded == "True" {
			_ = unstructured.SetNestedField(u.Object, int64(0), "status", "result", "exitCode")
		}
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Job", "id": "native"}}, "status", "execution", "references")
		return u
	}
	cases := []struct {
		name    string
		u       *unstructured.Unstructured
		recs    []journal.Record
		want    string // substring of the only mismatch; "" for none
		verdict string
	}{
		{"deleted after Finished and Delete", nil, deleted, "", "deleted after it finished"},
		{"deleted by TTL", nil, ttl, "", "deleted by TTL"},
		{"gone while running", nil, running, "no Finished note and no Delete", ""},
		{"terminal live, no Finished note", live("True", "Completed", false), running, "no Finished note for this Job", ""},
		{"terminal observation not decided", live("Unknown", "Running", false), observedEnd, "has not decided the end", ""},
		{"TTLExpired, not being deleted", live("True", "Completed", false), ttl, "not being deleted", ""},
		{"agreement: TTL delete in progress", live("True", "Completed", true), ttl, "", ""},
		{"agreement: running", live("Unknown", "Running", false), running, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := execution.CompareLive(tc.u, obj.UID, tc.recs)
			switch {
			case tc.want == "" && len(c.Mismatches) != 0:
				t.Fatalf("unexpected mismatches %q", c.Mismatches)
			case tc.want != "" && (len(c.Mismatches) != 1 || !strings.Contains(c.Mismatches[0], tc.want)):
				t.Fatalf("mismatches %q, want one containing %q", c.Mismatches, tc.want)
			}
			if !strings.Contains(c.Verdict, tc.verdict) {
				t.Fatalf("verdict %q, want %q", c.Verdict, tc.verdict)
			}
		})
	}
}
