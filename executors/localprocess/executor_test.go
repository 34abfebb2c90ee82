package localprocess_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/executors/localprocess"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The unit loop: the handlers as the consumer calls them, on records as
// the Job projector builds them, with the Jobs in a fake API reader (the
// projectors' side runs against a real API server and JetStream in
// stack_test.go).

const canary = "CANARY-localprocess-7d1f0b"

type fixture struct {
	t    *testing.T
	root string
	mgmt client.Client
	ex   *localprocess.Executor
	hs   map[string]journal.Handler
	n    int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := executionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	params := &unstructured.Unstructured{}
	params.SetGroupVersionKind(localprocess.ParametersGVK)
	params.SetName("local")
	params.SetUID("params-uid")
	class := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "local", UID: "class-uid"}, Spec: executionv1alpha1.JobClassSpec{
		ControllerName: localprocess.ControllerName,
		ParametersRef:  executionv1alpha1.ParametersReference{Group: localprocess.ParametersGroup, Kind: localprocess.ParametersKind, Name: "local"}}}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(localprocess.ParametersGVK, meta.RESTScopeRoot)
	mapper.Add(executionv1alpha1.GroupVersion.WithKind("JobClass"), meta.RESTScopeRoot)
	mapper.Add(executionv1alpha1.GroupVersion.WithKind("Job"), meta.RESTScopeNamespace)
	f := &fixture{t: t, root: t.TempDir(), mgmt: fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(params, class).Build()}
	f.ex = &localprocess.Executor{Root: f.root, Management: f.mgmt}
	f.hs = f.restart()
	return f
}

// restart is a new executor on the same root: what a manager restart
// leaves (the directories, none of the children).
func (f *fixture) restart() map[string]journal.Handler {
	f.ex = &localprocess.Executor{Root: f.root, Management: f.mgmt}
	hs, err := f.ex.Adapter().NewHandlers()
	if err != nil {
		f.t.Fatal(err)
	}
	f.hs = hs
	return hs
}

// job creates a Job whose task is argv with env.
func (f *fixture) job(argv []string, env ...executionv1alpha1.EnvVar) *executionv1alpha1.Job {
	f.t.Helper()
	f.n++
	j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "j" + string(rune('a'+f.n)),
		UID: types.UID("4c0d9a7e-0000-4000-8000-00000000000" + string(rune('0'+f.n)))},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "none", Command: argv[:1], Args: argv[1:], Env: env}}}
	if err := f.mgmt.Create(context.Background(), j); err != nil {
		f.t.Fatal(err)
	}
	return j
}

func (f *fixture) run(op string, j *executionv1alpha1.Job, payload any) (journal.Outcome, execution.Observation) {
	f.t.Helper()
	ref := journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: j.Namespace, Name: j.Name, UID: string(j.UID), Generation: 1}
	rec, err := journal.NewIntent(ref, op, "", 1, payload)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := f.hs[op](context.Background(), rec)
	if err != nil {
		f.t.Fatalf("%s: transient %v", op, err)
	}
	obs, _ := out.Payload.(execution.Observation)
	return out, obs
}

func (f *fixture) ensure(j *executionv1alpha1.Job) (journal.Outcome, execution.Observation) {
	f.t.Helper()
	digest, err := execution.TaskDigest(j.Spec.Task)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.run(execution.OpEnsure, j, execution.EnsureIntent{Adapter: localprocess.Name, JobClass: "local", JobClassUID: "class-uid",
		ParametersKind: localprocess.ParametersKind, ParametersName: "local", ParametersUID: "params-uid", TaskDigest: digest})
}

