package database

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

var tenantPolicy = TenantPolicy{ResyncInterval: time.Hour, RetryBase: time.Second, RetryMax: time.Minute, PendingRecheck: 30 * time.Second}

// tenantHistory builds a Tenant journal from steps (empty class: pending).
func tenantHistory(steps ...step) (*journal.State, []journal.Record) {
	obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: "app", UID: "t-1", Generation: 1}
	var recs []journal.Record
	attempts := map[string]int{}
	for _, s := range steps {
		attempts[s.op]++
		in, _ := journal.NewIntent(obj, s.op, "", attempts[s.op], nil)
		in.Sequence, in.Time = uint64(len(recs)+1), t0.Add(s.at)
		recs = append(recs, in)
		if s.class == "" {
			continue
		}
		out, _ := journal.NewOutcome(in, journal.Result{Class: s.class, Reason: s.reason}, s.payload)
		out.Sequence, out.Time = uint64(len(recs)+1), t0.Add(s.at)
		recs = append(recs, out)
	}
	return journal.Fold(recs), recs
}

func ok(op string) step { return step{op: op, class: journal.Succeeded} }

// decideKnown decides with every read-on-demand fact read (as the facts
// say: zero values are "nothing found").
func decideKnown(f TenantFacts) TenantDecision {
	f.Read = AllTenantFacts
	return DecideTenant(f, tenantPolicy)
}

