//go:build !unit

// Real servers only (no test runs under -short): left out of the unit
// loop's build (make test-unit: -tags unit), which then links no binary
// that would run nothing.

package v1alpha1_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

const testNS = "api-validation"

// validation holds the control plane shared by the subtests of
// TestExecutionValidation.
type validation struct {
	c   client.Client
	ctx context.Context
}

// wantInvalid fails unless err is an apierrors Invalid (422) error whose
// text contains every one of want.
func wantInvalid(t *testing.T, err error, want ...string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error = %v, want Invalid", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not mention %q", err.Error(), w)
		}
	}
}

func wantOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("want accepted, got %v", err)
	}
}

func validJob(name string) *executionv1alpha1.Job {
	return &executionv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: executionv1alpha1.JobSpec{
			Task: executionv1alpha1.TaskSpec{Image: "docker.io/library/alpine:3.22"},
		},
	}
}

func validClass(name string) *executionv1alpha1.JobClass {
	return &executionv1alpha1.JobClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: executionv1alpha1.JobClassSpec{
			ControllerName: executionv1alpha1.ControllerKubernetes,
			ParametersRef: executionv1alpha1.ParametersReference{
				Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "default",
			},
		},
	}
}

func validKubernetesParameters(name string) *executionv1alpha1.KubernetesExecutionParameters {
	return &executionv1alpha1.KubernetesExecutionParameters{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: "ayatori-job"},
	}
}

func validSandboxParameters(name string) *executionv1alpha1.OpenSandboxExecutionParameters {
	return &executionv1alpha1.OpenSandboxExecutionParameters{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{
			Endpoint:        "https://opensandbox.example.internal",
			APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: "ayatori-system", Name: "opensandbox-api", Key: "api-key"},
		},
	}
}

// unstructuredJob is a Job built as raw JSON, for shapes the typed client
// can not send (integer quantities, an absent spec.resources).
func unstructuredJob(name string, resources map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": executionv1alpha1.GroupVersion.String(),
		"kind":       "Job",
		"metadata":   map[string]any{"name": name, "namespace": testNS},
		"spec": map[string]any{
			"task": map[string]any{"image": "docker.io/library/alpine:3.22"},
		},
	}}
	if resources != nil {
		u.Object["spec"].(map[string]any)["resources"] = resources
	}
	return u
}

// TestExecutionValidation: every CEL rule and schema limit of the
// execution.ayatori.ddupan.top types, on a real kube-apiserver.
func TestExecutionValidation(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	v := &validation{c: cp.Client, ctx: context.Background()}
	if err := v.c.Create(v.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}); err != nil {
		t.Fatal(err)
	}
	t.Run("Job", v.jobCreate)
	t.Run("JobUpdate", v.jobUpdate)
	t.Run("JobResources", v.jobResources)
	t.Run("JobStatus", v.jobStatus)
	t.Run("JobClass", v.jobClass)
	t.Run("KubernetesExecutionParameters", v.kubernetesParameters)
	t.Run("OpenSandboxExecutionParameters", v.sandboxParameters)
}

