// Package localprocess is a minimal execution backend used only by tests:
// it runs a Job's task as a process of the test binary's host under a
// directory of its own, for the unit loop and as the proof that a backend
// is added through docs/architecture.md's checklist alone (its package,
// its registration and a docs row).
//
// It is never registered in the shipped manager: it runs the Job author's
// argv on the host that runs it, outside any container, which the threat
// model allows only for a test that wrote the Job itself.
//
// One execution per Job UID, found by UID before it is created: Ensure
// claims <Root>/<uid> with one mkdir (the claim is the run-once guard: a
// second Ensure, a redelivery or a concurrent delivery, finds the directory
// and reports it), then starts the process (argv as data, no shell; only the
// task's literal env; stdout and stderr to <dir>/output) and writes its PID;
// a goroutine of the executor waits for it and writes <dir>/exit (exit code,
// signal) by rename. What a later operation reports comes from those files:
// exit written → Succeeded or Failed (Cancelled when the process was killed
// after a cancel); no exit and the process is this executor's child →
// Running; no exit and not its child (the executor that started it is gone,
// or it died between the claim and the start) → ResultUnknown, never a
// guess.
package localprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Names of the adapter.
const (
	// Name is the adapter's name in intents and status.execution.adapter.
	Name = "localprocess"
	// ControllerName is the JobClass controllerName of its classes.
	ControllerName = "localprocess.test.ayatori.ddupan.top/local"
	// ParametersGroup and ParametersKind are its parameters kind: a
	// cluster-scoped CRD without fields the adapter reads (testdata/crd.yaml),
	// served without Go types.
	ParametersGroup = "localprocess.test.ayatori.ddupan.top"
	ParametersKind  = "LocalProcessExecutionParameters"
	// RefProcess is the reference type of status.execution.references:
	// the execution's directory name (the Job UID).
	RefProcess = "Process"
)

// Reasons the executor decides itself (besides classify.go's).
const (
	// ReasonTaskChanged: the Job's task no longer has the intent's digest.
	ReasonTaskChanged = "TaskChanged"
	// ReasonProcessStateLost: the execution was claimed, but its process
	// is not this executor's child and wrote no exit: it may run or may
	// have ended unseen.
	ReasonProcessStateLost = "ProcessStateLost"
	// ReasonStartFailed: the process could not be started (no such
	// executable, not executable): nothing ran.
	ReasonStartFailed = "StartFailed"
	// ReasonEnvNotLiteral: an env variable references a Secret or a
	// ConfigMap (Admit refuses such a Job before it is accepted).
	ReasonEnvNotLiteral = "EnvNotLiteral"
)

// DefaultTimeout bounds one operation.
const DefaultTimeout = 10 * time.Second

// uidPattern is what a Job UID must look like to name a directory.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Executor executes the execution domain's intents as local processes.
type Executor struct {
	// Root is the directory under which each Job UID gets its own
	// directory. Required, absolute, existing.
	Root string
	// Management reads the Ayatori Jobs (uncached: Ensure re-reads the
	// task it runs). Required.
	Management client.Reader
	// Timeout bounds one operation (default DefaultTimeout).
	Timeout time.Duration
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger

	mu       sync.Mutex
	children map[string]*exec.Cmd // by Job UID, while the process runs
}

// exitRecord is <dir>/exit.
type exitRecord struct {
	// ExitCode of the process; -1 when a signal ended it.
	ExitCode int32 `json:"exitCode"`
	// Signal that ended it ("" when it exited).
	Signal string    `json:"signal,omitempty"`
	Finish time.Time `json:"finish"`
}

// Validate reports a missing Management client or a Root that is not an
// absolute path of an existing directory.
func (e *Executor) Validate() error {
	if e.Management == nil {
		return errors.New("executors/localprocess: the Management client is required")
	}
	if !filepath.IsAbs(e.Root) {
		return fmt.Errorf("executors/localprocess: Root %q is not an absolute path", e.Root)
	}
	if st, err := os.Stat(e.Root); err != nil || !st.IsDir() {
		return fmt.Errorf("executors/localprocess: Root %q is not a directory", e.Root)
	}
	return nil
}

// Handlers returns the journal handlers by operation (execution.Operations).
func (e *Executor) Handlers() map[string]journal.Handler {
	t := e.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	b := &journal.Backend{Name: Name, Deadline: t, Log: e.Log, Classify: execution.Classifier(classify), Complete: execution.Complete(Name)}
	return map[string]journal.Handler{
		execution.OpEnsure:  journal.Execute(b, journal.Step[execution.EnsureIntent]{Run: execution.Observed(e.ensure), Validate: validEnsure}),
		execution.OpObserve: journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(e.observeOp)}),
		execution.OpCancel:  journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(e.cancel)}),
		execution.OpDelete:  journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(e.delete)}),
	}
}

