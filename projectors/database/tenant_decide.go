package database

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// tenantStep is one provisioning step and the phase reached when it succeeds.
type tenantStep struct {
	op    string
	phase databasev1alpha1.TenantPhase
}

// provisionSteps is the Tenant chain (specification §8.3, §9).
var provisionSteps = []tenantStep{
	{dbcontract.OpCheckExtensions, databasev1alpha1.TenantPhasePending},
	{dbcontract.OpClaimOwnership, databasev1alpha1.TenantPhasePlanned},
	{dbcontract.OpWriteCredential, databasev1alpha1.TenantPhaseCredentialCreated},
	{dbcontract.OpCreateRole, databasev1alpha1.TenantPhaseRoleCreated},
	{dbcontract.OpCreateDatabase, databasev1alpha1.TenantPhaseDatabaseCreated},
	{dbcontract.OpEnsureExtensions, databasev1alpha1.TenantPhaseDatabaseCreated},
	{dbcontract.OpEnsureExternalSecret, databasev1alpha1.TenantPhaseExternalSecretCreated},
	{dbcontract.OpObserveProjection, databasev1alpha1.TenantPhaseCredentialProjected},
	{dbcontract.OpVerifyLogin, databasev1alpha1.TenantPhaseReady},
}

// deleteSteps is the Delete policy's order (specification §11.2): every
// executor re-proves ownership before it deletes.
var deleteSteps = []tenantStep{
	{dbcontract.OpDeleteExternalSecret, databasev1alpha1.TenantPhaseDeleting},
	{dbcontract.OpDisableLogin, databasev1alpha1.TenantPhaseDeleting},
	{dbcontract.OpDropDatabase, databasev1alpha1.TenantPhaseDeleting},
	{dbcontract.OpDropRole, databasev1alpha1.TenantPhaseDeleting},
	{dbcontract.OpDestroyCredential, databasev1alpha1.TenantPhaseDeleting},
	{dbcontract.OpReleaseOwnership, databasev1alpha1.TenantPhaseDeleting},
}

// TenantPolicy tunes the Tenant decisions.
type TenantPolicy struct {
	// ResyncInterval: a Ready Tenant is re-checked (one ObserveTenant) this
	// long after its last successful check (drift detection).
	ResyncInterval time.Duration
	// RetryBase/RetryMax: back-off after dependency failures. Conflicts are
	// re-checked every RetryMax (a human may have resolved them).
	RetryBase, RetryMax time.Duration
	PendingRecheck      time.Duration
}

// DefaultTenantPolicy is used unless flags say otherwise.
var DefaultTenantPolicy = TenantPolicy{ResyncInterval: 10 * time.Minute, RetryBase: 5 * time.Second, RetryMax: 5 * time.Minute, PendingRecheck: 30 * time.Second}

