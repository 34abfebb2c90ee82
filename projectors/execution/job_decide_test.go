package execution

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// sim drives DecideJob like the skeleton does: it appends the decided
// record to an in-memory journal, writes the status back, and lets the
// test play the executor's outcomes. Records carry the sim's clock as
// their (local observation) time.
type sim struct {
	t     *testing.T
	job   *executionv1alpha1.Job
	recs  []journal.Record
	seq   uint64
	now   time.Time
	facts JobFacts
	last  JobDecision
	// policy is testPolicy unless a test sets another.
	policy JobPolicy
}

var testPolicy = JobPolicy{ObserveBase: time.Second, ObserveMax: 8 * time.Second, RetryBase: 2 * time.Second, RetryMax: 30 * time.Second,
	ResolveRecheck: 10 * time.Second, PendingRecheck: 30 * time.Second}

func newSim(t *testing.T) *sim {
	t.Helper()
	job := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "build", UID: types.UID("3f1e6c1a-0000-4000-8000-000000000001"), Generation: 1},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "ayatori.test/succeed"}, DesiredState: executionv1alpha1.JobDesiredStateRunning}}
	s := &sim{t: t, job: job, now: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC), policy: testPolicy}
	s.facts.Adapter = execution.AdapterKubernetes
	s.facts.Resolution = &Resolution{Class: &executionv1alpha1.ResolvedJobClassReference{Name: "default", UID: "class-uid",
		ControllerName: executionv1alpha1.ControllerKubernetes, ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group,
			Kind: "KubernetesExecutionParameters", Name: "default", UID: "params-uid"}}}
	return s
}

// pass runs one decision and applies it (status, record).
func (s *sim) pass() JobDecision {
	s.t.Helper()
	f := s.facts
	f.Now = s.now
	if s.job.Status.ResolvedJobClass != nil {
		f.Resolution = nil
	}
	d := DecideJob(s.job, s.recs, f, s.policy)
	s.job.Status = d.Status
	if err := ValidateStatus(&s.job.Status); err != nil {
		s.t.Fatalf("invariant broken: %v (status %+v)", err, s.job.Status)
	}
	ref := objectRef(s.job)
	switch {
	case d.Note != "":
		note := journal.Record{ID: string(s.job.UID) + "/note/" + d.Note, Type: journal.TypeNote, Operation: d.Note, Object: ref, Attempt: 1}
		if err := note.SetPayload(d.NotePayload); err != nil {
			s.t.Fatal(err)
		}
		s.add(note)
	case d.Intent != nil:
		rec, err := journal.NewIntent(ref, d.Intent.Operation, d.Intent.Step, journaled.NextAttempt(journal.Fold(s.recs), d.Intent.Operation, s.job.Generation), d.Intent.Payload)
		if err != nil {
			s.t.Fatal(err)
		}
		s.add(rec)
	}
	s.last = d
	return d
}

func (s *sim) add(r journal.Record) {
	s.seq++
	r.Sequence, r.Time = s.seq, s.now
	s.recs = append(s.recs, r)
}

// pending returns the one pending intent (fails when there is none).
func (s *sim) pending() journal.Record {
	s.t.Helper()
	p := journal.Fold(s.recs).Pending()
	if len(p) != 1 {
		s.t.Fatalf("want one pending intent, have %d", len(p))
	}
	return p[0]
}

// answer records the executor's outcome of the pending intent, which must
// be of operation op.
func (s *sim) answer(op string, class journal.ResultClass, obs *execution.Observation) {
	s.t.Helper()
	in := s.pending()
	if in.Operation != op {
		s.t.Fatalf("pending intent is %s, want %s", in.Operation, op)
	}
	res := journal.Result{Class: class}
	if class != journal.Succeeded {
		res.Reason = "X"
		if obs != nil && obs.Reason != "" {
			res.Reason = obs.Reason
		}
		if obs != nil {
			res.Message = obs.Message // executors put it in both
		}
	}
	var payload any
	if obs != nil {
		payload = *obs
	}
	out, err := journal.NewOutcome(in, res, payload)
	if err != nil {
		s.t.Fatal(err)
	}
	s.add(out)
}

func (s *sim) ok(op string, obs execution.Observation) {
	s.t.Helper()
	s.answer(op, journal.Succeeded, &obs)
}

func (s *sim) advance(d time.Duration) { s.now = s.now.Add(d) }

// until runs passes (advancing the clock by each RequeueAfter) until an
// intent is decided; it fails after n passes.
func (s *sim) until(op string) journal.Record {
	s.t.Helper()
	for range 50 {
		d := s.pass()
		if d.Intent != nil {
			if d.Intent.Operation != op {
				s.t.Fatalf("decided %s, want %s (status %s)", d.Intent.Operation, op, s.succeeded())
			}
			return s.pending()
		}
		if d.RemoveFinalizer {
			s.t.Fatalf("finalizer released while waiting for %s", op)
		}
		if d.RequeueAfter > 0 {
			s.advance(d.RequeueAfter)
		} else if !d.Requeue && d.Note == "" {
			s.t.Fatalf("waiting for %s: the decision came to rest (status %s)", op, s.succeeded())
		}
	}
	s.t.Fatalf("no %s decided", op)
	return journal.Record{}
}

// rest runs passes until no intent is decided and no immediate requeue.
func (s *sim) rest() JobDecision {
	s.t.Helper()
	for range 10 {
		d := s.pass()
		if d.Intent != nil {
			s.t.Fatalf("decided %s, want rest", d.Intent.Operation)
		}
		if !d.Requeue && d.Note == "" {
			return d
		}
	}
	s.t.Fatal("no rest")
	return JobDecision{}
}

func (s *sim) cond(typ string) *metav1.Condition {
	return meta.FindStatusCondition(s.job.Status.Conditions, typ)
}

