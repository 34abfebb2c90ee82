package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

func object(kind, ns, name, uid string, status map[string]any, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"kind": kind,
		"metadata": map[string]any{"namespace": ns, "name": name, "uid": uid}, "status": status, "spec": spec}}
}

func cond(typ, status, reason, msg string) map[string]any {
	return map[string]any{"conditions": []any{map[string]any{"type": typ, "status": status, "reason": reason, "message": msg}}}
}

// TestExplain: every answer of why from the object and its journal, one row
// per situation the runbook covers; the live stack test checks the same
// against real servers.
func TestExplain(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	uid := "7d3c0e52-1c1a-4b8e-9a53-000000000002"
	ref := journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ci", Name: "n", UID: uid, Generation: 1}
	intent := func(op string, seq uint64, at time.Time) journal.Record {
		return journal.Record{ID: uid + "/" + op, Type: journal.TypeIntent, Operation: op, Object: ref, Attempt: 1, Sequence: seq, Time: at}
	}
	outcome := func(op string, seq uint64, class journal.ResultClass, reason string) journal.Record {
		return journal.Record{ID: uid + "/" + op + "/outcome", Type: journal.TypeOutcome, Operation: op, Object: ref, Attempt: 1, Sequence: seq,
			CausationID: uid + "/" + op, Time: now, Result: &journal.Result{Class: class, Reason: reason}}
	}
	cases := []struct {
		name      string
		kind      string
		condition string
		obj       *unstructured.Unstructured
		recs      []journal.Record
		want      []string // substrings of the text answer
		reason    string
	}{
		{"ready tenant", "PostgreSQLTenant", "Ready", object("PostgreSQLTenant", "acme", "shop", uid, cond("Ready", "True", "Ready", "converged"), nil),
			[]journal.Record{intent("CreateRole", 1, now), outcome("CreateRole", 2, journal.Succeeded, "")},
			[]string{"Ready=True", "Nothing: the object is converged", "CreateRole attempt 1 at sequence 2"}, "Ready"},
		{"waiting on an instance", "PostgreSQLTenant", "Ready",
			object("PostgreSQLTenant", "acme", "shop", uid, cond("Ready", "False", "InstanceNotReady", "instance missing"), map[string]any{"instanceRef": "shared"}),
			nil, []string{`Waiting for:  PostgreSQLInstance "shared" to become Ready`, "why instance/shared", "runbook.md#ayatoriinstancenotready", "Journal:"}, "InstanceNotReady"},
		{"cancelling job", "Job", "Succeeded", object("Job", "ci", "n", uid, cond("Succeeded", "Unknown", "Cancelling", ""), nil),
			[]journal.Record{intent("Ensure", 1, now.Add(-time.Minute)), outcome("Ensure", 2, journal.Succeeded, ""), intent("Cancel", 3, now.Add(-5*time.Second))},
			[]string{"the backend to confirm the stop: the outcome of Cancel (attempt 1, intent at sequence 3, decided 5s ago)", "→ pending"}, "Cancelling"},
		{"result unknown", "Job", "Succeeded", object("Job", "ci", "n", uid, cond("Succeeded", "Unknown", "ResultUnknown", "gone"), nil),
			[]journal.Record{intent("Observe", 1, now), outcome("Observe", 2, journal.ResultUnknown, "ResultUnknown")},
			[]string{"kubectl annotate ajob -n ci n execution.ayatori.ddupan.top/confirm-backend-lost=" + uid, "Waiting for:  an administrator", "→ ResultUnknown/ResultUnknown"}, "ResultUnknown"},
		{"no condition yet", "JobClass", "Ready", object("JobClass", "", "std", uid, nil, nil), nil,
			[]string{"JobClass std", "reason None", "Read the condition's message"}, "None"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := explain(c.kind, c.condition, c.obj, c.recs, -1, now)
			if e.Condition.Reason != c.reason {
				t.Errorf("reason %q, want %q", e.Condition.Reason, c.reason)
			}
			var b bytes.Buffer
			printExplanation(&b, e, now)
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("answer lacks %q:\n%s", w, b.String())
				}
			}
			if !strings.Contains(b.String(), "proofs of origin not checked") {
				t.Errorf("no note that proofs were not checked:\n%s", b.String())
			}
		})
	}
}