// TenantFacts are the inputs of one Tenant decision.
type TenantFacts struct {
	Generation int64
	// InputErrors are invalid-spec problems (names, extensions).
	InputErrors []string
	// ImmutableErrors are changes to fields that are fixed after the first external write.
	ImmutableErrors []string
	// InstanceProblem is non-empty when the Instance is missing, deleting or not Ready.
	InstanceProblem string
	// NamespaceNotAllowed is non-empty when the Instance's
	// spec.allowedNamespaces does not admit the Tenant's namespace (never
	// checked while deleting).
	NamespaceNotAllowed string
	// InstanceProgressing: the Instance is not Ready yet but has no
	// conclusion either (Ready=Unknown: first validation, registry
	// bootstrap); the Tenant then reports Reconciling, not a failure.
	InstanceProgressing bool
	// InstanceMissing: the Instance the steps run on (the one the Tenant
	// was provisioned on, while deleting) does not exist: no step but the
	// Retain steps can run.
	InstanceMissing bool
	// Read are the read-on-demand facts below that the controller has
	// read (its zero value then means: nothing found). DecideTenant asks
	// for one it needs and that is not in Read (TenantDecision.Need)
	// instead of deciding without it; the controller reads it, adds its bit
	// and decides again, so each is read at most once per pass and only
	// when the decision depends on it. A caller that reads nothing gets
	// asked, never a decision taken without the fact.
	Read TenantFactSet
	// TargetTaken is non-empty when the projection target (the derived
	// ExternalSecret name or the target Secret) exists and is not this
	// Tenant's: it names what takes it (FactTargetTaken: metadata-only
	// reads, asked for before ClaimOwnership and EnsureExternalSecret,
	// never while deleting).
	TargetTaken string
	// ProjectionSynced: the Tenant's ExternalSecret reports Ready=True
	// (ESO synced it; FactProjectionSynced). Asked for before the first
	// observation of a just-created ExternalSecret, and while the chain
	// waits to observe the projection again after an attempt found it not
	// yet synced: the ExternalSecret's status change (watched) then ends
	// the wait at once instead of the back-off.
	ProjectionSynced bool
	// Drift is non-empty when what a Ready Tenant owns in Kubernetes (its
	// ExternalSecret, the Secret) or its credential record no longer
	// matches what was provisioned (FactDrift, asked for only when the
	// Tenant is Ready and nothing else is to be done): every step is
	// checked again.
	Drift      string
	Deleting   bool
	SpecPolicy databasev1alpha1.DeletionPolicy
	Journal    *journal.State
	// Records are the UID's records in order (for notes).
	Records []journal.Record
	Status  databasev1alpha1.PostgreSQLTenantStatus
	Now     time.Time
}

// TenantFactSet is a set of read-on-demand Tenant facts.
type TenantFactSet uint8

// The read-on-demand Tenant facts (TenantFacts.Read, TenantDecision.Need).
const (
	FactTargetTaken TenantFactSet = 1 << iota
	FactProjectionSynced
	FactDrift
	// AllTenantFacts are every read-on-demand fact.
	AllTenantFacts = FactTargetTaken | FactProjectionSynced | FactDrift
)

// TenantDecision is what the Tenant projector does next.
type TenantDecision struct {
	// Need is one fact not in TenantFacts.Read the decision depends on (0:
	// the decision is complete): the controller reads it and decides
	// again; every other field is then empty.
	Need       TenantFactSet
	Phase      databasev1alpha1.TenantPhase
	Ready      ReadyCondition
	Conclusive bool
	Intent     *PlannedIntent
	// Chain are further provisioning steps decided in the same pass, each
	// ordered after the one before it (the first after Intent): their
	// executors run them one after another as the outcomes come in,
	// without a pass per step (journal.Record.After). Only steps whose
	// payload and gates are known before the earlier steps' outcomes are
	// chained (chainable).
	Chain []PlannedIntent
	// Also are intents decided in the same pass that wait for none of the
	// others (their inputs are in the journal already): the ExternalSecret
	// beside the role → database → extensions chain.
	Also []PlannedIntent
	// Note is a journal note to append (dbcontract.NoteRevalidate, dbcontract.NoteDeletionStarted).
	Note       string
	NotePolicy databasev1alpha1.DeletionPolicy
	// RemoveFinalizer: deletion is complete (or Retain: the registry update is journaled).
	RemoveFinalizer bool
	DatabaseOID     uint32
	// LeftInPlace lists the objects deletion skipped because they are not
	// this Tenant's (reported as an Event when the finalizer goes).
	LeftInPlace  []string
	RequeueAfter time.Duration
	// StatusLost: see InstanceDecision.StatusLost.
	StatusLost bool
}

// lastNote returns the last note of op (nil: none).
func lastNote(recs []journal.Record, op string) *journal.Record {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Type == journal.TypeNote && recs[i].Operation == op {
			return &recs[i]
		}
	}
	return nil
}

