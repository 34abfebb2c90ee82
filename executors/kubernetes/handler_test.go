package kubernetes

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The handlers' error paths, on a fake client whose create fails as the
// API server would (the real-server suite covers the successful paths).

const testUID = "0b8f3c2e-1111-4222-8333-444455556666"

func fixtures() (*executionv1alpha1.Job, *executionv1alpha1.KubernetesExecutionParameters, *corev1.ServiceAccount) {
	v := "v"
	aj := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", UID: testUID},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "img", Env: []executionv1alpha1.EnvVar{{Name: "A", Value: &v}}}}}
	p := &executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "params", UID: "params-uid"},
		Spec: executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: "runner"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "runner"}}
	return aj, p, sa
}

func ensureRecord(t *testing.T, aj *executionv1alpha1.Job, mut ...func(*execution.EnsureIntent)) journal.Record {
	t.Helper()
	d, err := execution.TaskDigest(aj.Spec.Task)
	if err != nil {
		t.Fatal(err)
	}
	in := execution.EnsureIntent{Adapter: execution.AdapterKubernetes, JobClass: "class", JobClassUID: "class-uid",
		ParametersKind: ParametersKind, ParametersName: "params", ParametersUID: "params-uid", TaskDigest: d}
	for _, m := range mut {
		m(&in)
	}
	rec, err := journal.NewIntent(journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: aj.Namespace,
		Name: aj.Name, UID: string(aj.UID), Generation: 1}, execution.OpEnsure, "", 1, in)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func fakeExecutor(t *testing.T, createErr error, objs ...client.Object) (*Executor, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := executionv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	// The class every fixture's Job was accepted with.
	objs = append(objs, &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "class", UID: "class-uid"},
		Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes,
			ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: ParametersKind, Name: "params"}}})
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if createErr != nil {
				return createErr
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	return &Executor{Management: c, Workload: c, Proof: testProof()}, c
}

// testProof is an ObjectProof with a fresh key.
func testProof() journal.ObjectProof {
	k, _ := journal.NewSigningKey()
	return journal.ObjectProof{Signer: k, Trust: journal.NewTrustedKeys(k.Public())}
}

func TestEnsureErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for _, tc := range []struct {
		name      string
		createErr error
		mutate    func(*execution.EnsureIntent)
		noParams  bool
		transient bool
		reason    string
	}{
		{name: "Forbidden", createErr: apierrors.NewForbidden(gr, "x", errors.New("CANARY")), reason: ReasonForbidden},
		{name: "Invalid", createErr: apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "x", nil), reason: ReasonInvalidSpec},
		{name: "namespace missing", createErr: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), reason: ReasonNotFound},
		{name: "timeout is ambiguous", createErr: apierrors.NewTimeoutError("x", 1), transient: true},
		{name: "connection reset is ambiguous", createErr: errors.New("connection reset by peer"), transient: true},
		{name: "bad resources", mutate: func(in *execution.EnsureIntent) { in.Resources.LimitsMemory = "lots" }, reason: executionv1alpha1.ReasonInvalidResources},
		{name: "task changed", mutate: func(in *execution.EnsureIntent) { in.TaskDigest = "sha256:00" }, reason: ReasonTaskChanged},
		{name: "parameters kind", mutate: func(in *execution.EnsureIntent) { in.ParametersKind = "OpenSandboxExecutionParameters" },
			reason: executionv1alpha1.ReasonInvalidParametersReference},
		{name: "parameters UID", mutate: func(in *execution.EnsureIntent) { in.ParametersUID = "old" }, reason: executionv1alpha1.ReasonParametersChanged},
		{name: "class UID", mutate: func(in *execution.EnsureIntent) { in.JobClassUID = "old" }, reason: executionv1alpha1.ReasonJobClassNotFound},
		{name: "class gone", mutate: func(in *execution.EnsureIntent) { in.JobClass = "gone" }, reason: executionv1alpha1.ReasonJobClassNotFound},
		{name: "parameters gone", noParams: true, reason: executionv1alpha1.ReasonParametersChanged},
		{name: "parameters not the class's", mutate: func(in *execution.EnsureIntent) { in.ParametersName = "gone" }, reason: executionv1alpha1.ReasonInvalidParametersReference},
		{name: "other adapter", mutate: func(in *execution.EnsureIntent) { in.Adapter = "opensandbox" }, reason: journal.ReasonUndecodableIntent},
		{name: "no digest", mutate: func(in *execution.EnsureIntent) { in.TaskDigest = "" }, reason: journal.ReasonUndecodableIntent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aj, p, sa := fixtures()
			objs := []client.Object{aj, p, sa}
			if tc.noParams {
				objs = []client.Object{aj, sa}
			}
			e, c := fakeExecutor(t, tc.createErr, objs...)
			var muts []func(*execution.EnsureIntent)
			if tc.mutate != nil {
				muts = append(muts, tc.mutate)
			}
			out, err := e.Handlers()[execution.OpEnsure](context.Background(), ensureRecord(t, aj, muts...))
			if tc.transient {
				if f := journal.AsFailure(err); f == nil || !f.Transient || f.Reason != executionv1alpha1.ReasonBackendUnavailable {
					t.Fatalf("want a transient error with reason BackendUnavailable, got %+v, %v", out, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o, ok := out.Payload.(execution.Observation)
			if out.Result.Class != journal.Failed || out.Result.Reason != tc.reason || !ok || o.State != execution.StateNotFound || o.Created {
				t.Fatalf("outcome %+v, want Failed/%s with State NotFound", out, tc.reason)
			}
			var list batchv1.JobList
			if err := c.List(context.Background(), &list); err != nil || len(list.Items) != 0 {
				t.Fatalf("native Jobs %d, %v", len(list.Items), err)
			}
		})
	}
}

