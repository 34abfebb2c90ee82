package opensandbox_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
)

func TestAdmitTask(t *testing.T) {
	secret := executionv1alpha1.EnvVar{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "token"}}}
	optional := true
	optionalSecret := executionv1alpha1.EnvVar{Name: "MAYBE", ValueFrom: &executionv1alpha1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k", Optional: &optional}}}
	value := "literal-value-5c1"
	literal := executionv1alpha1.EnvVar{Name: "PLAIN", Value: &value}
	configMap := executionv1alpha1.EnvVar{Name: "LEVEL", ValueFrom: &executionv1alpha1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "level"}}}
	job := func(mut func(*executionv1alpha1.TaskSpec)) *executionv1alpha1.Job {
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "j"},
			Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "ayatori.test/succeed", Command: []string{"/bin/task"},
				Env: []executionv1alpha1.EnvVar{literal, configMap}}}}
		if mut != nil {
			mut(&j.Spec.Task)
		}
		return j
	}
	params := func(secretEnv, imageAuth bool) *executionv1alpha1.OpenSandboxExecutionParameters {
		return &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "microvm"},
			Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{AllowSecretEnv: secretEnv, AllowImageAuth: imageAuth}}
	}
	withSecret := func(t *executionv1alpha1.TaskSpec) { t.Env = append(t.Env, secret) }
	withOptional := func(t *executionv1alpha1.TaskSpec) { t.Env = append(t.Env, optionalSecret) }
	withPull := func(t *executionv1alpha1.TaskSpec) {
		t.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}, {Name: "mirror"}}
	}
	noCommand := func(t *executionv1alpha1.TaskSpec) { t.Command, t.Args = nil, []string{"--flag"} }
	for name, c := range map[string]struct {
		job    *executionv1alpha1.Job
		params *executionv1alpha1.OpenSandboxExecutionParameters
		reason string
		names  []string
	}{
		"literal and ConfigMap env":       {job(nil), params(false, false), "", nil},
		"Secret env not allowed":          {job(withSecret), params(false, true), executionv1alpha1.ReasonSecretEnvNotAllowed, []string{"TOKEN", "Secret token", "OpenSandboxExecutionParameters microvm", "allowSecretEnv"}},
		"optional Secret env not allowed": {job(withOptional), params(false, false), executionv1alpha1.ReasonSecretEnvNotAllowed, []string{"MAYBE", "Secret absent"}},
		"Secret env allowed":              {job(withSecret), params(true, false), "", nil},
		"image auth not allowed":          {job(withPull), params(true, false), executionv1alpha1.ReasonImageAuthNotAllowed, []string{"registry, mirror", "OpenSandboxExecutionParameters microvm", "allowImageAuth"}},
		"image auth allowed":              {job(withPull), params(false, true), "", nil},
		"no command":                      {job(noCommand), params(true, true), executionv1alpha1.ReasonCommandRequired, []string{"task.command", "entrypoint"}},
		"empty command":                   {job(func(t *executionv1alpha1.TaskSpec) { t.Command = []string{} }), params(false, false), executionv1alpha1.ReasonCommandRequired, nil},
	} {
		t.Run(name, func(t *testing.T) {
			reason, msg := opensandbox.AdmitTask(c.job, c.params)
			if reason != c.reason {
				t.Fatalf("reason %q (%s), want %q", reason, msg, c.reason)
			}
			if (reason == "") != (msg == "") {
				t.Fatalf("reason %q with message %q", reason, msg)
			}
			for _, n := range c.names {
				if !strings.Contains(msg, n) {
					t.Errorf("message %q does not name %q", msg, n)
				}
			}
			if strings.Contains(msg, value) || strings.Contains(msg, "PLAIN") || strings.Contains(msg, "LEVEL") {
				t.Errorf("message %q names a value or an unrelated variable", msg)
			}
		})
	}
}

// requestMapping Native can not be expressed by OpenSandbox unless each
// request equals its limit: refused at admission, never a silent change.
func TestAdmitResources(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	native := &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{RequestMapping: executionv1alpha1.OpenSandboxRequestMappingNative}}
	admission := native.DeepCopy()
	admission.Spec.RequestMapping = executionv1alpha1.OpenSandboxRequestMappingAdmissionOnly
	below := executionv1alpha1.ExecutionResourceRequirements{
		Requests: executionv1alpha1.ResourceValues{CPU: q("500m"), Memory: q("256Mi")},
		Limits:   executionv1alpha1.ResourceValues{CPU: q("1"), Memory: q("256Mi")}}
	equal := executionv1alpha1.ExecutionResourceRequirements{
		Requests: executionv1alpha1.ResourceValues{CPU: q("1000m")},
		Limits:   executionv1alpha1.ResourceValues{CPU: q("1"), Memory: q("1Gi")}}
	noLimit := executionv1alpha1.ExecutionResourceRequirements{Requests: executionv1alpha1.ResourceValues{Memory: q("1Gi")}}
	for _, c := range []struct {
		name   string
		res    executionv1alpha1.ExecutionResourceRequirements
		params *executionv1alpha1.OpenSandboxExecutionParameters
		want   string
	}{
		{"Native, request below limit", below, native, executionv1alpha1.ReasonRequestMappingUnsupported},
		{"Native, request without limit", noLimit, native, executionv1alpha1.ReasonRequestMappingUnsupported},
		{"Native, requests equal limits", equal, native, ""},
		{"AdmissionOnly, request below limit", below, admission, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if reason, msg := opensandbox.AdmitResources(c.res, c.params); reason != c.want {
				t.Fatalf("got %q (%s), want %q", reason, msg, c.want)
			}
		})
	}
}
