package execution_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	osexec "git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/integration"
	ostest "git.ddupan.top/panxiao81/ayatori/integration/opensandbox"
)

// osCanary is a Secret env value of an OpenSandbox Job: it may appear
// only in the command request the OpenSandbox server received.
const osCanary = "CANARY-os-stack-41b7e2"

// osStack is an execution stack whose manager runs the opensandbox executor
// against the spec-validating OpenSandbox server (integration/opensandbox).
type osStack struct {
	*jobEnv
	srv *ostest.Server
	key string
}

func startOSStack(t *testing.T, extraArgs ...string) *osStack {
	skipShort(t)
	srv := ostest.Start(t, ostest.Options{APIKeys: []string{"os-stack-key"}})
	args := append([]string{"--opensandbox-marker-dir=" + srv.FilesRoot(), "--jobclass-probe-interval=1s", "--executor-ack-wait=3s"}, extraArgs...)
	je := startJobEnv(t, integration.ExecutionStackOptions{ManagerArgs: args})
	e := &osStack{jobEnv: je, srv: srv, key: "os-stack-key"}
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: integration.ControllerNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: integration.ControllerNamespace, Name: "os-api"}, Data: map[string][]byte{"api-key": []byte("os-stack-key")}},
		&executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "microvm"},
			Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{Endpoint: srv.URL(), AllowInsecureHTTP: true, AllowSecretEnv: true,
				APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: integration.ControllerNamespace, Name: "os-api", Key: "api-key"}}},
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "microvm"},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerOpenSandbox,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: osexec.ParametersKind, Name: "microvm"}}},
	} {
		if err := e.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	e.waitClassReady(t, metav1.ConditionTrue)
	return e
}

