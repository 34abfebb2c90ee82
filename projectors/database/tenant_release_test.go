package database

import (
	"strings"
	"testing"

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	esexec "git.ddupan.top/panxiao81/ayatori/executors/externalsecrets"
	baoexec "git.ddupan.top/panxiao81/ayatori/executors/openbao"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// deletionHistory is a provisioning history (before), a DeletionStarted
// note with policy, then the deletion steps (after).
func deletionHistory(policy v1alpha1.DeletionPolicy, before, after []step) TenantFacts {
	_, recs := tenantHistory(before...)
	note := journal.Record{ID: "note", Type: journal.TypeNote, Operation: NoteDeletionStarted, Object: journal.ObjectRef{UID: "t-1", Generation: 1}, Attempt: 1}
	_ = note.SetPayload(DeletionNote{Policy: policy})
	note.Sequence = uint64(len(recs) + 1)
	recs = append(recs, note)
	_, tail := tenantHistory(append(append([]step{}, before...), after...)...)
	for _, r := range tail[len(recs)-1:] {
		r.Sequence += 1
		recs = append(recs, r)
	}
	return TenantFacts{Generation: 1, Deleting: true, SpecPolicy: policy, Journal: journal.Fold(recs), Records: recs, Now: t0}
}

// Retain: RetainOwnership is journaled (and never waited for: PostgreSQL
// may be down), then the ExternalSecret is released; only then does the
// finalizer go.
func TestDecideTenantRetain(t *testing.T) {
	claimed := []step{ok(pgexec.OpCheckExtensions), ok(pgexec.OpClaimOwnership)}
	cases := []struct {
		name   string
		after  []step
		intent string
		remove bool
	}{
		{name: "retain ownership first", intent: pgexec.OpRetainOwnership},
		{name: "then release the ExternalSecret, without waiting for PostgreSQL", after: []step{{op: pgexec.OpRetainOwnership}}, intent: esexec.OpRetainExternalSecret},
		{name: "release pending: wait", after: []step{{op: pgexec.OpRetainOwnership}, {op: esexec.OpRetainExternalSecret}}},
		{name: "released: finalizer goes", after: []step{{op: pgexec.OpRetainOwnership}, ok(esexec.OpRetainExternalSecret)}, remove: true},
		{name: "release failed: retried after back-off", after: []step{{op: pgexec.OpRetainOwnership},
			{op: esexec.OpRetainExternalSecret, class: journal.Failed, reason: "DependencyUnavailable", at: -10 * 1e9}}, intent: esexec.OpRetainExternalSecret},
	}
	for _, c := range cases {
		f := deletionHistory(v1alpha1.DeletionPolicyRetain, claimed, c.after)
		d := DecideTenant(f, tenantPolicy)
		got := ""
		if d.Intent != nil {
			got = d.Intent.Operation
		}
		if got != c.intent || d.RemoveFinalizer != c.remove || d.Phase != v1alpha1.TenantPhaseDeleting {
			t.Errorf("%s: intent %q remove %v phase %s (%s), want %q %v", c.name, got, d.RemoveFinalizer, d.Phase, d.Ready.Message, c.intent, c.remove)
		}
	}
}

// Delete: objects that are not this Tenant's are skipped by the executors
// (successful outcomes); the finalizer goes and they are reported.
func TestDecideTenantDeleteReportsLeftInPlace(t *testing.T) {
	claimed := []step{ok(pgexec.OpCheckExtensions), {op: pgexec.OpClaimOwnership, class: journal.Failed, reason: "Conflict"}}
	skip := func(op string, payload any) step { return step{op: op, class: journal.Succeeded, payload: payload} }
	after := []step{
		skip(esexec.OpDeleteExternalSecret, esexec.ProjectionOutcome{Skipped: "x"}),
		skip(pgexec.OpDisableLogin, pgexec.TenantOutcome{Skipped: "not owned"}),
		skip(pgexec.OpDropDatabase, pgexec.TenantOutcome{Skipped: "not owned"}),
		skip(pgexec.OpDropRole, pgexec.TenantOutcome{Skipped: "not owned"}),
		skip(baoexec.OpDestroyCredential, baoexec.DestroyOutcome{Skipped: "y"}),
		ok(pgexec.OpReleaseOwnership),
	}
	f := deletionHistory(v1alpha1.DeletionPolicyDelete, claimed, after)
	d := DecideTenant(f, tenantPolicy)
	if !d.RemoveFinalizer {
		t.Fatalf("finalizer kept: %+v", d)
	}
	joined := strings.Join(d.LeftInPlace, "\n")
	for _, op := range []string{esexec.OpDeleteExternalSecret, pgexec.OpDisableLogin, pgexec.OpDropDatabase, pgexec.OpDropRole, baoexec.OpDestroyCredential} {
		if !strings.Contains(joined, op) {
			t.Errorf("%s not reported: %q", op, joined)
		}
	}
}