// DecideTenant is the whole Tenant state machine. The phase only names
// the candidate step: every step is an intent whose executor checks the
// external facts before and after, and the phase advances only from
// outcomes in the journal. It never performs I/O: when the decision
// depends on a fact the controller reads on demand and has not read yet
// (not in f.Read), it returns only Need. The controller acts on the decision as
// it is, never overriding it.
func DecideTenant(f TenantFacts, p TenantPolicy) TenantDecision {
	need := func(fact TenantFactSet) bool { return f.Read&fact == 0 }
	ask := func(fact TenantFactSet) TenantDecision { return TenantDecision{Need: fact} }
	d := decideTenantChain(f, p)
	st := f.Journal
	if st == nil {
		st = journal.NewState()
	}
	op := func() string {
		if d.Intent == nil {
			return ""
		}
		return d.Intent.Operation
	}
	plans := func(ops ...string) bool {
		for _, o := range ops {
			has := func(c PlannedIntent) bool { return c.Operation == o }
			if op() == o || slices.ContainsFunc(d.Chain, has) || slices.ContainsFunc(d.Also, has) {
				return true
			}
		}
		return false
	}
	if !f.Deleting && plans(dbcontract.OpClaimOwnership, dbcontract.OpEnsureExternalSecret) && need(FactTargetTaken) {
		// Before the first external write, and before the ExternalSecret
		// is created: is the projection target someone else's?
		return ask(FactTargetTaken)
	}
	if !f.Deleting && op() == dbcontract.OpObserveProjection && d.Intent.Attempt == 1 &&
		f.Now.Before(ensuredAt(st, f.Generation).Add(p.RetryBase)) {
		// ESO syncs the ExternalSecret just created asynchronously: observe
		// once it reports Ready (its status change is watched and wakes a
		// pass), not before: an observation now would only fail and back
		// off. After RetryBase the observation is decided anyway, so a
		// projection that never syncs is still reported.
		if need(FactProjectionSynced) {
			return ask(FactProjectionSynced)
		}
		if !f.ProjectionSynced {
			d.Intent, d.Chain, d.Also, d.RequeueAfter = nil, nil, nil, ensuredAt(st, f.Generation).Add(p.RetryBase).Sub(f.Now)
		}
	}
	if !f.Deleting && d.Intent == nil && d.RequeueAfter > 0 && reobserveDue(st, f.Generation) && need(FactProjectionSynced) {
		// Waiting to observe the projection again: if ESO has synced the
		// ExternalSecret meanwhile (its status change woke this pass), do
		// it now (the chain then plans the observation).
		return ask(FactProjectionSynced)
	}
	if !f.Deleting && !d.StatusLost && d.Note == "" && d.Intent == nil && d.Ready.Status == metav1.ConditionTrue {
		// What the Tenant owns in Kubernetes changed (watched): repair or
		// report now, not at the next periodic re-check.
		if need(FactDrift) {
			return ask(FactDrift)
		}
		if f.Drift != "" {
			return TenantDecision{Phase: d.Phase, Note: dbcontract.NoteRevalidate, DatabaseOID: d.DatabaseOID, Ready: reconciling(f.Drift + "; re-checking every step")}
		}
	}
	if d.Note == "" && d.Intent != nil && f.InstanceMissing && op() != dbcontract.OpRetainOwnership && op() != dbcontract.OpRetainExternalSecret {
		// The Instance is gone: the steps that need it can not run; wait.
		return TenantDecision{Phase: d.Phase, Ready: notReady(databasev1alpha1.ReasonInstanceNotReady, f.InstanceProblem), RequeueAfter: p.PendingRecheck, StatusLost: d.StatusLost}
	}
	return d
}