func TestDecideTenant(t *testing.T) {
	all := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole),
		ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions), ok("EnsureExternalSecret"), ok("ObserveProjection"), ok(dbcontract.OpVerifyLogin)}
	cases := []struct {
		name    string
		steps   []step
		facts   func(*TenantFacts)
		phase   databasev1alpha1.TenantPhase
		ready   metav1.ConditionStatus
		reason  string
		intent  string
		attempt int
	}{
		{name: "fresh: check extensions first", phase: "Pending", ready: "Unknown", intent: dbcontract.OpCheckExtensions, attempt: 1},
		{name: "invalid input: nothing runs", facts: func(f *TenantFacts) { f.InputErrors = []string{"bad"} }, phase: "Pending", ready: "False", reason: "InvalidSpec"},
		{name: "instance not ready", facts: func(f *TenantFacts) { f.InstanceProblem = "not Ready" }, phase: "Pending", ready: "False", reason: "InstanceNotReady"},
		{name: "instance still validating: reconciling", facts: func(f *TenantFacts) {
			f.InstanceProblem = "PostgreSQLInstance x is not Ready"
			f.InstanceProgressing = true
		},
			phase: "Pending", ready: "Unknown", reason: "Reconciling"},
		{name: "forged phase is ignored", facts: func(f *TenantFacts) { f.Status.Phase = databasev1alpha1.TenantPhaseReady; f.InstanceProblem = "x" },
			phase: "Pending", ready: "False", reason: "InstanceNotReady"},
		{name: "after the claim: credential", steps: all[:2], phase: "Planned", ready: "Unknown", intent: dbcontract.OpWriteCredential, attempt: 1},
		{name: "credential pending", steps: append(append([]step{}, all[:2]...), step{op: dbcontract.OpWriteCredential}), phase: "Planned", ready: "Unknown"},
		{name: "conflict: reported, re-checked slowly", steps: []step{ok(dbcontract.OpCheckExtensions), {op: dbcontract.OpClaimOwnership, class: journal.Failed, reason: "Conflict"}},
			phase: "Pending", ready: "False", reason: "Conflict"},
		{name: "dependency failure retried after back-off", steps: append(append([]step{}, all[:3]...), step{op: dbcontract.OpCreateRole, class: journal.Failed, reason: "DependencyUnavailable"}),
			facts: func(f *TenantFacts) { f.Now = t0.Add(5 * time.Second) }, phase: "CredentialCreated", ready: "False", reason: "DependencyUnavailable", intent: dbcontract.OpCreateRole, attempt: 2},
		{name: "ESO not synced yet: still reconciling", steps: append(append([]step{}, all[:7]...), step{op: "ObserveProjection", class: journal.Failed, reason: "CredentialProjectionFailed"}),
			phase: "ExternalSecretCreated", ready: "Unknown", reason: "Reconciling"},
		{name: "ESO still not synced after the grace: CredentialProjectionFailed", steps: append(append([]step{}, all[:7]...),
			step{op: "ObserveProjection", class: journal.Failed, reason: "CredentialProjectionFailed"},
			step{op: "ObserveProjection", class: journal.Failed, reason: "CredentialProjectionFailed"},
			step{op: "ObserveProjection", class: journal.Failed, reason: "CredentialProjectionFailed"},
			step{op: "ObserveProjection", class: journal.Failed, reason: "CredentialProjectionFailed"}),
			phase: "ExternalSecretCreated", ready: "False", reason: "CredentialProjectionFailed"},
		{name: "all steps: Ready", steps: all, facts: func(f *TenantFacts) { f.Status.Phase = databasev1alpha1.TenantPhaseReady }, phase: "Ready", ready: "True", reason: "Ready"},
		// Never Pending again once something was written (issue 12, fault 4).
		{name: "status wiped: revalidate", steps: all, phase: "Planned", ready: "Unknown"},
		{name: "deletion records the policy", steps: all, facts: func(f *TenantFacts) { f.Deleting = true; f.SpecPolicy = databasev1alpha1.DeletionPolicyDelete },
			phase: "Deleting", ready: "Unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, recs := tenantHistory(tc.steps...)
			f := TenantFacts{Generation: 1, Journal: st, Records: recs, Now: t0, Status: databasev1alpha1.PostgreSQLTenantStatus{Phase: databasev1alpha1.TenantPhasePending}}
			if tc.name == "status wiped: revalidate" {
				f.Status.Phase = ""
			}
			if tc.facts != nil {
				tc.facts(&f)
			}
			d := decideKnown(f)
			if d.Phase != tc.phase || d.Ready.Status != tc.ready || (tc.reason != "" && d.Ready.Reason != tc.reason) {
				t.Fatalf("got %s %s/%s (%s), want %s %s/%s", d.Phase, d.Ready.Status, d.Ready.Reason, d.Ready.Message, tc.phase, tc.ready, tc.reason)
			}
			switch {
			case tc.intent == "" && d.Intent != nil:
				t.Fatalf("unexpected intent %+v", d.Intent)
			case tc.intent != "" && (d.Intent == nil || d.Intent.Operation != tc.intent || d.Intent.Attempt != tc.attempt):
				t.Fatalf("intent %+v, want %s a%d", d.Intent, tc.intent, tc.attempt)
			}
			if tc.name == "status wiped: revalidate" && (d.Note != dbcontract.NoteRevalidate || !d.StatusLost) {
				t.Fatalf("note %q, status lost %v", d.Note, d.StatusLost)
			}
			if tc.name != "status wiped: revalidate" && d.StatusLost {
				t.Fatal("StatusLost set although status has a phase")
			}
			if tc.name == "deletion records the policy" && (d.Note != dbcontract.NoteDeletionStarted || d.NotePolicy != databasev1alpha1.DeletionPolicyDelete) {
				t.Fatalf("note %q policy %q", d.Note, d.NotePolicy)
			}
		})
	}
}