// validEnsure refuses an Ensure without a task digest or for another
// adapter (nothing is created).
func validEnsure(_ journal.Record, in execution.EnsureIntent) error {
	if in.TaskDigest == "" || in.Adapter != Name || in.ParametersKind != ParametersKind {
		return execution.Refused(journal.ReasonUndecodableIntent, "the Ensure payload lacks the task digest or names another adapter", execution.StateNotFound)
	}
	return nil
}

// dirOf is the execution directory of the intent's Job UID.
func (e *Executor) dirOf(rec journal.Record) (string, error) {
	if !uidPattern.MatchString(rec.Object.UID) {
		return "", execution.Refused(journal.ReasonUndecodableIntent, "the intent's object UID is not a UID", execution.StateNotFound)
	}
	return filepath.Join(e.Root, rec.Object.UID), nil
}

// ensure claims the execution directory and starts the process, or
// reports the execution a claim made before.
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in execution.EnsureIntent) (execution.Observation, error) {
	dir, err := e.dirOf(rec)
	if err != nil {
		return execution.Observation{}, err
	}
	if _, err := os.Stat(dir); err == nil {
		return e.observe(rec, dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return execution.Observation{}, err
	}
	job, err := e.admit(ctx, rec, in)
	if err != nil {
		return execution.Observation{}, err
	}
	if err := os.Mkdir(dir, 0o700); errors.Is(err, fs.ErrExist) {
		return e.observe(rec, dir) // a concurrent delivery claimed it
	} else if err != nil {
		return execution.Observation{}, execution.NothingCreated(err)
	}
	if err := e.start(rec.Object.UID, dir, job.Spec.Task); err != nil {
		// Claimed, and nothing runs: a definite failure of this Job.
		_ = writeExit(dir, exitRecord{ExitCode: -1, Signal: "none", Finish: time.Now()})
		return execution.Observation{}, &execution.Failure{Reason: ReasonStartFailed, State: execution.StateFailed,
			References: references(rec), Message: "the task's command could not be started: " + startError(err)}
	}
	o, err := e.observe(rec, dir)
	o.Created = true
	return o, err
}

// admit re-reads the Job and refuses an Ensure whose Job is gone,
// recreated, cancelled or changed (nothing is created).
func (e *Executor) admit(ctx context.Context, rec journal.Record, in execution.EnsureIntent) (*executionv1alpha1.Job, error) {
	cancelled := func(msg string) error {
		return &execution.Failure{Reason: executionv1alpha1.ReasonCancelled, State: execution.StateNotFound, Message: msg}
	}
	job := &executionv1alpha1.Job{}
	err := e.Management.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}, job)
	switch {
	case isNotFound(err):
		return nil, cancelled("the Job no longer exists; no process was started")
	case err != nil:
		return nil, execution.NothingCreated(err)
	case string(job.UID) != rec.Object.UID:
		return nil, cancelled("the Job was recreated with another UID; no process was started")
	case job.DeletionTimestamp != nil || job.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled:
		return nil, cancelled("the Job is being deleted or cancelled; no process was started")
	case !execution.TaskMatches(job.Spec.Task, in.TaskDigest):
		return nil, &execution.Failure{Reason: ReasonTaskChanged, State: execution.StateNotFound,
			Message: "the Job's task does not match the digest of the Ensure intent; no process was started"}
	}
	for _, v := range job.Spec.Task.Env {
		if v.Value == nil {
			return nil, execution.Refused(ReasonEnvNotLiteral, "env "+v.Name+" is not a literal value; this adapter passes literal values only", execution.StateNotFound)
		}
	}
	if len(job.Spec.Task.Command) == 0 {
		return nil, execution.Refused(executionv1alpha1.ReasonCommandRequired, "the task has no command", execution.StateNotFound)
	}
	return job, nil
}

// start starts the task's argv (no shell) in dir/work with only the
// task's literal env, records its PID and waits for it in the background.
func (e *Executor) start(uid, dir string, task executionv1alpha1.TaskSpec) error {
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(dir, "output"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	argv := append(append([]string{}, task.Command...), task.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = work, out, out
	cmd.Env = []string{} // never the executor's own environment
	for _, v := range task.Env {
		cmd.Env = append(cmd.Env, v.Name+"="+*v.Value)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.mu.Lock()
	if e.children == nil {
		e.children = map[string]*exec.Cmd{}
	}
	e.children[uid] = cmd
	e.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		e.Log.Error(err, "record the PID", "uid", uid)
	}
	go func() {
		err := cmd.Wait()
		r := exitRecord{Finish: time.Now()}
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			r.ExitCode = int32(ee.ExitCode())
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.ExitCode, r.Signal = -1, ws.Signal().String()
			}
		default:
			r.ExitCode, r.Signal = -1, "unknown"
		}
		if err := writeExit(dir, r); err != nil {
			e.Log.Error(err, "record the exit", "uid", uid)
		}
		e.mu.Lock()
		delete(e.children, uid)
		e.mu.Unlock()
	}()
	return nil
}

