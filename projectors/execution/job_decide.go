package execution

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// JobFacts are what one pass read besides the Job and its journal.
type JobFacts struct {
	// Now is the projector's clock (the only clock decisions compare).
	Now time.Time
	// Resolution is the acceptance verdict, read only while the Job has no
	// pinned class (status.resolvedJobClass); nil otherwise.
	Resolution *Resolution
	// ClassReason and ClassMessage say why no new execution may start now
	// (the pinned class or parameters are gone, recreated with another UID,
	// or the class is not Ready); "" when it may. Read only before an
	// execution exists: for the pinned class, or for the class an accepting
	// Resolution pins (then ClassChecked is set).
	ClassReason, ClassMessage string
	// ClassChecked: ClassReason and ClassMessage were read for the class
	// Resolution pins, so the pass that accepts the Job also decides its
	// first Ensure (the status with the pinned class is written first:
	// JobDecision.StatusFirst).
	ClassChecked bool
	// Adapter is the name of the adapter this manager runs for the pinned
	// class's controller ("" when none, or no class is pinned yet): the
	// adapter an Ensure names.
	Adapter string
	// ExecutionChanged reports whether the adapter's change feed saw the
	// execution named by ref at a revision other than the one the latest
	// outcome reported (execution.Adapter.Changes), and registers ref at
	// that revision; each change is reported once. A Job waiting to
	// observe its execution then observes it at once instead of after the
	// back-off. nil: no feed.
	ExecutionChanged func(ref execution.Reference, revision string) bool
}

// Resolution is the outcome of resolving a Job's class, namespace policy,
// resources and env references (docs/execution/jobclass-api.md "Condition
// and Job state machine").
type Resolution struct {
	// Reason and Message are the Accepted=False reason ("" = accepted).
	Reason, Message string
	// Class pins the class and parameters (by UID) when accepted.
	Class *executionv1alpha1.ResolvedJobClassReference
	// Resources are the effective resources when accepted.
	Resources executionv1alpha1.ExecutionResourceRequirements
}

// JobPolicy are the projector's timings.
type JobPolicy struct {
	// ObserveBase and ObserveMax bound the back-off between Observes of an
	// execution whose state did not change (it resets on a change).
	ObserveBase, ObserveMax time.Duration
	// FollowedObserveBase replaces ObserveBase when it is longer and the
	// adapter's change feed follows the execution (JobFacts.ExecutionChanged
	// is set and the latest outcome reported a revision): the feed wakes
	// the Job when the result comes, so the timed Observe is only the
	// safety net for a feed that missed it, and the start of the task
	// (Running) shows after this pause. Capped at ObserveMax; 0: ObserveBase.
	FollowedObserveBase time.Duration
	// RetryBase and RetryMax bound the back-off of a failed Ensure or
	// Delete and of an unreachable backend.
	RetryBase, RetryMax time.Duration
	// ResolveRecheck is how often a Job that is not accepted (or whose
	// class is not ready) looks again, besides the watches.
	ResolveRecheck time.Duration
	// PendingRecheck is the pass after an intent whose outcome has not
	// arrived (the outcome watch normally wakes the Job first).
	PendingRecheck time.Duration
}

// DefaultJobPolicy are the manager's defaults.
var DefaultJobPolicy = JobPolicy{
	ObserveBase: time.Second, ObserveMax: 15 * time.Second, FollowedObserveBase: 5 * time.Second,
	RetryBase: 2 * time.Second, RetryMax: 2 * time.Minute,
	ResolveRecheck: 30 * time.Second, PendingRecheck: 30 * time.Second,
}

// JobIntent is an intent DecideJob wants appended.
type JobIntent struct {
	Operation string
	// Step distinguishes Cancel intents by their reason.
	Step    string
	Payload any
}

// JobDecision is what one pass does.
type JobDecision struct {
	// Status is the Job's whole status after the pass.
	Status executionv1alpha1.JobStatus
	// Intent, when set, is appended (and then nothing else changes until
	// its outcome arrives).
	Intent *JobIntent
	// Note, when set, is a journal note to append (NoteBackendLostConfirmed,
	// NoteDeadlineStarted) with payload NotePayload.
	Note        string
	NotePayload any
	// RemoveFinalizer: the Job's backend resources are gone.
	RemoveFinalizer bool
	// StatusFirst: the Status is written before the Intent is appended (an
	// Ensure decided in the pass that pins the class: the executor checks
	// it against status.resolvedJobClass).
	StatusFirst bool
	// Requeue asks for another pass at once; RequeueAfter after a delay.
	Requeue      bool
	RequeueAfter time.Duration
}