// TestStateUnknownFailure: a definite API refusal of a read carries no
// Observation (the state is not known).
func TestStateUnknownFailure(t *testing.T) {
	aj, _, _ := fixtures()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, key.Name, errors.New("CANARY"))
		},
	}).Build()
	e := &Executor{Management: c, Workload: c, Proof: testProof()}
	rec, err := journal.NewIntent(ensureRecord(t, aj).Object, execution.OpObserve, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Handlers()[execution.OpObserve](context.Background(), rec)
	if err != nil || out.Result.Class != journal.Failed || out.Result.Reason != ReasonForbidden || out.Payload != nil {
		t.Fatalf("outcome %+v, %v", out, err)
	}
}

func TestRegisterNeedsClients(t *testing.T) {
	d, err := journal.NewDispatcher(execution.Domain)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Executor{}).Register(d); err == nil {
		t.Fatal("Register without clients succeeded")
	}
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
	if err := (&Executor{Management: c, Workload: c, Proof: testProof()}).Register(d); err == nil {
		t.Fatal("Register with a scheme without the execution API succeeded")
	}
}

func TestBuildJob(t *testing.T) {
	aj, p, _ := fixtures()
	aj.Spec.Task.Command = []string{"/bin/task"}
	aj.Spec.Task.Args = []string{"--x"}
	aj.Spec.Task.WorkingDir = "/work"
	aj.Spec.Task.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	aj.Spec.Task.Env = append(aj.Spec.Task.Env,
		executionv1alpha1.EnvVar{Name: "S", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "k"}}},
		executionv1alpha1.EnvVar{Name: "C", ValueFrom: &executionv1alpha1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "k"}}})
	nonRoot := true
	p.Spec.RuntimeClassName = "gvisor"
	p.Spec.ImagePullPolicy = corev1.PullAlways
	p.Spec.Scheduling.NodeSelector = map[string]string{"pool": "jobs"}
	p.Spec.Scheduling.Tolerations = []corev1.Toleration{{Key: "jobs", Operator: corev1.TolerationOpExists}}
	p.Spec.PodSecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot}
	n := native{ns: "ns", name: "ayatori-" + testUID, uid: testUID}
	job, err := buildJob(n, "job", aj, p, execution.Resources{RequestsCPU: "250m", LimitsMemory: "1Gi"})
	if err != nil {
		t.Fatal(err)
	}
	ps := job.Spec.Template.Spec
	ctr := ps.Containers[0]
	switch {
	case job.Name != n.name || job.Namespace != "ns" || job.Labels[execution.LabelJobUID] != testUID || job.Spec.Template.Labels[execution.LabelJobUID] != testUID,
		job.Annotations[execution.AnnotationJobName] != "job" || job.Spec.Template.Annotations[execution.AnnotationJobNamespace] != "ns",
		*job.Spec.BackoffLimit != 0 || *job.Spec.Completions != 1 || *job.Spec.Parallelism != 1 || len(job.OwnerReferences) != 0,
		ps.RestartPolicy != corev1.RestartPolicyNever || ps.ServiceAccountName != "runner" || *ps.RuntimeClassName != "gvisor",
		ps.NodeSelector["pool"] != "jobs" || len(ps.Tolerations) != 1 || !*ps.SecurityContext.RunAsNonRoot || *ps.EnableServiceLinks,
		len(ps.ImagePullSecrets) != 1 || ps.ImagePullSecrets[0].Name != "pull",
		ctr.Name != ContainerName || ctr.Image != "img" || ctr.Command[0] != "/bin/task" || ctr.Args[0] != "--x" || ctr.WorkingDir != "/work",
		ctr.ImagePullPolicy != corev1.PullAlways,
		!ctr.Resources.Requests.Cpu().Equal(resource.MustParse("250m")) || !ctr.Resources.Limits.Memory().Equal(resource.MustParse("1Gi")),
		len(ctr.Resources.Requests) != 1 || len(ctr.Resources.Limits) != 1,
		len(ctr.Env) != 3 || ctr.Env[0].Value != "v" || ctr.Env[1].ValueFrom.SecretKeyRef.Name != "sec" || ctr.Env[2].ValueFrom.ConfigMapKeyRef.Name != "cm":
		t.Fatalf("native Job %+v", job)
	}
	// The parameters' objects are copied, not shared.
	p.Spec.Scheduling.NodeSelector["pool"] = "changed"
	if ps.NodeSelector["pool"] != "jobs" {
		t.Fatal("node selector shared with the parameters")
	}
	// Default pull policy.
	p.Spec.ImagePullPolicy = ""
	job, _ = buildJob(n, "job", aj, p, execution.Resources{})
	if c := job.Spec.Template.Spec.Containers[0]; c.ImagePullPolicy != corev1.PullIfNotPresent || c.Resources.Requests != nil || c.Resources.Limits != nil {
		t.Fatalf("defaults: %+v", c)
	}
}