// The projection target taken by someone else (TenantFacts.TargetTaken) is
// a Conflict with no intent wherever the chain stands (the controller
// gathers it before ClaimOwnership and EnsureExternalSecret); it never
// blocks deletion, and invalid input is reported first.
func TestDecideTenantTargetTaken(t *testing.T) {
	all := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole),
		ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions), ok("EnsureExternalSecret"), ok("ObserveProjection"), ok(dbcontract.OpVerifyLogin)}
	const taken = "Secret ns/payments-api-key exists and was not produced by this Tenant's ExternalSecret (no owner)"
	cases := []struct {
		name     string
		steps    []step
		facts    func(*TenantFacts)
		phase    databasev1alpha1.TenantPhase
		ready    metav1.ConditionStatus
		reason   string
		intent   string
		note     string
		finalize bool
	}{
		{name: "free target: the claim is planned", steps: all[:1], facts: func(f *TenantFacts) { f.TargetTaken = "" },
			phase: "Pending", ready: "Unknown", intent: dbcontract.OpClaimOwnership},
		{name: "taken before the claim: Conflict, nothing planned", steps: all[:1], phase: "Pending", ready: "False", reason: "Conflict"},
		{name: "taken on a fresh Tenant: Conflict", phase: "Pending", ready: "False", reason: "Conflict"},
		{name: "taken before EnsureExternalSecret: Conflict", steps: all[:6], phase: "DatabaseCreated", ready: "False", reason: "Conflict"},
		{name: "invalid spec is reported first", steps: all[:1], facts: func(f *TenantFacts) { f.InputErrors = []string{"bad"} },
			phase: "Pending", ready: "False", reason: "InvalidSpec"},
		{name: "Instance problem is reported first", steps: all[:1], facts: func(f *TenantFacts) { f.InstanceProblem = "gone" },
			phase: "Pending", ready: "False", reason: "InstanceNotReady"},
		{name: "deletion is never blocked: policy recorded", steps: all, facts: func(f *TenantFacts) {
			f.Deleting, f.SpecPolicy = true, databasev1alpha1.DeletionPolicyDelete
		}, phase: "Deleting", ready: "Unknown", note: dbcontract.NoteDeletionStarted},
		{name: "deletion without a claim: finalizer goes", steps: all[:1], facts: func(f *TenantFacts) {
			f.Deleting, f.SpecPolicy = true, databasev1alpha1.DeletionPolicyDelete
			f.Records = append(f.Records, journal.Record{Type: journal.TypeNote, Operation: dbcontract.NoteDeletionStarted, Sequence: 99, Payload: []byte(`{"policy":"Delete"}`)})
		}, phase: "Deleting", ready: "Unknown", finalize: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, recs := tenantHistory(tc.steps...)
			f := TenantFacts{Generation: 1, Journal: st, Records: recs, Now: t0, TargetTaken: taken,
				Status: databasev1alpha1.PostgreSQLTenantStatus{Phase: databasev1alpha1.TenantPhasePending}}
			if tc.facts != nil {
				tc.facts(&f)
			}
			d := decideKnown(f)
			if d.Phase != tc.phase || d.Ready.Status != tc.ready || (tc.reason != "" && d.Ready.Reason != tc.reason) {
				t.Fatalf("got %s %s/%s (%s), want %s %s/%s", d.Phase, d.Ready.Status, d.Ready.Reason, d.Ready.Message, tc.phase, tc.ready, tc.reason)
			}
			if tc.reason == "Conflict" && (!strings.Contains(d.Ready.Message, taken) || !d.Conclusive || d.RequeueAfter <= 0) {
				t.Fatalf("Conflict must name the object, be conclusive and re-checked: %+v", d)
			}
			switch {
			case tc.intent == "" && d.Intent != nil:
				t.Fatalf("unexpected intent %+v", d.Intent)
			case tc.intent != "" && (d.Intent == nil || d.Intent.Operation != tc.intent):
				t.Fatalf("intent %+v, want %s", d.Intent, tc.intent)
			}
			if d.Note != tc.note || d.RemoveFinalizer != tc.finalize {
				t.Fatalf("note %q finalize %v, want %q %v", d.Note, d.RemoveFinalizer, tc.note, tc.finalize)
			}
		})
	}
}