func (s *sim) succeeded() string {
	c := s.cond(executionv1alpha1.JobConditionSucceeded)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

func (s *sim) wantSucceeded(want string) {
	s.t.Helper()
	if got := s.succeeded(); got != want {
		s.t.Fatalf("Succeeded = %s, want %s", got, want)
	}
}

func (s *sim) count(op string) int {
	n := 0
	for _, r := range s.recs {
		if r.Type == journal.TypeIntent && r.Operation == op {
			n++
		}
	}
	return n
}

func (s *sim) verify() {
	s.t.Helper()
	if v := journal.Verify(s.recs, nil); len(v) > 0 {
		s.t.Fatalf("journal violations: %+v", v)
	}
}

var nativeRef = []execution.Reference{{Type: "Job", ID: "native-uid"}}

func obs(state execution.State) execution.Observation {
	o := execution.Observation{State: state, Adapter: execution.AdapterKubernetes}
	if state != execution.StateNotFound {
		o.References = nativeRef
	}
	switch state {
	case execution.StateSucceeded, execution.StateFailed, execution.StateCancelled:
		o.Terminal = true
	}
	return o
}

func timePtr(t time.Time) *time.Time { return &t }
func i32(v int32) *int32             { return &v }

// accept runs passes until the Ensure intent is decided.
func (s *sim) accept() {
	s.t.Helper()
	s.until(execution.OpEnsure)
	if !meta.IsStatusConditionTrue(s.job.Status.Conditions, executionv1alpha1.JobConditionAccepted) {
		s.t.Fatal("Ensure decided before Accepted=True")
	}
}

// run takes the Job to Running: Ensure created, then observed running.
func (s *sim) run() time.Time {
	s.t.Helper()
	s.accept()
	created := obs(execution.StatePending)
	created.Created = true
	s.ok(execution.OpEnsure, created)
	s.until(execution.OpObserve)
	started := s.now
	r := obs(execution.StateRunning)
	r.StartTime = timePtr(started)
	s.ok(execution.OpObserve, r)
	s.pass()
	s.wantSucceeded("Unknown/Running")
	return started
}

func TestM1CreateStartExitZero(t *testing.T) {
	s := newSim(t)
	started := s.run()
	if s.job.Status.StartTime == nil || !s.job.Status.StartTime.Time.Equal(started) {
		t.Fatalf("startTime = %v, want %v", s.job.Status.StartTime, started)
	}
	if !meta.IsStatusConditionTrue(s.job.Status.Conditions, executionv1alpha1.JobConditionScheduled) || s.job.Status.Execution == nil {
		t.Fatal("Scheduled=True and execution references expected")
	}
	s.until(execution.OpObserve)
	done := obs(execution.StateSucceeded)
	done.ExitCode, done.FinishTime = i32(0), timePtr(s.now.Add(-time.Second))
	s.ok(execution.OpObserve, done)
	s.rest()
	s.wantSucceeded("True/Completed")
	if ct := s.job.Status.CompletionTime; ct == nil || ct.Time.Before(s.job.Status.StartTime.Time) {
		t.Fatalf("completionTime %v", ct)
	}
	if s.count(execution.OpEnsure) != 1 {
		t.Fatalf("%d Ensures", s.count(execution.OpEnsure))
	}
	if r := s.job.Status.Result; r == nil || r.ExitCode == nil || *r.ExitCode != 0 || r.Reason != executionv1alpha1.ReasonCompleted {
		t.Fatalf("result %+v", r)
	}
	s.wantFinishedNote(true, executionv1alpha1.ReasonCompleted)
	s.verify()
}

// wantFinishedNote checks the journal names the Job's end exactly once.
func (s *sim) wantFinishedNote(succeeded bool, reason string) {
	s.t.Helper()
	var notes []execution.FinishedNote
	for _, r := range s.recs {
		if r.Type == journal.TypeNote && r.Operation == execution.NoteFinished {
			var n execution.FinishedNote
			if err := r.DecodePayload(&n); err != nil {
				s.t.Fatal(err)
			}
			notes = append(notes, n)
		}
	}
	if len(notes) != 1 || notes[0].Succeeded != succeeded || notes[0].Reason != reason {
		s.t.Fatalf("Finished notes %+v, want one {%v %s}", notes, succeeded, reason)
	}
}

func TestM2ProcessFailedKeepsExitCode(t *testing.T) {
	s := newSim(t)
	s.run()
	s.until(execution.OpObserve)
	f := obs(execution.StateFailed)
	f.Reason, f.ExitCode = executionv1alpha1.ReasonProcessFailed, i32(3)
	s.ok(execution.OpObserve, f)
	s.rest()
	s.wantSucceeded("False/ProcessFailed")
	if *s.job.Status.Result.ExitCode != 3 {
		t.Fatal("exit code lost")
	}
	s.verify()
}

func TestM3JobClassCreatedLater(t *testing.T) {
	s := newSim(t)
	s.facts.Resolution = &Resolution{Reason: executionv1alpha1.ReasonJobClassNotFound, Message: "JobClass fast not found"}
	d := s.pass()
	if d.Intent != nil || d.RequeueAfter == 0 {
		t.Fatalf("want a wait, got %+v", d)
	}
	if c := s.cond(executionv1alpha1.JobConditionAccepted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != executionv1alpha1.ReasonJobClassNotFound {
		t.Fatalf("Accepted = %+v", c)
	}
	s.wantSucceeded("Unknown/Pending")
	s.facts.Resolution = newSim(t).facts.Resolution
	s.accept()
	if s.count(execution.OpEnsure) != 1 {
		t.Fatal("want exactly one Ensure")
	}
}

func TestM3NoDefaultAndAmbiguousDefaultWait(t *testing.T) {
	for _, reason := range []string{executionv1alpha1.ReasonNoDefaultJobClass, executionv1alpha1.ReasonAmbiguousDefaultJobClass} {
		s := newSim(t)
		s.facts.Resolution = &Resolution{Reason: reason, Message: "m"}
		for range 3 {
			if d := s.pass(); d.Intent != nil {
				t.Fatal("Ensure without a class")
			}
			s.advance(time.Minute)
		}
		if c := s.cond(executionv1alpha1.JobConditionAccepted); c.Reason != reason {
			t.Fatalf("Accepted reason %s, want %s", c.Reason, reason)
		}
	}
}

func TestM4EnvReferenceCreatedLaterStartsOnce(t *testing.T) {
	s := newSim(t)
	s.facts.Resolution = &Resolution{Reason: executionv1alpha1.ReasonEnvReferenceNotFound, Message: "env TOKEN: Secret ci/token not found; the Job waits for it"}
	for range 3 {
		if d := s.pass(); d.Intent != nil {
			t.Fatal("Ensure before the Secret exists")
		}
		s.advance(10 * time.Second)
	}
	s.facts.Resolution = newSim(t).facts.Resolution
	s.run()
	for range 5 {
		s.until(execution.OpObserve)
		s.ok(execution.OpObserve, obs(execution.StateRunning))
	}
	if s.count(execution.OpEnsure) != 1 {
		t.Fatalf("%d Ensures", s.count(execution.OpEnsure))
	}
}

func TestM5ImagePullFailureEndsWithoutStartTime(t *testing.T) {
	s := newSim(t)
	s.accept()
	c := obs(execution.StatePending)
	c.Created = true
	s.ok(execution.OpEnsure, c)
	s.until(execution.OpObserve)
	f := obs(execution.StatePending)
	f.Failing, f.Reason, f.Message = true, executionv1alpha1.ReasonImagePullFailed, "image ayatori.test/pull-fail can not be pulled (ErrImagePull)"
	s.ok(execution.OpObserve, f)
	cancel := s.until(execution.OpCancel)
	if cancel.Step != string(execution.StopFailing) {
		t.Fatalf("cancel step %q", cancel.Step)
	}
	s.ok(execution.OpCancel, obs(execution.StateStopping))
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateCancelled))
	s.rest()
	s.wantSucceeded("False/ImagePullFailed")
	if s.job.Status.StartTime != nil || s.job.Status.CompletionTime == nil {
		t.Fatalf("times: start %v completion %v", s.job.Status.StartTime, s.job.Status.CompletionTime)
	}
	s.verify()
}