func (v *validation) jobCreate(t *testing.T) {
	t.Run("defaults desiredState to Running", func(t *testing.T) {
		job := validJob("defaults")
		wantOK(t, v.c.Create(v.ctx, job))
		if job.Spec.DesiredState != executionv1alpha1.JobDesiredStateRunning {
			t.Fatalf("desiredState = %q, want Running", job.Spec.DesiredState)
		}
	})
	literal := "visible"
	secretRef := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "value"}
	configMapRef := &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}, Key: "value"}
	for _, tc := range []struct {
		name string
		mut  func(*executionv1alpha1.Job)
		want string // "" = accepted
	}{
		{"env value and valueFrom both set", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN", Value: &literal, ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: secretRef}}}
		}, "exactly one of value or valueFrom must be set"},
		{"env neither value nor valueFrom", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN"}}
		}, "exactly one of value or valueFrom must be set"},
		{"env empty literal value allowed", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "EMPTY", Value: ptr.To("")}}
		}, ""},
		{"env secretKeyRef and configMapKeyRef both set", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: secretRef, ConfigMapKeyRef: configMapRef}}}
		}, "exactly one key reference must be set"},
		{"env valueFrom without a key reference", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{}}}
		}, "exactly one key reference must be set"},
		{"env secretKeyRef allowed", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: secretRef}}}
		}, ""},
		{"env configMapKeyRef allowed", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "CONFIG", ValueFrom: &executionv1alpha1.EnvVarSource{ConfigMapKeyRef: configMapRef}}}
		}, ""},
		{"duplicate env names", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "A", Value: &literal}, {Name: "A", Value: &literal}}
		}, "Duplicate value"},
		{"env name starting with a digit", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "1A", Value: &literal}}
		}, "spec.task.env[0].name"},
		{"env name with a dash", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "A-B", Value: &literal}}
		}, "spec.task.env[0].name"},
		{"env name with underscore and digits allowed", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "_a_B9", Value: &literal}}
		}, ""},
		{"env name 256 chars allowed", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: strings.Repeat("A", 256), Value: &literal}}
		}, ""},
		{"env name 257 chars", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: strings.Repeat("A", 257), Value: &literal}}
		}, "spec.task.env[0].name"},
		{"env value 32768 bytes allowed", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "BIG", Value: ptr.To(strings.Repeat("x", 32768))}}
		}, ""},
		{"env value 32769 bytes", func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "BIG", Value: ptr.To(strings.Repeat("x", 32769))}}
		}, "spec.task.env[0].value"},
		{"257 env vars", func(j *executionv1alpha1.Job) {
			for i := range 257 {
				j.Spec.Task.Env = append(j.Spec.Task.Env, executionv1alpha1.EnvVar{Name: "V" + strconv.Itoa(i), Value: &literal})
			}
		}, "spec.task.env"},
		{"empty image", func(j *executionv1alpha1.Job) { j.Spec.Task.Image = "" }, "spec.task.image"},
		{"image 1024 chars allowed", func(j *executionv1alpha1.Job) { j.Spec.Task.Image = strings.Repeat("a", 1024) }, ""},
		{"image 1025 chars", func(j *executionv1alpha1.Job) { j.Spec.Task.Image = strings.Repeat("a", 1025) }, "spec.task.image"},
		{"17 imagePullSecrets", func(j *executionv1alpha1.Job) {
			j.Spec.Task.ImagePullSecrets = make([]corev1.LocalObjectReference, 17)
		}, "spec.task.imagePullSecrets"},
		{"257 command items", func(j *executionv1alpha1.Job) { j.Spec.Task.Command = make([]string, 257) }, "spec.task.command"},
		{"1025 args", func(j *executionv1alpha1.Job) { j.Spec.Task.Args = make([]string, 1025) }, "spec.task.args"},
		{"workingDir 4097 chars", func(j *executionv1alpha1.Job) { j.Spec.Task.WorkingDir = strings.Repeat("d", 4097) }, "spec.task.workingDir"},
		{"jobClassName with upper case", func(j *executionv1alpha1.Job) { j.Spec.JobClassName = "Default" }, "spec.jobClassName"},
		{"jobClassName with underscore", func(j *executionv1alpha1.Job) { j.Spec.JobClassName = "my_class" }, "spec.jobClassName"},
		{"jobClassName dotted allowed", func(j *executionv1alpha1.Job) { j.Spec.JobClassName = "micro-vm.example" }, ""},
		{"jobClassName 253 chars allowed", func(j *executionv1alpha1.Job) { j.Spec.JobClassName = strings.Repeat("a", 253) }, ""},
		{"jobClassName 254 chars", func(j *executionv1alpha1.Job) { j.Spec.JobClassName = strings.Repeat("a", 254) }, "spec.jobClassName"},
		{"activeDeadlineSeconds 0", func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](0) }, "spec.activeDeadlineSeconds"},
		{"activeDeadlineSeconds 1 allowed", func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](1) }, ""},
		{"ttlSecondsAfterFinished -1", func(j *executionv1alpha1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To[int32](-1) }, "spec.ttlSecondsAfterFinished"},
		{"ttlSecondsAfterFinished 0 allowed", func(j *executionv1alpha1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To[int32](0) }, ""},
		{"desiredState outside the enum", func(j *executionv1alpha1.Job) { j.Spec.DesiredState = "Paused" }, "spec.desiredState"},
		{"created Cancelled allowed", func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := validJob("")
			job.GenerateName = "create-"
			tc.mut(job)
			err := v.c.Create(v.ctx, job)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
}