// Issue 12, faults 2 and 4: a Ready Tenant is re-checked by one
// ObserveTenant intent per ResyncInterval and stays Ready while it runs
// and after it found nothing wrong; a broken fact re-runs every step, an
// unreachable PostgreSQL is reported and re-observed after back-off.
func TestDecideTenantRecheck(t *testing.T) {
	all := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole),
		ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions), ok("EnsureExternalSecret"), ok("ObserveProjection"), ok(dbcontract.OpVerifyLogin)}
	with := func(extra ...step) []step { return append(append([]step{}, all...), extra...) }
	hour := tenantPolicy.ResyncInterval
	cases := []struct {
		name    string
		steps   []step
		now     time.Duration
		ready   metav1.ConditionStatus
		reason  string
		intent  string
		attempt int
		note    string
		requeue time.Duration
	}{
		{name: "not due: Ready, wait", steps: all, now: hour / 2, ready: "True", requeue: hour / 2},
		{name: "due: one ObserveTenant, still Ready", steps: all, now: hour, ready: "True", intent: dbcontract.OpObserveTenant, attempt: 1},
		{name: "observation running: still Ready", steps: with(step{op: dbcontract.OpObserveTenant, at: hour}), now: hour + time.Minute, ready: "True"},
		{name: "nothing wrong: Ready until the next interval", steps: with(ok(dbcontract.OpObserveTenant)), now: 10 * time.Minute, ready: "True", requeue: 50 * time.Minute},
		{name: "next interval: next attempt", steps: with(ok(dbcontract.OpObserveTenant)), now: hour, ready: "True", intent: dbcontract.OpObserveTenant, attempt: 2},
		{name: "a fact broke: every step again", steps: with(step{op: dbcontract.OpObserveTenant, class: journal.Failed, reason: "ProvisioningFailed"}),
			ready: "Unknown", note: dbcontract.NoteRevalidate},
		{name: "PostgreSQL unreachable: reported, re-observed after back-off", steps: with(step{op: dbcontract.OpObserveTenant, class: journal.Failed, reason: "DependencyUnavailable"}),
			ready: "False", reason: "DependencyUnavailable", requeue: tenantPolicy.RetryBase},
		{name: "PostgreSQL unreachable: retried", steps: with(step{op: dbcontract.OpObserveTenant, class: journal.Failed, reason: "DependencyUnavailable"}),
			now: time.Minute, ready: "False", reason: "DependencyUnavailable", intent: dbcontract.OpObserveTenant, attempt: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, recs := tenantHistory(tc.steps...)
			f := TenantFacts{Generation: 1, Journal: st, Records: recs, Now: t0.Add(tc.now), Status: databasev1alpha1.PostgreSQLTenantStatus{Phase: databasev1alpha1.TenantPhaseReady}}
			d := decideKnown(f)
			if d.Phase != databasev1alpha1.TenantPhaseReady || d.Ready.Status != tc.ready || (tc.reason != "" && d.Ready.Reason != tc.reason) || d.Note != tc.note {
				t.Fatalf("got %s %s/%s note %q (%s)", d.Phase, d.Ready.Status, d.Ready.Reason, d.Note, d.Ready.Message)
			}
			switch {
			case tc.intent == "" && d.Intent != nil:
				t.Fatalf("unexpected intent %+v", d.Intent)
			case tc.intent != "" && (d.Intent == nil || d.Intent.Operation != tc.intent || d.Intent.Attempt != tc.attempt):
				t.Fatalf("intent %+v, want %s a%d", d.Intent, tc.intent, tc.attempt)
			}
			if tc.requeue != 0 && d.RequeueAfter != tc.requeue {
				t.Fatalf("requeue after %v, want %v", d.RequeueAfter, tc.requeue)
			}
		})
	}
}