// decideTenantChain walks the step chain (or the deletion) from the
// journal and the facts read up front.
func decideTenantChain(f TenantFacts, p TenantPolicy) TenantDecision {
	st := f.Journal
	if st == nil {
		st = journal.NewState()
	}
	if f.Deleting {
		return decideTenantDelete(f, p, st)
	}
	var epoch uint64
	if n := lastNote(f.Records, dbcontract.NoteRevalidate); n != nil {
		epoch = n.Sequence
	}
	// Once the first external write happened the phase never returns to
	// Pending, not even while every step is re-checked: the API's
	// immutability rules hold from then on.
	start := databasev1alpha1.TenantPhasePending
	if provisionedAs(st) != nil {
		start = databasev1alpha1.TenantPhasePlanned
	}
	// The checkpoint shown while blocked is derived from the journal, never
	// taken from status (which may be stale or forged).
	phase := runChain(f, p, st, provisionSteps, epoch, start).Phase
	if len(f.InputErrors) > 0 {
		return TenantDecision{Phase: phase, Conclusive: true,
			Ready: notReady(databasev1alpha1.ReasonInvalidSpec, "invalid spec: "+strings.Join(f.InputErrors, "; "))}
	}
	if len(f.ImmutableErrors) > 0 {
		return TenantDecision{Phase: phase, Conclusive: true,
			Ready: notReady(databasev1alpha1.ReasonImmutableField, strings.Join(f.ImmutableErrors, "; ")+" (restore the previous value; v1alpha1 has no rename or migration)")}
	}
	if f.NamespaceNotAllowed != "" {
		// Before any external write; re-checked on every pass (an
		// administrator may add the namespace).
		return TenantDecision{Phase: phase, Conclusive: true, RequeueAfter: p.PendingRecheck,
			Ready: notReady(databasev1alpha1.ReasonNamespaceNotAllowed, f.NamespaceNotAllowed)}
	}
	if f.InstanceProblem != "" && f.InstanceProgressing {
		return TenantDecision{Phase: phase, RequeueAfter: p.PendingRecheck,
			Ready: reconciling("waiting: " + f.InstanceProblem + " yet")}
	}
	if f.InstanceProblem != "" {
		return TenantDecision{Phase: phase, Conclusive: true, RequeueAfter: p.PendingRecheck,
			Ready: notReady(databasev1alpha1.ReasonInstanceNotReady, f.InstanceProblem)}
	}
	if f.TargetTaken != "" {
		// Checked before the first external write (and again before the
		// ExternalSecret is created): nothing is claimed or written while
		// someone else's object holds the name. Re-checked on every pass
		// (a human may resolve it); it never blocks deletion.
		return TenantDecision{Phase: phase, Conclusive: true, RequeueAfter: p.PendingRecheck,
			Ready: notReady(databasev1alpha1.ReasonConflict, "the credential projection target is taken: "+f.TargetTaken+
				" (choose another spec.credential.secretName or Tenant name, or remove that object)")}
	}
	if f.Status.Phase == "" && len(st.Intents) > 0 {
		// Status was lost: re-run every step against the external facts.
		if anyAfter(st, f.Generation, epoch) {
			return TenantDecision{Phase: start, Note: dbcontract.NoteRevalidate, StatusLost: true,
				Ready: reconciling("status was lost; re-checking every step against the external facts")}
		}
	}
	d := runChain(f, p, st, provisionSteps, epoch, start)
	if d.done {
		return decideRecheck(f, p, st, d, epoch)
	}
	if d.Ready.Status == metav1.ConditionUnknown {
		d.Also = externalSecretBeside(f, st, epoch, d.at)
	}
	return d.TenantDecision
}

// externalSecretBeside plans EnsureExternalSecret beside the role →
// database → extensions chain: it needs only the credential record, so it
// is decided once WriteCredential succeeded, while the walk of the steps
// (stopped at index at, waiting for or deciding a step, not reporting a
// failure) has not reached it yet, and it has no intent in this epoch (or
// only a skipped one). ESO then syncs while PostgreSQL works. The phase
// still advances in the steps' order; a failure of the ExternalSecret is
// reported, and retried, when the walk reaches its step.
func externalSecretBeside(f TenantFacts, st *journal.State, epoch uint64, at int) []PlannedIntent {
	es := slices.IndexFunc(provisionSteps, func(s tenantStep) bool { return s.op == dbcontract.OpEnsureExternalSecret })
	cred := slices.IndexFunc(provisionSteps, func(s tenantStep) bool { return s.op == dbcontract.OpWriteCredential })
	if at <= cred || at >= es {
		return nil
	}
	if l := lastIntentSince(st, dbcontract.OpEnsureExternalSecret, f.Generation, epoch); l != nil && !skipped(st, l) {
		return nil
	}
	return []PlannedIntent{{Operation: dbcontract.OpEnsureExternalSecret, Attempt: journaled.NextAttempt(st, dbcontract.OpEnsureExternalSecret, f.Generation)}}
}

