package execution_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// envCanary is a Secret value that must never leave the pod's env
// resolution: not in status, Events, logs, the journal or metrics.
const envCanary = "CANARY-job-env-7d21c0"

// jobEnv is one execution stack shared by the tests of this file, each in
// its own namespace.
type jobEnv struct {
	t  *testing.T
	s  *integration.ExecutionStack
	c  client.Client
	ns atomic.Int32

	mu sync.Mutex
	// gone are UIDs of Jobs deleted during the tests (replayed at the end).
	gone []types.UID
}

func (e *jobEnv) deleted(uids ...types.UID) {
	e.mu.Lock()
	e.gone = append(e.gone, uids...)
	e.mu.Unlock()
}

// replay runs `ayatori-journal replay <uid> --kubeconfig` and fails on a
// mismatch between the live object (or its absence) and the journal.
func (e *jobEnv) replay(t *testing.T, uid types.UID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.s.JournalBin, append(e.s.JournalReaderArgs(), "replay", string(uid), "--kubeconfig", e.s.CP.KubeconfigPath)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ayatori-journal replay %s: %v\n%s", uid, err, out)
	}
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (real apiserver, controller-manager, scheduler, kwok, JetStream)")
	}
}

func startJobEnv(t *testing.T, opts integration.ExecutionStackOptions) *jobEnv {
	skipShort(t)
	s := integration.StartExecutionStack(t, opts)
	e := &jobEnv{t: t, s: s, c: s.CP.Client}
	ctx := context.Background()
	for _, o := range []client.Object{
		&executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "std"},
			Spec: executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: "ayatori-job"}},
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "std", Annotations: map[string]string{executionv1alpha1.AnnotationIsDefaultJobClass: "true"}},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std"}}},
	} {
		if err := e.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// namespace creates a fresh namespace with the class's ServiceAccount.
func (e *jobEnv) namespace(t *testing.T, withSA bool) string {
	t.Helper()
	ns := fmt.Sprintf("jobs-%d", e.ns.Add(1))
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if withSA {
		if err := e.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ayatori-job"}}); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

func newJob(ns, name, image string) *executionv1alpha1.Job {
	return &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: image, Command: []string{"/bin/task"}}}}
}

func (e *jobEnv) create(t *testing.T, j *executionv1alpha1.Job) *executionv1alpha1.Job {
	t.Helper()
	if err := e.c.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	return j
}

func succeeded(j *executionv1alpha1.Job) string {
	c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionSucceeded)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

