package database

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

var testPolicy = InstancePolicy{ResyncInterval: time.Minute, RetryBase: 5 * time.Second, RetryMax: time.Minute, PendingRecheck: 30 * time.Second}

// history builds a journal state for gen 1 from (op, result) steps; an
// empty result leaves the intent pending.
type step struct {
	op      string
	class   journal.ResultClass
	reason  string
	payload any
	at      time.Duration
}

func history(steps ...step) *journal.State {
	obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLInstance", Name: "shared", UID: "uid-1", Generation: 1}
	st := journal.NewState()
	seq := uint64(0)
	attempts := map[string]int{}
	for _, s := range steps {
		attempts[s.op]++
		in, _ := journal.NewIntent(obj, s.op, "", attempts[s.op], nil)
		seq++
		in.Sequence, in.Time = seq, t0.Add(s.at)
		st.Apply(in)
		if s.class == "" {
			continue
		}
		out, _ := journal.NewOutcome(in, journal.Result{Class: s.class, Reason: s.reason}, s.payload)
		seq++
		out.Sequence, out.Time = seq, t0.Add(s.at)
		st.Apply(out)
	}
	return st
}

func usable(rv string) dbcontract.ObserveOutcome {
	return dbcontract.ObserveOutcome{ServerVersion: "15.18", Registry: dbcontract.RegistryUsable, RegistryVersion: 1, SecretResourceVersion: rv}
}