func (v *validation) jobUpdate(t *testing.T) {
	update := func(t *testing.T, setup, mut func(*executionv1alpha1.Job)) error {
		t.Helper()
		job := validJob("")
		job.GenerateName = "update-"
		if setup != nil {
			setup(job)
		}
		if err := v.c.Create(v.ctx, job); err != nil {
			t.Fatal(err)
		}
		mut(job)
		return v.c.Update(v.ctx, job)
	}
	q := resource.MustParse
	withResources := func(j *executionv1alpha1.Job) {
		j.Spec.Resources.Requests.CPU = ptr.To(q("500m"))
	}
	withDeadline := func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](60) }
	withClass := func(j *executionv1alpha1.Job) { j.Spec.JobClassName = "default" }
	withTTL := func(j *executionv1alpha1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To[int32](60) }
	for _, tc := range []struct {
		name       string
		setup, mut func(*executionv1alpha1.Job)
		want       string
	}{
		{"task image", nil, func(j *executionv1alpha1.Job) { j.Spec.Task.Image = "docker.io/library/busybox:1.37" }, "task is immutable"},
		{"task args", nil, func(j *executionv1alpha1.Job) { j.Spec.Task.Args = []string{"echo"} }, "task is immutable"},
		{"task env", nil, func(j *executionv1alpha1.Job) {
			j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "A", Value: ptr.To("b")}}
		}, "task is immutable"},
		{"resources added", nil, withResources, "resources are immutable"},
		{"resources changed", withResources, func(j *executionv1alpha1.Job) { j.Spec.Resources.Requests.CPU = ptr.To(q("1")) }, "resources are immutable"},
		{"resources removed", withResources, func(j *executionv1alpha1.Job) { j.Spec.Resources = executionv1alpha1.ExecutionResourceRequirements{} }, "resources are immutable"},
		{"activeDeadlineSeconds added", nil, withDeadline, "activeDeadlineSeconds is immutable"},
		{"activeDeadlineSeconds changed", withDeadline, func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](61) }, "activeDeadlineSeconds is immutable"},
		{"activeDeadlineSeconds removed", withDeadline, func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = nil }, "activeDeadlineSeconds is immutable"},
		{"jobClassName added", nil, withClass, "jobClassName is immutable"},
		{"jobClassName changed", withClass, func(j *executionv1alpha1.Job) { j.Spec.JobClassName = "other" }, "jobClassName is immutable"},
		{"jobClassName removed", withClass, func(j *executionv1alpha1.Job) { j.Spec.JobClassName = "" }, "jobClassName is immutable"},
		{"ttlSecondsAfterFinished added", nil, withTTL, ""},
		{"ttlSecondsAfterFinished changed", withTTL, func(j *executionv1alpha1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To[int32](0) }, ""},
		{"ttlSecondsAfterFinished removed", withTTL, func(j *executionv1alpha1.Job) { j.Spec.TTLSecondsAfterFinished = nil }, ""},
		{"unchanged spec with labels", withResources, func(j *executionv1alpha1.Job) { j.Labels = map[string]string{"a": "b"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := update(t, tc.setup, tc.mut)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}

	t.Run("one-way cancel allowed", func(t *testing.T) {
		job := validJob("cancel")
		wantOK(t, v.c.Create(v.ctx, job))
		job.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled
		wantOK(t, v.c.Update(v.ctx, job))
		// Cancelled → Cancelled is no change.
		job.Labels = map[string]string{"touched": "yes"}
		wantOK(t, v.c.Update(v.ctx, job))
		t.Run("Cancelled to Running rejected", func(t *testing.T) {
			job.Spec.DesiredState = executionv1alpha1.JobDesiredStateRunning
			wantInvalid(t, v.c.Update(v.ctx, job), "desiredState may only transition from Running to Cancelled")
		})
	})
}

// jobResources: request ≤ limit for cpu and memory, whatever the JSON
// shape of the quantities (integers or strings).
func (v *validation) jobResources(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources map[string]any
		want      string
	}{
		{"cpu request above limit", map[string]any{"requests": map[string]any{"cpu": "2"}, "limits": map[string]any{"cpu": "500m"}}, "requests.cpu must not exceed limits.cpu"},
		{"cpu integer request above string limit", map[string]any{"requests": map[string]any{"cpu": int64(2)}, "limits": map[string]any{"cpu": "500m"}}, "requests.cpu must not exceed limits.cpu"},
		{"cpu string request above integer limit", map[string]any{"requests": map[string]any{"cpu": "1500m"}, "limits": map[string]any{"cpu": int64(1)}}, "requests.cpu must not exceed limits.cpu"},
		{"cpu integer request above integer limit", map[string]any{"requests": map[string]any{"cpu": int64(3)}, "limits": map[string]any{"cpu": int64(2)}}, "requests.cpu must not exceed limits.cpu"},
		{"cpu 1m above the limit", map[string]any{"requests": map[string]any{"cpu": "1001m"}, "limits": map[string]any{"cpu": int64(1)}}, "requests.cpu must not exceed limits.cpu"},
		{"cpu equal (integer and 1000m) allowed", map[string]any{"requests": map[string]any{"cpu": "1000m"}, "limits": map[string]any{"cpu": int64(1)}}, ""},
		{"cpu equal strings allowed", map[string]any{"requests": map[string]any{"cpu": "500m"}, "limits": map[string]any{"cpu": "500m"}}, ""},
		{"cpu integer below limit allowed", map[string]any{"requests": map[string]any{"cpu": int64(1)}, "limits": map[string]any{"cpu": int64(2)}}, ""},
		{"memory request above limit", map[string]any{"requests": map[string]any{"memory": "256Mi"}, "limits": map[string]any{"memory": "128Mi"}}, "requests.memory must not exceed limits.memory"},
		{"memory integer request above limit", map[string]any{"requests": map[string]any{"memory": int64(134217729)}, "limits": map[string]any{"memory": "128Mi"}}, "requests.memory must not exceed limits.memory"},
		{"memory 128Mi equals 134217728 allowed", map[string]any{"requests": map[string]any{"memory": "128Mi"}, "limits": map[string]any{"memory": int64(134217728)}}, ""},
		{"memory decimal below binary allowed", map[string]any{"requests": map[string]any{"memory": "128M"}, "limits": map[string]any{"memory": "128Mi"}}, ""},
		{"request without limit allowed", map[string]any{"requests": map[string]any{"cpu": "64", "memory": "1Ti"}}, ""},
		{"limit without request allowed", map[string]any{"limits": map[string]any{"cpu": "1m"}}, ""},
		{"malformed quantity", map[string]any{"requests": map[string]any{"cpu": "two"}}, "spec.resources.requests.cpu"},
		{"fractional JSON number", map[string]any{"requests": map[string]any{"cpu": 0.5}}, "spec.resources.requests.cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := unstructuredJob("", tc.resources)
			u.SetGenerateName("res-")
			err := v.c.Create(v.ctx, u)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
	t.Run("resources absent then added", func(t *testing.T) {
		u := unstructuredJob("res-absent", nil)
		wantOK(t, v.c.Create(v.ctx, u))
		u.Object["spec"].(map[string]any)["resources"] = map[string]any{"limits": map[string]any{"cpu": int64(1)}}
		wantInvalid(t, v.c.Update(v.ctx, u), "resources are immutable")
	})
}

// jobStatus: the status-only limits, written through the status
// subresource as the controller would.
func (v *validation) jobStatus(t *testing.T) {
	job := validJob("status")
	wantOK(t, v.c.Create(v.ctx, job))
	base := job.DeepCopy()
	resolved := func() *executionv1alpha1.ResolvedJobClassReference {
		return &executionv1alpha1.ResolvedJobClassReference{
			Name: "default", UID: "8aa4", ControllerName: executionv1alpha1.ControllerKubernetes,
			ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "default", UID: "c413"},
		}
	}
	refs := func(n int) []executionv1alpha1.ExecutionReference {
		var out []executionv1alpha1.ExecutionReference
		for i := range n {
			out = append(out, executionv1alpha1.ExecutionReference{Type: "T" + strings.Repeat("x", i), ID: "id"})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		mut  func(*executionv1alpha1.JobStatus)
		want string
	}{
		{"full status allowed (parametersRef.uid allowed here)", func(s *executionv1alpha1.JobStatus) {
			s.ResolvedJobClass = resolved()
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: []executionv1alpha1.ExecutionReference{{Type: "Job", ID: strings.Repeat("i", 253)}}}
			s.Result = &executionv1alpha1.JobResult{ExitCode: ptr.To[int32](0), Reason: executionv1alpha1.ReasonCompleted}
		}, ""},
		{"execution reference id 300 chars", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: []executionv1alpha1.ExecutionReference{{Type: "Job", ID: strings.Repeat("i", 300)}}}
		}, "status.execution.references[0].id"},
		{"execution reference id 254 chars", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: []executionv1alpha1.ExecutionReference{{Type: "Job", ID: strings.Repeat("i", 254)}}}
		}, "status.execution.references[0].id"},
		{"execution reference empty id", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: []executionv1alpha1.ExecutionReference{{Type: "Job", ID: ""}}}
		}, "status.execution.references[0].id"},
		{"execution reference type 64 chars", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: []executionv1alpha1.ExecutionReference{{Type: strings.Repeat("T", 64), ID: "id"}}}
		}, "status.execution.references[0].type"},
		{"nine execution references", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: refs(9)}
		}, "status.execution.references"},
		{"eight execution references allowed", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: refs(8)}
		}, ""},
		{"duplicate execution reference types", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: "kubernetes", References: []executionv1alpha1.ExecutionReference{{Type: "Job", ID: "a"}, {Type: "Job", ID: "b"}}}
		}, "Duplicate value"},
		{"adapter 64 chars", func(s *executionv1alpha1.JobStatus) {
			s.Execution = &executionv1alpha1.ExecutionStatus{Adapter: strings.Repeat("a", 64)}
		}, "status.execution.adapter"},
		{"result reason 129 chars", func(s *executionv1alpha1.JobStatus) {
			s.Result = &executionv1alpha1.JobResult{Reason: strings.Repeat("R", 129)}
		}, "status.result.reason"},
		{"resolvedJobClass name 254 chars", func(s *executionv1alpha1.JobStatus) {
			s.ResolvedJobClass = resolved()
			s.ResolvedJobClass.Name = strings.Repeat("n", 254)
		}, "status.resolvedJobClass.name"},
		{"resolvedJobClass controllerName 254 chars", func(s *executionv1alpha1.JobStatus) {
			s.ResolvedJobClass = resolved()
			s.ResolvedJobClass.ControllerName = strings.Repeat("n", 254)
		}, "status.resolvedJobClass.controllerName"},
		{"resolvedJobClass parametersRef kind lower case", func(s *executionv1alpha1.JobStatus) {
			s.ResolvedJobClass = resolved()
			s.ResolvedJobClass.ParametersRef.Kind = "configmap"
		}, "status.resolvedJobClass.parametersRef.kind"},
		{"effectiveResources request above limit", func(s *executionv1alpha1.JobStatus) {
			s.EffectiveResources.Requests.CPU = ptr.To(resource.MustParse("2"))
			s.EffectiveResources.Limits.CPU = ptr.To(resource.MustParse("1"))
		}, "requests.cpu must not exceed limits.cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := &executionv1alpha1.Job{}
			if err := v.c.Get(v.ctx, client.ObjectKeyFromObject(base), cur); err != nil {
				t.Fatal(err)
			}
			cur.Status = executionv1alpha1.JobStatus{}
			tc.mut(&cur.Status)
			err := v.c.Status().Update(v.ctx, cur)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
}