// wait polls the Job until cond holds (timeout: fails with the status).
func (e *jobEnv) wait(t *testing.T, j *executionv1alpha1.Job, what string, timeout time.Duration, cond func(*executionv1alpha1.Job) bool) *executionv1alpha1.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	cur := &executionv1alpha1.Job{}
	for {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur)
		if err == nil && cond(cur) {
			return cur
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(cur.Status)
			t.Fatalf("%s/%s: timed out waiting for %s (err %v); status %s", j.Namespace, j.Name, what, err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *jobEnv) waitSucceeded(t *testing.T, j *executionv1alpha1.Job, want string) *executionv1alpha1.Job {
	t.Helper()
	return e.wait(t, j, "Succeeded="+want, 90*time.Second, func(j *executionv1alpha1.Job) bool { return succeeded(j) == want })
}

// natives lists the batch/v1 Jobs of the Ayatori Job's UID.
func (e *jobEnv) natives(t *testing.T, j *executionv1alpha1.Job) []batchv1.Job {
	t.Helper()
	var list batchv1.JobList
	if err := e.c.List(context.Background(), &list, client.InNamespace(j.Namespace), client.MatchingLabels{execution.LabelJobUID: string(j.UID)}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (e *jobEnv) wantOneNative(t *testing.T, j *executionv1alpha1.Job) batchv1.Job {
	t.Helper()
	n := e.natives(t, j)
	if len(n) != 1 {
		t.Fatalf("%d native Jobs for %s, want exactly 1", len(n), j.Name)
	}
	return n[0]
}

// activePods counts the pods of a native Job that are not terminal.
func (e *jobEnv) activePods(t *testing.T, native *batchv1.Job) int {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.List(context.Background(), &pods, client.InNamespace(native.Namespace), client.MatchingLabels{"batch.kubernetes.io/controller-uid": string(native.UID)}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n
}

func (e *jobEnv) update(t *testing.T, j *executionv1alpha1.Job, mutate func(*executionv1alpha1.Job)) {
	t.Helper()
	for range 10 {
		cur := &executionv1alpha1.Job{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur); err != nil {
			t.Fatal(err)
		}
		mutate(cur)
		err := e.c.Update(context.Background(), cur)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("update kept conflicting")
}

func (e *jobEnv) verifyJournal(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []byte
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		cmd := exec.CommandContext(ctx, e.s.JournalBin, append(e.s.JournalReaderArgs(), "verify")...)
		out, err = cmd.CombinedOutput()
		if err == nil || cmd.ProcessState.ExitCode() != 2 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("ayatori-journal verify: %v\n%s", err, out)
	}
}

// matrix runs the state-machine matrix rows that need real servers, in
// parallel, each in its own namespace.
func (e *jobEnv) matrix(t *testing.T) {
	t.Run("M1_Succeeds", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := e.create(t, newJob(ns, "ok", "ayatori.test/succeed"))
		got := e.waitSucceeded(t, j, "True/Completed")
		if got.Status.ResolvedJobClass == nil || got.Status.ResolvedJobClass.Name != "std" || got.Status.ResolvedJobClass.ParametersRef.UID == "" {
			t.Fatalf("resolvedJobClass %+v", got.Status.ResolvedJobClass)
		}
		if got.Status.CompletionTime == nil || got.Status.Result == nil || got.Status.Result.ExitCode == nil || *got.Status.Result.ExitCode != 0 {
			t.Fatalf("result %+v completion %v", got.Status.Result, got.Status.CompletionTime)
		}
		if got.Status.Execution == nil || got.Status.Execution.Adapter != execution.AdapterKubernetes || len(got.Status.Execution.References) == 0 {
			t.Fatalf("execution %+v", got.Status.Execution)
		}
		native := e.wantOneNative(t, got)
		if native.Spec.BackoffLimit == nil || *native.Spec.BackoffLimit != 0 || native.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever ||
			native.Spec.Template.Spec.ServiceAccountName != "ayatori-job" {
			t.Fatalf("native Job spec: backoffLimit %v restartPolicy %s sa %s", native.Spec.BackoffLimit, native.Spec.Template.Spec.RestartPolicy, native.Spec.Template.Spec.ServiceAccountName)
		}
		if string(native.UID) != got.Status.Execution.References[0].ID {
			t.Fatalf("reference %v is not the native Job %s", got.Status.Execution.References, native.UID)
		}
	})

	t.Run("M2_ProcessFailedExitCode", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		code := "3"
		j := newJob(ns, "exit", "ayatori.test/exit")
		j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "AYATORI_EXIT_CODE", Value: &code}}
		got := e.waitSucceeded(t, e.create(t, j), "False/ProcessFailed")
		if got.Status.Result.ExitCode == nil || *got.Status.Result.ExitCode != 3 {
			t.Fatalf("exit code %v", got.Status.Result.ExitCode)
		}
	})

	t.Run("M5_ImagePullFailure", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		got := e.waitSucceeded(t, e.create(t, newJob(ns, "pull", "ayatori.test/pull-fail")), "False/ImagePullFailed")
		if got.Status.StartTime != nil || got.Status.CompletionTime == nil {
			t.Fatalf("start %v completion %v", got.Status.StartTime, got.Status.CompletionTime)
		}
		native := e.wantOneNative(t, got)
		if n := e.activePods(t, &native); n != 0 {
			t.Fatalf("%d pods still active after the failure", n)
		}
	})

	t.Run("M12_CancelRunning", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := e.create(t, newJob(ns, "hang", "ayatori.test/slow-stop"))
		e.wait(t, j, "Running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		e.update(t, j, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
		e.wait(t, j, "Cancelling", 30*time.Second, func(j *executionv1alpha1.Job) bool {
			return succeeded(j) == "Unknown/Cancelling" || succeeded(j) == "False/Cancelled"
		})
		got := e.waitSucceeded(t, j, "False/Cancelled")
		native := e.wantOneNative(t, got)
		if n := e.activePods(t, &native); n != 0 {
			t.Fatalf("Cancelled while %d pods still run", n)
		}
		// Cancelled → Running is refused by the API.
		// Read afresh and again on a conflict (answered before
		// validation, it would hide the rule).
		var err error
		for try := 0; try < 10; try++ {
			cur := &executionv1alpha1.Job{}
			if err = e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur); err != nil {
				t.Fatal(err)
			}
			cur.Spec.DesiredState = executionv1alpha1.JobDesiredStateRunning
			if err = e.c.Update(context.Background(), cur); !apierrors.IsConflict(err) {
				break
			}
		}
		if !apierrors.IsInvalid(err) {
			t.Fatalf("Cancelled → Running: %v, want Invalid", err)
		}
	})

	t.Run("M12_CancelWhileResolving", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := newJob(ns, "nowhere", "ayatori.test/succeed")
		j.Spec.JobClassName = "missing"
		e.create(t, j)
		e.wait(t, j, "Accepted=False", 30*time.Second, func(j *executionv1alpha1.Job) bool {
			c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionAccepted)
			return c != nil && c.Reason == executionv1alpha1.ReasonJobClassNotFound
		})
		e.update(t, j, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
		got := e.waitSucceeded(t, j, "False/Cancelled")
		if n := e.natives(t, got); len(n) != 0 {
			t.Fatal("a native Job exists for a Job cancelled before acceptance")
		}
	})

	t.Run("M14_DeadlineExceeded", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := newJob(ns, "deadline", "ayatori.test/hang")
		ads := int64(3)
		j.Spec.ActiveDeadlineSeconds = &ads
		got := e.waitSucceeded(t, e.create(t, j), "False/DeadlineExceeded")
		if got.Status.StartTime == nil || got.Status.CompletionTime.Sub(got.Status.StartTime.Time) < 3*time.Second {
			t.Fatalf("start %v completion %v: stopped before the deadline", got.Status.StartTime, got.Status.CompletionTime)
		}
		native := e.wantOneNative(t, got)
		if n := e.activePods(t, &native); n != 0 {
			t.Fatalf("DeadlineExceeded while %d pods still run", n)
		}
	})

	t.Run("M15_DeleteRunning", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := newJob(ns, "gone", "ayatori.test/slow-stop")
		j.Annotations = map[string]string{}
		e.create(t, j)
		running := e.wait(t, j, "Running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		native := e.wantOneNative(t, running)
		if err := e.c.Delete(context.Background(), running); err != nil {
			t.Fatal(err)
		}
		e.deleted(running.UID)
		// The Job stays (finalizer) until its native Job is gone.
		deadline := time.Now().Add(90 * time.Second)
		for {
			cur := &executionv1alpha1.Job{}
			err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur)
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Job not deleted: %s", succeeded(cur))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(&native), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Fatalf("native Job still there after the Job went: %v", err)
		}
	})

	t.Run("M4_SecretAndServiceAccountLater_Canary", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, false)
		j := newJob(ns, "secret", "ayatori.test/succeed")
		j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "token"}}}}
		e.create(t, j)
		e.wait(t, j, "Accepted=False/EnvReferenceNotFound", 30*time.Second, func(j *executionv1alpha1.Job) bool {
			c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionAccepted)
			return c != nil && c.Reason == executionv1alpha1.ReasonEnvReferenceNotFound
		})
		// The Secret appears without the key: still waiting.
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"}, StringData: map[string]string{"other": "x"}}
		if err := e.c.Create(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		if cur := e.wait(t, j, "still waiting", time.Second, func(*executionv1alpha1.Job) bool { return true }); meta.IsStatusConditionTrue(cur.Status.Conditions, executionv1alpha1.JobConditionAccepted) {
			t.Fatal("accepted without the Secret's key")
		}
		sec.StringData = map[string]string{"token": envCanary}
		if err := e.c.Update(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
		// Accepted now, but the class's ServiceAccount is missing: no
		// execution, never the default ServiceAccount.
		e.wait(t, j, "Scheduled=False/ServiceAccountNotFound", 60*time.Second, func(j *executionv1alpha1.Job) bool {
			c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionScheduled)
			return c != nil && c.Reason == executionv1alpha1.ReasonServiceAccountNotFound
		})
		if n := e.natives(t, j); len(n) != 0 {
			t.Fatal("native Job created without its ServiceAccount")
		}
		if err := e.c.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ayatori-job"}}); err != nil {
			t.Fatal(err)
		}
		got := e.waitSucceeded(t, j, "True/Completed")
		native := e.wantOneNative(t, got)
		env := native.Spec.Template.Spec.Containers[0].Env
		if len(env) != 1 || env[0].ValueFrom == nil || env[0].ValueFrom.SecretKeyRef == nil || env[0].Value != "" {
			t.Fatalf("the Secret must reach the pod as a reference: %+v", env)
		}
		b, _ := json.Marshal(got)
		if bytes.Contains(b, []byte(envCanary)) {
			t.Fatal("canary in the Job")
		}
		var evs eventsv1.EventList
		_ = e.c.List(context.Background(), &evs, client.InNamespace(ns))
		b, _ = json.Marshal(evs)
		if bytes.Contains(b, []byte(envCanary)) {
			t.Fatal("canary in Events")
		}
	})

	t.Run("M11_NativeDeletedOutOfBand_BackendLost", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := e.create(t, newJob(ns, "lost", "ayatori.test/hang"))
		running := e.wait(t, j, "Running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		native := e.wantOneNative(t, running)
		bg := metav1.DeletePropagationBackground
		if err := e.c.Delete(context.Background(), &native, &client.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		unknown := e.waitSucceeded(t, j, "Unknown/ResultUnknown")
		if unknown.Status.CompletionTime != nil {
			t.Fatal("completionTime on ResultUnknown")
		}
		time.Sleep(3 * time.Second)
		if cur := e.waitSucceeded(t, j, "Unknown/ResultUnknown"); len(e.natives(t, cur)) != 0 {
			t.Fatal("a second execution was created after the first was lost")
		}
		e.update(t, j, func(j *executionv1alpha1.Job) {
			if j.Annotations == nil {
				j.Annotations = map[string]string{}
			}
			j.Annotations[executionv1alpha1.AnnotationBackendLost] = string(j.UID)
		})
		e.waitSucceeded(t, j, "False/BackendLost")
	})

	t.Run("M17_TTLDeletesEachTerminalStateThroughTheFinalizer", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		code := "2"
		ok := newJob(ns, "ttl-ok", "ayatori.test/succeed")
		bad := newJob(ns, "ttl-bad", "ayatori.test/exit")
		bad.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "AYATORI_EXIT_CODE", Value: &code}}
		cancelled := newJob(ns, "ttl-cancelled", "ayatori.test/hang")
		unknown := newJob(ns, "ttl-unknown", "ayatori.test/hang")
		for _, j := range []*executionv1alpha1.Job{ok, bad, cancelled, unknown} {
			two := int32(2)
			j.Spec.TTLSecondsAfterFinished = &two
			e.create(t, j)
		}
		e.wait(t, cancelled, "Running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		e.update(t, cancelled, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
		running := e.wait(t, unknown, "Running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return j.Status.StartTime != nil })
		lost := e.wantOneNative(t, running)
		bg := metav1.DeletePropagationBackground
		if err := e.c.Delete(context.Background(), &lost, &client.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		e.deleted(ok.UID, bad.UID, cancelled.UID)
		for _, j := range []*executionv1alpha1.Job{ok, bad, cancelled} {
			e.waitGone(t, j)
			if n := e.natives(t, j); len(n) != 0 {
				t.Fatalf("native Job of %s survived its TTL deletion", j.Name)
			}
			if n := e.countNotes(t, j, execution.NoteFinished); n != 1 {
				t.Fatalf("%s: %d Finished notes, want 1", j.Name, n)
			}
			if n := e.countNotes(t, j, execution.NoteTTLExpired); n != 1 {
				t.Fatalf("%s: %d TTLExpired notes, want 1", j.Name, n)
			}
		}
		// ResultUnknown is not finished: never deleted by the TTL.
		e.waitSucceeded(t, unknown, "Unknown/ResultUnknown")
		time.Sleep(4 * time.Second)
		if got := e.waitSucceeded(t, unknown, "Unknown/ResultUnknown"); !got.DeletionTimestamp.IsZero() {
			t.Fatal("a ResultUnknown Job was deleted by its TTL")
		}
	})

	t.Run("M20_SameNameNewUID", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		first := e.create(t, newJob(ns, "again", "ayatori.test/succeed"))
		done := e.waitSucceeded(t, first, "True/Completed")
		oldNative := e.wantOneNative(t, done)
		if err := e.c.Delete(context.Background(), done); err != nil {
			t.Fatal(err)
		}
		e.deleted(done.UID)
		e.waitGone(t, done)
		second := e.create(t, newJob(ns, "again", "ayatori.test/succeed"))
		got := e.waitSucceeded(t, second, "True/Completed")
		if got.UID == done.UID {
			t.Fatal("same UID")
		}
		newNative := e.wantOneNative(t, got)
		if newNative.UID == oldNative.UID || got.Status.Execution.References[0].ID == string(oldNative.UID) {
			t.Fatal("the recreated Job adopted the old execution")
		}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(&oldNative), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the old native Job survived its Job's deletion: %v", err)
		}
	})
}

