package database

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// InstancePolicy tunes the Instance decisions.
type InstancePolicy struct {
	// ResyncInterval: a Ready Instance is re-observed this long after its
	// last successful observation (PostgreSQL stopped -> DependencyUnavailable).
	ResyncInterval time.Duration
	// RetryBase and RetryMax bound the exponential back-off before a failed
	// observation is retried (input errors are not retried at all).
	RetryBase, RetryMax time.Duration
	// PendingRecheck is how long to wait on a pending intent before
	// reconciling again (the outcome watch normally wakes the projector earlier).
	PendingRecheck time.Duration
	// DeletionRecheck is how often a deleting Instance re-lists the Tenants
	// that still reference it (Tenant changes wake it earlier);
	// SetupWithManager turns zero into DefaultInstancePolicy's one minute.
	DeletionRecheck time.Duration
}

// DefaultInstancePolicy is used by the manager unless flags say otherwise.
var DefaultInstancePolicy = InstancePolicy{ResyncInterval: 5 * time.Minute, RetryBase: 5 * time.Second, RetryMax: 5 * time.Minute,
	PendingRecheck: 30 * time.Second, DeletionRecheck: time.Minute}

// SecretFact is what the projector saw of the admin Secret.
type SecretFact struct {
	Found           bool
	ResourceVersion string
}

// InstanceFacts are the inputs of one Instance decision.
type InstanceFacts struct {
	Generation int64
	// SpecErrors from ValidateInstanceSpec.
	SpecErrors []string
	Secret     SecretFact
	// SecretName is the referenced admin Secret (for messages).
	SecretName string
	// Journal is the fold of the Instance UID's records.
	Journal *journal.State
	// Status is the current status (phase may be missing or forged).
	Status databasev1alpha1.PostgreSQLInstanceStatus
	Now    time.Time
	// Deleting: the Instance has a deletionTimestamp.
	Deleting bool
	// ReferencedBy names (namespace/name) the Tenants, deleting ones
	// included, whose spec.instanceRef is this Instance; read only while
	// Deleting. ReferencesUnknown: that list could not be read.
	ReferencedBy      []string
	ReferencesUnknown bool
}

// PlannedIntent is an intent the projector must append before anything else.
type PlannedIntent struct {
	Operation string
	Attempt   int
}

// ReadyCondition is the desired Ready condition.
type ReadyCondition = journaled.Condition

// InstanceDecision is what the projector does next.
type InstanceDecision struct {
	Phase             databasev1alpha1.InstancePhase
	Ready             ReadyCondition
	PostgreSQLVersion string
	// Conclusive: the decision concludes the current generation (success or
	// a known failure), so status.observedGeneration advances.
	Conclusive bool
	Intent     *PlannedIntent
	// RequeueAfter > 0 asks for another reconcile after that delay.
	RequeueAfter time.Duration
	// StatusLost: the decision rests on an empty status; the reconciler
	// confirms it against the API server before acting (its cache may not
	// have seen its own last status write yet).
	StatusLost bool
	// RemoveFinalizer: deleting and no Tenant references the Instance.
	RemoveFinalizer bool
	// WaitingForTenants: deleting, and Tenants still reference it (a
	// WaitingForTenants Event is emitted when the phase becomes Deleting).
	WaitingForTenants bool
}

func reconciling(msg string) ReadyCondition {
	return ReadyCondition{Status: metav1.ConditionUnknown, Reason: databasev1alpha1.ReasonReconciling, Message: msg}
}

