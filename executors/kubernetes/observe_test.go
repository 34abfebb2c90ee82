package kubernetes

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
	t2 = metav1.NewTime(t0.Add(2 * time.Minute))
)

func nativeJob(mut ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ayatori-u", UID: "native-uid"}}
	for _, m := range mut {
		m(j)
	}
	return j
}

func cond(t batchv1.JobConditionType, reason, msg string, at metav1.Time) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue,
			Reason: reason, Message: msg, LastTransitionTime: at})
	}
}

func suspended(j *batchv1.Job) { s := true; j.Spec.Suspend = &s }

func pod(phase corev1.PodPhase, state corev1.ContainerState, mut ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: t0}, Spec: corev1.PodSpec{NodeName: "node"},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: state,
			// The canary stands for anything a container may report:
			// never copied into an Observation.
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "CANARY"}}}}}}
	for _, m := range mut {
		m(&p)
	}
	return p
}

func running(at metav1.Time) corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}
}

func exited(code int32) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: t0, FinishedAt: t1,
		Reason: "Error", Message: "CANARY termination message"}}
}

func waiting(reason string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "CANARY kubelet message"}}
}

func TestObserve(t *testing.T) {
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &t1 }
	for _, tc := range []struct {
		name     string
		job      *batchv1.Job
		pods     []corev1.Pod
		state    execution.State
		terminal bool
		reason   string
		exit     *int32
		failing  bool
		start    *metav1.Time
		finish   *metav1.Time
		message  string
	}{
		{name: "no native Job", job: nil, state: execution.StateNotFound},
		{name: "no pod yet", job: nativeJob(), state: execution.StatePending, message: "create the pod"},
		{name: "pod unschedulable", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, corev1.ContainerState{}, func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status.ContainerStatuses = nil
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/1 nodes are available: 1 Insufficient cpu."}}
		})}, state: execution.StatePending, message: "Insufficient cpu"},
		{name: "pod not scheduled yet", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, corev1.ContainerState{}, func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status.ContainerStatuses = nil
		})}, state: execution.StatePending, message: "scheduled"},
		{name: "container creating", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, waiting("ContainerCreating"))},
			state: execution.StatePending, message: "waiting for the task to start"},
		{name: "config error", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, waiting("CreateContainerConfigError"))},
			state: execution.StatePending, message: "CreateContainerConfigError"},
		{name: "ErrImagePull", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, waiting("ErrImagePull"))},
			state: execution.StatePending, failing: true, reason: executionv1alpha1.ReasonImagePullFailed},
		{name: "ImagePullBackOff", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, waiting("ImagePullBackOff"))},
			state: execution.StatePending, failing: true, reason: executionv1alpha1.ReasonImagePullFailed},
		{name: "InvalidImageName", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, waiting("InvalidImageName"))},
			state: execution.StatePending, failing: true, reason: executionv1alpha1.ReasonImagePullFailed},
		{name: "ErrImageNeverPull", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodPending, waiting("ErrImageNeverPull"))},
			state: execution.StatePending, failing: true, reason: executionv1alpha1.ReasonImagePullFailed},
		{name: "running", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodRunning, running(t1))},
			state: execution.StateRunning, start: &t1},
		{name: "exited, Job controller behind", job: nativeJob(), pods: []corev1.Pod{pod(corev1.PodSucceeded, exited(0))},
			state: execution.StateRunning, start: &t0},
		{name: "complete", job: nativeJob(cond(batchv1.JobComplete, "CompletionsReached", "", t1), func(j *batchv1.Job) { j.Status.CompletionTime = &t2 }),
			pods:  []corev1.Pod{pod(corev1.PodSucceeded, exited(0))},
			state: execution.StateSucceeded, terminal: true, reason: executionv1alpha1.ReasonCompleted, exit: int32Ptr(0), start: &t0, finish: &t2},
		{name: "complete, pods gone", job: nativeJob(cond(batchv1.JobComplete, "", "", t1)),
			state: execution.StateSucceeded, terminal: true, reason: executionv1alpha1.ReasonCompleted, exit: int32Ptr(0), finish: &t1},
		{name: "complete wins over suspend", job: nativeJob(suspended, cond(batchv1.JobComplete, "", "", t1)),
			pods:  []corev1.Pod{pod(corev1.PodSucceeded, exited(0))},
			state: execution.StateSucceeded, terminal: true, reason: executionv1alpha1.ReasonCompleted, exit: int32Ptr(0), start: &t0, finish: &t1},
		{name: "process failed", job: nativeJob(cond(batchv1.JobFailed, "BackoffLimitExceeded", "CANARY", t2)),
			pods:  []corev1.Pod{pod(corev1.PodFailed, exited(3))},
			state: execution.StateFailed, terminal: true, reason: executionv1alpha1.ReasonProcessFailed, exit: int32Ptr(3), start: &t0, finish: &t2,
			message: "code 3"},
		// The kubelet reports the memory-limit kill as the container's
		// terminated reason (found by make e2e: it was ProcessFailed).
		{name: "memory limit", job: nativeJob(cond(batchv1.JobFailed, "BackoffLimitExceeded", "", t2)),
			pods: []corev1.Pod{pod(corev1.PodFailed, func() corev1.ContainerState {
				s := exited(137)
				s.Terminated.Reason = "OOMKilled"
				return s
			}())},
			state: execution.StateFailed, terminal: true, reason: executionv1alpha1.ReasonOOMKilled, exit: int32Ptr(137), start: &t0, finish: &t2,
			message: "memory limit"},
		{name: "evicted", job: nativeJob(cond(batchv1.JobFailed, "BackoffLimitExceeded", "", t2)),
			pods:  []corev1.Pod{pod(corev1.PodFailed, exited(137), func(p *corev1.Pod) { p.Status.Reason = "Evicted" })},
			state: execution.StateFailed, terminal: true, reason: executionv1alpha1.ReasonEvicted, exit: int32Ptr(137), start: &t0, finish: &t2},
		{name: "disruption target", job: nativeJob(cond(batchv1.JobFailed, "BackoffLimitExceeded", "", t2)),
			pods: []corev1.Pod{pod(corev1.PodFailed, corev1.ContainerState{}, func(p *corev1.Pod) {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}}
			})},
			state: execution.StateFailed, terminal: true, reason: executionv1alpha1.ReasonEvicted, finish: &t2},
		{name: "backend failed, exit 0", job: nativeJob(cond(batchv1.JobFailed, "DeadlineExceeded", "Job was active longer than specified deadline", t2)),
			pods:  []corev1.Pod{pod(corev1.PodFailed, exited(0))},
			state: execution.StateFailed, terminal: true, reason: executionv1alpha1.ReasonBackendFailed, start: &t0, finish: &t2,
			message: "DeadlineExceeded: Job was active longer"},
		{name: "backend failed, no pod", job: nativeJob(cond(batchv1.JobFailed, "PodFailurePolicy", "x", t2)),
			state: execution.StateFailed, terminal: true, reason: executionv1alpha1.ReasonBackendFailed, finish: &t2},
		{name: "suspend requested, pod running", job: nativeJob(suspended), pods: []corev1.Pod{pod(corev1.PodRunning, running(t1))},
			state: execution.StateStopping, start: &t1},
		{name: "suspend requested, pod terminating", job: nativeJob(suspended, cond(batchv1.JobSuspended, "JobSuspended", "", t2)),
			pods:  []corev1.Pod{pod(corev1.PodRunning, running(t1), deleting)},
			state: execution.StateStopping, start: &t1},
		{name: "suspend not yet seen by the Job controller", job: nativeJob(suspended), state: execution.StateStopping},
		{name: "cancelled", job: nativeJob(suspended, cond(batchv1.JobSuspended, "JobSuspended", "", t2)),
			state: execution.StateCancelled, terminal: true, reason: executionv1alpha1.ReasonCancelled, finish: &t2},
		{name: "cancelled, terminal pod left", job: nativeJob(suspended, cond(batchv1.JobSuspended, "JobSuspended", "", t2)),
			pods:  []corev1.Pod{pod(corev1.PodFailed, exited(137), deleting)},
			state: execution.StateCancelled, terminal: true, reason: executionv1alpha1.ReasonCancelled, finish: &t2},
		{name: "native Job being deleted", job: nativeJob(func(j *batchv1.Job) { j.DeletionTimestamp = &t2 }),
			state: execution.StateStopping, message: "being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := observe(tc.job, tc.pods)
			if o.State != tc.state || o.Terminal != tc.terminal || o.Reason != tc.reason || o.Failing != tc.failing {
				t.Fatalf("observe = %+v, want state %s terminal %v reason %q failing %v", o, tc.state, tc.terminal, tc.reason, tc.failing)
			}
			if o.Terminal != o.State.Stopped() && o.State != execution.StateNotFound {
				t.Fatalf("Terminal %v for state %s", o.Terminal, o.State)
			}
			if (o.ExitCode == nil) != (tc.exit == nil) || (o.ExitCode != nil && *o.ExitCode != *tc.exit) {
				t.Fatalf("exit code %v, want %v", o.ExitCode, tc.exit)
			}
			checkTime(t, "start", o.StartTime, tc.start)
			checkTime(t, "finish", o.FinishTime, tc.finish)
			if !strings.Contains(o.Message, tc.message) || o.Message == "" || len(o.Message) > maxMessage {
				t.Fatalf("message %q, want it to contain %q", o.Message, tc.message)
			}
			if tc.job != nil && (len(o.References) != 1 || o.References[0] != (execution.Reference{Type: ReferenceTypeJob, ID: "native-uid"})) {
				t.Fatalf("references %+v", o.References)
			}
			if tc.job == nil && o.References != nil {
				t.Fatalf("references %+v for no Job", o.References)
			}
			if b, _ := json.Marshal(o); strings.Contains(string(b), "CANARY") {
				t.Fatalf("observation carries backend text: %s", b)
			}
		})
	}
}

func checkTime(t *testing.T, what string, got *time.Time, want *metav1.Time) {
	t.Helper()
	if (got == nil) != (want == nil) || (got != nil && !got.Equal(want.Time)) {
		t.Fatalf("%s time %v, want %v", what, got, want)
	}
}

func TestObservePrefersTheLivePod(t *testing.T) {
	old := pod(corev1.PodFailed, exited(137))
	live := pod(corev1.PodRunning, running(t2), func(p *corev1.Pod) { p.CreationTimestamp = t1 })
	if o := observe(nativeJob(), []corev1.Pod{old, live}); o.State != execution.StateRunning || !o.StartTime.Equal(t2.Time) {
		t.Fatalf("observe = %+v", o)
	}
}

func TestShort(t *testing.T) {
	s := strings.Repeat("é", 300)
	got := short(s)
	if len(got) > maxMessage || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("short: %d bytes", len(got))
	}
	if short("ok") != "ok" {
		t.Fatal("short changed a short message")
	}
}
