package kubernetes_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	kexec "git.ddupan.top/panxiao81/ayatori/executors/kubernetes"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The suite runs the executor's handlers directly (no NATS) against one
// real Workload shared by every subtest: kube-apiserver with the project's
// CRDs, kube-controller-manager (job, garbage collector, ...),
// kube-scheduler and kwok fake nodes whose pods follow
// integration/kwok/stages.yaml. Each subtest has its own namespace and
// parameters object and runs in parallel with the others.

// canary is a Secret value that must never appear in an outcome.
const canary = "CANARY-kexec-9f3a"

// testDeleteWait is the tests' Executor.DeleteWait: a deadline for the
// garbage collector on a loaded machine, not the production default.
const testDeleteWait = 30 * time.Second

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

type suite struct {
	w        *integration.Workload
	c        client.Client
	watching client.WithWatch
	exec     *kexec.Executor
	h        map[string]journal.Handler
}

// fixture is one subtest's namespace, ServiceAccount and parameters.
type fixture struct {
	*suite
	t      *testing.T
	ctx    context.Context
	ns     string
	params *executionv1alpha1.KubernetesExecutionParameters
	class  *executionv1alpha1.JobClass
}

func (s *suite) fixture(t *testing.T, ns string, saName string, createSA bool) *fixture {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	t.Cleanup(cancel)
	if err := s.w.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if createSA {
		if err := s.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: saName}}); err != nil {
			t.Fatal(err)
		}
	}
	p := &executionv1alpha1.KubernetesExecutionParameters{
		ObjectMeta: metav1.ObjectMeta{Name: "params-" + ns},
		Spec:       executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: saName},
	}
	if err := s.c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	class := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "class-" + ns},
		Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes,
			ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: kexec.ParametersKind, Name: p.Name}}}
	if err := s.c.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	return &fixture{suite: s, t: t, ctx: ctx, ns: ns, params: p, class: class}
}

// with makes f run the operations on ex (the same suite, other clients).
func (f *fixture) with(ex *kexec.Executor) {
	f.suite = &suite{w: f.w, c: f.c, watching: f.watching, exec: ex, h: ex.Handlers()}
}

// created creates a Job named name that succeeds and requires its Ensure
// to create the native Job.
func (f *fixture) created(name string) *executionv1alpha1.Job {
	f.t.Helper()
	j := f.job(name, integration.ImageSucceed, nil)
	if o := f.obs(execution.OpEnsure, j, f.ensurePayload(j)); !o.Created {
		f.t.Fatalf("Ensure of new Job %s: %+v", name, o)
	}
	return j
}

// job creates an Ayatori Job running image with env.
func (f *fixture) job(name, image string, env []executionv1alpha1.EnvVar, mutate ...func(*executionv1alpha1.Job)) *executionv1alpha1.Job {
	f.t.Helper()
	j := &executionv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec:       executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: image, Args: []string{"run"}, Env: env}},
	}
	for _, m := range mutate {
		m(j)
	}
	if err := f.c.Create(f.ctx, j); err != nil {
		f.t.Fatal(err)
	}
	return j
}

func ref(j *executionv1alpha1.Job) journal.ObjectRef {
	return journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: j.Namespace, Name: j.Name,
		UID: string(j.UID), Generation: j.Generation}
}

func (f *fixture) ensurePayload(j *executionv1alpha1.Job) execution.EnsureIntent {
	f.t.Helper()
	d, err := execution.TaskDigest(j.Spec.Task)
	if err != nil {
		f.t.Fatal(err)
	}
	return execution.EnsureIntent{Adapter: execution.AdapterKubernetes, JobClass: f.class.Name, JobClassUID: string(f.class.UID),
		ParametersKind: kexec.ParametersKind, ParametersName: f.params.Name, ParametersUID: string(f.params.UID),
		Image: j.Spec.Task.Image, TaskDigest: d,
		Resources: execution.Resources{RequestsCPU: "100m", RequestsMemory: "64Mi", LimitsCPU: "1", LimitsMemory: "128Mi"}}
}

// call runs operation op of job j with payload (attempt selects the intent
// record) and scans the outcome for the canary.
func (f *fixture) call(op string, j *executionv1alpha1.Job, attempt int, payload any) (journal.Outcome, error) {
	f.t.Helper()
	rec, err := journal.NewIntent(ref(j), op, "", attempt, payload)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := f.h[op](f.ctx, rec)
	b, merr := json.Marshal(out)
	if merr != nil {
		f.t.Fatal(merr)
	}
	if strings.Contains(string(b), canary) || (err != nil && strings.Contains(err.Error(), canary)) {
		f.t.Fatalf("%s outcome carries the canary: %s", op, b)
	}
	return out, err
}

