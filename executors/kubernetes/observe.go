package kubernetes

import (
	"fmt"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// ReferenceTypeJob is the type of the execution reference naming the native
// batch/v1 Job; its ID is the native Job's UID.
const ReferenceTypeJob = "Job"

// ContainerName is the name of the one container of a native Job's pod.
const ContainerName = "task"

// Waiting reasons of a container the kubelet reports for an image that can
// not be pulled: the execution will not start by itself.
var imagePullFailures = map[string]bool{
	"ErrImagePull":      true,
	"ImagePullBackOff":  true,
	"InvalidImageName":  true,
	"ErrImageNeverPull": true,
}

// maxMessage bounds the length of an Observation message, in bytes.
const maxMessage = 256

// references are the execution references of native Job job.
func references(job *batchv1.Job) []execution.Reference {
	return []execution.Reference{{Type: ReferenceTypeJob, ID: string(job.UID)}}
}

// succeededOwnPod: one of pods (Ayatori's own) ran the task to exit 0.
func succeededOwnPod(pods []corev1.Pod) bool {
	for i := range pods {
		if t := terminatedOf(taskStatus(&pods[i])); t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// observe derives the Observation of the execution from its native Job
// (nil: none exists) and the Job's pods (any order). It reads no clock.
//
// Order: no Job → NotFound; Complete=True → Succeeded; Failed=True → Failed
// (ProcessFailed with the exit code, Evicted, else BackendFailed, never a
// success); spec.suspend (a Cancel) or a deletion in progress → Stopping
// while a pod is not terminal or the Job controller has not confirmed the
// suspension, else Cancelled; otherwise Running once the task container
// runs, Pending before (Failing with ImagePullFailed for an image that can
// not be pulled). Messages are short and never carry an environment value,
// a termination message or a log.
func observe(job *batchv1.Job, pods []corev1.Pod) execution.Observation {
	if job == nil {
		return execution.Observation{State: execution.StateNotFound, Adapter: execution.AdapterKubernetes,
			Message: "no native Job exists for this Job"}
	}
	o := execution.Observation{Adapter: execution.AdapterKubernetes, References: references(job), Revision: job.ResourceVersion}
	pod := mainPod(pods)
	var ctr *corev1.ContainerStatus
	if pod != nil {
		ctr = taskStatus(pod)
	}
	if c := jobCondition(job, batchv1.JobComplete); c != nil {
		o.State, o.Terminal, o.Reason = execution.StateSucceeded, true, executionv1alpha1.ReasonCompleted
		// Complete with one completion: the pod succeeded, every container
		// exited 0.
		o.ExitCode = int32Ptr(0)
		o.Message = "the task exited 0"
		if t := terminatedOf(ctr); t != nil {
			o.StartTime = timePtr(t.StartedAt)
		}
		if job.Status.CompletionTime != nil {
			o.FinishTime = timePtr(*job.Status.CompletionTime)
		} else {
			o.FinishTime = timePtr(c.LastTransitionTime)
		}
		return o
	}
	if c := jobCondition(job, batchv1.JobFailed); c != nil {
		o.State, o.Terminal = execution.StateFailed, true
		o.FinishTime = timePtr(c.LastTransitionTime)
		failed := failedPod(pods)
		var t *corev1.ContainerStateTerminated
		if failed != nil {
			t = terminatedOf(taskStatus(failed))
			if t != nil {
				o.StartTime = timePtr(t.StartedAt)
			}
		}
		switch {
		case failed != nil && evicted(failed):
			o.Reason, o.Message = executionv1alpha1.ReasonEvicted, "the pod was evicted"
			if t != nil {
				o.ExitCode = int32Ptr(t.ExitCode)
			}
		case t != nil && t.Reason == "OOMKilled":
			o.Reason, o.ExitCode = executionv1alpha1.ReasonOOMKilled, int32Ptr(t.ExitCode)
			o.Message = fmt.Sprintf("the task was killed at its memory limit (OOMKilled, exit code %d)", t.ExitCode)
		case t != nil && t.ExitCode != 0:
			o.Reason, o.ExitCode = executionv1alpha1.ReasonProcessFailed, int32Ptr(t.ExitCode)
			o.Message = fmt.Sprintf("the task exited with code %d", t.ExitCode)
		default:
			o.Reason = executionv1alpha1.ReasonBackendFailed
			o.Message = short("the native Job failed: " + c.Reason + ": " + c.Message)
		}
		return o
	}
	stopping := job.Spec.Suspend != nil && *job.Spec.Suspend
	if stopping || job.DeletionTimestamp != nil {
		alive := 0
		for i := range pods {
			if !podTerminal(&pods[i]) {
				alive++
			}
		}
		suspended := jobCondition(job, batchv1.JobSuspended) != nil
		switch {
		case alive > 0:
			o.State, o.Message = execution.StateStopping, fmt.Sprintf("waiting for %d pod(s) to stop", alive)
		case job.DeletionTimestamp != nil:
			o.State, o.Message = execution.StateStopping, "the native Job is being deleted"
		case !suspended:
			o.State, o.Message = execution.StateStopping, "waiting for the Job controller to suspend the native Job"
		default:
			o.State, o.Terminal, o.Reason = execution.StateCancelled, true, executionv1alpha1.ReasonCancelled
			o.Message = "the native Job is suspended and has no running pod"
			if c := jobCondition(job, batchv1.JobSuspended); c != nil {
				o.FinishTime = timePtr(c.LastTransitionTime)
			}
		}
		if t := runningOf(ctr); t != nil {
			o.StartTime = timePtr(t.StartedAt)
		}
		return o
	}
	if pod == nil {
		o.State, o.Message = execution.StatePending, "waiting for the Job controller to create the pod"
		return o
	}
	if r := runningOf(ctr); r != nil {
		o.State, o.StartTime, o.Message = execution.StateRunning, timePtr(r.StartedAt), "the task is running"
		return o
	}
	if t := terminatedOf(ctr); t != nil {
		// The process ended; the Job controller has not recorded it yet.
		o.State, o.StartTime = execution.StateRunning, timePtr(t.StartedAt)
		o.Message = "the task exited; waiting for the Job controller"
		return o
	}
	o.State = execution.StatePending
	if ctr != nil && ctr.State.Waiting != nil {
		w := ctr.State.Waiting
		if imagePullFailures[w.Reason] {
			o.Failing, o.Reason = true, executionv1alpha1.ReasonImagePullFailed
			o.Message = "the image could not be pulled (" + w.Reason + ")"
			return o
		}
		if w.Reason != "" && w.Reason != "ContainerCreating" {
			o.Message = "the container is waiting: " + w.Reason
			return o
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			o.Message = short("the pod can not be scheduled: " + c.Message)
			return o
		}
	}
	if pod.Spec.NodeName == "" {
		o.Message = "waiting for the pod to be scheduled"
	} else {
		o.Message = "waiting for the task to start"
	}
	return o
}

// jobCondition returns job's condition of type t when its status is True.
func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// mainPod is the pod whose state the observation reports: the newest pod
// that is not terminal, else the newest pod (nil: none).
func mainPod(pods []corev1.Pod) *corev1.Pod {
	if len(pods) == 0 {
		return nil
	}
	sorted := make([]*corev1.Pod, len(pods))
	for i := range pods {
		sorted[i] = &pods[i]
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		return sorted[j].CreationTimestamp.Before(&sorted[i].CreationTimestamp)
	})
	for _, p := range sorted {
		if !podTerminal(p) {
			return p
		}
	}
	return sorted[0]
}

// failedPod is the pod that explains a failed Job: an evicted one, else one
// whose task container exited non-zero, else the newest pod.
func failedPod(pods []corev1.Pod) *corev1.Pod {
	for i := range pods {
		if evicted(&pods[i]) {
			return &pods[i]
		}
	}
	for i := range pods {
		if t := terminatedOf(taskStatus(&pods[i])); t != nil && t.ExitCode != 0 {
			return &pods[i]
		}
	}
	return mainPod(pods)
}

// evicted: the kubelet or the API evicted pod (status reason Evicted, or a
// DisruptionTarget condition).
func evicted(pod *corev1.Pod) bool {
	if pod.Status.Reason == "Evicted" {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// podTerminal: pod's phase is Succeeded or Failed (a pod being deleted is
// not terminal until its containers stopped).
func podTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// taskStatus is the status of pod's task container (nil: not reported yet).
func taskStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == ContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func terminatedOf(c *corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if c == nil {
		return nil
	}
	return c.State.Terminated
}

func runningOf(c *corev1.ContainerStatus) *corev1.ContainerStateRunning {
	if c == nil {
		return nil
	}
	return c.State.Running
}

func int32Ptr(v int32) *int32 { return &v }

// timePtr is t as a *time.Time (nil for the zero time).
func timePtr(t metav1.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := t.Time.UTC()
	return &v
}

// short truncates s to maxMessage bytes on a rune boundary.
func short(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
