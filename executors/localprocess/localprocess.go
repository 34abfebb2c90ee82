// Package localprocess is a minimal execution backend used only by tests:
// it runs a Job's task as a process of the test binary's host under a
// directory of its own, for the unit loop and as the proof that a backend
// is added through docs/architecture.md's checklist alone (its package,
// its registration and a docs row).
//
// It is never registered in the shipped manager: it runs the Job author's
// argv on the host that runs it, outside any container, with the
// executor's own user (the task could read the executor's files and
// processes), which the threat model allows only for a test that wrote the
// Job itself.
//
// One execution per Job UID, found by UID before it is created: Ensure
// prepares a directory beside <Root>/<uid> and claims <Root>/<uid> by
// renaming it (the claim is the run-once guard: a second Ensure, a
// redelivery or a concurrent delivery, finds the directory and reports
// it), then starts the process (argv as data, no shell, no PATH look-up;
// only the task's literal env; stdout and stderr to <dir>/output) and
// writes its PID; a goroutine of the executor waits for it, kills what is
// left of its process group and writes <dir>/exit (exit code, signal) by
// rename. What a later operation reports comes from those files: exit
// written → Succeeded or Failed (Cancelled when the process was killed
// after a cancel); no exit and the process is this executor's child →
// Running; no exit and not its child (the executor that started it is
// gone, or died between the claim and the start) → ResultUnknown, never a
// guess, for Observe, Cancel and Delete alike (the directory stays).
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
	// ReasonCommandNotAbsolute: task.command[0] is not an absolute path
	// (the adapter looks nothing up in a PATH).
	ReasonCommandNotAbsolute = "CommandNotAbsolute"
	// ReasonResourcesUnsupported: the Job's effective resources set a
	// request or a limit, which a local process can not honour.
	ReasonResourcesUnsupported = "ResourcesUnsupported"
)

// DefaultTimeout bounds one operation.
const DefaultTimeout = 10 * time.Second

// uidPattern is what a Job UID must look like to name a directory.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Executor executes the execution domain's intents as local processes.
type Executor struct {
	// Root is the directory under which each Job UID gets its own
	// directory. Required, absolute, existing; one executor per Root.
	Root string
	// Management reads the Ayatori Jobs (uncached: Ensure re-reads the
	// task it runs). Required.
	Management client.Reader
	// Timeout bounds one operation (default DefaultTimeout).
	Timeout time.Duration
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger

	ensureMu sync.Mutex // one Ensure at a time
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
// reports the execution a claim made before. One executor's Ensures run
// one at a time, so that the claim, the start and the child's registration
// are one step for its Observes.
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in execution.EnsureIntent) (execution.Observation, error) {
	dir, err := e.dirOf(rec)
	if err != nil {
		return execution.Observation{}, err
	}
	e.ensureMu.Lock()
	defer e.ensureMu.Unlock()
	if _, err := os.Stat(dir); err == nil {
		return e.observe(rec, dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return execution.Observation{}, err
	}
	job, err := e.admit(ctx, rec, in)
	if err != nil {
		return execution.Observation{}, err
	}
	// Prepare the directory beside the claim, then claim it by rename: a
	// failure before the rename created nothing.
	staged, err := os.MkdirTemp(e.Root, ".claim-")
	if err != nil {
		return execution.Observation{}, execution.NothingCreated(err)
	}
	defer os.RemoveAll(staged) // gone after a successful claim
	out, err := prepare(staged)
	if err != nil {
		return execution.Observation{}, execution.NothingCreated(err)
	}
	defer out.Close()
	if err := os.Rename(staged, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return e.observe(rec, dir) // claimed meanwhile
		}
		return execution.Observation{}, execution.NothingCreated(err)
	}
	if err := e.start(rec.Object.UID, dir, out, job.Spec.Task); err != nil {
		// Claimed, and nothing runs: the Job's result, recorded like an
		// exit so that every later operation reports the same.
		if err := writeExit(dir, exitRecord{ExitCode: -1, Signal: signalNotStarted, Finish: time.Now()}); err != nil {
			return execution.Observation{}, err // the redelivery finds the claim: ResultUnknown
		}
		e.Log.Info("the task could not be started", "uid", rec.Object.UID, "cause", startError(err))
	}
	o, err := e.observe(rec, dir)
	o.Created = true
	return o, err
}

// signalNotStarted in an exit record: the command could not be started.
const signalNotStarted = "none"

// prepare creates the work directory and the output file in dir.
func prepare(dir string) (*os.File, error) {
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "output"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
}

// admit re-reads the Job, its class and its parameters, and refuses an
// Ensure whose Job is gone, recreated, cancelled or changed, or whose
// class or parameters were recreated since it was accepted (nothing is
// created).
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
	class := &executionv1alpha1.JobClass{}
	err = e.Management.Get(ctx, types.NamespacedName{Name: in.JobClass}, class)
	switch {
	case isNotFound(err) || err == nil && string(class.UID) != in.JobClassUID:
		return nil, execution.Refused(executionv1alpha1.ReasonJobClassNotFound, "JobClass "+in.JobClass+" is gone or was recreated since the Job was accepted; no process was started", execution.StateNotFound)
	case err != nil:
		return nil, execution.NothingCreated(err)
	}
	if why := execution.ClassMismatch(class, in, ControllerName); why != "" {
		return nil, execution.Refused(executionv1alpha1.ReasonInvalidParametersReference, why+"; no process was started", execution.StateNotFound)
	}
	params := e.Adapter().NewParameters()
	err = e.Management.Get(ctx, types.NamespacedName{Name: in.ParametersName}, params)
	switch {
	case isNotFound(err) || err == nil && string(params.GetUID()) != in.ParametersUID:
		return nil, execution.Refused(executionv1alpha1.ReasonParametersNotFound, ParametersKind+" "+in.ParametersName+" is gone or was recreated since the Job was accepted; no process was started", execution.StateNotFound)
	case err != nil:
		return nil, execution.NothingCreated(err)
	}
	if reason, msg := Admit(job, params, executionv1alpha1.ExecutionResourceRequirements{}); reason != "" {
		return nil, execution.Refused(reason, msg+"; no process was started", execution.StateNotFound)
	}
	if in.Resources != (execution.Resources{}) {
		return nil, execution.Refused(ReasonResourcesUnsupported, "the local-process adapter can not bound CPU or memory; no process was started", execution.StateNotFound)
	}
	return job, nil
}

