package kubernetes

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// buildJob is the native Job of Ayatori Job aj (named jobName) with
// parameters params and effective resources res (see the package doc,
// "Native Job shape"). It fails with an InvalidResources refusal when a
// quantity of res does not parse.
func buildJob(n native, jobName string, aj *executionv1alpha1.Job, params *executionv1alpha1.KubernetesExecutionParameters, res execution.Resources) (*batchv1.Job, error) {
	resources, err := resourceRequirements(res)
	if err != nil {
		return nil, err
	}
	labels := func() map[string]string {
		return map[string]string{execution.LabelJobUID: n.uid, LabelManagedBy: "ayatori"}
	}
	annotations := func() map[string]string {
		return map[string]string{execution.AnnotationJobName: jobName, execution.AnnotationJobNamespace: n.ns}
	}
	task := aj.Spec.Task
	env := make([]corev1.EnvVar, 0, len(task.Env))
	for _, v := range task.Env {
		ev := corev1.EnvVar{Name: v.Name}
		switch {
		case v.Value != nil:
			ev.Value = *v.Value
		case v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil:
			ev.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: v.ValueFrom.SecretKeyRef.DeepCopy()}
		case v.ValueFrom != nil && v.ValueFrom.ConfigMapKeyRef != nil:
			ev.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: v.ValueFrom.ConfigMapKeyRef.DeepCopy()}
		}
		env = append(env, ev)
	}
	pullPolicy := params.Spec.ImagePullPolicy
	if pullPolicy == "" {
		pullPolicy = corev1.PullIfNotPresent
	}
	one, zero, no := int32(1), int32(0), false
	spec := params.Spec
	pod := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: spec.ServiceAccountName,
		NodeSelector:       copyMap(spec.Scheduling.NodeSelector),
		EnableServiceLinks: &no,
		ImagePullSecrets:   append([]corev1.LocalObjectReference(nil), task.ImagePullSecrets...),
		Containers: []corev1.Container{{
			Name:            ContainerName,
			Image:           task.Image,
			Command:         append([]string(nil), task.Command...),
			Args:            append([]string(nil), task.Args...),
			WorkingDir:      task.WorkingDir,
			Env:             env,
			Resources:       resources,
			ImagePullPolicy: pullPolicy,
		}},
	}
	if spec.RuntimeClassName != "" {
		rc := spec.RuntimeClassName
		pod.RuntimeClassName = &rc
	}
	for _, t := range spec.Scheduling.Tolerations {
		pod.Tolerations = append(pod.Tolerations, *t.DeepCopy())
	}
	if spec.PodSecurityContext != nil {
		pod.SecurityContext = spec.PodSecurityContext.DeepCopy()
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: n.ns, Name: n.name, Labels: labels(), Annotations: annotations()},
		Spec: batchv1.JobSpec{
			BackoffLimit: &zero,
			Completions:  &one,
			Parallelism:  &one,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(), Annotations: annotations()},
				Spec:       pod,
			},
		},
	}, nil
}

// resourceRequirements parses res; an unparsable quantity is an
// InvalidResources refusal (nothing is created).
func resourceRequirements(res execution.Resources) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	for _, q := range []struct {
		value string
		field string
		list  *corev1.ResourceList
		name  corev1.ResourceName
	}{
		{res.RequestsCPU, "requests.cpu", &out.Requests, corev1.ResourceCPU},
		{res.RequestsMemory, "requests.memory", &out.Requests, corev1.ResourceMemory},
		{res.LimitsCPU, "limits.cpu", &out.Limits, corev1.ResourceCPU},
		{res.LimitsMemory, "limits.memory", &out.Limits, corev1.ResourceMemory},
	} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil {
			return out, &execution.Failure{Reason: executionv1alpha1.ReasonInvalidResources, State: execution.StateNotFound,
				Message: fmt.Sprintf("the effective resources' %s is not a Kubernetes quantity; no execution was created", q.field)}
		}
		if *q.list == nil {
			*q.list = corev1.ResourceList{}
		}
		(*q.list)[q.name] = v
	}
	return out, nil
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