func TestM5EnsureRefusedWaitsAndRetries(t *testing.T) {
	s := newSim(t)
	s.accept()
	refused := obs(execution.StateNotFound)
	refused.Reason, refused.Message = executionv1alpha1.ReasonServiceAccountNotFound, "ServiceAccount ci/ayatori-job not found"
	s.answer(execution.OpEnsure, journal.Failed, &refused)
	d := s.pass()
	if d.Intent != nil || d.RequeueAfter <= 0 {
		t.Fatalf("want a back-off, got %+v", d)
	}
	if c := s.cond(executionv1alpha1.JobConditionScheduled); c.Reason != executionv1alpha1.ReasonServiceAccountNotFound {
		t.Fatalf("Scheduled reason %s", c.Reason)
	}
	s.until(execution.OpEnsure)
	if s.count(execution.OpEnsure) != 2 {
		t.Fatal("want a second Ensure attempt")
	}
	s.verify()
}

func TestM6CrashAfterEnsureFindsByUID(t *testing.T) {
	// The executor created the native Job, then the process died before
	// the outcome: the redelivered Ensure reports the existing execution
	// (Created=false). The status write after it was lost too: the next
	// pass rebuilds it from the journal.
	s := newSim(t)
	s.accept()
	found := obs(execution.StateRunning)
	found.StartTime = timePtr(s.now)
	s.ok(execution.OpEnsure, found)
	s.job.Status = executionv1alpha1.JobStatus{ResolvedJobClass: s.job.Status.ResolvedJobClass}
	s.pass()
	s.wantSucceeded("Unknown/Running")
	if s.count(execution.OpEnsure) != 1 || s.job.Status.Execution == nil {
		t.Fatal("want one Ensure and the references rebuilt")
	}
	s.verify()
}