// DecideJob is the Job state machine (docs/execution/job-api.md "State
// machine"). There is no stored phase: the status is recomputed from the
// Job, its journal and the facts of this pass, and a terminal status is
// never changed again. At most one intent is in flight per Job: the next
// is decided from the previous one's outcome. It never performs I/O.
func DecideJob(job *executionv1alpha1.Job, recs []journal.Record, f JobFacts, p JobPolicy) JobDecision {
	l := readLedger(recs)
	st := job.Status.DeepCopy()
	st.ObservedGeneration = job.Generation
	d := &decider{job: job, l: l, st: st, f: f, p: p}
	d.apply()
	d.decide()
	d.out.Status = *d.st
	return d.out
}

type decider struct {
	job *executionv1alpha1.Job
	l   *ledger
	st  *executionv1alpha1.JobStatus
	f   JobFacts
	p   JobPolicy
	out JobDecision
}

func (d *decider) gen() int64 { return d.job.Generation }

func (d *decider) set(typ string, s metav1.ConditionStatus, reason, msg string) {
	journaled.SetCondition(&d.st.Conditions, typ, d.gen(), journaled.Condition{Status: s, Reason: reason, Message: msg})
}

func (d *decider) running(reason, msg string) {
	d.set(executionv1alpha1.JobConditionSucceeded, metav1.ConditionUnknown, reason, msg)
}

func (d *decider) terminal() bool { return IsTerminal(d.st) }

// IsTerminal reports whether st has a terminal Succeeded condition.
func IsTerminal(st *executionv1alpha1.JobStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == executionv1alpha1.JobConditionSucceeded {
			return c.Status == metav1.ConditionTrue || c.Status == metav1.ConditionFalse
		}
	}
	return false
}

// apply folds the journal's facts into the status: the execution
// references, Scheduled, startTime and a terminal result. A terminal
// status is never changed.
func (d *decider) apply() {
	if d.terminal() {
		return
	}
	l, st := d.l, d.st
	if l.existed && st.ResolvedJobClass != nil {
		d.set(executionv1alpha1.JobConditionScheduled, metav1.ConditionTrue, executionv1alpha1.ReasonBackendCreated, "the backend execution exists")
		if st.Execution == nil && len(l.refs) > 0 {
			refs := make([]executionv1alpha1.ExecutionReference, 0, len(l.refs))
			for _, r := range l.refs {
				refs = append(refs, executionv1alpha1.ExecutionReference{Type: r.Type, ID: r.ID})
			}
			st.Execution = &executionv1alpha1.ExecutionStatus{Adapter: l.adapter, References: refs}
		}
		if st.StartTime == nil {
			switch {
			case l.startTime != nil:
				st.StartTime = &metav1.Time{Time: *l.startTime}
			case !l.runningSince.IsZero():
				st.StartTime = &metav1.Time{Time: l.runningSince}
			}
		}
	}
	if t := d.conclusion(); t != nil {
		d.finish(*t)
	}
}

// ending is a terminal result.
type ending struct {
	succeeded bool
	reason    string
	message   string
	exitCode  *int32
	at        time.Time
}

// conclusion returns the Job's terminal result when the journal proves one
// (the first backend fact wins: a success observed before the stop stays
// a success), nil otherwise.
func (d *decider) conclusion() *ending {
	l := d.l
	stopReason := l.firstCancelReason()
	if t := l.terminal; t != nil {
		e := &ending{exitCode: t.obs.ExitCode, at: t.rec.Time, message: t.obs.Message}
		if t.obs.FinishTime != nil {
			e.at = *t.obs.FinishTime
		}
		switch t.obs.State {
		case execution.StateSucceeded:
			e.succeeded, e.reason = true, executionv1alpha1.ReasonCompleted
		case execution.StateFailed:
			e.reason = t.obs.Reason
			if e.reason == "" {
				e.reason = executionv1alpha1.ReasonBackendFailed
			}
		default:
			e.reason = d.stoppedReason(stopReason)
			e.message = d.stoppedMessage(stopReason)
		}
		return e
	}
	if o, ok := l.stoppedAfterCancel(); ok && !d.ensurePending() {
		// Stopped on request (the execution is gone, or never existed).
		return &ending{reason: d.stoppedReason(stopReason), message: d.stoppedMessage(stopReason), at: o.rec.Time}
	}
	if l.backendLost {
		return &ending{reason: executionv1alpha1.ReasonBackendLost, at: d.f.Now,
			message: "an administrator confirmed the backend execution is lost; its result is unknown"}
	}
	if d.job.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled && len(l.ensures) == 0 {
		return &ending{reason: executionv1alpha1.ReasonCancelled, at: d.f.Now, message: "cancelled before any execution was created"}
	}
	return nil
}