func TestJobStack(t *testing.T) {
	e := startJobEnv(t, integration.ExecutionStackOptions{})
	t.Run("matrix", func(t *testing.T) { e.matrix(t) })
	if t.Failed() {
		return
	}

	t.Run("AmbiguousDefaultClass", func(t *testing.T) {
		ctx := context.Background()
		second := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "std-too", Annotations: map[string]string{executionv1alpha1.AnnotationIsDefaultJobClass: "true"}},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std"}}}
		if err := e.c.Create(ctx, second); err != nil {
			t.Fatal(err)
		}
		ns := e.namespace(t, true)
		j := e.create(t, newJob(ns, "which", "ayatori.test/succeed"))
		e.wait(t, j, "Accepted=False/AmbiguousDefaultJobClass", 30*time.Second, func(j *executionv1alpha1.Job) bool {
			c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionAccepted)
			return c != nil && c.Reason == executionv1alpha1.ReasonAmbiguousDefaultJobClass
		})
		if len(e.natives(t, j)) != 0 {
			t.Fatal("an ambiguous default started an execution")
		}
		// Naming the class explicitly still works.
		named := newJob(ns, "named", "ayatori.test/succeed")
		named.Spec.JobClassName = "std-too"
		e.waitSucceeded(t, e.create(t, named), "True/Completed")
	})

	t.Run("ReplayEveryJob", func(t *testing.T) {
		// Every live Job agrees with its journal, and every Job deleted
		// by its TTL or by hand is explained by it.
		var list executionv1alpha1.JobList
		if err := e.c.List(context.Background(), &list); err != nil {
			t.Fatal(err)
		}
		for _, j := range list.Items {
			if j.Status.CompletionTime == nil && !meta.IsStatusConditionTrue(j.Status.Conditions, executionv1alpha1.JobConditionScheduled) {
				continue // never accepted (ambiguous default): nothing journaled yet
			}
			e.replay(t, j.UID)
		}
		for _, uid := range e.gone {
			e.replay(t, uid)
		}
	})

	t.Run("JournalVerifyAndCanary", func(t *testing.T) {
		e.verifyJournal(t)
		e.noCanary(t, envCanary)
	})
	// Last: it leaves forged records in the journal on purpose.
	t.Run("ForgedIntentsNotExecuted", func(t *testing.T) { e.forgedIntents(t) })
}