func TestM7RepeatedPassesChangeNothing(t *testing.T) {
	s := newSim(t)
	s.run()
	s.until(execution.OpObserve)
	done := obs(execution.StateSucceeded)
	done.FinishTime = timePtr(s.now)
	s.ok(execution.OpObserve, done)
	s.rest()
	want := s.job.Status.DeepCopy()
	n := len(s.recs)
	for range 5 {
		s.advance(time.Hour)
		if d := s.pass(); d.Intent != nil || d.Requeue || d.RequeueAfter != 0 {
			t.Fatalf("a terminal Job must rest, got %+v", d)
		}
	}
	if !statusEqual(want, &s.job.Status) || len(s.recs) != n {
		t.Fatal("terminal status or journal changed")
	}
	// A late, contradicting outcome (of an intent of the Job's journal:
	// an answer to no intent is no observation at all) never rewrites a
	// terminal status.
	late, err := journal.NewIntent(objectRef(s.job), execution.OpObserve, "", 99, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.add(late)
	s.add(journal.Record{ID: late.ID + "/outcome", Type: journal.TypeOutcome, CausationID: late.ID, Operation: execution.OpObserve, Object: objectRef(s.job), Attempt: 99,
		Result: &journal.Result{Class: journal.Succeeded}, Payload: []byte(`{"terminal":true,"state":"Failed","reason":"ProcessFailed"}`)})
	if l := readLedger(s.recs); l.last() == nil || l.last().rec.CausationID != late.ID {
		t.Fatal("the late outcome is not the ledger's latest")
	}
	s.pass()
	s.wantSucceeded("True/Completed")
}

func TestM8RecoversEveryNonTerminalStateFromTheJournal(t *testing.T) {
	// A restarted controller sees the journal and the persisted status;
	// with the status lost as well, the journal alone gives the state.
	type stage struct {
		name  string
		setup func(s *sim)
		want  string
	}
	for _, st := range []stage{
		{"Resolving", func(s *sim) {
			s.facts.Resolution = &Resolution{Reason: executionv1alpha1.ReasonJobClassNotFound, Message: "m"}
		}, "Unknown/Pending"},
		{"Scheduling", func(s *sim) { s.accept() }, "Unknown/Scheduling"},
		{"Starting", func(s *sim) {
			s.accept()
			s.ok(execution.OpEnsure, obs(execution.StatePending))
		}, "Unknown/Starting"},
		{"Running", func(s *sim) { s.run() }, "Unknown/Running"},
		{"Cancelling", func(s *sim) {
			s.run()
			s.job.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
			s.job.Generation++
			s.until(execution.OpCancel)
			s.ok(execution.OpCancel, obs(execution.StateStopping))
		}, "Unknown/Cancelling"},
		{"ResultUnknown", func(s *sim) {
			s.accept()
			s.answer(execution.OpEnsure, journal.ResultUnknown, nil)
		}, "Unknown/ResultUnknown"},
	} {
		t.Run(st.name, func(t *testing.T) {
			s := newSim(t)
			st.setup(s)
			s.pass()
			s.wantSucceeded(st.want)
			kept := s.job.Status.ResolvedJobClass
			s.job.Status = executionv1alpha1.JobStatus{ResolvedJobClass: kept}
			s.pass()
			s.wantSucceeded(st.want)
		})
	}
}

func TestM9AmbiguousEnsureStaysNonTerminal(t *testing.T) {
	s := newSim(t)
	s.accept()
	s.answer(execution.OpEnsure, journal.ResultUnknown, nil)
	for range 4 {
		s.until(execution.OpObserve)
		s.wantSucceeded("Unknown/ResultUnknown")
		if s.job.Status.CompletionTime != nil {
			t.Fatal("completionTime set on an unknown result")
		}
		s.answer(execution.OpObserve, journal.Failed, nil) // RetriesExhausted: backend unreachable
	}
	if s.count(execution.OpEnsure) != 1 {
		t.Fatal("an ambiguous Ensure must be observed, never repeated")
	}
	if StateOf(s.job) != "ResultUnknown" {
		t.Fatalf("state %s", StateOf(s.job))
	}
}

func TestM9NotFoundAfterAmbiguousEnsureCreatesOnce(t *testing.T) {
	s := newSim(t)
	s.accept()
	s.answer(execution.OpEnsure, journal.ResultUnknown, nil)
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateNotFound))
	s.until(execution.OpEnsure)
	c := obs(execution.StatePending)
	c.Created = true
	s.ok(execution.OpEnsure, c)
	s.pass()
	s.wantSucceeded("Unknown/Starting")
	s.verify()
}

func TestM10ResultUnknownBackToRunning(t *testing.T) {
	s := newSim(t)
	s.run()
	s.until(execution.OpObserve)
	s.answer(execution.OpObserve, journal.ResultUnknown, nil)
	s.pass()
	s.wantSucceeded("Unknown/ResultUnknown")
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateRunning))
	s.pass()
	s.wantSucceeded("Unknown/Running")
}

func TestM11BackendLostOnlyAfterConfirmation(t *testing.T) {
	s := newSim(t)
	s.run()
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateNotFound)) // deleted out of band
	for range 4 {
		s.pass()
		s.wantSucceeded("Unknown/ResultUnknown")
		if c := s.cond(executionv1alpha1.JobConditionSucceeded); !strings.Contains(c.Message, executionv1alpha1.AnnotationBackendLost) {
			t.Fatalf("message does not say how to confirm: %s", c.Message)
		}
		s.until(execution.OpObserve)
		s.ok(execution.OpObserve, obs(execution.StateNotFound))
	}
	// A confirmation for another UID (a copied manifest) does nothing.
	s.job.Annotations = map[string]string{executionv1alpha1.AnnotationBackendLost: "another-uid"}
	s.pass()
	s.wantSucceeded("Unknown/ResultUnknown")
	s.job.Annotations[executionv1alpha1.AnnotationBackendLost] = string(s.job.UID)
	d := s.pass()
	if d.Note != execution.NoteBackendLostConfirmed {
		t.Fatalf("want the confirmation journaled first, got %+v", d)
	}
	s.rest()
	s.wantSucceeded("False/BackendLost")
	s.verify()
}