// obs runs op and requires a Succeeded outcome; it returns its Observation.
func (f *fixture) obs(op string, j *executionv1alpha1.Job, payload any) execution.Observation {
	f.t.Helper()
	out, err := f.call(op, j, 1, payload)
	if err != nil {
		f.t.Fatalf("%s: %v", op, err)
	}
	o, ok := out.Payload.(execution.Observation)
	if out.Result.Class != journal.Succeeded || !ok {
		f.t.Fatalf("%s: outcome %+v, want Succeeded with an Observation", op, out)
	}
	if o.Adapter != execution.AdapterKubernetes {
		f.t.Fatalf("%s: adapter %q", op, o.Adapter)
	}
	return o
}

// failed runs op and requires a Failed outcome with reason; it returns
// its Observation.
func (f *fixture) failed(op string, j *executionv1alpha1.Job, payload any, reason string) execution.Observation {
	f.t.Helper()
	out, err := f.call(op, j, 1, payload)
	if err != nil {
		f.t.Fatalf("%s: %v", op, err)
	}
	o, _ := out.Payload.(execution.Observation)
	if out.Result.Class != journal.Failed || out.Result.Reason != reason {
		f.t.Fatalf("%s: outcome %+v, want Failed/%s", op, out.Result, reason)
	}
	return o
}

var (
	exe = execution.ExecutionIntent{Adapter: execution.AdapterKubernetes}
	cxl = execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, Reason: execution.StopCancelled}
)

