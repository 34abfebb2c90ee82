package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestWorkloadSmoke runs workloads on the real controller manager,
// scheduler and kwok fake nodes: one control plane, a namespace per case.
func TestWorkloadSmoke(t *testing.T) {
	w := integration.StartWorkload(t, integration.WorkloadOptions{})
	c := w.CP.Client

	ns := func(t *testing.T, name string) (context.Context, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		if err := w.CreateNamespace(ctx, name); err != nil {
			t.Fatal(err)
		}
		return ctx, name
	}

	t.Run("JobSucceeds", func(t *testing.T) {
		ctx, ns := ns(t, "job-succeeds")
		job := newJob(ns, "ok", integration.ImageSucceed, nil)
		if err := c.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		waitJobCondition(ctx, t, c, job, batchv1.JobComplete)
		pods := jobPods(ctx, t, c, job)
		if len(pods) != 1 || pods[0].Status.Phase != corev1.PodSucceeded {
			t.Fatalf("want one Succeeded pod, got %s", podSummary(pods))
		}
	})

	t.Run("JobFailsWithExitCode", func(t *testing.T) {
		ctx, ns := ns(t, "job-fails")
		job := newJob(ns, "bad", integration.ImageExit, []corev1.EnvVar{{Name: integration.EnvExitCode, Value: "3"}})
		if err := c.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		cond := waitJobCondition(ctx, t, c, job, batchv1.JobFailed)
		if cond.Reason != batchv1.JobReasonBackoffLimitExceeded {
			t.Errorf("Failed condition reason %q, want %q", cond.Reason, batchv1.JobReasonBackoffLimitExceeded)
		}
		pods := jobPods(ctx, t, c, job)
		if len(pods) != 1 || pods[0].Status.Phase != corev1.PodFailed {
			t.Fatalf("want one Failed pod, got %s", podSummary(pods))
		}
		cs := pods[0].Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 3 {
			t.Fatalf("want container terminated with exit code 3, got %+v", cs)
		}
	})

	t.Run("ForegroundDeleteRemovesPods", func(t *testing.T) {
		ctx, ns := ns(t, "job-foreground")
		job := newJob(ns, "hang", integration.ImageHang, nil)
		job.Spec.Parallelism = ptr.To[int32](2)
		job.Spec.Completions = ptr.To[int32](2)
		if err := c.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "two Running pods", func() (bool, error) {
			pods := jobPods(ctx, t, c, job)
			running := 0
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == 2, nil
		})
		if err := c.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
			t.Fatal(err)
		}
		// Foreground: the Job stays (with the foregroundDeletion finalizer)
		// until the garbage collector has deleted its pods.
		poll(ctx, t, "Job and its pods gone", func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
			return len(jobPods(ctx, t, c, job)) == 0, nil
		})
	})

	t.Run("TTLAfterFinishedDeletesJob", func(t *testing.T) {
		ctx, ns := ns(t, "job-ttl")
		job := newJob(ns, "ttl", integration.ImageSucceed, nil)
		job.Spec.TTLSecondsAfterFinished = ptr.To[int32](0)
		if err := c.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "finished Job and its pods deleted", func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
			return len(jobPods(ctx, t, c, job)) == 0, nil
		})
	})

	t.Run("SlowStop", func(t *testing.T) {
		ctx, ns := ns(t, "slow-stop")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow",
				Annotations: map[string]string{integration.AnnotationStopDelay: "2s"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: integration.ImageSlowStop}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "pod Running", func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			return err == nil && pod.Status.Phase == corev1.PodRunning, err
		})
		start := time.Now()
		if err := c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "pod gone", func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Fatalf("slow-stop pod went in %s, want about 2s", took)
		} else {
			t.Logf("slow-stop pod went in %s", took)
		}
	})

	t.Run("OversizedRequestUnschedulable", func(t *testing.T) {
		ctx, ns := ns(t, "oversized")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "main", Image: integration.ImageHang,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("64"), // the fake node has 4
				}},
			}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "PodScheduled=False/Unschedulable", func() (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					if !strings.Contains(cond.Message, "Insufficient cpu") {
						return false, fmt.Errorf("unschedulable for another reason: %s", cond.Message)
					}
					return true, nil
				}
			}
			return false, nil
		})
		time.Sleep(2 * time.Second)
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
			t.Fatalf("oversized pod was placed: node %q phase %s", pod.Spec.NodeName, pod.Status.Phase)
		}
	})

	t.Run("ImagePullFailure", func(t *testing.T) {
		ctx, ns := ns(t, "pull-fail")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nopull"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: integration.ImagePullFail}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "container waiting in ErrImagePull", func() (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			cs := pod.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ErrImagePull", nil
		})
		if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName == "" {
			t.Fatalf("want a scheduled Pending pod, got node %q phase %s", pod.Spec.NodeName, pod.Status.Phase)
		}
	})
}

// TestWorkloadNoProcessOutlivesKilledTest starts a Workload in a child test
// binary, SIGKILLs that binary and checks every server process it started
// is gone (parent-death signals).
func TestWorkloadNoProcessOutlivesKilledTest(t *testing.T) {
	if os.Getenv("AYATORI_WORKLOAD_CHILD") == "1" {
		w := integration.StartWorkload(t, integration.WorkloadOptions{})
		fmt.Printf("PIDS %s\n", strings.Trim(fmt.Sprint(w.Pids()), "[]"))
		time.Sleep(10 * time.Minute) // killed by the parent
		return
	}
	integration.Servers(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkloadNoProcessOutlivesKilledTest$", "-test.v")
	cmd.Env = integration.ChildTestEnv(t, "AYATORI_WORKLOAD_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, _ := strconv.Atoi(f)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 3 {
		t.Fatalf("child printed no PIDS line (got %v)", pids)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("pid %d not running before the kill: %v", pid, err)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	poll(ctx, t, "no server process left", func() (bool, error) {
		for _, pid := range pids {
			if alive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
}

// alive reports whether pid runs (a zombie, reaped by init later, is dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func newJob(ns, name, image string, env []corev1.EnvVar) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: image, Env: env}},
			}},
		},
	}
}

func jobPods(ctx context.Context, t *testing.T, c client.Client, job *batchv1.Job) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func podSummary(pods []corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		parts = append(parts, fmt.Sprintf("%s:%s", p.Name, p.Status.Phase))
	}
	return fmt.Sprintf("%d pods %v", len(pods), parts)
}

func waitJobCondition(ctx context.Context, t *testing.T, c client.Client, job *batchv1.Job, typ batchv1.JobConditionType) batchv1.JobCondition {
	t.Helper()
	var got batchv1.JobCondition
	poll(ctx, t, "Job condition "+string(typ), func() (bool, error) {
		j := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
			return false, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == typ && cond.Status == corev1.ConditionTrue {
				got = cond
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

func poll(ctx context.Context, t *testing.T, what string, check func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		done, err := check()
		if err != nil {
			last = err
		}
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}
