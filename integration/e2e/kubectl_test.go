//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubectl runs kubectl against the cluster and returns its trimmed output;
// a failure fails the test.
func kubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	return kubectlIn(ctx, t, nil, args...)
}

func kubectlIn(ctx context.Context, t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	out, err := cluster.Kubectl(ctx, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// apply is kubectl apply -f - of a manifest.
func apply(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	kubectlIn(ctx, t, []byte(manifest), "apply", "-f", "-")
}

// waitFor is kubectl wait --for=<cond> of one object; on timeout it
// fails with the object and the namespace's pods described.
func waitFor(ctx context.Context, t *testing.T, ns, object, cond string, timeout time.Duration) {
	t.Helper()
	args := []string{"wait", object, "--for=" + cond, "--timeout=" + timeout.String()}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	if _, err := cluster.Kubectl(ctx, nil, args...); err != nil {
		desc, _ := cluster.Kubectl(ctx, nil, append(nsArgs(ns), "get", object, "-o", "yaml")...)
		t.Fatalf("%v\n%s\n%s\n%s", err, desc, podReport(ctx, ns), managerLogs(ctx))
	}
}

func nsArgs(ns string) []string {
	if ns == "" {
		return nil
	}
	return []string{"-n", ns}
}

// waitPodDone waits until a pod has ended (Succeeded or Failed).
func waitPodDone(ctx context.Context, t *testing.T, ns, pod string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		out, _ := cluster.Kubectl(ctx, nil, "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.phase}")
		if p := string(out); p == "Succeeded" || p == "Failed" {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("pod %s/%s did not end\n%s", ns, pod, podReport(ctx, ns))
}

// managerLogs is the last lines of both manager replicas' logs.
func managerLogs(ctx context.Context) string {
	out, _ := cluster.Kubectl(ctx, nil, "-n", controllerNS, "logs", "-l", "app.kubernetes.io/name=ayatori-manager", "--tail=40", "--prefix")
	return string(out)
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