// writeExit writes dir/exit by rename (a reader sees all of it or none).
func writeExit(dir string, r exitRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".exit.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "exit"))
}

func references(rec journal.Record) []execution.Reference {
	return []execution.Reference{{Type: RefProcess, ID: rec.Object.UID}}
}

// observe reports the execution in dir from its files and this
// executor's children.
func (e *Executor) observe(rec journal.Record, dir string) (execution.Observation, error) {
	o := execution.Observation{References: references(rec)}
	b, err := os.ReadFile(filepath.Join(dir, "exit"))
	switch {
	case err == nil:
		var r exitRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return o, &execution.Failure{Reason: ReasonProcessStateLost, Unknown: true, References: o.References, Message: "the exit record is unreadable"}
		}
		finish := r.Finish
		o.Terminal, o.FinishTime = true, &finish
		_, cancelErr := os.Stat(filepath.Join(dir, "cancel"))
		switch {
		case r.Signal != "" && cancelErr == nil:
			o.State, o.Reason, o.Message = execution.StateCancelled, executionv1alpha1.ReasonCancelled, "the process was stopped on request"
		case r.Signal == "none":
			o.State, o.Reason, o.Message = execution.StateFailed, ReasonStartFailed, "the task's command could not be started"
		case r.Signal != "":
			o.State, o.Reason, o.Message = execution.StateFailed, executionv1alpha1.ReasonBackendFailed, "the process was ended by signal "+r.Signal
		case r.ExitCode == 0:
			o.State, o.Reason, o.ExitCode, o.Message = execution.StateSucceeded, executionv1alpha1.ReasonCompleted, &r.ExitCode, "the task exited with code 0"
		default:
			o.State, o.Reason, o.ExitCode = execution.StateFailed, executionv1alpha1.ReasonProcessFailed, &r.ExitCode
			o.Message = fmt.Sprintf("the task exited with code %d", r.ExitCode)
		}
		return o, nil
	case !errors.Is(err, fs.ErrNotExist):
		return o, err
	}
	if e.child(rec.Object.UID) != nil {
		o.State, o.Message = execution.StateRunning, "the process runs"
		if _, err := os.Stat(filepath.Join(dir, "cancel")); err == nil {
			o.State, o.Message = execution.StateStopping, "the process was signalled to stop"
		}
		return o, nil
	}
	return o, &execution.Failure{Reason: ReasonProcessStateLost, Unknown: true, References: o.References,
		Message: "the execution was claimed but its process is not this executor's and recorded no exit"}
}

func (e *Executor) child(uid string) *exec.Cmd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.children[uid]
}

// existing returns the execution directory of the intent's Job UID, or
// the NotFound observation when none exists (done).
func (e *Executor) existing(rec journal.Record) (dir string, done *execution.Observation, err error) {
	dir, err = e.dirOf(rec)
	if err != nil {
		return "", nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return dir, &execution.Observation{State: execution.StateNotFound, Message: "no execution exists for the Job UID"}, nil
	} else if err != nil {
		return "", nil, err
	}
	return dir, nil, nil
}

func (e *Executor) observeOp(_ context.Context, rec journal.Record, _ execution.ExecutionIntent) (execution.Observation, error) {
	dir, done, err := e.existing(rec)
	if err != nil || done != nil {
		return deref(done), err
	}
	return e.observe(rec, dir)
}

func deref(o *execution.Observation) execution.Observation {
	if o == nil {
		return execution.Observation{}
	}
	return *o
}

// cancel records the request and kills the process group of this
// executor's child.
func (e *Executor) cancel(_ context.Context, rec journal.Record, _ execution.ExecutionIntent) (execution.Observation, error) {
	dir, done, err := e.existing(rec)
	if err != nil || done != nil {
		return deref(done), err
	}
	if err := os.WriteFile(filepath.Join(dir, "cancel"), nil, 0o600); err != nil {
		return execution.Observation{}, err
	}
	if cmd := e.child(rec.Object.UID); cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return e.observe(rec, dir)
}

// delete kills the process (if it is this executor's child) and removes
// the execution directory once its exit is recorded.
func (e *Executor) delete(_ context.Context, rec journal.Record, _ execution.ExecutionIntent) (execution.Observation, error) {
	dir, done, err := e.existing(rec)
	if err != nil || done != nil {
		return deref(done), err
	}
	if cmd := e.child(rec.Object.UID); cmd != nil {
		_ = os.WriteFile(filepath.Join(dir, "cancel"), nil, 0o600)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return execution.Observation{State: execution.StateStopping, References: references(rec), Message: "the process was signalled to stop"}, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return execution.Observation{}, err
	}
	return execution.Observation{State: execution.StateNotFound, Message: "the execution directory was removed"}, nil
}