// decideRecheck keeps a provisioned Tenant Ready and re-checks it every
// ResyncInterval with one ObserveTenant intent (a quiet
// re-check appends one intent and its outcome). Ready stays True while the
// observation runs and after one that finds nothing wrong. An observation
// that finds a fact broken re-runs every step (a Revalidate note); one
// that cannot reach PostgreSQL is reported and retried with back-off.
func decideRecheck(f TenantFacts, p TenantPolicy, st *journal.State, chain chainResult, epoch uint64) TenantDecision {
	ready := TenantDecision{Phase: databasev1alpha1.TenantPhaseReady, Ready: tenantReady(), Conclusive: true, DatabaseOID: chain.oid}
	verified := chain.lastDone
	var last *journal.Record
	for _, r := range journaled.IntentsOf(st, dbcontract.OpObserveTenant, f.Generation) {
		if r.Sequence > epoch {
			r := r
			last = &r
		}
	}
	observe := func(d TenantDecision) TenantDecision {
		d.Intent = &PlannedIntent{Operation: dbcontract.OpObserveTenant, Attempt: journaled.NextAttempt(st, dbcontract.OpObserveTenant, f.Generation)}
		d.RequeueAfter = p.PendingRecheck
		return d
	}
	if last != nil {
		out, done := st.OutcomeOf(last.ID)
		switch {
		case !done:
			ready.RequeueAfter = p.PendingRecheck
			return ready
		case out.Result.Class == journal.Succeeded:
			verified = out.Time
		case out.Result.Reason == databasev1alpha1.ReasonDependencyUnavailable:
			msg := out.Result.Message
			if msg == "" {
				msg = "the re-check could not reach PostgreSQL"
			}
			d := TenantDecision{Phase: databasev1alpha1.TenantPhaseReady, Conclusive: true, DatabaseOID: chain.oid,
				Ready: notReady(databasev1alpha1.ReasonDependencyUnavailable, msg)}
			due := out.Time.Add(journaled.Backoff(p.RetryBase, p.RetryMax, consecutiveFailed(st, dbcontract.OpObserveTenant, f.Generation, epoch)))
			if f.Now.Before(due) {
				d.RequeueAfter = due.Sub(f.Now)
				return d
			}
			return observe(d)
		default:
			msg := out.Result.Message
			if msg == "" {
				msg = "the re-check failed: " + out.Result.Reason
			}
			return TenantDecision{Phase: databasev1alpha1.TenantPhaseReady, Note: dbcontract.NoteRevalidate, DatabaseOID: chain.oid,
				Ready: reconciling(msg + "; re-checking every step")}
		}
	}
	due := verified.Add(p.ResyncInterval)
	if !f.Now.Before(due) {
		return observe(ready)
	}
	ready.RequeueAfter = due.Sub(f.Now)
	return ready
}

// consecutiveFailed counts the failed outcomes of op in gen after epoch
// since its last success (at least 1).
func consecutiveFailed(st *journal.State, op string, gen int64, epoch uint64) int {
	ins := journaled.IntentsOf(st, op, gen)
	n := 0
	for i := len(ins) - 1; i >= 0 && ins[i].Sequence > epoch; i-- {
		out, ok := st.OutcomeOf(ins[i].ID)
		if ok && out.Result.Class == journal.Succeeded {
			break
		}
		if ok {
			n++
		}
	}
	return max(n, 1)
}

func tenantReady() ReadyCondition {
	return ReadyCondition{Status: metav1.ConditionTrue, Reason: databasev1alpha1.ReasonReady,
		Message: "database, owner role, extensions and credential verified; the application login works"}
}