func TestM12CancelInEveryStage(t *testing.T) {
	cancel := func(s *sim) {
		s.job.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		s.job.Generation++
	}
	t.Run("Resolving", func(t *testing.T) {
		s := newSim(t)
		s.facts.Resolution = &Resolution{Reason: executionv1alpha1.ReasonNoDefaultJobClass, Message: "m"}
		s.pass()
		cancel(s)
		s.rest()
		s.wantSucceeded("False/Cancelled")
		if s.count(execution.OpEnsure) != 0 {
			t.Fatal("Ensure after cancel")
		}
		s.wantFinishedNote(false, executionv1alpha1.ReasonCancelled)
	})
	t.Run("SchedulingBeforeEnsure", func(t *testing.T) {
		s := newSim(t)
		s.pass() // accepted, Ensure is next
		cancel(s)
		s.rest()
		s.wantSucceeded("False/Cancelled")
		if s.count(execution.OpEnsure) != 0 {
			t.Fatal("Ensure after cancel")
		}
	})
	t.Run("SchedulingEnsureInFlight", func(t *testing.T) {
		s := newSim(t)
		s.accept()
		cancel(s)
		if d := s.pass(); d.Intent != nil {
			t.Fatal("nothing may be decided while the Ensure is in flight")
		}
		s.wantSucceeded("Unknown/Cancelling")
		// The executor's fence: the Job is cancelled, nothing created.
		refused := obs(execution.StateNotFound)
		refused.Reason = executionv1alpha1.ReasonCancelled
		s.answer(execution.OpEnsure, journal.Failed, &refused)
		s.until(execution.OpCancel)
		s.ok(execution.OpCancel, obs(execution.StateNotFound))
		s.rest()
		s.wantSucceeded("False/Cancelled")
		s.verify()
	})
	t.Run("Starting", func(t *testing.T) {
		s := newSim(t)
		s.accept()
		s.ok(execution.OpEnsure, obs(execution.StatePending))
		cancel(s)
		s.until(execution.OpCancel)
		s.ok(execution.OpCancel, obs(execution.StateStopping))
		s.pass()
		s.wantSucceeded("Unknown/Cancelling")
		s.until(execution.OpObserve)
		s.ok(execution.OpObserve, obs(execution.StateCancelled))
		s.rest()
		s.wantSucceeded("False/Cancelled")
		s.verify()
	})
	t.Run("Running", func(t *testing.T) {
		s := newSim(t)
		s.run()
		cancel(s)
		s.until(execution.OpCancel)
		s.ok(execution.OpCancel, obs(execution.StateStopping))
		for range 3 {
			s.until(execution.OpObserve)
			s.ok(execution.OpObserve, obs(execution.StateStopping))
			s.wantSucceeded("Unknown/Cancelling")
		}
		s.until(execution.OpObserve)
		s.ok(execution.OpObserve, obs(execution.StateCancelled))
		s.rest()
		s.wantSucceeded("False/Cancelled")
		if s.count(execution.OpEnsure) != 1 {
			t.Fatal("Ensure after cancel")
		}
		s.verify()
	})
	t.Run("ResultUnknown", func(t *testing.T) {
		s := newSim(t)
		s.accept()
		s.answer(execution.OpEnsure, journal.ResultUnknown, nil)
		cancel(s)
		s.until(execution.OpCancel)
		s.answer(execution.OpCancel, journal.ResultUnknown, nil)
		s.until(execution.OpObserve)
		s.wantSucceeded("Unknown/Cancelling")
		s.ok(execution.OpObserve, obs(execution.StateNotFound))
		s.rest()
		s.wantSucceeded("False/Cancelled")
		s.verify()
	})
}

func TestM13SuccessBeforeCancelStaysSucceeded(t *testing.T) {
	s := newSim(t)
	s.run()
	s.job.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
	s.job.Generation++
	s.until(execution.OpCancel)
	done := obs(execution.StateSucceeded)
	done.ExitCode = i32(0)
	s.ok(execution.OpCancel, done) // the task finished before the stop
	s.rest()
	s.wantSucceeded("True/Completed")
	s.verify()
}

func TestM14DeadlineExceeded(t *testing.T) {
	s := newSim(t)
	ads := int64(60)
	s.job.Spec.ActiveDeadlineSeconds = &ads
	started := s.run()
	for s.now.Before(started.Add(60 * time.Second)) {
		d := s.pass()
		if d.Intent != nil {
			if d.Intent.Operation == execution.OpCancel {
				t.Fatalf("cancelled at %v, before the deadline", s.now.Sub(started))
			}
			s.ok(execution.OpObserve, obs(execution.StateRunning))
			continue
		}
		s.advance(d.RequeueAfter)
	}
	in := s.until(execution.OpCancel)
	if in.Step != string(execution.StopDeadlineExceeded) {
		t.Fatalf("cancel step %q", in.Step)
	}
	s.ok(execution.OpCancel, obs(execution.StateStopping))
	s.pass()
	if s.terminal() {
		t.Fatal("terminal before the backend confirmed the stop")
	}
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateCancelled))
	s.rest()
	s.wantSucceeded("False/DeadlineExceeded")
	s.verify()
}

func (s *sim) terminal() bool { return IsTerminal(&s.job.Status) }

func TestM15DeleteInEveryState(t *testing.T) {
	del := func(s *sim) {
		now := metav1.NewTime(s.now)
		s.job.DeletionTimestamp = &now
	}
	finishDeletion := func(s *sim) {
		s.t.Helper()
		for range 20 {
			d := s.pass()
			if d.RemoveFinalizer {
				return
			}
			if d.Intent == nil {
				s.advance(max(d.RequeueAfter, time.Second))
				continue
			}
			switch d.Intent.Operation {
			case execution.OpCancel:
				s.ok(execution.OpCancel, obs(execution.StateStopping))
			case execution.OpObserve:
				s.ok(execution.OpObserve, obs(execution.StateCancelled))
			case execution.OpDelete:
				s.ok(execution.OpDelete, obs(execution.StateNotFound))
			default:
				s.t.Fatalf("unexpected %s while deleting", d.Intent.Operation)
			}
		}
		s.t.Fatal("finalizer never released")
	}
	t.Run("Resolving", func(t *testing.T) {
		s := newSim(t)
		s.facts.Resolution = &Resolution{Reason: executionv1alpha1.ReasonNoDefaultJobClass, Message: "m"}
		s.pass()
		del(s)
		if d := s.pass(); !d.RemoveFinalizer {
			t.Fatal("nothing external exists: the finalizer goes at once")
		}
	})
	t.Run("Running", func(t *testing.T) {
		s := newSim(t)
		s.run()
		del(s)
		if d := s.pass(); d.RemoveFinalizer || d.Intent == nil || d.Intent.Operation != execution.OpCancel {
			t.Fatalf("want Cancel first, got %+v", d)
		}
		s.recs = s.recs[:len(s.recs)-1]
		s.seq--
		finishDeletion(s)
		if s.count(execution.OpDelete) == 0 || s.count(execution.OpCancel) == 0 {
			t.Fatal("want Cancel and Delete before the finalizer goes")
		}
		s.verify()
	})
	t.Run("Starting", func(t *testing.T) {
		s := newSim(t)
		s.accept()
		s.ok(execution.OpEnsure, obs(execution.StatePending))
		del(s)
		finishDeletion(s)
		s.verify()
	})
	t.Run("EnsureInFlight", func(t *testing.T) {
		s := newSim(t)
		s.accept()
		del(s)
		if d := s.pass(); d.RemoveFinalizer || d.Intent != nil {
			t.Fatalf("want a wait for the Ensure outcome, got %+v", d)
		}
		s.ok(execution.OpEnsure, obs(execution.StatePending))
		finishDeletion(s)
	})
	t.Run("Terminal", func(t *testing.T) {
		s := newSim(t)
		s.run()
		s.until(execution.OpObserve)
		s.ok(execution.OpObserve, obs(execution.StateSucceeded))
		s.rest()
		del(s)
		if d := s.pass(); d.Intent == nil || d.Intent.Operation != execution.OpDelete {
			t.Fatalf("a finished Job's backend resources are deleted, got %+v", d)
		}
		s.ok(execution.OpDelete, obs(execution.StateNotFound))
		if d := s.pass(); !d.RemoveFinalizer {
			t.Fatal("finalizer kept after the delete")
		}
		s.wantSucceeded("True/Completed")
	})
}