func TestDecideInstance(t *testing.T) {
	readyStatus := databasev1alpha1.PostgreSQLInstanceStatus{Phase: databasev1alpha1.InstancePhaseReady, ObservedGeneration: 1,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}}
	validating := databasev1alpha1.PostgreSQLInstanceStatus{Phase: databasev1alpha1.InstancePhaseValidating}
	cases := []struct {
		name       string
		facts      InstanceFacts
		phase      databasev1alpha1.InstancePhase
		ready      metav1.ConditionStatus
		reason     string
		intent     string
		attempt    int
		conclusive bool
	}{
		{name: "invalid spec: no intent, not retried", facts: InstanceFacts{SpecErrors: []string{"bad"}},
			phase: "Pending", ready: "False", reason: "InvalidSpec", conclusive: true},
		{name: "secret missing at first assembly", facts: InstanceFacts{Secret: SecretFact{}},
			phase: "Pending", ready: "False", reason: "DependencyUnavailable", conclusive: true},
		{name: "fresh: observe first", facts: InstanceFacts{},
			phase: "Validating", ready: "Unknown", reason: "Reconciling", intent: dbcontract.OpObserveInstance, attempt: 1},
		{name: "forged Ready on a fresh Instance does not skip validation", facts: InstanceFacts{Status: readyStatus},
			phase: "Validating", ready: "Unknown", intent: dbcontract.OpObserveInstance, attempt: 1},
		{name: "observe pending", facts: InstanceFacts{Journal: history(step{op: dbcontract.OpObserveInstance})},
			phase: "Validating", ready: "Unknown"},
		{name: "registry absent: bootstrap", facts: InstanceFacts{Status: validating, Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: dbcontract.ObserveOutcome{Registry: dbcontract.RegistryAbsent, SecretResourceVersion: "7"}})},
			phase: "InitializingRegistry", ready: "Unknown", intent: dbcontract.OpBootstrapRegistry, attempt: 1},
		{name: "bootstrap done: Ready", facts: InstanceFacts{Status: validating, Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: dbcontract.ObserveOutcome{Registry: dbcontract.RegistryAbsent, SecretResourceVersion: "7"}},
			step{op: dbcontract.OpBootstrapRegistry, class: journal.Succeeded})},
			phase: "Ready", ready: "True", reason: "Ready", conclusive: true},
		{name: "usable registry: Ready", facts: InstanceFacts{Status: validating, Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("7")})},
			phase: "Ready", ready: "True", reason: "Ready", conclusive: true},
		{name: "status wiped: observe again", facts: InstanceFacts{Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("7")})},
			phase: "Validating", ready: "Unknown", intent: dbcontract.OpObserveInstance, attempt: 2},
		{name: "secret changed: observe again", facts: InstanceFacts{Status: readyStatus, Secret: SecretFact{Found: true, ResourceVersion: "8"}, Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("7")})},
			phase: "Validating", ready: "Unknown", intent: dbcontract.OpObserveInstance, attempt: 2},
		{name: "resync due: observe, stay Ready", facts: InstanceFacts{Status: readyStatus, Now: t0.Add(2 * time.Minute), Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("7")})},
			phase: "Ready", ready: "True", intent: dbcontract.OpObserveInstance, attempt: 2, conclusive: true},
		{name: "resync pending keeps Ready", facts: InstanceFacts{Status: readyStatus, Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("7")},
			step{op: dbcontract.OpObserveInstance})},
			phase: "Ready", ready: "True"},
		{name: "auth failed: reported, back-off", facts: InstanceFacts{Status: validating, Now: t0.Add(time.Second), Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Failed, reason: "AuthenticationFailed", payload: dbcontract.ObserveOutcome{SecretResourceVersion: "7"}})},
			phase: "Validating", ready: "False", reason: "AuthenticationFailed", conclusive: true},
		{name: "after back-off: observe again", facts: InstanceFacts{Status: validating, Now: t0.Add(10 * time.Second), Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Failed, reason: "InsufficientPrivileges", payload: dbcontract.ObserveOutcome{SecretResourceVersion: "7"}})},
			phase: "Validating", ready: "False", reason: "InsufficientPrivileges", intent: dbcontract.OpObserveInstance, attempt: 2, conclusive: true},
		{name: "unknown reason maps to DependencyUnavailable", facts: InstanceFacts{Status: validating, Now: t0, Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Failed, reason: journal.ReasonRetriesExhausted})},
			phase: "Validating", ready: "False", reason: "DependencyUnavailable", conclusive: true},
		{name: "bootstrap result unknown: observe before retrying", facts: InstanceFacts{Status: validating, Now: t0.Add(time.Hour), Journal: history(
			step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: dbcontract.ObserveOutcome{Registry: dbcontract.RegistryAbsent, SecretResourceVersion: "7"}},
			step{op: dbcontract.OpBootstrapRegistry, class: journal.ResultUnknown, reason: "DependencyUnavailable"})},
			phase: "InitializingRegistry", ready: "False", reason: "DependencyUnavailable", intent: dbcontract.OpObserveInstance, attempt: 2, conclusive: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.facts
			f.Generation = 1
			if f.Secret == (SecretFact{}) && tc.name != "secret missing at first assembly" {
				f.Secret = SecretFact{Found: true, ResourceVersion: "7"}
			}
			if f.Now.IsZero() {
				f.Now = t0
			}
			d := DecideInstance(f, testPolicy)
			if d.Phase != tc.phase || d.Ready.Status != tc.ready || (tc.reason != "" && d.Ready.Reason != tc.reason) || d.Conclusive != tc.conclusive {
				t.Fatalf("got phase=%s ready=%s/%s conclusive=%t; want %s %s/%s %t (%s)", d.Phase, d.Ready.Status, d.Ready.Reason, d.Conclusive,
					tc.phase, tc.ready, tc.reason, tc.conclusive, d.Ready.Message)
			}
			switch {
			case tc.intent == "" && d.Intent != nil:
				t.Fatalf("unexpected intent %+v", d.Intent)
			case tc.intent != "" && (d.Intent == nil || d.Intent.Operation != tc.intent || d.Intent.Attempt != tc.attempt):
				t.Fatalf("intent %+v, want %s attempt %d", d.Intent, tc.intent, tc.attempt)
			}
			if want := tc.name == "status wiped: observe again"; d.StatusLost != want {
				t.Fatalf("StatusLost %v, want %v", d.StatusLost, want)
			}
		})
	}
}

// A deleting Instance keeps its finalizer while any Tenant references it
// (or the references cannot be read) and never plans an intent: nothing
// external is deleted.
func TestDecideInstanceDelete(t *testing.T) {
	p := testPolicy
	p.DeletionRecheck = time.Minute
	ready := history(step{op: dbcontract.OpObserveInstance, class: journal.Succeeded})
	for _, c := range []struct {
		name    string
		facts   InstanceFacts
		release bool
		waiting bool
		requeue time.Duration
	}{
		{name: "no Tenant", facts: InstanceFacts{Deleting: true}, release: true},
		{name: "references unreadable", facts: InstanceFacts{Deleting: true, ReferencesUnknown: true}, requeue: p.RetryBase},
		{name: "a Tenant references it", facts: InstanceFacts{Deleting: true, ReferencedBy: []string{"team-a/app"}}, waiting: true, requeue: time.Minute},
		{name: "invalid spec does not block deletion", facts: InstanceFacts{Deleting: true, SpecErrors: []string{"bad"}}, release: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.facts.Journal, c.facts.Generation, c.facts.Now = ready, 1, t0
			d := DecideInstance(c.facts, p)
			if d.Phase != databasev1alpha1.InstancePhaseDeleting || d.Intent != nil || d.RemoveFinalizer != c.release ||
				d.WaitingForTenants != c.waiting || d.RequeueAfter != c.requeue {
				t.Fatalf("decision %+v", d)
			}
			if c.waiting && d.Ready.Message == "" {
				t.Fatal("no message naming the Tenants")
			}
		})
	}
}