// forgedIntents: with the manager's NATS credentials (leaked), Cancel and
// Delete intents for a running Job, unsigned and signed with the manager's
// own key (stolen), are refused: one Failed/UntrustedIntent outcome each,
// the native Job keeps running, its pods stay, and the Job still succeeds
// once its author lets it.
func (e *jobEnv) forgedIntents(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(t, true)
	victim := newJob(ns, "victim", integration.ImageHang)
	victim.Spec.JobClassName = "std" // AmbiguousDefaultClass left a second default
	j := e.create(t, victim)
	running := e.wait(t, j, "running", 60*time.Second, func(j *executionv1alpha1.Job) bool {
		return j.Status.Execution != nil && j.Status.StartTime != nil
	})
	native := e.wantOneNative(t, running)
	nc, err := e.s.NATS.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	obj := journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: ns, Name: "victim", UID: string(running.UID), Generation: running.Generation}
	var forged []uint64
	for i, c := range []struct {
		op     string
		reason execution.StopReason
		signed bool
	}{
		{execution.OpCancel, execution.StopCancelled, false}, {execution.OpDelete, "", false},
		{execution.OpCancel, execution.StopCancelled, true}, {execution.OpCancel, execution.StopDeleted, true}, {execution.OpDelete, "", true},
	} {
		rec, err := journal.NewIntent(obj, c.op, "forged", 90+i, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, Reason: c.reason})
		if err != nil {
			t.Fatal(err)
		}
		rec.Time, rec.Actor = time.Now().UTC(), "attacker"
		if c.signed {
			if err := rec.Sign(e.s.JournalKeys.Key); err != nil {
				t.Fatal(err)
			}
		}
		data, _ := json.Marshal(rec)
		ack, err := js.Publish(ctx, "ayatori.journal.execution."+string(running.UID)+".intent", data)
		if err != nil {
			t.Fatal(err)
		}
		forged = append(forged, ack.Sequence)
	}
	store, err := journal.OpenExisting(ctx, nc, journal.Config{Trust: integration.JournalTrust(t)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	refused := 0
	for time.Now().Before(deadline) && refused < len(forged) {
		time.Sleep(200 * time.Millisecond)
		recs, err := store.Read(ctx, string(running.UID))
		if err != nil {
			t.Fatal(err)
		}
		refused = 0
		for _, r := range recs {
			if r.Type == journal.TypeOutcome && r.Result.Reason == journal.ReasonUntrustedIntent {
				refused++
			}
		}
	}
	if refused != len(forged) {
		t.Fatalf("%d UntrustedIntent outcomes for %d forged intents", refused, len(forged))
	}
	time.Sleep(2 * time.Second)
	cur := &batchv1.Job{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(&native), cur); err != nil || cur.UID != native.UID || cur.DeletionTimestamp != nil ||
		cur.Spec.Suspend != nil && *cur.Spec.Suspend {
		t.Fatalf("the native Job was touched: %v %+v", err, cur.Spec.Suspend)
	}
	if n := e.activePods(t, cur); n != 1 {
		t.Fatalf("%d active pods, want 1", n)
	}
	got := &executionv1alpha1.Job{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(running), got); err != nil || got.Status.CompletionTime != nil {
		t.Fatalf("the Job ended: %v %+v", err, got.Status)
	}
	// Its author cancels it: the real Cancel runs.
	e.update(t, got, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
	e.waitSucceeded(t, got, "False/Cancelled")
}

// waitGone waits until the Job is deleted.
func (e *jobEnv) waitGone(t *testing.T, j *executionv1alpha1.Job) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), &executionv1alpha1.Job{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not deleted", j.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// exists reports whether the Job (this UID) is still there.
func (e *jobEnv) exists(t *testing.T, j *executionv1alpha1.Job) bool {
	t.Helper()
	cur := &executionv1alpha1.Job{}
	err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && cur.UID == j.UID
}

// countNotes counts the journal notes op of the Job's UID.
func (e *jobEnv) countNotes(t *testing.T, j *executionv1alpha1.Job, op string) int {
	t.Helper()
	return e.countRecords(t, j, journal.TypeNote, op)
}

// countRecords counts the journal records of type typ and operation op of
// the Job's UID.
func (e *jobEnv) countRecords(t *testing.T, j *executionv1alpha1.Job, typ journal.RecordType, op string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := e.s.NATS.Connect(journal.IdentityReader)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	store, err := journal.OpenExisting(ctx, nc, journal.Config{Trust: integration.JournalTrust(t)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.Read(ctx, string(j.UID))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Type == typ && r.Operation == op {
			n++
		}
	}
	return n
}