// until observes j until its Observation is terminal.
func (f *fixture) until(j *executionv1alpha1.Job) execution.Observation {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, obs := f.run(execution.OpObserve, j, execution.ExecutionIntent{Adapter: localprocess.Name})
		if out.Result.Class != journal.Succeeded {
			f.t.Fatalf("Observe: %+v", out.Result)
		}
		if obs.Terminal {
			return obs
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("not terminal: %+v", obs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func literal(name, value string) executionv1alpha1.EnvVar {
	return executionv1alpha1.EnvVar{Name: name, Value: &value}
}

func TestRunsOncePerUID(t *testing.T) {
	f := newFixture(t)
	counter := filepath.Join(t.TempDir(), "runs")
	j := f.job([]string{"/bin/sh", "-c", `echo run >> "$COUNTER"; echo "hello $WHO"`}, literal("COUNTER", counter), literal("WHO", "world"))
	out, obs := f.ensure(j)
	if out.Result.Class != journal.Succeeded || !obs.Created || obs.Adapter != localprocess.Name {
		t.Fatalf("first Ensure: %+v %+v", out.Result, obs)
	}
	if out, obs := f.ensure(j); out.Result.Class != journal.Succeeded || obs.Created {
		t.Fatalf("second Ensure created again: %+v %+v", out.Result, obs)
	}
	obs = f.until(j)
	if obs.State != execution.StateSucceeded || obs.Reason != executionv1alpha1.ReasonCompleted || obs.ExitCode == nil || *obs.ExitCode != 0 {
		t.Fatalf("result %+v", obs)
	}
	f.restart()
	if out, obs := f.ensure(j); out.Result.Class != journal.Succeeded || obs.Created || obs.State != execution.StateSucceeded {
		t.Fatalf("Ensure after a restart: %+v %+v", out.Result, obs)
	}
	runs, _ := os.ReadFile(counter)
	if strings.Count(string(runs), "run") != 1 {
		t.Fatalf("the task ran %d times", strings.Count(string(runs), "run"))
	}
	output, _ := os.ReadFile(filepath.Join(f.root, string(j.UID), "output"))
	if string(output) != "hello world\n" {
		t.Fatalf("output %q", output)
	}
}

func TestExitCodeAndCancel(t *testing.T) {
	f := newFixture(t)
	failing := f.job([]string{"/bin/sh", "-c", "exit 3"})
	f.ensure(failing)
	if obs := f.until(failing); obs.State != execution.StateFailed || obs.Reason != executionv1alpha1.ReasonProcessFailed || *obs.ExitCode != 3 {
		t.Fatalf("exit 3: %+v", obs)
	}

	sleeping := f.job([]string{"/bin/sleep", "30"})
	if _, obs := f.ensure(sleeping); obs.State != execution.StateRunning {
		t.Fatalf("sleep: %+v", obs)
	}
	if out, _ := f.run(execution.OpCancel, sleeping, execution.ExecutionIntent{Adapter: localprocess.Name, Reason: execution.StopCancelled}); out.Result.Class != journal.Succeeded {
		t.Fatalf("Cancel: %+v", out.Result)
	}
	if obs := f.until(sleeping); obs.State != execution.StateCancelled || obs.Reason != executionv1alpha1.ReasonCancelled {
		t.Fatalf("cancelled: %+v", obs)
	}
	if _, obs := f.run(execution.OpDelete, sleeping, execution.ExecutionIntent{Adapter: localprocess.Name}); obs.State != execution.StateNotFound {
		t.Fatalf("Delete: %+v", obs)
	}
	if _, err := os.Stat(filepath.Join(f.root, string(sleeping.UID))); !os.IsNotExist(err) {
		t.Fatalf("the execution directory is left: %v", err)
	}

	missing := f.job([]string{"/nonexistent/task"})
	out, obs := f.ensure(missing)
	if out.Result.Class != journal.Succeeded || !obs.Terminal || obs.Reason != localprocess.ReasonStartFailed || obs.State != execution.StateFailed {
		t.Fatalf("missing executable: %+v %+v", out.Result, obs)
	}
	if obs := f.until(missing); obs.Reason != localprocess.ReasonStartFailed {
		t.Fatalf("observed after a failed start: %+v", obs)
	}
}

// cleanupWith cancels j at the end of the test with the handlers of the
// executor that started it and waits until its exit is recorded (before
// the temporary directories go).
func (f *fixture) cleanupWith(hs map[string]journal.Handler, j *executionv1alpha1.Job) {
	f.t.Cleanup(func() {
		f.hs = hs
		f.run(execution.OpCancel, j, execution.ExecutionIntent{Adapter: localprocess.Name, Reason: execution.StopCancelled})
		f.until(j)
	})
}

// Only the task's literal env reaches the process: never the executor's
// own environment; an Ensure for a changed task creates nothing.
func TestEnvAndTaskChecks(t *testing.T) {
	f := newFixture(t)
	t.Setenv("AYATORI_MANAGER_SECRET", canary)
	j := f.job([]string{"/usr/bin/env"}, literal("ONLY", "this"))
	f.ensure(j)
	f.until(j)
	output, _ := os.ReadFile(filepath.Join(f.root, string(j.UID), "output"))
	if string(output) != "ONLY=this\n" {
		t.Fatalf("env of the process: %q", output)
	}

	changed := f.job([]string{"/bin/true"})
	digest, _ := execution.TaskDigest(changed.Spec.Task)
	changed.Spec.Task.Args = []string{"other"}
	if err := f.mgmt.Update(context.Background(), changed); err != nil {
		t.Fatal(err)
	}
	out, obs := f.run(execution.OpEnsure, changed, execution.EnsureIntent{Adapter: localprocess.Name, ParametersKind: localprocess.ParametersKind, TaskDigest: digest})
	if out.Result.Class != journal.Failed || out.Result.Reason != localprocess.ReasonTaskChanged || obs.State != execution.StateNotFound {
		t.Fatalf("changed task: %+v %+v", out.Result, obs)
	}
	if _, err := os.Stat(filepath.Join(f.root, string(changed.UID))); !os.IsNotExist(err) {
		t.Fatal("a changed task was claimed")
	}

	other := f.job([]string{"/bin/true"})
	out, _ = f.run(execution.OpEnsure, other, execution.EnsureIntent{Adapter: execution.AdapterKubernetes, TaskDigest: digest})
	if out.Result.Class != journal.Failed || out.Result.Reason != journal.ReasonUndecodableIntent {
		t.Fatalf("another adapter's Ensure: %+v", out.Result)
	}
	b, _ := json.Marshal(out)
	if strings.Contains(string(b), canary) {
		t.Fatal("the canary reached an outcome")
	}
}

// A process this executor did not start (a restart) and that recorded no
// exit is ResultUnknown for Observe, Cancel and Delete — never Running, a
// guessed result or NotFound — and its directory stays: it may still run.
func TestLostProcessIsResultUnknown(t *testing.T) {
	f := newFixture(t)
	j := f.job([]string{"/bin/sleep", "30"})
	f.ensure(j)
	f.cleanupWith(f.hs, j)
	f.restart()
	for _, op := range []string{execution.OpObserve, execution.OpCancel, execution.OpDelete} {
		out, _ := f.run(op, j, execution.ExecutionIntent{Adapter: localprocess.Name})
		if out.Result.Class != journal.ResultUnknown || out.Result.Reason != localprocess.ReasonProcessStateLost {
			t.Fatalf("%s after a restart: %+v", op, out.Result)
		}
	}
	if _, err := os.Stat(filepath.Join(f.root, string(j.UID))); err != nil {
		t.Fatalf("the execution directory of a process that may run was removed: %v", err)
	}
}

// A Cancel after the process ended keeps its result; what the task left
// running in its process group ends with it.
func TestEndedStaysEnded(t *testing.T) {
	f := newFixture(t)
	bg := filepath.Join(t.TempDir(), "bg.pid")
	j := f.job([]string{"/bin/sh", "-c", `/bin/sleep 30 & echo $! > "$BG"; exit 3`}, literal("BG", bg))
	f.ensure(j)
	f.until(j)
	f.run(execution.OpCancel, j, execution.ExecutionIntent{Adapter: localprocess.Name, Reason: execution.StopCancelled})
	if obs := f.until(j); obs.State != execution.StateFailed || obs.Reason != executionv1alpha1.ReasonProcessFailed || *obs.ExitCode != 3 {
		t.Fatalf("after a late Cancel: %+v", obs)
	}
	b, err := os.ReadFile(bg)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the task's background process %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An Ensure for a class or parameters recreated since the Job was
// accepted creates nothing.
func TestRecreatedClassCreatesNothing(t *testing.T) {
	f := newFixture(t)
	j := f.job([]string{"/bin/true"})
	digest, _ := execution.TaskDigest(j.Spec.Task)
	for name, in := range map[string]execution.EnsureIntent{
		"class":      {JobClass: "local", JobClassUID: "old-class-uid", ParametersName: "local", ParametersUID: "params-uid"},
		"parameters": {JobClass: "local", JobClassUID: "class-uid", ParametersName: "local", ParametersUID: "old-params-uid"},
	} {
		in.Adapter, in.ParametersKind, in.TaskDigest = localprocess.Name, localprocess.ParametersKind, digest
		out, obs := f.run(execution.OpEnsure, j, in)
		if out.Result.Class != journal.Failed || obs.State != execution.StateNotFound {
			t.Fatalf("%s recreated: %+v %+v", name, out.Result, obs)
		}
	}
	if _, err := os.Stat(filepath.Join(f.root, string(j.UID))); !os.IsNotExist(err) {
		t.Fatal("claimed for a recreated class")
	}
}

func TestAdmit(t *testing.T) {
	secret := executionv1alpha1.EnvVar{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "token"}}}
	for name, c := range map[string]struct {
		task   executionv1alpha1.TaskSpec
		reason string
	}{
		"command and literal env": {executionv1alpha1.TaskSpec{Command: []string{"/bin/true"}, Env: []executionv1alpha1.EnvVar{literal("A", "b")}}, ""},
		"Secret env":              {executionv1alpha1.TaskSpec{Command: []string{"/bin/true"}, Env: []executionv1alpha1.EnvVar{secret}}, localprocess.ReasonEnvNotLiteral},
		"image pull Secrets":      {executionv1alpha1.TaskSpec{Command: []string{"/bin/true"}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "r"}}}, executionv1alpha1.ReasonImageAuthNotAllowed},
		"no command":              {executionv1alpha1.TaskSpec{Args: []string{"x"}}, executionv1alpha1.ReasonCommandRequired},
		"relative command":        {executionv1alpha1.TaskSpec{Command: []string{"sh"}}, localprocess.ReasonCommandNotAbsolute},
		"resources":               {executionv1alpha1.TaskSpec{Command: []string{"/bin/true"}, Image: "limited"}, localprocess.ReasonResourcesUnsupported},
	} {
		t.Run(name, func(t *testing.T) {
			var res executionv1alpha1.ExecutionResourceRequirements
			if c.task.Image == "limited" {
				res.Limits.Memory = ptr.To(resource.MustParse("64Mi"))
			}
			reason, msg := localprocess.Admit(&executionv1alpha1.Job{Spec: executionv1alpha1.JobSpec{Task: c.task}}, nil, res)
			if reason != c.reason || (reason != "" && msg == "") {
				t.Fatalf("Admit = %q %q, want %q", reason, msg, c.reason)
			}
		})
	}
}