// anyAfter reports whether the generation has intents after the epoch.
func anyAfter(st *journal.State, gen int64, epoch uint64) bool {
	for _, r := range st.Intents {
		if r.Object.Generation == gen && r.Sequence > epoch {
			return true
		}
	}
	return false
}

type chainResult struct {
	TenantDecision
	// at is the index of the step the walk stopped at (len(steps): done).
	at       int
	done     bool
	lastDone time.Time
	oid      uint32
}

// runChain walks steps in order for the current generation after epoch.
func runChain(f TenantFacts, p TenantPolicy, st *journal.State, steps []tenantStep, epoch uint64, start databasev1alpha1.TenantPhase) chainResult {
	phase := start
	var lastDone time.Time
	var oid uint32
	for i, step := range steps {
		last := lastIntentSince(st, step.op, f.Generation, epoch)
		if last == nil || skipped(st, last) {
			// Not decided yet in this epoch, or its last intent was not
			// run because an earlier step failed (which has succeeded
			// since): decide it, and the chainable steps after it.
			var chain []PlannedIntent
			for _, next := range steps[i+1:] {
				if !chainable[next.op] {
					break
				}
				if l := lastIntentSince(st, next.op, f.Generation, epoch); l != nil && !skipped(st, l) {
					break
				}
				chain = append(chain, PlannedIntent{Operation: next.op, Attempt: journaled.NextAttempt(st, next.op, f.Generation)})
			}
			return chainResult{at: i, TenantDecision: TenantDecision{Phase: phase, RequeueAfter: p.PendingRecheck, DatabaseOID: oid,
				Ready:  reconciling(stepMessage(step.op)),
				Intent: &PlannedIntent{Operation: step.op, Attempt: journaled.NextAttempt(st, step.op, f.Generation)}, Chain: chain}}
		}
		out, ok := st.OutcomeOf(last.ID)
		if !ok {
			return chainResult{at: i, TenantDecision: TenantDecision{Phase: phase, RequeueAfter: p.PendingRecheck, DatabaseOID: oid,
				Ready: reconciling(stepMessage(step.op))}}
		}
		if out.Result.Class != journal.Succeeded {
			return chainResult{at: i, TenantDecision: tenantFailure(f, p, st, step, out, phase, epoch, oid)}
		}
		if step.op == dbcontract.OpCreateDatabase {
			var o dbcontract.TenantOutcome
			if json.Unmarshal(out.Payload, &o) == nil && o.DatabaseOID != 0 {
				oid = o.DatabaseOID
			}
		}
		phase = step.phase
		lastDone = out.Time
	}
	return chainResult{at: len(steps), TenantDecision: TenantDecision{Phase: phase, DatabaseOID: oid}, done: true, lastDone: lastDone, oid: oid}
}

// chainable are the provisioning steps decided in the same pass as the
// step before them and ordered after it (TenantDecision.Chain): their
// payloads come from the spec and the Instance alone, and the only fact
// read on demand that gates any of them (FactTargetTaken, before
// ClaimOwnership) is read once for the pass. EnsureExternalSecret carries
// the credential version WriteCredential's outcome reports, and
// ObserveProjection waits for ESO: each starts a chain of its own.
var chainable = map[string]bool{
	dbcontract.OpClaimOwnership:   true,
	dbcontract.OpWriteCredential:  true,
	dbcontract.OpCreateRole:       true,
	dbcontract.OpCreateDatabase:   true,
	dbcontract.OpEnsureExtensions: true,
	dbcontract.OpVerifyLogin:      true,
}

// lastIntentSince is the last intent of op in gen after epoch (nil: none).
func lastIntentSince(st *journal.State, op string, gen int64, epoch uint64) *journal.Record {
	var last *journal.Record
	for _, r := range journaled.IntentsOf(st, op, gen) {
		if r.Sequence > epoch {
			r := r
			last = &r
		}
	}
	return last
}