// DecideTenant asks for a read-on-demand fact only when its decision
// depends on it, never twice, and its complete decision is what the
// controller acts on (the controller overrides nothing).
func TestDecideTenantAsksForWhatItNeeds(t *testing.T) {
	all := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole),
		ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions), ok(dbcontract.OpEnsureExternalSecret), ok(dbcontract.OpObserveProjection), ok(dbcontract.OpVerifyLogin)}
	facts := func(steps []step) TenantFacts {
		st, recs := tenantHistory(steps...)
		return TenantFacts{Generation: 1, Journal: st, Records: recs, Now: t0.Add(time.Hour),
			Status: databasev1alpha1.PostgreSQLTenantStatus{Phase: databasev1alpha1.TenantPhasePending}}
	}
	// run answers every Need with read and returns the decision and what
	// was asked, in order.
	run := func(f TenantFacts, read func(TenantFactSet, *TenantFacts)) (TenantDecision, []TenantFactSet) {
		var asked []TenantFactSet
		for {
			d := DecideTenant(f, tenantPolicy)
			if d.Need == 0 {
				return d, asked
			}
			if f.Read&d.Need != 0 {
				t.Fatalf("asked again for %d", d.Need)
			}
			asked = append(asked, d.Need)
			f.Read |= d.Need
			read(d.Need, &f)
		}
	}
	nothing := func(TenantFactSet, *TenantFacts) {}

	d, asked := run(facts(all[:1]), nothing)
	if len(asked) != 1 || asked[0] != FactTargetTaken || d.Intent == nil || d.Intent.Operation != dbcontract.OpClaimOwnership {
		t.Fatalf("before the claim: asked %v, decided %+v", asked, d)
	}
	d, _ = run(facts(all[:1]), func(_ TenantFactSet, f *TenantFacts) { f.TargetTaken = "Secret ns/app taken" })
	if d.Intent != nil || d.Ready.Reason != databasev1alpha1.ReasonConflict {
		t.Fatalf("taken target: %+v", d)
	}
	d, asked = run(facts(all[:3]), nothing)
	if len(asked) != 1 || asked[0] != FactTargetTaken || d.Intent == nil || d.Intent.Operation != dbcontract.OpCreateRole ||
		len(d.Also) != 1 || d.Also[0].Operation != dbcontract.OpEnsureExternalSecret {
		t.Fatalf("mid-chain, the ExternalSecret beside it: asked %v, decided %+v", asked, d)
	}
	d, _ = run(facts(all[:3]), func(_ TenantFactSet, f *TenantFacts) { f.TargetTaken = "Secret ns/app taken" })
	if d.Intent != nil || len(d.Also) != 0 || d.Ready.Reason != databasev1alpha1.ReasonConflict {
		t.Fatalf("mid-chain, taken target: %+v", d)
	}

	// Ready: drift is read, and a drift is a Revalidate note.
	ready := facts(all)
	ready.Now = t0.Add(time.Minute) // before the periodic re-check
	d, asked = run(ready, nothing)
	if len(asked) != 1 || asked[0] != FactDrift || d.Ready.Status != metav1.ConditionTrue || d.Note != "" {
		t.Fatalf("Ready: asked %v, decided %+v", asked, d)
	}
	d, _ = run(ready, func(_ TenantFactSet, f *TenantFacts) { f.Drift = "the ExternalSecret was deleted" })
	if d.Note != dbcontract.NoteRevalidate || !strings.Contains(d.Ready.Message, "the ExternalSecret was deleted") {
		t.Fatalf("drift: %+v", d)
	}

	// A just-created ExternalSecret is observed once ESO synced it, or
	// after RetryBase.
	fresh := facts(all[:7])
	fresh.Now = t0.Add(tenantPolicy.RetryBase / 2)
	d, asked = run(fresh, nothing)
	if len(asked) != 1 || asked[0] != FactProjectionSynced || d.Intent != nil || d.RequeueAfter <= 0 {
		t.Fatalf("not synced yet: asked %v, decided %+v", asked, d)
	}
	d, _ = run(fresh, func(_ TenantFactSet, f *TenantFacts) { f.ProjectionSynced = true })
	if d.Intent == nil || d.Intent.Operation != dbcontract.OpObserveProjection {
		t.Fatalf("synced: %+v", d)
	}

	// The Instance is gone: nothing but the Retain steps runs.
	gone := facts(all[:3])
	gone.InstanceMissing, gone.InstanceProblem = true, "PostgreSQLInstance pg does not exist"
	d, _ = run(gone, nothing)
	if d.Intent != nil || d.Ready.Reason != databasev1alpha1.ReasonInstanceNotReady || d.RequeueAfter != tenantPolicy.PendingRecheck {
		t.Fatalf("Instance gone: %+v", d)
	}
}