// start starts the task's argv (no shell, no PATH look-up: Admit requires
// an absolute command) in dir/work with only the task's literal env,
// records its PID and waits for it in the background; when it exits, the
// rest of its process group is killed (the task ends with its main
// process, as a container's does) and the exit is recorded.
func (e *Executor) start(uid, dir string, out *os.File, task executionv1alpha1.TaskSpec) error {
	argv := append(append([]string{}, task.Command...), task.Args...)
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Dir: filepath.Join(dir, "work"), Stdout: out, Stderr: out}
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
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what the task left in its group
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

// lost is the ResultUnknown failure of an execution claimed in dir whose
// process is not this executor's child and recorded no exit.
func lost(rec journal.Record) error {
	return &execution.Failure{Reason: ReasonProcessStateLost, Unknown: true, References: references(rec),
		Message: "the execution was claimed but its process is not this executor's and recorded no exit"}
}

// observe reports the execution in dir from its exit record and this
// executor's children. The child is looked up before the exit record is
// read: the waiter records the exit before it forgets the child, so a
// process is never seen neither running nor ended.
func (e *Executor) observe(rec journal.Record, dir string) (execution.Observation, error) {
	o := execution.Observation{References: references(rec)}
	running := e.child(rec.Object.UID) != nil
	r, ok, err := readExit(dir)
	switch {
	case err != nil:
		return o, &execution.Failure{Reason: ReasonProcessStateLost, Unknown: true, References: o.References, Message: "the exit record is unreadable"}
	case ok:
		finish := r.Finish
		o.Terminal, o.FinishTime = true, &finish
		_, cancelErr := os.Stat(filepath.Join(dir, "cancel"))
		switch {
		case r.Signal == signalNotStarted:
			o.State, o.Reason, o.Message = execution.StateFailed, ReasonStartFailed, "the task's command could not be started"
		case r.Signal != "" && cancelErr == nil:
			o.State, o.Reason, o.Message = execution.StateCancelled, executionv1alpha1.ReasonCancelled, "the process was stopped on request"
		case r.Signal != "":
			o.State, o.Reason, o.Message = execution.StateFailed, executionv1alpha1.ReasonBackendFailed, "the process was ended by signal "+r.Signal
		case r.ExitCode == 0:
			o.State, o.Reason, o.ExitCode, o.Message = execution.StateSucceeded, executionv1alpha1.ReasonCompleted, &r.ExitCode, "the task exited with code 0"
		default:
			o.State, o.Reason, o.ExitCode = execution.StateFailed, executionv1alpha1.ReasonProcessFailed, &r.ExitCode
			o.Message = fmt.Sprintf("the task exited with code %d", r.ExitCode)
		}
		return o, nil
	case running:
		o.State, o.Message = execution.StateRunning, "the process runs"
		if _, err := os.Stat(filepath.Join(dir, "cancel")); err == nil {
			o.State, o.Message = execution.StateStopping, "the process was signalled to stop"
		}
		return o, nil
	}
	return o, lost(rec)
}

// readExit reads dir/exit (ok false: none yet).
func readExit(dir string) (r exitRecord, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "exit"))
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	return r, true, json.Unmarshal(b, &r)
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

// stop asks this executor's running child of the Job to stop (the cancel
// marker, then SIGKILL to its process group). It reports whether a child
// runs; an execution that already ended is left as it is.
func (e *Executor) stop(rec journal.Record, dir string) (bool, error) {
	cmd := e.child(rec.Object.UID)
	if cmd == nil {
		return false, nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cancel"), nil, 0o600); err != nil {
		return true, err
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return true, nil
}

// cancel stops this executor's child of the Job. An execution that ended
// keeps its result; one whose process is not this executor's is
// ResultUnknown (it can not be stopped from here).
func (e *Executor) cancel(_ context.Context, rec journal.Record, _ execution.ExecutionIntent) (execution.Observation, error) {
	dir, done, err := e.existing(rec)
	if err != nil || done != nil {
		return deref(done), err
	}
	if _, err := e.stop(rec, dir); err != nil {
		return execution.Observation{}, err
	}
	return e.observe(rec, dir)
}

// delete stops this executor's child of the Job and removes the execution
// directory once the exit is recorded. An execution whose process is not
// this executor's and recorded no exit is ResultUnknown, and its
// directory stays: it may still run.
func (e *Executor) delete(_ context.Context, rec journal.Record, _ execution.ExecutionIntent) (execution.Observation, error) {
	dir, done, err := e.existing(rec)
	if err != nil || done != nil {
		return deref(done), err
	}
	running, err := e.stop(rec, dir)
	if err != nil {
		return execution.Observation{}, err
	}
	if running {
		return execution.Observation{State: execution.StateStopping, References: references(rec), Message: "the process was signalled to stop"}, nil
	}
	if _, ok, err := readExit(dir); err != nil || !ok {
		return execution.Observation{}, lost(rec)
	}
	if err := os.RemoveAll(dir); err != nil {
		return execution.Observation{}, err
	}
	return execution.Observation{State: execution.StateNotFound, Message: "the execution directory was removed"}, nil
}