// skipped reports whether intent in was not run because the intent it was
// ordered after did not succeed (Failed/DependencyFailed).
func skipped(st *journal.State, in *journal.Record) bool {
	out, ok := st.OutcomeOf(in.ID)
	return ok && out.Result.Class == journal.Failed && out.Result.Reason == journal.ReasonDependencyFailed
}

func stepMessage(op string) string {
	switch op {
	case dbcontract.OpCheckExtensions:
		return "checking the requested extensions are available"
	case dbcontract.OpClaimOwnership:
		return "claiming ownership in the registry"
	case dbcontract.OpWriteCredential:
		return "writing the credential to OpenBao"
	case dbcontract.OpCreateRole:
		return "creating the login role"
	case dbcontract.OpCreateDatabase:
		return "creating the database"
	case dbcontract.OpEnsureExtensions:
		return "installing extensions"
	case dbcontract.OpEnsureExternalSecret:
		return "creating the ExternalSecret"
	case dbcontract.OpObserveProjection:
		return "waiting for ESO to project the Secret"
	case dbcontract.OpVerifyLogin:
		return "verifying the application login"
	default:
		return "running " + op
	}
}

// tenantFailure reports a failed step and schedules its retry: dependency
// problems back off exponentially, conflicts are re-checked slowly,
// invalid input is not retried until the spec changes.
func tenantFailure(f TenantFacts, p TenantPolicy, st *journal.State, step tenantStep, out journal.Record, phase databasev1alpha1.TenantPhase, epoch uint64, oid uint32) TenantDecision {
	reason := tenantReason(out.Result, step.op)
	msg := out.Result.Message
	if msg == "" {
		msg = fmt.Sprintf("%s failed: %s", out.Operation, out.Result.Reason)
	}
	d := TenantDecision{Phase: phase, Ready: notReady(reason, msg), Conclusive: true, DatabaseOID: oid}
	if reason == databasev1alpha1.ReasonInvalidSpec {
		return d
	}
	if step.op == dbcontract.OpObserveProjection && reason == databasev1alpha1.ReasonCredentialProjectionFailed &&
		attemptsSince(st, step.op, f.Generation, epoch) < projectionGrace {
		// ESO syncs asynchronously: the first observations usually find
		// the Secret not projected yet. That is still Reconciling (spec §10:
		// Ready=Unknown while there is no conclusion), not a failure.
		d.Ready, d.Conclusive = reconciling("waiting for ESO to project the Secret: "+msg), false
	}
	delay := p.RetryMax
	if reason != databasev1alpha1.ReasonConflict {
		n := attemptsSince(st, step.op, f.Generation, epoch)
		delay = journaled.Backoff(p.RetryBase, p.RetryMax, n)
		if step.op == dbcontract.OpObserveProjection && reason == databasev1alpha1.ReasonCredentialProjectionFailed && n < projectionGrace && f.ProjectionSynced {
			// ESO has synced since: observe again now. Bounded by the
			// grace attempts, so a Secret that stays wrong backs off.
			delay = 0
		}
	}
	due := out.Time.Add(delay)
	if f.Now.Before(due) {
		d.RequeueAfter = due.Sub(f.Now)
		return d
	}
	d.Intent = &PlannedIntent{Operation: step.op, Attempt: journaled.NextAttempt(st, step.op, f.Generation)}
	d.RequeueAfter = p.PendingRecheck
	return d
}

// projectionGrace is how many ObserveProjection attempts (per epoch) find
// the Secret not yet projected before the Tenant reports
// CredentialProjectionFailed; with the default back-off (5 s, doubling)
// that is about 35 s.
const projectionGrace = 4

// attemptsSince counts the intents of op for gen after epoch that ran (a
// skipped one, Failed/DependencyFailed, was no attempt).
func attemptsSince(st *journal.State, op string, gen int64, epoch uint64) int {
	n := 0
	for _, r := range journaled.IntentsOf(st, op, gen) {
		if r.Sequence > epoch && !skipped(st, &r) {
			n++
		}
	}
	return n
}