func TestM16BackendUnreachableKeepsFinalizer(t *testing.T) {
	s := newSim(t)
	s.run()
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateSucceeded))
	s.rest()
	now := metav1.NewTime(s.now)
	s.job.DeletionTimestamp = &now
	for range 5 {
		s.until(execution.OpDelete)
		s.answer(execution.OpDelete, journal.Failed, nil) // RetriesExhausted
		if d := s.pass(); d.RemoveFinalizer {
			t.Fatal("finalizer released while the backend is unreachable")
		}
	}
	s.until(execution.OpDelete)
	st := obs(execution.StateStopping)
	st.Message = "deletion in progress"
	s.ok(execution.OpDelete, st)
	if d := s.pass(); d.RemoveFinalizer {
		t.Fatal("finalizer released while the native Job still exists")
	}
	s.until(execution.OpDelete)
	s.ok(execution.OpDelete, obs(execution.StateNotFound))
	if d := s.pass(); !d.RemoveFinalizer {
		t.Fatal("finalizer kept after the delete")
	}
}

func TestM20SameNameNewUIDIsANewJob(t *testing.T) {
	old := newSim(t)
	old.run()
	s := newSim(t)
	s.job.UID = "3f1e6c1a-0000-4000-8000-000000000002"
	// Nothing of the old UID's journal reaches the new Job: its journal
	// is keyed by its own UID, so it starts from scratch.
	s.accept()
	if s.job.Status.Execution != nil || s.count(execution.OpEnsure) != 1 {
		t.Fatal("the new Job must create its own execution")
	}
	a, _ := execution.NativeJobName(string(old.job.UID))
	b, _ := execution.NativeJobName(string(s.job.UID))
	if a == b {
		t.Fatal("two UIDs share a native Job name")
	}
}

func TestClassNotReadyBlocksNewEnsureOnly(t *testing.T) {
	s := newSim(t)
	s.pass()
	s.facts.ClassReason, s.facts.ClassMessage = executionv1alpha1.ReasonClassNotReady, "JobClass default is not ready"
	for range 3 {
		if d := s.pass(); d.Intent != nil {
			t.Fatal("Ensure while the class is not ready")
		}
		s.advance(time.Minute)
	}
	if c := s.cond(executionv1alpha1.JobConditionScheduled); c.Reason != executionv1alpha1.ReasonClassNotReady {
		t.Fatalf("Scheduled reason %s", c.Reason)
	}
	s.facts.ClassReason = ""
	s.accept()
	s.ok(execution.OpEnsure, obs(execution.StateRunning))
	s.facts.ClassReason = executionv1alpha1.ReasonClassNotReady
	s.until(execution.OpObserve) // an existing execution is still observed
}

func TestObserveBackoffGrowsAndResets(t *testing.T) {
	s := newSim(t)
	s.run()
	var gaps []time.Duration
	for range 6 {
		before := s.now
		s.until(execution.OpObserve)
		gaps = append(gaps, s.now.Sub(before))
		s.ok(execution.OpObserve, obs(execution.StateRunning))
	}
	if gaps[len(gaps)-1] <= gaps[0] || gaps[len(gaps)-1] > testPolicy.ObserveMax {
		t.Fatalf("gaps %v", gaps)
	}
}

// compact replaces the sim's journal by what a checkpoint keeps
// (journal.Compact), as a long-running Job's reads see it.
func (s *sim) compact() {
	s.recs = journal.Compact(s.recs)
}

// The deadline and a failing execution's reason must survive journal
// compaction: a Job that runs for long is observed many times, and the
// checkpoint keeps only the latest few Observes.
func TestDeadlineSurvivesCompaction(t *testing.T) {
	s := newSim(t)
	ads := int64(600)
	s.job.Spec.ActiveDeadlineSeconds = &ads
	s.accept()
	s.ok(execution.OpEnsure, obs(execution.StatePending))
	// The first Observe sees the pod pending: the checkpoint keeps that
	// first success, not the first Running one.
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StatePending))
	s.until(execution.OpObserve)
	started := s.now
	s.ok(execution.OpObserve, obs(execution.StateRunning))
	for {
		d := s.pass()
		if d.Intent != nil && d.Intent.Operation == execution.OpCancel {
			break
		}
		if d.Intent != nil {
			s.ok(execution.OpObserve, obs(execution.StateRunning))
			s.compact()
			continue
		}
		if s.now.Sub(started) > 2*time.Duration(ads)*time.Second {
			t.Fatalf("no Cancel %v after the start, deadline %ds", s.now.Sub(started), ads)
		}
		s.advance(max(d.RequeueAfter, time.Second))
	}
	if late := s.now.Sub(started) - time.Duration(ads)*time.Second; late < 0 || late > testPolicy.ObserveMax {
		t.Fatalf("cancelled %v after the deadline", late)
	}
}