func (e *osStack) waitClassReady(t *testing.T, want metav1.ConditionStatus) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c := &executionv1alpha1.JobClass{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Name: "microvm"}, c); err == nil {
			if r := meta.FindStatusCondition(c.Status.Conditions, executionv1alpha1.JobClassConditionReady); r != nil && r.Status == want {
				return r.Reason
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("JobClass microvm not Ready=%s: %+v", want, c.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func osStackJob(ns, name string, argv ...string) *executionv1alpha1.Job {
	return &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: executionv1alpha1.JobSpec{JobClassName: "microvm", Task: executionv1alpha1.TaskSpec{Image: "registry.example/tools:1", Command: argv}}}
}

// sandboxesOf counts the sandboxes ever created for the Job.
func (e *osStack) sandboxesOf(j *executionv1alpha1.Job) int {
	return e.srv.CreatedSandboxes(osexec.LabelJobUID, string(j.UID))
}

// sandboxStatus is the lifecycle API's status code for GET of a sandbox.
func (e *osStack) sandboxStatus(t *testing.T, id string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL()+"/v1/sandboxes/"+id, nil)
	req.Header.Set("OPEN-SANDBOX-API-KEY", e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func refsOf(j *executionv1alpha1.Job) map[string]string {
	out := map[string]string{}
	if j.Status.Execution != nil {
		for _, r := range j.Status.Execution.References {
			out[r.Type] = r.ID
		}
	}
	return out
}

// TestOpenSandboxStack runs the matrix rows of the OpenSandbox adapter
// through the manager (projectors, journal, executor) on real servers and
// the spec-validating OpenSandbox server.
func TestOpenSandboxStack(t *testing.T) {
	e := startOSStack(t)
	ns := e.namespace(t, false)
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string][]byte{"token": []byte(osCanary)}}); err != nil {
		t.Fatal(err)
	}
	t.Run("matrix", func(t *testing.T) {
		t.Run("M1_M22_Succeeds", func(t *testing.T) {
			t.Parallel()
			j := e.create(t, osStackJob(ns, "ok", "bash", "-c", "echo hi"))
			got := e.waitSucceeded(t, j, "True/Completed")
			refs := refsOf(got)
			if got.Status.Execution == nil || got.Status.Execution.Adapter != "opensandbox" || refs["Sandbox"] == "" || refs["Command"] == "" {
				t.Fatalf("execution %+v", got.Status.Execution)
			}
			if got.Status.StartTime == nil || got.Status.Result == nil || got.Status.Result.ExitCode == nil || *got.Status.Result.ExitCode != 0 {
				t.Fatalf("status %+v", got.Status)
			}
			if e.sandboxesOf(got) != 1 || e.srv.Commands(refs["Sandbox"]) != 1 {
				t.Fatalf("%d sandboxes, %d commands", e.sandboxesOf(got), e.srv.Commands(refs["Sandbox"]))
			}
		})
		t.Run("M2_ExitCode", func(t *testing.T) {
			t.Parallel()
			j := e.create(t, osStackJob(ns, "exit3", "bash", "-c", "exit 3"))
			got := e.waitSucceeded(t, j, "False/ProcessFailed")
			if got.Status.Result == nil || got.Status.Result.ExitCode == nil || *got.Status.Result.ExitCode != 3 {
				t.Fatalf("result %+v", got.Status.Result)
			}
		})
		t.Run("M5_ImagePullFailure", func(t *testing.T) {
			t.Parallel()
			j := osStackJob(ns, "pullfail", "true")
			j.Spec.Task.Image = "registry.example/pull-fail:1"
			got := e.waitSucceeded(t, e.create(t, j), "False/ImagePullFailed")
			if got.Status.StartTime != nil {
				t.Fatal("a start time without a started process")
			}
		})
		t.Run("M12_Cancel", func(t *testing.T) {
			t.Parallel()
			j := e.create(t, osStackJob(ns, "cancel", "sleep", "300"))
			e.wait(t, j, "running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
			e.update(t, j, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
			e.waitSucceeded(t, j, "False/Cancelled")
		})
		t.Run("M14_Deadline", func(t *testing.T) {
			t.Parallel()
			j := osStackJob(ns, "deadline", "sleep", "300")
			d := int64(2)
			j.Spec.ActiveDeadlineSeconds = &d
			e.waitSucceeded(t, e.create(t, j), "False/DeadlineExceeded")
		})
		t.Run("SecretEnv", func(t *testing.T) {
			t.Parallel()
			out := e.srv.FilesRoot() + "/secret-env.out"
			j := osStackJob(ns, "secret", "bash", "-c", `printf '%s' "$TOKEN" > "$0"`, out)
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "token"}}}}
			e.waitSucceeded(t, e.create(t, j), "True/Completed")
			if b, _ := os.ReadFile(out); string(b) != osCanary {
				t.Fatalf("the process saw %q", b)
			}
		})
		t.Run("M15_DeleteRemovesTheSandbox", func(t *testing.T) {
			t.Parallel()
			j := e.create(t, osStackJob(ns, "delete", "sleep", "300"))
			got := e.wait(t, j, "running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
			sb := refsOf(got)["Sandbox"]
			if err := e.c.Delete(ctx, got); err != nil {
				t.Fatal(err)
			}
			e.deleted(got.UID)
			e.waitGone(t, got)
			if code := e.sandboxStatus(t, sb); code != http.StatusNotFound {
				t.Fatalf("sandbox %s outlived its Job (GET answered %d)", sb, code)
			}
		})
	})
	if t.Failed() {
		return
	}
	t.Run("C10_APIKeyRotation", func(t *testing.T) {
		// The backend takes only a new key: the class goes not Ready and
		// a new Job waits; the Secret is rotated: Ready again, the Job runs.
		e.srv.SetAPIKeys("os-stack-key-2")
		if r := e.waitClassReady(t, metav1.ConditionFalse); r != executionv1alpha1.ReasonAPIKeyRejected {
			t.Fatalf("Ready=False/%s, want APIKeyRejected", r)
		}
		j := e.create(t, osStackJob(ns, "after-rotation", "true"))
		e.wait(t, j, "Scheduled=False/ClassNotReady", 30*time.Second, func(j *executionv1alpha1.Job) bool {
			c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionScheduled)
			return c != nil && c.Reason == executionv1alpha1.ReasonClassNotReady
		})
		sec := &corev1.Secret{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: integration.ControllerNamespace, Name: "os-api"}, sec); err != nil {
			t.Fatal(err)
		}
		sec.Data["api-key"] = []byte("os-stack-key-2")
		e.key = "os-stack-key-2"
		if err := e.c.Update(ctx, sec); err != nil {
			t.Fatal(err)
		}
		e.waitClassReady(t, metav1.ConditionTrue)
		e.waitSucceeded(t, j, "True/Completed")
	})
	t.Run("JournalVerifyAndCanary", func(t *testing.T) {
		e.verifyJournal(t)
		e.noCanary(t, osCanary, "os-stack-key")
		var list executionv1alpha1.JobList
		_ = e.c.List(ctx, &list, client.InNamespace(ns))
		for _, j := range list.Items {
			if b, _ := json.Marshal(j.Status); bytes.Contains(b, []byte(osCanary)) {
				t.Fatalf("canary in the status of %s", j.Name)
			}
		}
		n := 0
		for _, b := range e.srv.Bodies() {
			if bytes.Contains(b, []byte(osCanary)) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("the canary is in %d request bodies, want only the command's", n)
		}
	})
}

// TestOpenSandboxSurvivesManagerKill: SIGKILL of the manager after the
// executor created the sandbox and started the command, before the
// Ensure outcome was journaled. After a restart the Job completes with one
// sandbox and one command.
func TestOpenSandboxSurvivesManagerKill(t *testing.T) {
	e := startOSStack(t)
	ns := e.namespace(t, false)
	e.s.StopManager()
	if err := e.s.StartManager([]string{"AYATORI_FAILPOINTS=executor-before-outcome=Ensure"}); err != nil {
		t.Fatal(err)
	}
	j := e.create(t, osStackJob(ns, "crash", "bash", "-c", "sleep 2"))
	if !e.s.WaitManagerExit(90 * time.Second) {
		t.Fatal("the failpoint did not kill the manager")
	}
	if n := e.sandboxesOf(j); n != 1 {
		t.Fatalf("%d sandboxes at the crash, want 1", n)
	}
	if err := e.s.StartManager(nil); err != nil {
		t.Fatal(err)
	}
	got := e.waitSucceeded(t, j, "True/Completed")
	sb := refsOf(got)["Sandbox"]
	if n := e.sandboxesOf(got); n != 1 {
		t.Fatalf("%d sandboxes, want 1", n)
	}
	if n := e.srv.Commands(sb); n != 1 {
		t.Fatalf("%d commands, want 1", n)
	}
	e.verifyJournal(t)
}