func notReady(reason, msg string) ReadyCondition {
	return ReadyCondition{Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

// conditionReason maps an outcome reason to a Ready reason of the Instance.
func instanceReason(r *journal.Result) string {
	switch r.Reason {
	case databasev1alpha1.ReasonAuthenticationFailed, databasev1alpha1.ReasonInsufficientPrivileges, databasev1alpha1.ReasonInvalidSpec, databasev1alpha1.ReasonDependencyUnavailable:
		return r.Reason
	default:
		return databasev1alpha1.ReasonDependencyUnavailable
	}
}

// DecideInstance is the Instance state machine (specification §8.2, §9;
// domain-instance.md §5): Pending -> Validating -> InitializingRegistry ->
// Ready. The phase is derived from the journal and the facts, never trusted
// from status: a wiped status forces a fresh observation, a forged phase is
// overwritten. It never performs I/O.
func DecideInstance(f InstanceFacts, p InstancePolicy) InstanceDecision {
	gen := f.Generation
	st := f.Journal
	if st == nil {
		st = journal.NewState()
	}
	if f.Deleting {
		return decideInstanceDelete(f, p)
	}
	if len(f.SpecErrors) > 0 {
		return InstanceDecision{Phase: databasev1alpha1.InstancePhasePending, Conclusive: true,
			Ready: notReady(databasev1alpha1.ReasonInvalidSpec, "invalid spec: "+strings.Join(f.SpecErrors, "; "))}
	}
	if !f.Secret.Found {
		phase := databasev1alpha1.InstancePhasePending
		if f.Status.Phase != "" && f.Status.Phase != databasev1alpha1.InstancePhaseReady {
			phase = f.Status.Phase
		}
		return InstanceDecision{Phase: phase, Conclusive: true, RequeueAfter: p.PendingRecheck,
			Ready: notReady(databasev1alpha1.ReasonDependencyUnavailable, fmt.Sprintf("admin credential Secret %q not found in the controller namespace", f.SecretName))}
	}
	observe := func(phase databasev1alpha1.InstancePhase, ready ReadyCondition) InstanceDecision {
		return InstanceDecision{Phase: phase, Ready: ready, RequeueAfter: p.PendingRecheck,
			Intent: &PlannedIntent{Operation: dbcontract.OpObserveInstance, Attempt: journaled.NextAttempt(st, dbcontract.OpObserveInstance, gen)}}
	}
	obs := journaled.IntentsOf(st, dbcontract.OpObserveInstance, gen)
	if len(obs) == 0 {
		return observe(databasev1alpha1.InstancePhaseValidating, reconciling("validating the connection and the admin role"))
	}
	last := obs[len(obs)-1]
	out, done := st.OutcomeOf(last.ID)
	if !done {
		d := InstanceDecision{Phase: databasev1alpha1.InstancePhaseValidating, Ready: reconciling("validating the connection and the admin role"), RequeueAfter: p.PendingRecheck}
		if keepReady(f) {
			d.Phase, d.Ready, d.PostgreSQLVersion = databasev1alpha1.InstancePhaseReady, readyCondition(f.Status.PostgreSQLVersion), f.Status.PostgreSQLVersion
		}
		return d
	}
	var op dbcontract.ObserveOutcome
	_ = json.Unmarshal(out.Payload, &op)
	if op.SecretResourceVersion != "" && op.SecretResourceVersion != f.Secret.ResourceVersion {
		// The admin Secret changed since the observation: it says nothing
		// about the credentials in force now.
		return observe(databasev1alpha1.InstancePhaseValidating, reconciling("the admin credential Secret changed; validating again"))
	}
	if out.Result.Class != journal.Succeeded {
		return retryAfterFailure(f, p, st, out, databasev1alpha1.InstancePhaseValidating, observe)
	}
	switch op.Registry {
	case dbcontract.RegistryUsable:
		return readyOrResync(f, p, out.Time, op.ServerVersion, observe)
	case dbcontract.RegistryAbsent, dbcontract.RegistryNeedsMigration:
	default:
		return observe(databasev1alpha1.InstancePhaseValidating, reconciling("the last observation did not report the registry; validating again"))
	}
	// The registry must be created or migrated: a BootstrapRegistry decided
	// after this observation.
	var boot *journal.Record
	for _, b := range journaled.IntentsOf(st, dbcontract.OpBootstrapRegistry, gen) {
		if b.Sequence > out.Sequence {
			b := b
			boot = &b
			break
		}
	}
	if boot == nil {
		return InstanceDecision{Phase: databasev1alpha1.InstancePhaseInitializingRegistry, Ready: reconciling("initializing the ownership registry"),
			RequeueAfter: p.PendingRecheck,
			Intent:       &PlannedIntent{Operation: dbcontract.OpBootstrapRegistry, Attempt: journaled.NextAttempt(st, dbcontract.OpBootstrapRegistry, gen)}}
	}
	bout, done := st.OutcomeOf(boot.ID)
	if !done {
		return InstanceDecision{Phase: databasev1alpha1.InstancePhaseInitializingRegistry, Ready: reconciling("initializing the ownership registry"), RequeueAfter: p.PendingRecheck}
	}
	if bout.Result.Class != journal.Succeeded {
		return retryAfterFailure(f, p, st, bout, databasev1alpha1.InstancePhaseInitializingRegistry, observe)
	}
	return readyOrResync(f, p, bout.Time, op.ServerVersion, observe)
}

// keepReady: a periodic re-observation of a Ready Instance does not flap
// its Ready condition while it is pending.
func keepReady(f InstanceFacts) bool {
	return f.Status.Phase == databasev1alpha1.InstancePhaseReady && f.Status.ObservedGeneration == f.Generation &&
		readyStatus(f.Status.Conditions) == metav1.ConditionTrue
}

func readyStatus(conds []metav1.Condition) metav1.ConditionStatus {
	for _, c := range conds {
		if c.Type == databasev1alpha1.ConditionReady {
			return c.Status
		}
	}
	return ""
}

func readyCondition(version string) ReadyCondition {
	msg := "connected; admin privileges and ownership registry verified"
	if version != "" {
		msg = "connected to PostgreSQL " + version + "; admin privileges and ownership registry verified"
	}
	return ReadyCondition{Status: metav1.ConditionTrue, Reason: databasev1alpha1.ReasonReady, Message: msg}
}

func readyOrResync(f InstanceFacts, p InstancePolicy, verifiedAt time.Time, version string, observe func(databasev1alpha1.InstancePhase, ReadyCondition) InstanceDecision) InstanceDecision {
	if f.Status.Phase == "" {
		// Status was lost: rebuild it from a fresh observation, never from
		// the journal alone.
		d := observe(databasev1alpha1.InstancePhaseValidating, reconciling("status was lost; validating again from external facts"))
		d.StatusLost = true
		return d
	}
	due := verifiedAt.Add(p.ResyncInterval)
	if !f.Now.Before(due) {
		d := observe(databasev1alpha1.InstancePhaseReady, readyCondition(version))
		d.PostgreSQLVersion, d.Conclusive = version, true
		return d
	}
	return InstanceDecision{Phase: databasev1alpha1.InstancePhaseReady, Ready: readyCondition(version), PostgreSQLVersion: version,
		Conclusive: true, RequeueAfter: due.Sub(f.Now)}
}

// retryAfterFailure reports a failed (or unknown) outcome and, after an
// exponential back-off over the consecutive failures, observes again. A
// ResultUnknown is never retried blindly: the retry is an observation.
func retryAfterFailure(f InstanceFacts, p InstancePolicy, st *journal.State, out journal.Record, phase databasev1alpha1.InstancePhase,
	observe func(databasev1alpha1.InstancePhase, ReadyCondition) InstanceDecision) InstanceDecision {
	reason := instanceReason(out.Result)
	msg := out.Result.Message
	if msg == "" {
		msg = out.Operation + " failed: " + out.Result.Reason
	}
	ready := notReady(reason, msg)
	if reason == databasev1alpha1.ReasonInvalidSpec {
		return InstanceDecision{Phase: phase, Ready: ready, Conclusive: true}
	}
	failures := consecutiveFailures(st, f.Generation)
	delay := journaled.Backoff(p.RetryBase, p.RetryMax, failures)
	due := out.Time.Add(delay)
	if !f.Now.Before(due) {
		d := observe(phase, ready)
		d.Conclusive = true
		return d
	}
	return InstanceDecision{Phase: phase, Ready: ready, Conclusive: true, RequeueAfter: due.Sub(f.Now)}
}

// consecutiveFailures counts the non-successful outcomes of this generation
// since its last success. Only answers to the Instance's own intents
// count: an executor's answer to a record it could not attribute or decode
// (keyed by that record's stream sequence, journal.UntrustedIntentID and
// UndecodableIntentID) is no failure of the Instance.
func consecutiveFailures(st *journal.State, gen int64) int {
	var outs []journal.Record
	for _, o := range st.Outcomes {
		if _, ours := st.Intents[o.CausationID]; ours && o.Object.Generation == gen {
			outs = append(outs, o)
		}
	}
	journaled.SortBySequence(outs)
	n := 0
	for i := len(outs) - 1; i >= 0; i-- {
		if outs[i].Result.Class == journal.Succeeded {
			break
		}
		n++
	}
	if n == 0 {
		n = 1
	}
	return n
}

// decideInstanceDelete stops provisioning (phase Deleting) and keeps the
// finalizer while any Tenant, deleting ones included, references the
// Instance; a failed reference check counts as "still referenced". Nothing
// external is deleted: the server and the registry outlive the Instance.
func decideInstanceDelete(f InstanceFacts, p InstancePolicy) InstanceDecision {
	switch {
	case f.ReferencesUnknown:
		return InstanceDecision{Phase: databasev1alpha1.InstancePhaseDeleting, RequeueAfter: p.RetryBase,
			Ready: reconciling("deleting: could not check for Tenants referencing this Instance; keeping the finalizer")}
	case len(f.ReferencedBy) > 0:
		return InstanceDecision{Phase: databasev1alpha1.InstancePhaseDeleting, RequeueAfter: p.DeletionRecheck, WaitingForTenants: true,
			Ready: reconciling(fmt.Sprintf("deleting: waiting for %d PostgreSQLTenant(s) referencing this Instance (e.g. %s)", len(f.ReferencedBy), f.ReferencedBy[0]))}
	}
	return InstanceDecision{Phase: databasev1alpha1.InstancePhaseDeleting, RemoveFinalizer: true, Ready: reconciling("deleting: no Tenant references this Instance")}
}