func TestFailingReasonSurvivesCompaction(t *testing.T) {
	s := newSim(t)
	s.accept()
	s.ok(execution.OpEnsure, obs(execution.StatePending))
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StatePending))
	s.until(execution.OpObserve)
	f := obs(execution.StatePending)
	f.Failing, f.Reason, f.Message = true, executionv1alpha1.ReasonImagePullFailed, "image can not be pulled"
	s.ok(execution.OpObserve, f)
	s.until(execution.OpCancel)
	s.ok(execution.OpCancel, obs(execution.StateStopping))
	for range 12 {
		s.until(execution.OpObserve)
		s.ok(execution.OpObserve, obs(execution.StateStopping))
		s.compact()
	}
	s.until(execution.OpObserve)
	s.ok(execution.OpObserve, obs(execution.StateCancelled))
	s.rest()
	s.wantSucceeded("False/ImagePullFailed")
}

// TestHugeDeadlineNeverFiresEarly: activeDeadlineSeconds beyond what a
// time.Duration holds (the CRD accepts any int64 ≥ 1) is a deadline
// centuries away, never one that already passed.
func TestHugeDeadlineNeverFiresEarly(t *testing.T) {
	for _, ads := range []int64{9_300_000_000, 1 << 62, 1<<63 - 1} {
		s := newSim(t)
		s.job.Spec.ActiveDeadlineSeconds = &ads
		s.run()
		for range 20 {
			d := s.pass()
			if d.Intent != nil {
				if d.Intent.Operation == execution.OpCancel {
					t.Fatalf("activeDeadlineSeconds %d: Cancel %s right after the start", ads, d.Intent.Step)
				}
				s.ok(execution.OpObserve, obs(execution.StateRunning))
				continue
			}
			if d.RequeueAfter <= 0 {
				t.Fatalf("activeDeadlineSeconds %d: requeue %v", ads, d.RequeueAfter)
			}
			s.advance(min(d.RequeueAfter, time.Minute))
		}
	}
}

// TestM11ConfirmLostAfterAmbiguousEnsure: a Job whose Ensure never got an
// answer (the backend unreachable for good) is in ResultUnknown too; the
// administrator's confirmation ends it as BackendLost, like a Job whose
// execution disappeared.
func TestM11ConfirmLostAfterAmbiguousEnsure(t *testing.T) {
	s := newSim(t)
	s.accept()
	s.answer(execution.OpEnsure, journal.ResultUnknown, nil)
	for range 3 {
		s.until(execution.OpObserve)
		s.answer(execution.OpObserve, journal.Failed, nil) // RetriesExhausted
	}
	s.pass()
	s.wantSucceeded("Unknown/ResultUnknown")
	s.job.Annotations = map[string]string{executionv1alpha1.AnnotationBackendLost: string(s.job.UID)}
	d := s.pass()
	if d.Note != execution.NoteBackendLostConfirmed {
		t.Fatalf("want the confirmation journaled, got %+v (status %s)", d, s.succeeded())
	}
	s.rest()
	s.wantSucceeded("False/BackendLost")
	s.verify()
}

// A ResultUnknown condition says why the backend could not tell (the
// outcome's reason and message, e.g. the OpenSandbox adapter's
// CommandStateLost), not only that it could not.
func TestResultUnknownSaysWhy(t *testing.T) {
	s := newSim(t)
	s.run()
	s.until(execution.OpObserve)
	s.answer(execution.OpObserve, journal.ResultUnknown, &execution.Observation{Reason: "CommandStateLost", Message: "execd no longer knows the command"})
	s.pass()
	s.wantSucceeded("Unknown/ResultUnknown")
	c := meta.FindStatusCondition(s.job.Status.Conditions, executionv1alpha1.JobConditionSucceeded)
	if !strings.Contains(c.Message, "CommandStateLost") || !strings.Contains(c.Message, "execd no longer knows the command") {
		t.Fatalf("message %q does not say why", c.Message)
	}
}

// A Job accepted for a class whose controller no adapter of this manager
// serves (any more) appends no Ensure: it waits, Scheduled=False.
func TestNoAdapterNoEnsure(t *testing.T) {
	s := newSim(t)
	s.facts.Adapter = ""
	for range 3 {
		s.pass()
		s.now = s.now.Add(time.Minute)
	}
	if n := s.count(execution.OpEnsure); n != 0 {
		t.Fatalf("%d Ensures without an adapter", n)
	}
	if meta.IsStatusConditionTrue(s.job.Status.Conditions, executionv1alpha1.JobConditionScheduled) {
		t.Fatal("Scheduled=True without an adapter")
	}
	s.facts.Adapter = execution.AdapterKubernetes
	s.pass()
	if n := s.count(execution.OpEnsure); n != 1 {
		t.Fatalf("%d Ensures once the adapter runs", n)
	}
}

// A Cancel goes to the adapter the Ensure named even when no outcome named
// it (the Ensure's result is unknown) and this manager no longer runs that
// adapter: never to another backend, which would find nothing and let the
// Job go while its execution may run.
func TestCancelGoesToTheEnsuresAdapter(t *testing.T) {
	s := newSim(t)
	s.facts.Adapter = "sandboxish"
	s.accept()
	s.answer(execution.OpEnsure, journal.ResultUnknown, nil)
	s.facts.Adapter = ""
	s.job.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
	s.job.Generation++
	rec := s.until(execution.OpCancel)
	var in execution.ExecutionIntent
	if err := rec.DecodePayload(&in); err != nil || in.Adapter != "sandboxish" {
		t.Fatalf("Cancel for adapter %q (%v), want the Ensure's", in.Adapter, err)
	}
}

