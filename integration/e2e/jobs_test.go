//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

const jobsNS = "e2e-jobs"

// TestJobsRunRealContainers: Ayatori Jobs on the default class (the
// shipped sample) run real containers on the node: an exit 0 whose log
// kubectl reads, an exit 3, a memory-limit kill, an image that does not
// exist, a cancellation while running (the container is gone after), an
// active deadline; then ttlSecondsAfterFinished removes every Job with its
// native Job and pods.
func TestJobsRunRealContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ensureJobClass(ctx, t)
	jobNamespace(ctx, t, jobsNS)
	job := func(name, extra, command string) string {
		return fmt.Sprintf(`apiVersion: execution.ayatori.ddupan.top/v1alpha1
kind: Job
metadata: {name: %s, namespace: %s}
spec:
  ttlSecondsAfterFinished: 3600
  task:
    image: %s
    command: ["sh", "-c", %q]
%s`, name, jobsNS, "ayatori-test/debian:bookworm", command, extra)
	}
	apply(ctx, t, job("hello", "", "echo hello from a real container")+"---\n"+
		job("exit3", "", "echo failing; exit 3")+"---\n"+
		// tail keeps the whole of /dev/zero as one line in memory.
		job("oom", "  resources: {limits: {memory: 32Mi}, requests: {memory: 32Mi}}\n", "tail /dev/zero")+"---\n"+
		job("deadline", "  activeDeadlineSeconds: 8\n", "sleep 600")+"---\n"+
		job("cancel", "", "sleep 600")+"---\n"+
		strings.Replace(job("noimage", "", "true"), "ayatori-test/debian:bookworm", "ayatori-test/does-not-exist:e2e", 1))

	// Cancel while the container runs.
	waitFor(ctx, t, jobsNS, "job.execution.ayatori.ddupan.top/cancel", "jsonpath={.status.conditions[?(@.type==\"Succeeded\")].reason}=Running", 2*time.Minute)
	cancelPods := podsOf(ctx, t, "cancel")
	kubectl(ctx, t, "-n", jobsNS, "patch", "job.execution.ayatori.ddupan.top", "cancel", "--type=merge", "-p", `{"spec":{"desiredState":"Cancelled"}}`)

	for _, c := range []struct{ name, status, reason string }{
		{"hello", "True", "Completed"},
		{"exit3", "False", "ProcessFailed"},
		{"oom", "False", "OOMKilled"},
		{"deadline", "False", "DeadlineExceeded"},
		{"cancel", "False", "Cancelled"},
		{"noimage", "False", "ImagePullFailed"},
	} {
		obj := "job.execution.ayatori.ddupan.top/" + c.name
		waitFor(ctx, t, jobsNS, obj, "condition=Succeeded="+c.status, 3*time.Minute)
		if got := kubectl(ctx, t, "-n", jobsNS, "get", obj, "-o", `jsonpath={.status.conditions[?(@.type=="Succeeded")].reason}`); got != c.reason {
			t.Errorf("%s: Succeeded reason %q, want %q (%s)", c.name, got, c.reason,
				kubectl(ctx, t, "-n", jobsNS, "get", obj, "-o", "jsonpath={.status}"))
		}
	}
	// The log of the container, read as a user reads it.
	if logs := kubectl(ctx, t, "-n", jobsNS, "logs", "-l", "batch.kubernetes.io/controller-uid="+nativeJobUID(ctx, t, "hello")); !strings.Contains(logs, "hello from a real container") {
		t.Errorf("kubectl logs of the hello Job's pod: %q", logs)
	}
	if code := kubectl(ctx, t, "-n", jobsNS, "get", "job.execution.ayatori.ddupan.top/exit3", "-o", "jsonpath={.status.result.exitCode}"); code != "3" {
		t.Errorf("exit3: status.result.exitCode %q, want 3", code)
	}
	if code := kubectl(ctx, t, "-n", jobsNS, "get", "job.execution.ayatori.ddupan.top/oom", "-o", "jsonpath={.status.result.exitCode}"); code != "137" {
		t.Errorf("oom: status.result.exitCode %q, want 137", code)
	}
	// The cancelled Job's container is gone from the node.
	for _, pod := range cancelPods {
		deadline := time.Now().Add(time.Minute)
		for running := runningContainers(t, pod); running != 0; running = runningContainers(t, pod) {
			if time.Now().After(deadline) {
				t.Fatalf("cancel: pod %s still has %d running container(s) on the node", pod, running)
			}
			time.Sleep(time.Second)
		}
	}
	// TTL (which may change after creation): every finished Job goes, with
	// its native Job and pods.
	for _, name := range []string{"hello", "exit3", "oom", "deadline", "cancel", "noimage"} {
		kubectl(ctx, t, "-n", jobsNS, "patch", "job.execution.ayatori.ddupan.top", name, "--type=merge", "-p", `{"spec":{"ttlSecondsAfterFinished":2}}`)
	}
	for _, name := range []string{"hello", "exit3", "oom", "deadline", "cancel", "noimage"} {
		waitFor(ctx, t, jobsNS, "job.execution.ayatori.ddupan.top/"+name, "delete", 3*time.Minute)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := kubectl(ctx, t, "-n", jobsNS, "get", "jobs.batch,pods", "-o", "name")
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after TTL, left in %s: %s", jobsNS, left)
		}
		time.Sleep(2 * time.Second)
	}
}

// nativeJobUID is the UID of the batch/v1 Job behind an Ayatori Job.
func nativeJobUID(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	uid := kubectl(ctx, t, "-n", jobsNS, "get", "job.execution.ayatori.ddupan.top/"+name, "-o", `jsonpath={.status.execution.references[?(@.type=="Job")].id}`)
	if uid == "" {
		t.Fatalf("%s: no Job reference in status.execution", name)
	}
	return uid
}

func podsOf(ctx context.Context, t *testing.T, name string) []string {
	t.Helper()
	out := kubectl(ctx, t, "-n", jobsNS, "get", "pods", "-l", "batch.kubernetes.io/controller-uid="+nativeJobUID(ctx, t, name), "-o", "jsonpath={.items[*].metadata.name}")
	if out == "" {
		t.Fatalf("%s: no pod", name)
	}
	return strings.Fields(out)
}

// runningContainers counts the node's running tasks of the containers of
// pod (in jobsNS), as containerd reports them.
func runningContainers(t *testing.T, pod string) int {
	t.Helper()
	out, err := cluster.Ctr("containers", "ls", "-q",
		`labels."io.kubernetes.pod.namespace"==`+jobsNS+`,labels."io.kubernetes.pod.name"==`+pod)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, id := range strings.Fields(string(out)) {
		if st, err := cluster.Ctr("tasks", "ps", id); err == nil && len(strings.TrimSpace(string(st))) > 0 && strings.Count(string(st), "\n") > 1 {
			n++
		}
	}
	return n
}

// ensureJobClass applies the shipped default JobClass sample and waits
// until it is Ready.
func ensureJobClass(ctx context.Context, t *testing.T) {
	t.Helper()
	sample, err := os.ReadFile(filepath.Join(integration.RepoRoot(), "deploy", "samples", "jobclass-default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	apply(ctx, t, string(sample))
	waitFor(ctx, t, "", "jobclass/default", "condition=Ready", 2*time.Minute)
}

// jobNamespace makes namespace ns with the ServiceAccount ayatori-job the
// default class's parameters name.
func jobNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	apply(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ayatori-job, namespace: %[1]s}
`, ns))
}