func (v *validation) jobClass(t *testing.T) {
	q := resource.MustParse
	for _, tc := range []struct {
		name string
		mut  func(*executionv1alpha1.JobClass)
		want string
	}{
		{"valid class allowed", func(*executionv1alpha1.JobClass) {}, ""},
		{"parametersRef.uid set", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.UID = "c413" }, "parametersRef.uid is set by the controller"},
		{"controllerName without a path", func(c *executionv1alpha1.JobClass) { c.Spec.ControllerName = "kubernetes" }, "spec.controllerName"},
		{"controllerName with an upper-case domain", func(c *executionv1alpha1.JobClass) { c.Spec.ControllerName = "Example.com/x" }, "spec.controllerName"},
		{"controllerName 254 chars", func(c *executionv1alpha1.JobClass) { c.Spec.ControllerName = "example.com/" + strings.Repeat("x", 242) }, "spec.controllerName"},
		{"controllerName unknown but well-formed allowed", func(c *executionv1alpha1.JobClass) { c.Spec.ControllerName = "example.com/other" }, ""},
		{"parametersRef group empty", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Group = "" }, "spec.parametersRef.group"},
		{"parametersRef group with upper case", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Group = "Execution.example" }, "spec.parametersRef.group"},
		{"parametersRef group 254 chars", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Group = strings.Repeat("g", 254) }, "spec.parametersRef.group"},
		{"parametersRef kind empty", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = "" }, "spec.parametersRef.kind"},
		{"parametersRef kind lower case", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = "configMap" }, "spec.parametersRef.kind"},
		{"parametersRef kind with a dot", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = "Config.Map" }, "spec.parametersRef.kind"},
		{"parametersRef kind 63 chars allowed", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = "K" + strings.Repeat("k", 62) }, ""},
		{"parametersRef kind 64 chars", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = "K" + strings.Repeat("k", 63) }, "spec.parametersRef.kind"},
		{"parametersRef name empty", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Name = "" }, "spec.parametersRef.name"},
		{"parametersRef name with a slash", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Name = "a/b" }, "spec.parametersRef.name"},
		{"parametersRef name 253 chars allowed", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Name = strings.Repeat("n", 253) }, ""},
		{"parametersRef name 254 chars", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Name = strings.Repeat("n", 254) }, "spec.parametersRef.name"},
		{"core group (empty) is not allowed", func(c *executionv1alpha1.JobClass) {
			c.Spec.ParametersRef = executionv1alpha1.ParametersReference{Kind: "ConfigMap", Name: "x"}
		}, "spec.parametersRef.group"},
		{"defaults cpu request above limit", func(c *executionv1alpha1.JobClass) {
			c.Spec.Resources.Defaults = executionv1alpha1.ExecutionResourceRequirements{
				Requests: executionv1alpha1.ResourceValues{CPU: ptr.To(q("2"))}, Limits: executionv1alpha1.ResourceValues{CPU: ptr.To(q("500m"))}}
		}, "requests.cpu must not exceed limits.cpu"},
		{"defaults memory request above limit", func(c *executionv1alpha1.JobClass) {
			c.Spec.Resources.Defaults = executionv1alpha1.ExecutionResourceRequirements{
				Requests: executionv1alpha1.ResourceValues{Memory: ptr.To(q("1Gi"))}, Limits: executionv1alpha1.ResourceValues{Memory: ptr.To(q("512Mi"))}}
		}, "requests.memory must not exceed limits.memory"},
		{"defaults equal allowed", func(c *executionv1alpha1.JobClass) {
			c.Spec.Resources.Defaults = executionv1alpha1.ExecutionResourceRequirements{
				Requests: executionv1alpha1.ResourceValues{CPU: ptr.To(q("1")), Memory: ptr.To(q("128Mi"))},
				Limits:   executionv1alpha1.ResourceValues{CPU: ptr.To(q("1000m")), Memory: ptr.To(q("134217728"))}}
		}, ""},
		{"maximum request above maximum limit", func(c *executionv1alpha1.JobClass) {
			c.Spec.Resources.Maximum = executionv1alpha1.ExecutionResourceRequirements{
				Requests: executionv1alpha1.ResourceValues{CPU: ptr.To(q("8"))}, Limits: executionv1alpha1.ResourceValues{CPU: ptr.To(q("4"))}}
		}, "requests.cpu must not exceed limits.cpu"},
		{"allowedNamespaces selector allowed", func(c *executionv1alpha1.JobClass) {
			c.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"ayatori.ddupan.top/execution": "enabled"}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validClass("")
			c.GenerateName = "class-"
			tc.mut(c)
			err := v.c.Create(v.ctx, c)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
	for _, tc := range []struct {
		name string
		mut  func(*executionv1alpha1.JobClass)
		want string
	}{
		{"controllerName immutable", func(c *executionv1alpha1.JobClass) { c.Spec.ControllerName = executionv1alpha1.ControllerOpenSandbox }, "controllerName is immutable"},
		{"parametersRef name immutable", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Name = "other" }, "parametersRef is immutable"},
		{"parametersRef kind immutable", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = "OpenSandboxExecutionParameters" }, "parametersRef is immutable"},
		{"parametersRef.uid added", func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.UID = "c413" }, "parametersRef"},
		{"allowedNamespaces mutable", func(c *executionv1alpha1.JobClass) {
			c.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, ""},
		{"resources mutable", func(c *executionv1alpha1.JobClass) {
			c.Spec.Resources.Maximum.Limits.CPU = ptr.To(q("8"))
		}, ""},
	} {
		t.Run("update "+tc.name, func(t *testing.T) {
			c := validClass("")
			c.GenerateName = "class-update-"
			wantOK(t, v.c.Create(v.ctx, c))
			tc.mut(c)
			err := v.c.Update(v.ctx, c)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
}

func (v *validation) kubernetesParameters(t *testing.T) {
	t.Run("imagePullPolicy defaults to IfNotPresent", func(t *testing.T) {
		p := validKubernetesParameters("defaults")
		wantOK(t, v.c.Create(v.ctx, p))
		if p.Spec.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Fatalf("imagePullPolicy = %q, want IfNotPresent", p.Spec.ImagePullPolicy)
		}
	})
	for _, tc := range []struct {
		name string
		mut  func(*executionv1alpha1.KubernetesExecutionParameters)
		want string
	}{
		{"serviceAccountName required", func(p *executionv1alpha1.KubernetesExecutionParameters) { p.Spec.ServiceAccountName = "" }, "spec.serviceAccountName"},
		{"serviceAccountName with upper case", func(p *executionv1alpha1.KubernetesExecutionParameters) { p.Spec.ServiceAccountName = "Job" }, "spec.serviceAccountName"},
		{"serviceAccountName with underscore", func(p *executionv1alpha1.KubernetesExecutionParameters) { p.Spec.ServiceAccountName = "a_b" }, "spec.serviceAccountName"},
		{"serviceAccountName 254 chars", func(p *executionv1alpha1.KubernetesExecutionParameters) {
			p.Spec.ServiceAccountName = strings.Repeat("s", 254)
		}, "spec.serviceAccountName"},
		{"imagePullPolicy outside the enum", func(p *executionv1alpha1.KubernetesExecutionParameters) { p.Spec.ImagePullPolicy = "Sometimes" }, "spec.imagePullPolicy"},
		{"imagePullPolicy Always allowed", func(p *executionv1alpha1.KubernetesExecutionParameters) { p.Spec.ImagePullPolicy = corev1.PullAlways }, ""},
		{"imagePullPolicy Never allowed", func(p *executionv1alpha1.KubernetesExecutionParameters) { p.Spec.ImagePullPolicy = corev1.PullNever }, ""},
		{"runtimeClassName 254 chars", func(p *executionv1alpha1.KubernetesExecutionParameters) {
			p.Spec.RuntimeClassName = strings.Repeat("r", 254)
		}, "spec.runtimeClassName"},
		{"65 tolerations", func(p *executionv1alpha1.KubernetesExecutionParameters) {
			p.Spec.Scheduling.Tolerations = make([]corev1.Toleration, 65)
		}, "spec.scheduling.tolerations"},
		{"scheduling and security context allowed", func(p *executionv1alpha1.KubernetesExecutionParameters) {
			p.Spec.RuntimeClassName = "runc"
			p.Spec.Scheduling.NodeSelector = map[string]string{"ayatori.ddupan.top/node-role": "execution"}
			p.Spec.Scheduling.Tolerations = []corev1.Toleration{{Key: "ayatori.ddupan.top/execution", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
			p.Spec.PodSecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validKubernetesParameters("")
			p.GenerateName = "k8s-"
			tc.mut(p)
			err := v.c.Create(v.ctx, p)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
}

func (v *validation) sandboxParameters(t *testing.T) {
	t.Run("requestMapping defaults to AdmissionOnly", func(t *testing.T) {
		p := validSandboxParameters("defaults")
		wantOK(t, v.c.Create(v.ctx, p))
		if p.Spec.RequestMapping != executionv1alpha1.OpenSandboxRequestMappingAdmissionOnly {
			t.Fatalf("requestMapping = %q, want AdmissionOnly", p.Spec.RequestMapping)
		}
	})
	endpoint := func(e string, insecure bool) func(*executionv1alpha1.OpenSandboxExecutionParameters) {
		return func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
			p.Spec.Endpoint, p.Spec.AllowInsecureHTTP = e, insecure
		}
	}
	for _, tc := range []struct {
		name string
		mut  func(*executionv1alpha1.OpenSandboxExecutionParameters)
		want string
	}{
		{"https allowed", endpoint("https://opensandbox.example.internal:8443/api/v1", false), ""},
		{"https with @ in the path allowed", endpoint("https://opensandbox.example.internal/a@b", false), ""},
		{"http without allowInsecureHTTP", endpoint("http://opensandbox.dev.internal", false), "endpoint must use HTTPS unless allowInsecureHTTP is true"},
		{"http with allowInsecureHTTP allowed", endpoint("http://opensandbox.dev.internal:8080", true), ""},
		{"credentials in the URL", endpoint("https://user:pw@opensandbox.example.internal", false), "endpoint must not contain credentials"},
		{"user name in the URL", endpoint("https://user@opensandbox.example.internal", false), "endpoint must not contain credentials"},
		{"credentials in an http URL", endpoint("http://user:pw@opensandbox.dev.internal", true), "endpoint must not contain credentials"},
		{"query", endpoint("https://opensandbox.example.internal/?token=x", false), "endpoint must not contain a query or fragment"},
		{"fragment", endpoint("https://opensandbox.example.internal/#x", false), "endpoint must not contain a query or fragment"},
		{"not a URL", endpoint("opensandbox.example.internal", false), "endpoint must be an http(s) URL"},
		{"not a URL with allowInsecureHTTP", endpoint("opensandbox.example.internal", true), "endpoint must be an http(s) URL"},
		{"other scheme", endpoint("ftp://opensandbox.example.internal", true), "endpoint must be an http(s) URL"},
		{"upper-case scheme", endpoint("HTTPS://opensandbox.example.internal", false), "endpoint must be an http(s) URL"},
		{"no host", endpoint("https://", false), "endpoint must be an absolute URL with a host"},
		{"space in the host", endpoint("https://open sandbox.example.internal", false), "endpoint must be an absolute URL with a host"},
		{"endpoint empty", endpoint("", false), "spec.endpoint"},
		{"endpoint 2049 chars", endpoint("https://h/"+strings.Repeat("p", 2039), false), "spec.endpoint"},
		{"endpoint 2048 chars allowed", endpoint("https://h/"+strings.Repeat("p", 2038), false), ""},
		{"apiKeySecretRef namespace with a dot", func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
			p.Spec.APIKeySecretRef.Namespace = "a.b"
		}, "spec.apiKeySecretRef.namespace"},
		{"apiKeySecretRef namespace 64 chars", func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
			p.Spec.APIKeySecretRef.Namespace = strings.Repeat("n", 64)
		}, "spec.apiKeySecretRef.namespace"},
		{"apiKeySecretRef name empty", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.APIKeySecretRef.Name = "" }, "spec.apiKeySecretRef.name"},
		{"apiKeySecretRef name 254 chars", func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
			p.Spec.APIKeySecretRef.Name = strings.Repeat("n", 254)
		}, "spec.apiKeySecretRef.name"},
		{"apiKeySecretRef key with a slash", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.APIKeySecretRef.Key = "a/b" }, "spec.apiKeySecretRef.key"},
		{"apiKeySecretRef key empty", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.APIKeySecretRef.Key = "" }, "spec.apiKeySecretRef.key"},
		{"apiKeySecretRef key 254 chars", func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
			p.Spec.APIKeySecretRef.Key = strings.Repeat("k", 254)
		}, "spec.apiKeySecretRef.key"},
		{"poolRef 254 chars", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.PoolRef = strings.Repeat("p", 254) }, "spec.poolRef"},
		{"requestMapping outside the enum", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.RequestMapping = "Strict" }, "spec.requestMapping"},
		{"requestMapping Native allowed", func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
			p.Spec.RequestMapping = executionv1alpha1.OpenSandboxRequestMappingNative
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validSandboxParameters("")
			p.GenerateName = "sandbox-"
			tc.mut(p)
			err := v.c.Create(v.ctx, p)
			if tc.want == "" {
				wantOK(t, err)
				return
			}
			wantInvalid(t, err, tc.want)
		})
	}
}