// The pass that accepts a Job also decides its first Ensure when the
// class's readiness was read with the Resolution (ClassChecked); the
// status with the pinned class is written before the Ensure is appended
// (StatusFirst), since the executor checks the Ensure against it.
func TestAcceptanceDecidesFirstEnsure(t *testing.T) {
	t.Run("class ready", func(t *testing.T) {
		s := newSim(t)
		s.facts.ClassChecked = true
		d := s.pass()
		if d.Intent == nil || d.Intent.Operation != execution.OpEnsure || !d.StatusFirst {
			t.Fatalf("accepting pass: intent %+v, statusFirst %v; want an Ensure written after the status", d.Intent, d.StatusFirst)
		}
		if !meta.IsStatusConditionTrue(d.Status.Conditions, executionv1alpha1.JobConditionAccepted) || d.Status.ResolvedJobClass == nil {
			t.Fatalf("the Ensure's pass does not pin the class: %+v", d.Status)
		}
		in := d.Intent.Payload.(execution.EnsureIntent)
		if in.JobClassUID != string(d.Status.ResolvedJobClass.UID) || in.ParametersUID != string(d.Status.ResolvedJobClass.ParametersRef.UID) {
			t.Fatalf("Ensure %+v names another class than the status pins %+v", in, d.Status.ResolvedJobClass)
		}
		s.ok(execution.OpEnsure, execution.Observation{State: execution.StatePending, Created: true})
		if d := s.pass(); d.StatusFirst {
			t.Fatal("StatusFirst outside the accepting pass")
		}
		if s.count(execution.OpEnsure) != 1 {
			t.Fatalf("%d Ensures", s.count(execution.OpEnsure))
		}
		s.verify()
	})
	t.Run("class not ready", func(t *testing.T) {
		s := newSim(t)
		s.facts.ClassChecked = true
		s.facts.ClassReason, s.facts.ClassMessage = executionv1alpha1.ReasonClassNotReady, "JobClass default is not ready"
		d := s.pass()
		if d.Intent != nil || d.StatusFirst || d.RequeueAfter != testPolicy.ResolveRecheck {
			t.Fatalf("accepting pass with the class not ready: intent %+v, statusFirst %v, requeue %s", d.Intent, d.StatusFirst, d.RequeueAfter)
		}
		if c := s.cond(executionv1alpha1.JobConditionScheduled); c == nil || c.Reason != executionv1alpha1.ReasonClassNotReady {
			t.Fatalf("Scheduled %+v", c)
		}
		if !meta.IsStatusConditionTrue(d.Status.Conditions, executionv1alpha1.JobConditionAccepted) {
			t.Fatal("not accepted")
		}
	})
	t.Run("status lost after an Ensure", func(t *testing.T) {
		s := newSim(t)
		s.accept()
		s.ok(execution.OpEnsure, execution.Observation{State: execution.StatePending, Created: true})
		s.job.Status = executionv1alpha1.JobStatus{}
		s.facts.ClassChecked = true
		d := s.pass()
		if d.Intent != nil || d.StatusFirst || d.Status.ResolvedJobClass == nil {
			t.Fatalf("re-pinning pass after a lost status: intent %+v, statusFirst %v, pinned %v; want the class pinned again and no Ensure", d.Intent, d.StatusFirst, d.Status.ResolvedJobClass)
		}
		s.until(execution.OpObserve)
		if s.count(execution.OpEnsure) != 1 {
			t.Fatalf("%d Ensures", s.count(execution.OpEnsure))
		}
	})
	t.Run("readiness not read", func(t *testing.T) {
		s := newSim(t)
		d := s.pass()
		if d.Intent != nil || d.StatusFirst || !d.Requeue {
			t.Fatalf("accepting pass without the class's readiness: intent %+v, statusFirst %v, requeue %v", d.Intent, d.StatusFirst, d.Requeue)
		}
		s.accept()
	})
}

// A Job's Finished note needs no pass after it unless the Job is being
// deleted: the skeleton checkpoints the journal with the note.
func TestFinishedNoteRestsUnlessDeleting(t *testing.T) {
	for _, deleting := range []bool{false, true} {
		s := newSim(t)
		s.run()
		s.until(execution.OpObserve)
		done := obs(execution.StateSucceeded)
		done.ExitCode = i32(0)
		s.ok(execution.OpObserve, done)
		if deleting {
			s.job.DeletionTimestamp = &metav1.Time{Time: s.now}
		}
		d := s.pass()
		if d.Note != execution.NoteFinished {
			t.Fatalf("deleting=%v: decided %+v, want the Finished note", deleting, d)
		}
		if d.Requeue != deleting || d.RequeueAfter != 0 {
			t.Fatalf("deleting=%v: requeue %v after %s", deleting, d.Requeue, d.RequeueAfter)
		}
		if deleting {
			s.until(execution.OpDelete)
		} else if d := s.pass(); d.Intent != nil || d.Note != "" || d.Requeue || d.RequeueAfter != 0 {
			t.Fatalf("after the Finished note: %+v", d)
		}
	}
}

// TestAnswersToForgedRecordsAreNotObservations: an executor answers a
// record on a Job's intent subject it can not attribute or decode with a
// signed Failed outcome keyed by that record's stream sequence, carrying
// the operation its publisher chose. Such an answer is no observation of
// the Job's execution: a running Job stays Running (it turned the Job
// ResultUnknown, counted as the latest, ambiguous outcome).
func TestAnswersToForgedRecordsAreNotObservations(t *testing.T) {
	for _, tc := range []struct {
		name, reason, op string
		id               func(uid string) string
	}{
		{"untrusted Ensure", journal.ReasonUntrustedIntent, execution.OpEnsure, func(uid string) string { return journal.UntrustedIntentID(uid, 99) }},
		{"untrusted Delete", journal.ReasonUntrustedIntent, execution.OpDelete, func(uid string) string { return journal.UntrustedIntentID(uid, 98) }},
		{"undecodable", journal.ReasonUndecodableIntent, "Unknown", func(uid string) string { return journal.UndecodableIntentID(uid, 97) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t)
			s.run()
			forged := journal.Record{ID: tc.id(string(s.job.UID)), Type: journal.TypeIntent, Operation: tc.op, Object: objectRef(s.job), Attempt: 1}
			out, err := journal.NewOutcome(forged, journal.Result{Class: journal.Failed, Reason: tc.reason, Message: "not executed"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.add(out)
			for range 3 {
				d := s.pass()
				s.wantSucceeded("Unknown/Running")
				if d.Intent != nil || d.RemoveFinalizer {
					t.Fatalf("decided %+v after an answer to a forged record", d)
				}
			}
		})
	}
}
