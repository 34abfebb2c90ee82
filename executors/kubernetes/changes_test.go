package kubernetes

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stateKey changes with what an Observation reads from the native Job, and
// only with that.
func TestStateKey(t *testing.T) {
	base := func() *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"}, Status: batchv1.JobStatus{Active: 1}}
	}
	one, yes := int32(1), true
	now := metav1.Now()
	for _, c := range []struct {
		name   string
		mutate func(*batchv1.Job)
		change bool
	}{
		{"labels", func(j *batchv1.Job) { j.Labels = map[string]string{"x": "y"} }, false},
		{"annotations and finalizers", func(j *batchv1.Job) {
			j.Annotations = map[string]string{"x": "y"}
			j.Finalizers = []string{"f"}
		}, false},
		{"resourceVersion alone", func(j *batchv1.Job) { j.ResourceVersion = "2" }, false},
		{"a pod ready", func(j *batchv1.Job) { j.Status.Ready = &one }, true},
		{"no pod active", func(j *batchv1.Job) { j.Status.Active = 0 }, true},
		{"succeeded", func(j *batchv1.Job) { j.Status.Succeeded = 1 }, true},
		{"failed", func(j *batchv1.Job) { j.Status.Failed = 1 }, true},
		{"terminating", func(j *batchv1.Job) { j.Status.Terminating = &one }, true},
		{"complete", func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}, true},
		{"suspended", func(j *batchv1.Job) { j.Spec.Suspend = &yes }, true},
		{"deletion started", func(j *batchv1.Job) { j.DeletionTimestamp = &now }, true},
	} {
		j := base()
		c.mutate(j)
		if got := stateKey(base()) != stateKey(j); got != c.change {
			t.Errorf("%s: state changed %t, want %t", c.name, got, c.change)
		}
	}
}