func tenantReason(r *journal.Result, op string) string {
	switch r.Reason {
	case databasev1alpha1.ReasonConflict, databasev1alpha1.ReasonInvalidSpec, databasev1alpha1.ReasonDependencyUnavailable,
		databasev1alpha1.ReasonProvisioningFailed, databasev1alpha1.ReasonCredentialProjectionFailed, databasev1alpha1.ReasonImmutableField,
		databasev1alpha1.ReasonLoginRejected, databasev1alpha1.ReasonDeletionBlocked:
		return r.Reason
	}
	if op == dbcontract.OpObserveProjection || op == dbcontract.OpEnsureExternalSecret {
		return databasev1alpha1.ReasonCredentialProjectionFailed
	}
	return databasev1alpha1.ReasonProvisioningFailed
}

// decideTenantDelete: the policy in force is the one recorded when deletion
// began. Retain journals the registry update and lets the CR go at once
// (the intent is executed whenever PostgreSQL is reachable); Delete runs
// the cleanup chain and keeps the finalizer until every step succeeded.
func decideTenantDelete(f TenantFacts, p TenantPolicy, st *journal.State) TenantDecision {
	note := lastNote(f.Records, dbcontract.NoteDeletionStarted)
	if note == nil {
		policy := f.SpecPolicy
		if policy == "" {
			policy = databasev1alpha1.DeletionPolicyRetain
		}
		return TenantDecision{Phase: databasev1alpha1.TenantPhaseDeleting, Note: dbcontract.NoteDeletionStarted, NotePolicy: policy,
			Ready: reconciling("deletion started (deletionPolicy " + string(policy) + ")")}
	}
	var dn dbcontract.DeletionNote
	_ = json.Unmarshal(note.Payload, &dn)
	if len(st.Intents) == 0 || !claimedEver(st) {
		// Nothing was ever claimed: there is nothing of ours outside.
		return TenantDecision{Phase: databasev1alpha1.TenantPhaseDeleting, RemoveFinalizer: true, Ready: reconciling("nothing to clean up")}
	}
	if pending := pendingBefore(st, note.Sequence); len(pending) > 0 {
		// An intent decided before deletion began may still run (a
		// redelivered CreateRole or CreateDatabase): deleting or releasing
		// now could leave what it creates behind.
		// Every intent gets an outcome (the consumer records
		// RetriesExhausted at the latest), so this wait ends.
		return TenantDecision{Phase: databasev1alpha1.TenantPhaseDeleting, RequeueAfter: p.PendingRecheck,
			Ready: reconciling(fmt.Sprintf("deletion waits for %d operation(s) decided before it to finish (%s)", len(pending), pending[0].Operation))}
	}
	if dn.Policy != databasev1alpha1.DeletionPolicyDelete {
		return decideTenantRetain(f, p, st, note.Sequence)
	}
	d := runChain(f, p, st, deleteSteps, note.Sequence, databasev1alpha1.TenantPhaseDeleting)
	if d.done {
		return TenantDecision{Phase: databasev1alpha1.TenantPhaseDeleting, RemoveFinalizer: true, Ready: reconciling("every external resource was deleted"),
			LeftInPlace: leftInPlace(st, deleteSteps, f.Generation, note.Sequence)}
	}
	d.Phase = databasev1alpha1.TenantPhaseDeleting
	return d.TenantDecision
}

// pendingBefore lists the intents appended before seq that have no
// outcome yet, in stream order.
func pendingBefore(st *journal.State, seq uint64) []journal.Record {
	var out []journal.Record
	for _, r := range st.Pending() {
		if r.Sequence < seq {
			out = append(out, r)
		}
	}
	return out
}

// claimedEver reports whether a ClaimOwnership was ever decided for the
// UID (a pending one may still execute, so it counts).
func claimedEver(st *journal.State) bool {
	for _, r := range st.Intents {
		if r.Operation == dbcontract.OpClaimOwnership {
			return true
		}
	}
	return false
}