// until polls Observe until cond holds, returning every observation seen.
func (f *fixture) until(j *executionv1alpha1.Job, what string, cond func(execution.Observation) bool) []execution.Observation {
	f.t.Helper()
	var seen []execution.Observation
	for {
		o := f.obs(execution.OpObserve, j, exe)
		seen = append(seen, o)
		if cond(o) {
			return seen
		}
		select {
		case <-f.ctx.Done():
			f.t.Fatalf("waiting for %s: last observation %+v", what, o)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func state(s execution.State) func(execution.Observation) bool {
	return func(o execution.Observation) bool { return o.State == s }
}

// natives lists the batch/v1 Jobs of j (by the UID label).
func (f *fixture) natives(j *executionv1alpha1.Job) []batchv1.Job {
	f.t.Helper()
	var list batchv1.JobList
	if err := f.c.List(f.ctx, &list, client.InNamespace(f.ns), client.MatchingLabels{execution.LabelJobUID: string(j.UID)}); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) pods(j *executionv1alpha1.Job) []corev1.Pod {
	f.t.Helper()
	var list corev1.PodList
	if err := f.c.List(f.ctx, &list, client.InNamespace(f.ns), client.MatchingLabels{execution.LabelJobUID: string(j.UID)}); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func nativeName(t *testing.T, j *executionv1alpha1.Job) string {
	t.Helper()
	n, err := execution.NativeJobName(string(j.UID))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sameRefs: every observation names the one native Job.
func sameRefs(t *testing.T, want []execution.Reference, seen ...execution.Observation) {
	t.Helper()
	for _, o := range seen {
		if o.State == execution.StateNotFound {
			continue
		}
		if len(o.References) != 1 || len(want) != 1 || o.References[0] != want[0] {
			t.Fatalf("references %+v, want %+v", o.References, want)
		}
	}
}

func TestExecutor(t *testing.T) {
	start := time.Now()
	w := integration.StartWorkload(t, integration.WorkloadOptions{})
	t.Logf("workload up in %s", time.Since(start).Round(100*time.Millisecond))
	// The manager's workload client can watch (Delete waits on a watch).
	watching, err := client.NewWithWatch(w.CP.Config, client.Options{Scheme: w.CP.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// DeleteWait: the garbage collector's foreground cascade runs on the
	// controller manager's 20 QPS beside every parallel subtest; the
	// default 2 s is the production figure, not a test's deadline.
	e := &kexec.Executor{Management: w.CP.Client, Workload: watching, Actor: "kexec-test", DeleteWait: testDeleteWait,
		Proof: journal.ObjectProof{Signer: integration.JournalSigner(t), Trust: integration.JournalTrust(t)}}
	d, err := journal.NewDispatcher(execution.Domain)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Operations(), ","); got != "Cancel,Delete,Ensure,Observe" {
		t.Fatalf("registered operations %s", got)
	}
	s := &suite{w: w, c: w.CP.Client, watching: watching, exec: e, h: e.Handlers()}

	t.Run("Succeeds", func(t *testing.T) {
		f := s.fixture(t, "succeeds", "runner", true)
		j := f.job("ok", integration.ImageSucceed, nil)
		created := f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		if !created.Created || created.State != execution.StatePending || created.Terminal {
			t.Fatalf("Ensure: %+v", created)
		}
		seen := f.until(j, "Succeeded", func(o execution.Observation) bool { return o.Terminal })
		last := seen[len(seen)-1]
		if last.State != execution.StateSucceeded || last.Reason != executionv1alpha1.ReasonCompleted ||
			last.ExitCode == nil || *last.ExitCode != 0 || last.FinishTime == nil {
			t.Fatalf("final observation %+v", last)
		}
		sameRefs(t, created.References, seen...)
		n := f.natives(j)
		if len(n) != 1 || created.References[0].ID != string(n[0].UID) {
			t.Fatalf("native Jobs %d, reference %+v", len(n), created.References)
		}
		// The native Job's shape.
		nj := n[0]
		ps := nj.Spec.Template.Spec
		if *nj.Spec.BackoffLimit != 0 || *nj.Spec.Completions != 1 || *nj.Spec.Parallelism != 1 ||
			ps.RestartPolicy != corev1.RestartPolicyNever || ps.ServiceAccountName != "runner" ||
			len(ps.Containers) != 1 || ps.Containers[0].Name != kexec.ContainerName ||
			ps.Containers[0].Resources.Limits.Memory().String() != "128Mi" || ps.Containers[0].Resources.Requests.Cpu().String() != "100m" ||
			nj.Spec.Template.Labels[execution.LabelJobUID] != string(j.UID) ||
			nj.Annotations[execution.AnnotationJobName] != j.Name || nj.Annotations[execution.AnnotationJobNamespace] != j.Namespace {
			t.Fatalf("native Job shape: %+v", nj.Spec)
		}
	})

	t.Run("ProcessFails", func(t *testing.T) {
		f := s.fixture(t, "exit3", "runner", true)
		code := "3"
		j := f.job("bad", integration.ImageExit, []executionv1alpha1.EnvVar{{Name: integration.EnvExitCode, Value: &code}})
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		seen := f.until(j, "terminal", func(o execution.Observation) bool { return o.Terminal })
		last := seen[len(seen)-1]
		if last.State != execution.StateFailed || last.Reason != executionv1alpha1.ReasonProcessFailed || last.ExitCode == nil || *last.ExitCode != 3 {
			t.Fatalf("final observation %+v", last)
		}
	})

	t.Run("ImagePullFailsThenCancelled", func(t *testing.T) {
		f := s.fixture(t, "pull-fail", "runner", true)
		j := f.job("nopull", integration.ImagePullFail, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		o := f.until(j, "Failing", func(o execution.Observation) bool { return o.Failing })
		last := o[len(o)-1]
		if last.State != execution.StatePending || last.Reason != executionv1alpha1.ReasonImagePullFailed || last.Terminal {
			t.Fatalf("observation %+v", last)
		}
		f.obs(execution.OpCancel, j, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, Reason: execution.StopFailing})
		seen := f.until(j, "Cancelled", func(o execution.Observation) bool { return o.Terminal })
		if last := seen[len(seen)-1]; last.State != execution.StateCancelled {
			t.Fatalf("final observation %+v", last)
		}
	})

	t.Run("HangRunningThenCancelled", func(t *testing.T) {
		f := s.fixture(t, "hang", "runner", true)
		j := f.job("hang", integration.ImageHang, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		seen := f.until(j, "Running", state(execution.StateRunning))
		if seen[len(seen)-1].StartTime == nil {
			t.Fatalf("Running without a start time: %+v", seen[len(seen)-1])
		}
		c := f.obs(execution.OpCancel, j, cxl)
		if c.State != execution.StateStopping {
			t.Fatalf("Cancel: %+v, want Stopping", c)
		}
		seen = f.until(j, "Cancelled", func(o execution.Observation) bool { return o.Terminal })
		if last := seen[len(seen)-1]; last.State != execution.StateCancelled || last.Reason != executionv1alpha1.ReasonCancelled {
			t.Fatalf("final observation %+v", last)
		}
		// Cancel is repeatable.
		if again := f.obs(execution.OpCancel, j, cxl); again.State != execution.StateCancelled {
			t.Fatalf("second Cancel: %+v", again)
		}
	})

	t.Run("SlowStopIsStoppingFirst", func(t *testing.T) {
		f := s.fixture(t, "slow-stop", "runner", true)
		j := f.job("slow", integration.ImageSlowStop, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		f.until(j, "Running", state(execution.StateRunning))
		f.obs(execution.OpCancel, j, cxl)
		seen := f.until(j, "Cancelled", func(o execution.Observation) bool { return o.Terminal })
		stopping := 0
		for _, o := range seen {
			if o.State == execution.StateStopping {
				stopping++
			}
		}
		if stopping < 3 || seen[len(seen)-1].State != execution.StateCancelled {
			t.Fatalf("want Stopping for a while (the pod takes 3s), then Cancelled; saw %d Stopping, last %+v", stopping, seen[len(seen)-1])
		}
	})

	t.Run("EnsureTwice", func(t *testing.T) {
		f := s.fixture(t, "twice", "runner", true)
		j := f.job("twice", integration.ImageHang, nil)
		p := f.ensurePayload(j)
		first := f.obs(execution.OpEnsure, j, p)
		second := f.obs(execution.OpEnsure, j, p)
		if !first.Created || second.Created {
			t.Fatalf("Created %v then %v", first.Created, second.Created)
		}
		sameRefs(t, first.References, second)
		if n := f.natives(j); len(n) != 1 {
			t.Fatalf("%d native Jobs", len(n))
		}
	})

	t.Run("EnsureAfterCrash", func(t *testing.T) {
		f := s.fixture(t, "crash", "runner", true)
		j := f.job("crash", integration.ImageHang, nil)
		// The executor created the native Job, then crashed before the
		// outcome: it exists with the UID label and its creation proof.
		nj := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: nativeName(t, j), Labels: map[string]string{execution.LabelJobUID: string(j.UID)},
				Annotations: map[string]string{kexec.AnnotationCreationProof: e.CreationProof(f.ns, nativeName(t, j), string(j.UID))}},
			Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{execution.LabelJobUID: string(j.UID)}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: kexec.ContainerName, Image: integration.ImageHang}}}}},
		}
		if err := f.c.Create(f.ctx, nj); err != nil {
			t.Fatal(err)
		}
		o := f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		if o.Created || len(o.References) != 1 || o.References[0].ID != string(nj.UID) {
			t.Fatalf("Ensure after crash: %+v", o)
		}
		if n := f.natives(j); len(n) != 1 {
			t.Fatalf("%d native Jobs", len(n))
		}
	})

	t.Run("ForgedNativeJobNeverAdopted", func(t *testing.T) {
		f := s.fixture(t, "forged", "runner", true)
		j := f.job("forged", integration.ImageHang, nil)
		// Someone who may create Jobs in the namespace makes one under the
		// native name with the UID label before the Ensure runs.
		forged := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: nativeName(t, j), Labels: map[string]string{execution.LabelJobUID: string(j.UID)},
				Annotations: map[string]string{kexec.AnnotationCreationProof: "ed25519:0000000000000000:forged"}},
			Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{execution.LabelJobUID: string(j.UID)}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: kexec.ContainerName, Image: integration.ImageSucceed}}}}},
		}
		if err := f.c.Create(f.ctx, forged); err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{execution.OpEnsure, execution.OpObserve, execution.OpCancel, execution.OpDelete} {
			payload := any(execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, Reason: execution.StopCancelled})
			if op == execution.OpEnsure {
				payload = f.ensurePayload(j)
			}
			if o := f.failed(op, j, payload, kexec.ReasonConflict); o.State != execution.StateNotFound || !strings.Contains(o.Message, "did not create") {
				t.Fatalf("%s: %+v", op, o)
			}
		}
		// A recorded execution with another UID is not it either.
		f.failed(execution.OpObserve, j, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes,
			References: []execution.Reference{{Type: kexec.ReferenceTypeJob, ID: "0b1c2d3e-0000-0000-0000-000000000000"}}}, kexec.ReasonConflict)
		cur := &batchv1.Job{}
		if err := f.c.Get(f.ctx, client.ObjectKeyFromObject(forged), cur); err != nil || cur.UID != forged.UID || cur.DeletionTimestamp != nil ||
			cur.Spec.Suspend != nil && *cur.Spec.Suspend {
			t.Fatalf("the forged Job was touched: %v %+v", err, cur.Spec.Suspend)
		}
	})

	t.Run("ForgedPodIgnored", func(t *testing.T) {
		f := s.fixture(t, "forgedpod", "runner", true)
		j := f.job("forgedpod", integration.ImageHang, nil)
		created := f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		nj := f.natives(j)[0]
		refs := execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, References: created.References}
		f.until(j, "running", state(execution.StateRunning))
		// A pod with the native Job's labels that it did not create (owned
		// by a ConfigMap, an image Ayatori did not ask for).
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "not-a-job"}}
		if err := f.c.Create(f.ctx, owner); err != nil {
			t.Fatal(err)
		}
		yes := true
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lookalike",
			Labels:          map[string]string{"batch.kubernetes.io/controller-uid": string(nj.UID), execution.LabelJobUID: string(j.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: kexec.ContainerName, Image: integration.ImagePullFail}}}}
		if err := f.c.Create(f.ctx, pod); err != nil {
			t.Fatal(err)
		}
		o := f.obs(execution.OpObserve, j, refs)
		if o.State != execution.StateRunning || o.Failing || !strings.Contains(o.Message, "1 pod(s)") {
			t.Fatalf("with a lookalike pod: %+v", o)
		}
		// A Cancel ends once Ayatori's own pod is gone, whatever the
		// lookalike does.
		f.obs(execution.OpCancel, j, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, References: created.References, Reason: execution.StopCancelled})
		f.until(j, "cancelled", state(execution.StateCancelled))
	})

	t.Run("ServiceAccountMissing", func(t *testing.T) {
		f := s.fixture(t, "no-sa", "absent", false)
		j := f.job("nosa", integration.ImageSucceed, nil)
		o := f.failed(execution.OpEnsure, j, f.ensurePayload(j), executionv1alpha1.ReasonServiceAccountNotFound)
		if o.State != execution.StateNotFound {
			t.Fatalf("observation %+v", o)
		}
		if n := f.natives(j); len(n) != 0 {
			t.Fatalf("%d native Jobs after a refusal", len(n))
		}
		if err := f.c.Create(f.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "absent"}}); err != nil {
			t.Fatal(err)
		}
		first := f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		second := f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		if !first.Created || second.Created {
			t.Fatalf("Created %v then %v", first.Created, second.Created)
		}
		if n := f.natives(j); len(n) != 1 || n[0].Spec.Template.Spec.ServiceAccountName != "absent" {
			t.Fatalf("native Jobs %+v", n)
		}
	})

	t.Run("ParametersRecreated", func(t *testing.T) {
		f := s.fixture(t, "params", "runner", true)
		j := f.job("params", integration.ImageSucceed, nil)
		p := f.ensurePayload(j)
		if err := f.c.Delete(f.ctx, f.params); err != nil {
			t.Fatal(err)
		}
		again := &executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: f.params.Name}, Spec: f.params.Spec}
		if err := f.c.Create(f.ctx, again); err != nil {
			t.Fatal(err)
		}
		o := f.failed(execution.OpEnsure, j, p, executionv1alpha1.ReasonParametersChanged)
		if o.State != execution.StateNotFound {
			t.Fatalf("observation %+v", o)
		}
		if n := f.natives(j); len(n) != 0 {
			t.Fatalf("%d native Jobs after a refusal", len(n))
		}
	})

	t.Run("AdmissionReadsCacheFirst", func(t *testing.T) {
		f := s.fixture(t, "cached", "runner", true)
		// A cache that admits: no fresh read of the Job or its class (the
		// parameters are always read fresh).
		fresh := &countingReader{Reader: s.c}
		cached := &kexec.Executor{Management: fresh, Cached: s.c, Workload: s.c, Actor: "kexec-test", Proof: s.exec.Proof}
		f.with(cached)
		f.created("admitted")
		if n := fresh.n.Load(); n != 1 {
			t.Fatalf("%d fresh reads after the cache admitted, want 1 (the parameters)", n)
		}
		// A cache that has not seen the Job (or would refuse it): the
		// admission is decided again on fresh reads.
		fresh = &countingReader{Reader: s.c}
		behind := &kexec.Executor{Management: fresh, Cached: notFoundReader{}, Workload: s.c, Actor: "kexec-test", Proof: s.exec.Proof}
		f.with(behind)
		f.created("behind")
		if n := fresh.n.Load(); n != 3 {
			t.Fatalf("%d fresh reads after the cache refused, want 3 (Job, class, parameters)", n)
		}
		// Parameters edited in place (same UID) while the cache lags: the
		// pod gets the fresh ones.
		if err := f.c.Create(f.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "looser"}}); err != nil {
			t.Fatal(err)
		}
		stale := f.params.DeepCopy()
		stale.Spec.ServiceAccountName = "looser"
		lagging := &kexec.Executor{Management: s.c, Cached: staleParams{Reader: s.c, params: stale}, Workload: s.c, Actor: "kexec-test", Proof: s.exec.Proof}
		f.with(lagging)
		j := f.job("fresh-params", integration.ImageSucceed, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		if n := f.natives(j); len(n) != 1 || n[0].Spec.Template.Spec.ServiceAccountName != f.params.Spec.ServiceAccountName {
			t.Fatalf("native Jobs %d, built from stale parameters", len(n))
		}
		// A refusal stands only on fresh reads: a cancelled Job is refused
		// whatever the cache says.
		j = f.job("cxl", integration.ImageSucceed, nil, func(j *executionv1alpha1.Job) {
			j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		})
		f.failed(execution.OpEnsure, j, f.ensurePayload(j), executionv1alpha1.ReasonCancelled)
		if n := f.natives(j); len(n) != 0 {
			t.Fatalf("%d native Jobs of a cancelled Job", len(n))
		}
	})

	t.Run("EnsureCreatesFirst", func(t *testing.T) {
		f := s.fixture(t, "create-first", "runner", true)
		// A new execution: the create comes first, with no read of the
		// native Job before it (issue 28: one GET per Job fewer).
		workload := &countingClient{Client: s.c}
		ex := &kexec.Executor{Management: s.c, Workload: workload, Actor: "kexec-test", Proof: s.exec.Proof}
		f.with(ex)
		j := f.created("first")
		if n := workload.jobReads.Load(); n != 0 {
			t.Fatalf("%d reads of the native Job before creating it, want 0", n)
		}
		// A redelivery finds it through the create's AlreadyExists.
		o := f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		if o.Created || o.State == execution.StateNotFound {
			t.Fatalf("Ensure redelivered: %+v", o)
		}
		// An execution that exists is reported even when the admission
		// would now refuse to create one (a cancelled Job): the Ensure
		// created it, and "nothing was created" would be false.
		if err := f.c.Get(f.ctx, client.ObjectKeyFromObject(j), j); err != nil {
			t.Fatal(err)
		}
		j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		if err := f.c.Update(f.ctx, j); err != nil {
			t.Fatal(err)
		}
		if o := f.obs(execution.OpEnsure, j, f.ensurePayload(j)); o.Created || o.State == execution.StateNotFound {
			t.Fatalf("Ensure of a cancelled Job whose execution exists: %+v", o)
		}
		if n := f.natives(j); len(n) != 1 {
			t.Fatalf("%d native Jobs, want 1", len(n))
		}
		// A refused admission with the execution missing still creates
		// nothing.
		cx := f.job("refused", integration.ImageSucceed, nil, func(j *executionv1alpha1.Job) {
			j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		})
		f.failed(execution.OpEnsure, cx, f.ensurePayload(cx), executionv1alpha1.ReasonCancelled)
		if n := f.natives(cx); len(n) != 0 {
			t.Fatalf("%d native Jobs of a refused Ensure", len(n))
		}
	})

	t.Run("DesiredStateCancelled", func(t *testing.T) {
		f := s.fixture(t, "cancelled", "runner", true)
		j := f.job("cxl", integration.ImageSucceed, nil, func(j *executionv1alpha1.Job) {
			j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		})
		o := f.failed(execution.OpEnsure, j, f.ensurePayload(j), executionv1alpha1.ReasonCancelled)
		if o.State != execution.StateNotFound {
			t.Fatalf("observation %+v", o)
		}
		if n := f.natives(j); len(n) != 0 {
			t.Fatalf("%d native Jobs", len(n))
		}
		// Cancel of an execution that was never created.
		if c := f.obs(execution.OpCancel, j, cxl); c.State != execution.StateNotFound {
			t.Fatalf("Cancel: %+v", c)
		}
	})

	t.Run("ForeignObject", func(t *testing.T) {
		f := s.fixture(t, "foreign", "runner", true)
		j := f.job("foreign", integration.ImageHang, nil)
		other := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: nativeName(t, j)},
			Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: integration.ImageHang}}}}},
		}
		if err := f.c.Create(f.ctx, other); err != nil {
			t.Fatal(err)
		}
		for _, op := range []struct {
			name    string
			payload any
		}{{execution.OpEnsure, f.ensurePayload(j)}, {execution.OpObserve, exe}, {execution.OpCancel, cxl}, {execution.OpDelete, exe}} {
			if o := f.failed(op.name, j, op.payload, kexec.ReasonConflict); o.State != execution.StateNotFound {
				t.Fatalf("%s: observation %+v", op.name, o)
			}
		}
		got := &batchv1.Job{}
		if err := f.c.Get(f.ctx, client.ObjectKeyFromObject(other), got); err != nil {
			t.Fatal(err)
		}
		if got.UID != other.UID || got.DeletionTimestamp != nil || (got.Spec.Suspend != nil && *got.Spec.Suspend) || got.Labels[execution.LabelJobUID] != "" {
			t.Fatalf("the foreign Job was touched: %+v", got.ObjectMeta)
		}
	})

	t.Run("DeleteForeground", func(t *testing.T) {
		f := s.fixture(t, "delete", "runner", true)
		j := f.job("del", integration.ImageSlowStop, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		f.until(j, "Running", state(execution.StateRunning))
		first := f.obs(execution.OpDelete, j, exe)
		if first.State != execution.StateStopping || first.Message != "deletion in progress" {
			t.Fatalf("Delete with a slow pod: %+v", first)
		}
		for {
			o := f.obs(execution.OpDelete, j, exe)
			if o.State == execution.StateNotFound {
				break
			}
			if o.State != execution.StateStopping {
				t.Fatalf("Delete: %+v", o)
			}
			select {
			case <-f.ctx.Done():
				t.Fatal("the native Job was not deleted")
			case <-time.After(100 * time.Millisecond):
			}
		}
		if p := f.pods(j); len(p) != 0 {
			t.Fatalf("%d pods left after the foreground delete", len(p))
		}
		if o := f.obs(execution.OpObserve, j, exe); o.State != execution.StateNotFound {
			t.Fatalf("Observe after Delete: %+v", o)
		}
	})

	// A finished Job's pods are already stopped: one Delete waits for the
	// garbage collector and reports NotFound (no second intent).
	t.Run("DeleteFinishedOnce", func(t *testing.T) {
		f := s.fixture(t, "delete-once", "runner", true)
		j := f.job("done", integration.ImageSucceed, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		f.until(j, "Succeeded", func(o execution.Observation) bool { return o.Terminal })
		if o := f.obs(execution.OpDelete, j, exe); o.State != execution.StateNotFound {
			t.Fatalf("one Delete of a finished Job: %+v, want NotFound", o)
		}
		if n := f.natives(j); len(n) != 0 {
			t.Fatalf("%d native Jobs left", len(n))
		}
	})

	// The wait for the garbage collector is one watch of the native Job's
	// name, not reads every 100 ms, doubling (issue 28); a client that
	// can not watch still reads.
	t.Run("DeleteFinishedOnOneWatch", func(t *testing.T) {
		f := s.fixture(t, "delete-watch", "runner", true)
		done := func(name string) *executionv1alpha1.Job {
			j := f.job(name, integration.ImageSucceed, nil)
			f.obs(execution.OpEnsure, j, f.ensurePayload(j))
			f.until(j, "Succeeded", func(o execution.Observation) bool { return o.Terminal })
			return j
		}
		j := done("watched")
		watching := &countingWatchClient{WithWatch: s.watching}
		ex := &kexec.Executor{Management: s.c, Workload: watching, Actor: "kexec-test", DeleteWait: testDeleteWait, Proof: s.exec.Proof}
		f.with(ex)
		if o := f.obs(execution.OpDelete, j, exe); o.State != execution.StateNotFound {
			t.Fatalf("Delete of a finished Job on a watch: %+v, want NotFound", o)
		}
		if r, w := watching.jobReads.Load(), watching.watches.Load(); r != 1 || w != 1 {
			t.Fatalf("Delete read the native Job %d times and watched it %d times, want 1 and 1", r, w)
		}
		if n := f.natives(j); len(n) != 0 {
			t.Fatalf("%d native Jobs left", len(n))
		}
		j = done("polled")
		polling := &countingClient{Client: s.c}
		ex = &kexec.Executor{Management: s.c, Workload: polling, Actor: "kexec-test", DeleteWait: testDeleteWait, Proof: s.exec.Proof}
		f.with(ex)
		if o := f.obs(execution.OpDelete, j, exe); o.State != execution.StateNotFound {
			t.Fatalf("Delete of a finished Job without a watch: %+v, want NotFound", o)
		}
		if r := polling.jobReads.Load(); r < 2 {
			t.Fatalf("Delete without a watch read the native Job %d times, want the read before and at least one after", r)
		}
	})

	t.Run("DeletedOutOfBand", func(t *testing.T) {
		f := s.fixture(t, "oob", "runner", true)
		j := f.job("oob", integration.ImageHang, nil)
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		nj := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: nativeName(t, j)}}
		if err := f.c.Delete(f.ctx, nj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
		f.until(j, "NotFound", state(execution.StateNotFound))
	})

	t.Run("SecretReferenceNeverRead", func(t *testing.T) {
		f := s.fixture(t, "secret-ref", "runner", true)
		if err := f.c.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "creds"},
			StringData: map[string]string{"token": canary}}); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cfg"},
			Data: map[string]string{"mode": canary}}); err != nil {
			t.Fatal(err)
		}
		lit := "plain"
		j := f.job("secret", integration.ImageHang, []executionv1alpha1.EnvVar{
			{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
			{Name: "MODE", ValueFrom: &executionv1alpha1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "mode"}}},
			{Name: "LITERAL", Value: &lit},
		})
		f.obs(execution.OpEnsure, j, f.ensurePayload(j))
		f.until(j, "Running", state(execution.StateRunning))
		pods := f.pods(j)
		if len(pods) != 1 {
			t.Fatalf("%d pods", len(pods))
		}
		env := pods[0].Spec.Containers[0].Env
		if len(env) != 3 || env[0].ValueFrom == nil || env[0].ValueFrom.SecretKeyRef == nil || env[0].ValueFrom.SecretKeyRef.Name != "creds" ||
			env[0].Value != "" || env[1].ValueFrom == nil || env[1].ValueFrom.ConfigMapKeyRef == nil || env[2].Value != "plain" {
			t.Fatalf("pod env %+v", env)
		}
		if b, _ := json.Marshal(pods[0].Spec); strings.Contains(string(b), canary) {
			t.Fatal("the Secret value reached the pod spec")
		}
		f.obs(execution.OpCancel, j, cxl)
		f.until(j, "Cancelled", func(o execution.Observation) bool { return o.Terminal })
		f.until(j, "NotFound after Delete", func(execution.Observation) bool {
			return f.obs(execution.OpDelete, j, exe).State == execution.StateNotFound
		})
	})

	t.Run("NoNamespace", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// An intent for a Job of a namespace the workload cluster lacks:
		// Ensure's refusals come first (the Job does not exist).
		rec, err := journal.NewIntent(journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: "nowhere", Name: "x",
			UID: "0b8f3c2e-1111-4222-8333-444455556666", Generation: 1}, execution.OpEnsure, "", 1, execution.EnsureIntent{Adapter: execution.AdapterKubernetes, TaskDigest: "sha256:00"})
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.h[execution.OpEnsure](ctx, rec)
		if err != nil || out.Result.Class != journal.Failed || out.Result.Reason != executionv1alpha1.ReasonCancelled {
			t.Fatalf("Ensure: %+v %v", out, err)
		}
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: "nowhere", Name: "ayatori-0b8f3c2e-1111-4222-8333-444455556666"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Fatalf("native Job: %v", err)
		}
	})
}