// TestDecideTenantChain: one pass decides every provisioning step whose
// inputs are known, each ordered after the one before it; a step skipped
// because an earlier one failed is decided again (with the chain after
// it) at once once that one succeeded, without a back-off.
func TestDecideTenantChain(t *testing.T) {
	ops := func(d TenantDecision) []string {
		if d.Intent == nil {
			return nil
		}
		out := []string{d.Intent.Operation}
		for _, c := range d.Chain {
			out = append(out, c.Operation)
		}
		return out
	}
	dbChain := []string{dbcontract.OpCheckExtensions, dbcontract.OpClaimOwnership, dbcontract.OpWriteCredential, dbcontract.OpCreateRole,
		dbcontract.OpCreateDatabase, dbcontract.OpEnsureExtensions}
	skip := func(op string) step {
		return step{op: op, class: journal.Failed, reason: journal.ReasonDependencyFailed}
	}
	cases := []struct {
		name  string
		steps []step
		want  []string
		phase databasev1alpha1.TenantPhase
	}{
		{name: "fresh: the chain up to the extensions", want: dbChain, phase: "Pending"},
		{name: "chain pending: nothing new", steps: []step{ok(dbcontract.OpCheckExtensions), {op: dbcontract.OpClaimOwnership}, {op: dbcontract.OpWriteCredential}},
			phase: "Pending"},
		{name: "extensions done: the ExternalSecret alone", steps: []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership),
			ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole), ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions)},
			want: []string{dbcontract.OpEnsureExternalSecret}, phase: "DatabaseCreated"},
		{name: "ExternalSecret created: the observation and the login check after it", steps: []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership),
			ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole), ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions),
			ok(dbcontract.OpEnsureExternalSecret)},
			want: []string{dbcontract.OpObserveProjection, dbcontract.OpVerifyLogin}, phase: "ExternalSecretCreated"},
		{name: "projection retried alone after a failure; the skipped login check after its success", steps: []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership),
			ok(dbcontract.OpWriteCredential), ok(dbcontract.OpCreateRole), ok(dbcontract.OpCreateDatabase), ok(dbcontract.OpEnsureExtensions),
			ok(dbcontract.OpEnsureExternalSecret), {op: dbcontract.OpObserveProjection, class: journal.Failed, reason: "CredentialProjectionFailed"}, skip(dbcontract.OpVerifyLogin),
			ok(dbcontract.OpObserveProjection)},
			want: []string{dbcontract.OpVerifyLogin}, phase: "CredentialProjected"},
		{name: "retried step succeeded: the skipped ones again, no back-off", steps: []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership),
			ok(dbcontract.OpWriteCredential), {op: dbcontract.OpCreateRole, class: journal.Failed, reason: "DependencyUnavailable"},
			skip(dbcontract.OpCreateDatabase), skip(dbcontract.OpEnsureExtensions), ok(dbcontract.OpCreateRole)},
			want: []string{dbcontract.OpCreateDatabase, dbcontract.OpEnsureExtensions}, phase: "RoleCreated"},
	}
	beside := []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential)}
	for _, c := range []struct {
		name  string
		steps []step
		want  bool
	}{
		{name: "credential written, role pending", steps: append(append([]step{}, beside...), step{op: dbcontract.OpCreateRole}), want: true},
		{name: "credential pending", steps: beside[:2], want: false},
		{name: "ExternalSecret already pending", steps: append(append([]step{}, beside...), step{op: dbcontract.OpCreateRole}, step{op: dbcontract.OpEnsureExternalSecret})},
		{name: "ExternalSecret failed: reported when the walk reaches it", steps: append(append([]step{}, beside...), step{op: dbcontract.OpCreateRole},
			step{op: dbcontract.OpEnsureExternalSecret, class: journal.Failed, reason: "Conflict"})},
		{name: "role failed: nothing beside a failure", steps: append(append([]step{}, beside...), step{op: dbcontract.OpCreateRole, class: journal.Failed, reason: "DependencyUnavailable"})},
	} {
		t.Run("beside/"+c.name, func(t *testing.T) {
			st, recs := tenantHistory(c.steps...)
			d := decideKnown(TenantFacts{Generation: 1, Journal: st, Records: recs, Now: t0.Add(time.Second), Status: databasev1alpha1.PostgreSQLTenantStatus{Phase: "Planned"}})
			got := len(d.Also) == 1 && d.Also[0].Operation == dbcontract.OpEnsureExternalSecret
			if got != c.want {
				t.Errorf("ExternalSecret beside the chain: %v, want %v (decision %+v)", got, c.want, d)
			}
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, recs := tenantHistory(c.steps...)
			f := TenantFacts{Generation: 1, Journal: st, Records: recs, Now: t0.Add(time.Hour), ProjectionSynced: true}
			if len(recs) > 0 {
				f.Status.Phase = databasev1alpha1.TenantPhasePending
			}
			d := decideKnown(f)
			if got := ops(d); !slices.Equal(got, c.want) {
				t.Errorf("decided %v, want %v", got, c.want)
			}
			if d.Phase != c.phase {
				t.Errorf("phase %s, want %s", d.Phase, c.phase)
			}
		})
	}
}
