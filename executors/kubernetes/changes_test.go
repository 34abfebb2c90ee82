package kubernetes

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stateKey changes with what decides an Observation's result or stop, and
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
		{"pod counts", func(j *batchv1.Job) {
			j.Status.Ready, j.Status.Active, j.Status.Succeeded, j.Status.Terminating = &one, 0, 1, &one
		}, false},
		// The interim conditions come one status write before Complete
		// or Failed; an Observation reads only the final ones, so waking
		// on them cost an Observe that still saw the Job running.
		{"failure target", func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}}
		}, false},
		{"success criteria met", func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}
		}, false},
		{"complete", func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}, true},
		{"failed", func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
		}, true},
		{"suspended condition", func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue}}
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
	// Complete after SuccessCriteriaMet is the change that matters.
	interim, done := base(), base()
	interim.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}
	done.Status.Conditions = append(append([]batchv1.JobCondition(nil), interim.Status.Conditions...), batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
	if stateKey(interim) == stateKey(done) {
		t.Error("Complete after SuccessCriteriaMet: no state change")
	}
}