// countingReader counts the reads it passes on.
type countingReader struct {
	client.Reader
	n atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.n.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// countingClient counts the reads of batch/v1 Jobs it passes on.
type countingClient struct {
	client.Client
	jobReads atomic.Int64
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*batchv1.Job); ok {
		c.jobReads.Add(1)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// countingWatchClient counts the reads and watches of batch/v1 Jobs it
// passes on.
type countingWatchClient struct {
	client.WithWatch
	jobReads, watches atomic.Int64
}

func (c *countingWatchClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*batchv1.Job); ok {
		c.jobReads.Add(1)
	}
	return c.WithWatch.Get(ctx, key, obj, opts...)
}

func (c *countingWatchClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	if _, ok := list.(*batchv1.JobList); ok {
		c.watches.Add(1)
	}
	return c.WithWatch.Watch(ctx, list, opts...)
}

// notFoundReader is a cache that has seen nothing.
type notFoundReader struct{ client.Reader }

func (notFoundReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: "objects"}, key.Name)
}

// staleParams is a cache whose KubernetesExecutionParameters lag behind.
type staleParams struct {
	client.Reader
	params *executionv1alpha1.KubernetesExecutionParameters
}

func (r staleParams) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if p, ok := obj.(*executionv1alpha1.KubernetesExecutionParameters); ok {
		r.params.DeepCopyInto(p)
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}