func (d *decider) ensurePending() bool {
	for _, r := range d.l.pending {
		if r.Operation == execution.OpEnsure {
			return true
		}
	}
	return false
}

// stoppedReason is the terminal reason of an execution stopped for reason.
func (d *decider) stoppedReason(reason execution.StopReason) string {
	switch reason {
	case execution.StopDeadlineExceeded:
		return executionv1alpha1.ReasonDeadlineExceeded
	case execution.StopFailing:
		if r := d.l.firstCancel().FailingReason; r != "" {
			return r
		}
		return executionv1alpha1.ReasonBackendFailed
	}
	return executionv1alpha1.ReasonCancelled
}

func (d *decider) stoppedMessage(reason execution.StopReason) string {
	switch reason {
	case execution.StopDeadlineExceeded:
		return fmt.Sprintf("activeDeadlineSeconds (%ds) passed; the execution was stopped", deref(d.job.Spec.ActiveDeadlineSeconds))
	case execution.StopFailing:
		if m := d.failingMessage(); m != "" {
			return m + "; the execution was stopped"
		}
		return "the backend reported a failure; the execution was stopped"
	case execution.StopDeleted:
		return "the Job was deleted; the execution was stopped"
	}
	return "cancelled; the backend confirmed the execution stopped"
}

// failingMessage is the failure of a Cancel decided for a failing
// execution: from the first Cancel's payload, else the latest failing
// observation (before the Cancel is decided).
func (d *decider) failingMessage() string {
	if m := d.l.firstCancel().FailingMessage; m != "" {
		return m
	}
	if d.l.failing != nil {
		return d.l.failing.obs.Message
	}
	return ""
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// finish records e as the terminal status (times set once; completion
// never before start).
func (d *decider) finish(e ending) {
	st := d.st
	s := metav1.ConditionFalse
	if e.succeeded {
		s = metav1.ConditionTrue
	}
	msg := e.message
	if msg == "" {
		msg = e.reason
	}
	d.set(executionv1alpha1.JobConditionSucceeded, s, e.reason, msg)
	at := e.at
	if at.IsZero() {
		at = d.f.Now
	}
	if st.StartTime != nil && at.Before(st.StartTime.Time) {
		at = st.StartTime.Time
	}
	if st.CompletionTime == nil {
		st.CompletionTime = &metav1.Time{Time: at}
	}
	st.Result = &executionv1alpha1.JobResult{ExitCode: e.exitCode, Reason: e.reason}
}

func (d *decider) requeueAfter(after time.Duration) {
	if after <= 0 {
		d.out.Requeue = true
		return
	}
	if d.out.RequeueAfter == 0 || after < d.out.RequeueAfter {
		d.out.RequeueAfter = after
	}
}

func (d *decider) intent(op, step string, payload any) {
	d.out.Intent = &JobIntent{Operation: op, Step: step, Payload: payload}
}

func (d *decider) executionIntent(reason execution.StopReason) execution.ExecutionIntent {
	in := execution.ExecutionIntent{Adapter: d.adapter(), Reason: reason}
	in.References = append(in.References, d.l.refs...)
	if rc := d.st.ResolvedJobClass; rc != nil {
		in.ParametersName, in.ParametersUID = rc.ParametersRef.Name, string(rc.ParametersRef.UID)
	}
	return in
}

// cancelIntent is the payload of a Cancel for reason: a repeated Cancel
// carries the first one's reason and failure; a Cancel for a failing
// execution carries the failure the backend reported.
func (d *decider) cancelIntent(reason execution.StopReason) execution.ExecutionIntent {
	in := d.executionIntent(reason)
	if first := d.l.firstCancel(); first.Reason != "" {
		in.Reason, in.FailingReason, in.FailingMessage = first.Reason, first.FailingReason, first.FailingMessage
	} else if reason == execution.StopFailing && d.l.failing != nil {
		in.FailingReason, in.FailingMessage = d.l.failing.obs.Reason, d.l.failing.obs.Message
	}
	return in
}

// adapter names the adapter of the Job's execution: the one its outcomes
// report, else the one its Ensure named, else the one of its pinned class
// ("" when none is known, which only a Job without any Ensure can be: the
// dispatcher reads that as execution.AdapterKubernetes, as intents of
// projectors before adapters were named did).
func (d *decider) adapter() string {
	switch {
	case d.l.adapter != "":
		return d.l.adapter
	case d.l.ensuredWith != "":
		return d.l.ensuredWith
	}
	return d.f.Adapter
}

// due returns how long until at+delay on the projector's clock (≤ 0: now).
func (d *decider) due(at time.Time, delay time.Duration) time.Duration {
	return at.Add(delay).Sub(d.f.Now)
}

func (d *decider) decide() {
	deleting := !d.job.DeletionTimestamp.IsZero()
	if len(d.l.pending) > 0 {
		// One intent in flight: its outcome wakes the Job.
		d.describeWaiting()
		d.requeueAfter(d.p.PendingRecheck)
		return
	}
	if d.terminal() && !d.l.finished {
		// The result goes into the journal first (with this pass's
		// terminal status): every Job's end is there, for forensics and for
		// the TTL controller's invariant.
		c := meta.FindStatusCondition(d.st.Conditions, executionv1alpha1.JobConditionSucceeded)
		n := execution.FinishedNote{Succeeded: c.Status == metav1.ConditionTrue, Reason: c.Reason}
		if d.st.Result != nil {
			n.ExitCode = d.st.Result.ExitCode
		}
		d.out.Note, d.out.NotePayload = execution.NoteFinished, n
		if deleting {
			// The deletion is decided on the journal with the note.
			d.requeueAfter(0)
		}
		// Otherwise nothing follows the note: the Job is at rest (the
		// skeleton checkpoints the journal with the note in this pass).
		return
	}
	if deleting {
		d.decideDeletion()
		return
	}
	if d.terminal() {
		return
	}
	if d.st.ResolvedJobClass == nil {
		d.decideAcceptance()
		return
	}
	if ads := d.job.Spec.ActiveDeadlineSeconds; ads != nil && d.l.deadlineFrom.IsZero() && !d.l.runningSince.IsZero() && len(d.l.cancels) == 0 {
		// The execution runs: the deadline starts now, journaled so that
		// it survives compaction of the Observes and restarts.
		d.describeProgress()
		d.out.Note, d.out.NotePayload = execution.NoteDeadlineStarted, execution.DeadlineNote{ActiveDeadlineSeconds: *ads}
		d.requeueAfter(0)
		return
	}
	if reason, ok := d.stopWanted(); ok {
		d.decideStop(reason)
		return
	}
	if !d.l.existed {
		d.decideScheduling()
		return
	}
	d.decideObservation()
}

// describeWaiting keeps the Succeeded condition meaningful while an intent
// is in flight.
func (d *decider) describeWaiting() {
	if d.terminal() || d.st.ResolvedJobClass == nil {
		return
	}
	d.describeProgress()
}

// describeProgress sets Succeeded=Unknown from what is known.
func (d *decider) describeProgress() {
	l := d.l
	switch {
	case d.job.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled || (!d.job.DeletionTimestamp.IsZero() && len(l.ensures) > 0):
		d.running(executionv1alpha1.ReasonCancelling, "stopping the execution; waiting for the backend to confirm")
	case l.last() != nil && l.last().ambiguous:
		d.running(executionv1alpha1.ReasonResultUnknown, unknownMessage(l.last()))
	case l.existed && l.last() != nil && l.last().obs.State == execution.StateNotFound && len(l.cancels) == 0:
		d.running(executionv1alpha1.ReasonResultUnknown, lostMessage(d.job))
	case d.st.StartTime != nil:
		d.running(executionv1alpha1.ReasonRunning, "the task is running")
	case l.existed:
		msg := "the backend execution exists; the task has not started"
		if o := l.last(); o != nil && o.obs.Message != "" {
			msg = o.obs.Message
		}
		d.running(executionv1alpha1.ReasonStarting, msg)
	default:
		d.running(executionv1alpha1.ReasonScheduling, "creating the backend execution")
	}
}

const resultUnknownMessage = "the backend did not answer whether the execution exists or runs; observing again (this is not a failure)"

// unknownMessage is the ResultUnknown message after ambiguous outcome o:
// what the executor said (its reason and its condition-safe message, e.g.
// CommandStateLost) when it said anything, else resultUnknownMessage.
func unknownMessage(o *observed) string {
	if o == nil || o.rec.Result == nil || o.rec.Result.Class != journal.ResultUnknown {
		return resultUnknownMessage
	}
	msg := o.rec.Result.Message
	if msg == "" {
		msg = o.obs.Message
	}
	if msg == "" {
		return resultUnknownMessage
	}
	return fmt.Sprintf("the backend can not tell the execution's state (%s: %s); observing again (this is not a failure)", o.rec.Result.Reason, msg)
}

func lostMessage(job *executionv1alpha1.Job) string {
	return fmt.Sprintf("the backend execution disappeared before its end was observed; if it is lost for good, confirm with annotation %s=%s", executionv1alpha1.AnnotationBackendLost, job.UID)
}

// decideAcceptance pins the class or reports why it can not.
func (d *decider) decideAcceptance() {
	r := d.f.Resolution
	if r == nil {
		d.requeueAfter(0)
		return
	}
	if r.Reason != "" {
		d.set(executionv1alpha1.JobConditionAccepted, metav1.ConditionFalse, r.Reason, r.Message)
		d.set(executionv1alpha1.JobConditionScheduled, metav1.ConditionFalse, executionv1alpha1.ReasonNotScheduled, "waiting for the Job to be accepted")
		d.running(executionv1alpha1.ReasonPending, "waiting for the Job to be accepted: "+r.Message)
		d.requeueAfter(d.p.ResolveRecheck)
		return
	}
	d.set(executionv1alpha1.JobConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonValid, "JobClass "+r.Class.Name+" resolved")
	d.set(executionv1alpha1.JobConditionScheduled, metav1.ConditionFalse, executionv1alpha1.ReasonNotScheduled, "the backend execution is not created yet")
	d.running(executionv1alpha1.ReasonScheduling, "creating the backend execution")
	c := *r.Class
	d.st.ResolvedJobClass = &c
	d.st.EffectiveResources = *r.Resources.DeepCopy()
	if !d.f.ClassChecked || len(d.l.ensures) > 0 {
		// The Ensure is decided from the pinned status, in the next pass
		// (always when the journal has Ensures already: a status that
		// was lost is pinned again first, then the execution observed).
		d.requeueAfter(0)
		return
	}
	// The class's readiness is known: the first Ensure is decided now,
	// and appended only after the status with the pinned class is
	// written (the executor checks the Ensure against it).
	d.decideScheduling()
	d.out.StatusFirst = d.out.Intent != nil
}

// stopWanted says whether the execution must be stopped, and why (the
// first reason wins in the journal: the Cancel intent's step).
func (d *decider) stopWanted() (execution.StopReason, bool) {
	l := d.l
	if len(l.cancels) > 0 {
		return l.firstCancelReason(), true
	}
	if d.job.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled {
		return execution.StopCancelled, true
	}
	if last := l.last(); last != nil && !last.ambiguous && last.obs.Failing {
		return execution.StopFailing, true
	}
	// A deadline beyond what a time.Duration holds (~292 years; the CRD
	// accepts any int64 ≥ 1) never passes: it must not overflow into one
	// that passed already.
	if ads := d.job.Spec.ActiveDeadlineSeconds; ads != nil && *ads <= int64(math.MaxInt64/time.Second) && !l.deadlineFrom.IsZero() {
		left := d.due(l.deadlineFrom, time.Duration(*ads)*time.Second)
		if left <= 0 {
			return execution.StopDeadlineExceeded, true
		}
		d.requeueAfter(left)
	}
	return "", false
}

// decideStop drives Cancel/Observe until the backend confirms the stop.
func (d *decider) decideStop(reason execution.StopReason) {
	l := d.l
	d.describeProgress()
	if reason != execution.StopCancelled && d.job.Spec.DesiredState != executionv1alpha1.JobDesiredStateCancelled && d.job.DeletionTimestamp.IsZero() {
		d.running(executionv1alpha1.ReasonCancelling, d.stoppedMessage(reason)+" (waiting for the backend to confirm)")
	}
	lastCancel := l.lastOf(execution.OpCancel)
	if len(l.cancels) == 0 || lastCancel == nil {
		d.intent(execution.OpCancel, string(reason), d.cancelIntent(reason))
		return
	}
	last := l.last()
	if !last.ambiguous && (last.obs.State == execution.StatePending || last.obs.State == execution.StateRunning) && last.rec.Sequence > lastCancel.rec.Sequence {
		// Running again after the stop request (an Ensure that ran after
		// it): ask again.
		d.intent(execution.OpCancel, string(l.firstCancelReason()), d.cancelIntent(l.firstCancelReason()))
		return
	}
	d.observeLater()
}

// decideScheduling creates the execution, or waits for a reason to.
func (d *decider) decideScheduling() {
	l := d.l
	if d.f.ClassReason != "" {
		d.set(executionv1alpha1.JobConditionScheduled, metav1.ConditionFalse, d.f.ClassReason, d.f.ClassMessage)
		d.describeProgress()
		d.requeueAfter(d.p.ResolveRecheck)
		return
	}
	last := l.last()
	switch {
	case len(l.ensures) == 0:
		// First Ensure.
	case last != nil && last.ambiguous:
		// The Ensure (or an Observe after it) can not tell whether the
		// execution was created: find it by UID before anything else.
		d.running(executionv1alpha1.ReasonResultUnknown, unknownMessage(last))
		if d.confirmLost() {
			return
		}
		d.observeLater()
		return
	case last != nil && last.rec.Operation == execution.OpEnsure && last.rec.Result != nil && last.rec.Result.Class != journal.Succeeded:
		// Refused before anything was created: wait, then try again.
		reason := last.obs.Reason
		if reason == "" {
			reason = executionv1alpha1.ReasonBackendUnavailable
		}
		msg := last.obs.Message
		if msg == "" && last.rec.Result != nil {
			msg = last.rec.Result.Message
		}
		d.set(executionv1alpha1.JobConditionScheduled, metav1.ConditionFalse, reason, msg)
		d.running(executionv1alpha1.ReasonScheduling, "waiting before creating the backend execution again: "+msg)
		failures := 0
		for _, o := range l.outcomes {
			if o.rec.Operation == execution.OpEnsure && o.rec.Result != nil && o.rec.Result.Class != journal.Succeeded {
				failures++
			}
		}
		if left := d.due(last.rec.Time, journaled.Backoff(d.p.RetryBase, d.p.RetryMax, failures)); left > 0 {
			d.requeueAfter(left)
			return
		}
	default:
		// Not found after an ambiguous Ensure: it was never created (the
		// name derives from the UID), so creating it now is the first time.
	}
	d.describeProgress()
	d.ensure()
}

func (d *decider) ensure() {
	rc := d.st.ResolvedJobClass
	if d.f.Adapter == "" {
		d.running(executionv1alpha1.ReasonScheduling, "no adapter of this manager runs controller "+rc.ControllerName+"; waiting for a manager that does")
		d.requeueAfter(d.p.ResolveRecheck)
		return
	}
	digest, err := execution.TaskDigest(d.job.Spec.Task)
	if err != nil {
		d.running(executionv1alpha1.ReasonScheduling, "the task can not be fingerprinted")
		d.requeueAfter(d.p.RetryMax)
		return
	}
	er := d.st.EffectiveResources
	d.intent(execution.OpEnsure, "", execution.EnsureIntent{
		Adapter:        d.f.Adapter,
		JobClass:       rc.Name,
		JobClassUID:    string(rc.UID),
		ParametersKind: rc.ParametersRef.Kind,
		ParametersName: rc.ParametersRef.Name,
		ParametersUID:  string(rc.ParametersRef.UID),
		Image:          d.job.Spec.Task.Image,
		TaskDigest:     digest,
		Resources: execution.Resources{
			RequestsCPU: quantity(er.Requests.CPU), RequestsMemory: quantity(er.Requests.Memory),
			LimitsCPU: quantity(er.Limits.CPU), LimitsMemory: quantity(er.Limits.Memory),
		},
		References: append([]execution.Reference(nil), d.l.refs...),
	})
}

// decideObservation follows an existing execution.
func (d *decider) decideObservation() {
	l := d.l
	last := l.last()
	d.describeProgress()
	lost := last != nil && (last.ambiguous || last.obs.State == execution.StateNotFound)
	if lost && d.confirmLost() {
		return
	}
	d.observeLater()
}

// confirmLost journals the administrator's confirmation that the
// execution of a Job in ResultUnknown is lost, when the Job carries it
// (with its own UID, so a copied manifest confirms nothing); true when the
// note is decided. Every ResultUnknown state honours it: an execution
// that disappeared, and one whose Ensure or Observe never got an answer.
func (d *decider) confirmLost() bool {
	if d.job.Annotations[executionv1alpha1.AnnotationBackendLost] != string(d.job.UID) || d.l.backendLost {
		return false
	}
	d.out.Note = execution.NoteBackendLostConfirmed
	d.out.NotePayload = execution.BackendLostNote{Annotation: executionv1alpha1.AnnotationBackendLost, ConfirmedBy: d.job.Annotations[executionv1alpha1.AnnotationConfirmedBy]}
	d.requeueAfter(0)
	return true
}

// observeLater appends an Observe once the back-off since the latest
// outcome passed (it grows while the state stays the same).
func (d *decider) observeLater() {
	l := d.l
	if last := l.last(); last != nil {
		if !last.ambiguous && d.executionChanged(last) {
			d.intent(execution.OpObserve, "", d.executionIntent(""))
			return
		}
		base, limit := d.p.ObserveBase, d.p.ObserveMax
		if d.followed(last) {
			base = min(max(base, d.p.FollowedObserveBase), limit)
		}
		if last.ambiguous {
			base, limit = d.p.RetryBase, d.p.RetryMax
		}
		if left := d.due(last.rec.Time, journaled.Backoff(base, limit, l.sameStateRun())); left > 0 {
			d.requeueAfter(left)
			return
		}
	}
	d.intent(execution.OpObserve, "", d.executionIntent(""))
}

// followed: a change feed follows the execution outcome o observed (the
// adapter has one and o carries a reference and a revision).
func (d *decider) followed(o *observed) bool {
	return d.f.ExecutionChanged != nil && len(o.obs.References) > 0 && o.obs.Revision != ""
}

// executionChanged: the change feed saw the execution outcome o observed
// change since (JobFacts.ExecutionChanged); false without a feed, a
// reference or a revision.
func (d *decider) executionChanged(o *observed) bool {
	if !d.followed(o) {
		return false
	}
	return d.f.ExecutionChanged(o.obs.References[0], o.obs.Revision)
}

// decideDeletion: stop the execution, delete its backend resources, then
// release the finalizer. An unreachable backend keeps the finalizer.
func (d *decider) decideDeletion() {
	l := d.l
	if len(l.ensures) == 0 {
		d.out.RemoveFinalizer = true
		return
	}
	if !d.terminal() {
		reason := execution.StopDeleted
		if len(l.cancels) > 0 {
			reason = l.firstCancelReason()
		}
		d.decideStop(reason)
		return
	}
	lastDel := l.lastOf(execution.OpDelete)
	lastEnsure := l.ensures[len(l.ensures)-1]
	if lastDel == nil || lastDel.rec.Sequence < lastEnsure.Sequence {
		d.intent(execution.OpDelete, "", d.executionIntent(""))
		return
	}
	if !lastDel.ambiguous && lastDel.obs.State == execution.StateNotFound {
		// Nothing of the Job's is left (an object of another owner under
		// the native name is reported NotFound with a Conflict, untouched).
		d.out.RemoveFinalizer = true
		return
	}
	// Deletion in progress, or the backend is unreachable: ask again
	// after a back-off; the finalizer stays.
	if left := d.due(lastDel.rec.Time, journaled.Backoff(d.p.RetryBase, d.p.RetryMax, len(l.deletes))); left > 0 {
		d.requeueAfter(left)
		return
	}
	d.intent(execution.OpDelete, "", d.executionIntent(""))
}
