package database

import (
	"strings"
	"testing"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// deletionHistory is a provisioning history (before), a DeletionStarted
// note with policy, then the deletion steps (after).
func deletionHistory(policy databasev1alpha1.DeletionPolicy, before, after []step) TenantFacts {
	_, recs := tenantHistory(before...)
	note := journal.Record{ID: "note", Type: journal.TypeNote, Operation: dbcontract.NoteDeletionStarted, Object: journal.ObjectRef{UID: "t-1", Generation: 1}, Attempt: 1}
	_ = note.SetPayload(dbcontract.DeletionNote{Policy: policy})
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
	claimed := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership)}
	cases := []struct {
		name   string
		after  []step
		intent string
		remove bool
	}{
		{name: "retain ownership first", intent: dbcontract.OpRetainOwnership},
		{name: "then release the ExternalSecret, without waiting for PostgreSQL", after: []step{{op: dbcontract.OpRetainOwnership}}, intent: dbcontract.OpRetainExternalSecret},
		{name: "release pending: wait", after: []step{{op: dbcontract.OpRetainOwnership}, {op: dbcontract.OpRetainExternalSecret}}},
		{name: "released: finalizer goes", after: []step{{op: dbcontract.OpRetainOwnership}, ok(dbcontract.OpRetainExternalSecret)}, remove: true},
		{name: "release failed: retried after back-off", after: []step{{op: dbcontract.OpRetainOwnership},
			{op: dbcontract.OpRetainExternalSecret, class: journal.Failed, reason: "DependencyUnavailable", at: -10 * 1e9}}, intent: dbcontract.OpRetainExternalSecret},
	}
	for _, c := range cases {
		f := deletionHistory(databasev1alpha1.DeletionPolicyRetain, claimed, c.after)
		d := decideKnown(f)
		got := ""
		if d.Intent != nil {
			got = d.Intent.Operation
		}
		if got != c.intent || d.RemoveFinalizer != c.remove || d.Phase != databasev1alpha1.TenantPhaseDeleting {
			t.Errorf("%s: intent %q remove %v phase %s (%s), want %q %v", c.name, got, d.RemoveFinalizer, d.Phase, d.Ready.Message, c.intent, c.remove)
		}
	}
}

// Delete: objects that are not this Tenant's are skipped by the executors
// (successful outcomes); the finalizer goes and they are reported.
func TestDecideTenantDeleteReportsLeftInPlace(t *testing.T) {
	claimed := []step{ok(dbcontract.OpCheckExtensions), {op: dbcontract.OpClaimOwnership, class: journal.Failed, reason: "Conflict"}}
	skip := func(op string, payload any) step { return step{op: op, class: journal.Succeeded, payload: payload} }
	after := []step{
		skip(dbcontract.OpDeleteExternalSecret, dbcontract.ProjectionOutcome{Skipped: "x"}),
		skip(dbcontract.OpDisableLogin, dbcontract.TenantOutcome{Skipped: "not owned"}),
		skip(dbcontract.OpDropDatabase, dbcontract.TenantOutcome{Skipped: "not owned"}),
		skip(dbcontract.OpDropRole, dbcontract.TenantOutcome{Skipped: "not owned"}),
		skip(dbcontract.OpDestroyCredential, dbcontract.DestroyOutcome{Skipped: "y"}),
		ok(dbcontract.OpReleaseOwnership),
	}
	f := deletionHistory(databasev1alpha1.DeletionPolicyDelete, claimed, after)
	d := decideKnown(f)
	if !d.RemoveFinalizer {
		t.Fatalf("finalizer kept: %+v", d)
	}
	joined := strings.Join(d.LeftInPlace, "\n")
	for _, op := range []string{dbcontract.OpDeleteExternalSecret, dbcontract.OpDisableLogin, dbcontract.OpDropDatabase, dbcontract.OpDropRole, dbcontract.OpDestroyCredential} {
		if !strings.Contains(joined, op) {
			t.Errorf("%s not reported: %q", op, joined)
		}
	}
}

// Issue 12, fault 5: deletion waits for every intent decided before it
// (a pending CreateRole could otherwise run between DropDatabase and
// DropRole, or after RetainOwnership and leave an orphan LOGIN role).
func TestDecideTenantDeleteWaitsForPendingIntents(t *testing.T) {
	claimed := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential), {op: dbcontract.OpCreateRole}}
	for _, policy := range []databasev1alpha1.DeletionPolicy{databasev1alpha1.DeletionPolicyDelete, databasev1alpha1.DeletionPolicyRetain} {
		f := deletionHistory(policy, claimed, nil)
		d := decideKnown(f)
		if d.Intent != nil || d.RemoveFinalizer || d.Phase != databasev1alpha1.TenantPhaseDeleting || !strings.Contains(d.Ready.Message, dbcontract.OpCreateRole) {
			t.Errorf("%s with CreateRole pending: %+v", policy, d)
		}
		done := append(claimed[:3:3], ok(dbcontract.OpCreateRole))
		f = deletionHistory(policy, done, nil)
		if d := decideKnown(f); d.Intent == nil {
			t.Errorf("%s after CreateRole finished: no deletion step (%+v)", policy, d)
		}
	}
}