// completedNative runs aj's Ensure on e and marks the native Job it
// created Complete, as the Job controller would; it returns that Job.
func completedNative(t *testing.T, e *Executor, c client.Client, aj *executionv1alpha1.Job) *batchv1.Job {
	t.Helper()
	ctx := context.Background()
	out, err := e.Handlers()[execution.OpEnsure](ctx, ensureRecord(t, aj))
	if err != nil || out.Result.Class != journal.Succeeded {
		t.Fatalf("Ensure: %+v %v", out, err)
	}
	name, _ := execution.NativeJobName(testUID)
	nj := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, nj); err != nil {
		t.Fatal(err)
	}
	nj.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, nj); err != nil {
		t.Fatal(err)
	}
	return nj
}

// TestCompletionNeedsAyatorisPod: a native Job that the Job controller
// marked Complete because of a pod it adopted (the labels copied, another
// image) is not a success: the task's own pod never succeeded.
func TestCompletionNeedsAyatorisPod(t *testing.T) {
	aj, p, sa := fixtures()
	e, c := fakeExecutor(t, nil, aj, p, sa)
	ctx := context.Background()
	nj := completedNative(t, e, c, aj)
	yes := true
	lookalike := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lookalike",
		Labels:          map[string]string{labelControllerUID: string(nj.UID), execution.LabelJobUID: testUID},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: nj.Name, UID: nj.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{ServiceAccountName: "runner", Containers: []corev1.Container{{Name: ContainerName, Image: "someone-elses"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}}}
	if err := c.Create(ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	rec, _ := journal.NewIntent(ensureRecord(t, aj).Object, execution.OpObserve, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes,
		References: []execution.Reference{{Type: ReferenceTypeJob, ID: string(nj.UID)}}})
	out, err := e.Handlers()[execution.OpObserve](ctx, rec)
	o, _ := out.Payload.(execution.Observation)
	if err != nil || o.State != execution.StateFailed || o.Reason != executionv1alpha1.ReasonBackendFailed {
		t.Fatalf("observation %+v, %v", o, err)
	}
}

// TestDeleteWithoutWatchRight: a workload client whose watch is refused
// (no watch right on batch/v1 Jobs, as with an --execution-kubeconfig
// that lacks it) still waits for a finished native Job's removal, by
// reading it again.
func TestDeleteWithoutWatchRight(t *testing.T) {
	aj, p, sa := fixtures()
	var watches atomic.Int64
	e, c := fakeExecutor(t, nil, aj, p, sa)
	ctx := context.Background()
	nj := completedNative(t, e, c, aj)
	e.Workload = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			watches.Add(1)
			return nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "", errors.New("no watch right"))
		},
	})
	rec, _ := journal.NewIntent(ensureRecord(t, aj).Object, execution.OpDelete, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes,
		References: []execution.Reference{{Type: ReferenceTypeJob, ID: string(nj.UID)}}})
	out, err := e.Handlers()[execution.OpDelete](ctx, rec)
	o, _ := out.Payload.(execution.Observation)
	if err != nil || out.Result.Class != journal.Succeeded || o.State != execution.StateNotFound || watches.Load() != 1 {
		t.Fatalf("Delete with the watch refused: %+v, %v (%d watches)", out, err, watches.Load())
	}
}
