package execution_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestCheckIntent: a Cancel is run only for a reason the live Job gives, a
// Delete only for a Job being deleted, and nothing for a Job that is gone
// or was recreated under the same name.
func TestCheckIntent(t *testing.T) {
	deadline := int64(60)
	now := metav1.Now()
	job := func(edit func(*executionv1alpha1.Job)) *executionv1alpha1.Job {
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "build", UID: "job-1"}}
		if edit != nil {
			edit(j)
		}
		return j
	}
	rec := func(op string, reason execution.StopReason) journal.Record {
		r, err := journal.NewIntent(journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: "ci", Name: "build", UID: "job-1", Generation: 1},
			op, string(reason), 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, Reason: reason})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ensure := func(edit func(*execution.EnsureIntent)) journal.Record {
		in := execution.EnsureIntent{Adapter: execution.AdapterKubernetes, JobClass: "std", JobClassUID: "class-1",
			ParametersKind: "KubernetesExecutionParameters", ParametersName: "std", ParametersUID: "params-1", TaskDigest: "sha256:00"}
		if edit != nil {
			edit(&in)
		}
		r, err := journal.NewIntent(journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: "ci", Name: "build", UID: "job-1", Generation: 1},
			execution.OpEnsure, "", 1, in)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	accepted := func(j *executionv1alpha1.Job) {
		j.Status.ResolvedJobClass = &executionv1alpha1.ResolvedJobClassReference{Name: "std", UID: "class-1", ControllerName: executionv1alpha1.ControllerKubernetes,
			ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std", UID: "params-1"}}
	}
	cancelled := func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled }
	deleting := func(j *executionv1alpha1.Job) { j.DeletionTimestamp = &now }
	cases := []struct {
		name    string
		rec     journal.Record
		job     *executionv1alpha1.Job
		refused string
	}{
		{"observe", rec(execution.OpObserve, ""), job(nil), ""},
		{"cancel of a cancelled Job", rec(execution.OpCancel, execution.StopCancelled), job(cancelled), ""},
		{"cancel of a running Job", rec(execution.OpCancel, execution.StopCancelled), job(nil), "desiredState"},
		{"deadline cancel", rec(execution.OpCancel, execution.StopDeadlineExceeded), job(func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = &deadline }), ""},
		{"deadline cancel without a deadline", rec(execution.OpCancel, execution.StopDeadlineExceeded), job(nil), "activeDeadlineSeconds"},
		{"deleted cancel", rec(execution.OpCancel, execution.StopDeleted), job(deleting), ""},
		{"deleted cancel of a live Job", rec(execution.OpCancel, execution.StopDeleted), job(nil), "not being deleted"},
		{"failing cancel", rec(execution.OpCancel, execution.StopFailing), job(nil), ""},
		{"cancel without a reason", rec(execution.OpCancel, ""), job(nil), "reason"},
		{"delete of a Job being deleted", rec(execution.OpDelete, ""), job(deleting), ""},
		{"delete of a live Job", rec(execution.OpDelete, ""), job(nil), "not being deleted"},
		{"a gone Job", rec(execution.OpObserve, ""), nil, "does not exist"},
		{"a recreated Job", rec(execution.OpDelete, ""), job(func(j *executionv1alpha1.Job) { j.UID = "job-2"; j.DeletionTimestamp = &now }), "does not exist"},
		{"ensure with the accepted class", ensure(nil), job(accepted), ""},
		{"ensure before the Job was accepted", ensure(nil), job(nil), "not accepted with"},
		{"ensure with another class", ensure(func(in *execution.EnsureIntent) { in.JobClass = "permissive" }), job(accepted), "not accepted with"},
		{"ensure with a recreated class", ensure(func(in *execution.EnsureIntent) { in.JobClassUID = "class-2" }), job(accepted), "not accepted with"},
		{"ensure with other parameters", ensure(func(in *execution.EnsureIntent) { in.ParametersName = "wide-open" }), job(accepted), "not accepted with"},
		{"ensure with recreated parameters", ensure(func(in *execution.EnsureIntent) { in.ParametersUID = "params-2" }), job(accepted), "not accepted with"},
		{"ensure with another parameters kind", ensure(func(in *execution.EnsureIntent) { in.ParametersKind = "OpenSandboxExecutionParameters" }), job(accepted), "not accepted with"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := execution.CheckIntent(tc.rec, tc.job)
			if tc.refused == "" && got != "" || tc.refused != "" && !strings.Contains(got, tc.refused) {
				t.Fatalf("CheckIntent = %q, want %q", got, tc.refused)
			}
		})
	}
}

// TestClassMismatch: an adapter runs an Ensure only under a class of its
// own controller that references the intent's parameters.
func TestClassMismatch(t *testing.T) {
	class := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "std"}, Spec: executionv1alpha1.JobClassSpec{
		ControllerName: executionv1alpha1.ControllerKubernetes,
		ParametersRef:  executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std"}}}
	in := execution.EnsureIntent{ParametersKind: "KubernetesExecutionParameters", ParametersName: "std"}
	if why := execution.ClassMismatch(class, in, executionv1alpha1.ControllerKubernetes); why != "" {
		t.Fatalf("own class refused: %s", why)
	}
	if why := execution.ClassMismatch(class, in, executionv1alpha1.ControllerOpenSandbox); !strings.Contains(why, "belongs to controller") {
		t.Fatalf("another controller's class: %q", why)
	}
	in.ParametersName = "other"
	if why := execution.ClassMismatch(class, in, executionv1alpha1.ControllerKubernetes); !strings.Contains(why, "references") {
		t.Fatalf("other parameters: %q", why)
	}
}

// TestTaskDigestHasNoLiteralValue: the digest of two tasks that differ
// only in a literal env value is the same (no hash of a value reaches the
// journal), differs for any other change, and digests of the earlier form
// still match.
func TestTaskDigestHasNoLiteralValue(t *testing.T) {
	a, b := "CANARY-short-secret", "other"
	task := func(v *string, image string) executionv1alpha1.TaskSpec {
		return executionv1alpha1.TaskSpec{Image: image, Args: []string{"run"}, Env: []executionv1alpha1.EnvVar{{Name: "TOKEN", Value: v}}}
	}
	da, _ := execution.TaskDigest(task(&a, "img"))
	db, _ := execution.TaskDigest(task(&b, "img"))
	dc, _ := execution.TaskDigest(task(&a, "other-img"))
	if da != db || da == dc || !strings.HasPrefix(da, "sha256v2:") {
		t.Fatalf("digests %s %s %s", da, db, dc)
	}
	if !execution.TaskMatches(task(&a, "img"), da) || execution.TaskMatches(task(&a, "other-img"), da) {
		t.Fatal("TaskMatches")
	}
	raw, _ := json.Marshal(task(&a, "img"))
	sum := sha256.Sum256(raw)
	if !execution.TaskMatches(task(&a, "img"), "sha256:"+hex.EncodeToString(sum[:])) {
		t.Fatal("an earlier-form digest does not match")
	}
}