// Issue 12, fault 7: the executor's clock is never compared with the
// projector's. An outcome stamped by an executor 15 minutes behind looked
// 15 minutes old, so a Ready Instance was re-observed on every pass; with
// the times the projector observed (journaled.Observations) it waits for
// its resync interval.
func TestDecideInstanceIgnoresExecutorClock(t *testing.T) {
	st := history(step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("1"), at: -15 * time.Minute})
	var recs []journal.Record
	for _, in := range st.Intents {
		recs = append(recs, in)
		if out, ok := st.OutcomeOf(in.ID); ok {
			recs = append(recs, out)
		}
	}
	journaled.SortBySequence(recs)
	facts := func(recs []journal.Record) InstanceFacts {
		return InstanceFacts{Generation: 1, Secret: SecretFact{Found: true, ResourceVersion: "1"}, Journal: journal.Fold(recs), Now: t0,
			Status: databasev1alpha1.PostgreSQLInstanceStatus{Phase: databasev1alpha1.InstancePhaseReady, ObservedGeneration: 1, PostgreSQLVersion: "15.18",
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}}}
	}
	if d := DecideInstance(facts(recs), testPolicy); d.Intent == nil {
		t.Fatalf("precondition: with the executor's times the Instance is re-observed at once, got %+v", d)
	}
	clk := clocktesting.NewFakePassiveClock(t0)
	obs := journaled.NewObservations(clk)
	d := DecideInstance(facts(obs.Stamp("uid-1", recs)), testPolicy)
	if d.Intent != nil || d.Phase != databasev1alpha1.InstancePhaseReady || d.RequeueAfter != testPolicy.ResyncInterval {
		t.Fatalf("with observed times: %+v", d)
	}
	// Later passes keep the first observation: due after the interval.
	clk.SetTime(t0.Add(testPolicy.ResyncInterval))
	if d := DecideInstance(InstanceFacts{Generation: 1, Secret: SecretFact{Found: true, ResourceVersion: "1"}, Journal: journal.Fold(obs.Stamp("uid-1", recs)),
		Now: clk.Now(), Status: facts(nil).Status}, testPolicy); d.Intent == nil || d.Intent.Operation != dbcontract.OpObserveInstance {
		t.Fatalf("after the interval: %+v", d)
	}
}

// TestForgedRecordAnswersAreNoFailures: an executor's answer to a record
// on the Instance's intent subject it could not attribute or decode
// (Failed, keyed by that record's stream sequence, with the generation the
// record's publisher chose) is no failure of the Instance's own steps: it
// does not lengthen the back-off of the next retry.
func TestForgedRecordAnswersAreNoFailures(t *testing.T) {
	st := history(step{op: dbcontract.OpObserveInstance, class: journal.Succeeded, payload: usable("1")},
		step{op: dbcontract.OpObserveInstance, class: journal.Failed, reason: "ConnectionFailed", at: time.Second})
	want := consecutiveFailures(st, 1)
	obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLInstance", Name: "shared", UID: "uid-1", Generation: 1}
	for i, id := range []string{journal.UntrustedIntentID("uid-1", 90), journal.UndecodableIntentID("uid-1", 91), journal.UntrustedIntentID("uid-1", 92)} {
		forged := journal.Record{ID: id, Type: journal.TypeIntent, Operation: dbcontract.OpObserveInstance, Object: obj, Attempt: 1}
		out, err := journal.NewOutcome(forged, journal.Result{Class: journal.Failed, Reason: journal.ReasonUntrustedIntent}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out.Sequence, out.Time = uint64(100+i), t0.Add(2*time.Second)
		st.Apply(out)
	}
	if got := consecutiveFailures(st, 1); got != want {
		t.Fatalf("consecutive failures %d after three answers to forged records, want %d", got, want)
	}
}
