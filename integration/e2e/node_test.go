//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNodeRunsContainers: the node runs a real container whose output is
// readable with kubectl logs and resolves a Service name through cluster DNS.
func TestNodeRunsContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pod := `apiVersion: v1
kind: Pod
metadata: {name: node-smoke, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: ayatori-test/debian:bookworm
    command: ["sh", "-c", "echo hello-from-the-node; getent hosts kubernetes.default.svc.cluster.local"]
`
	if _, err := cluster.Kubectl(ctx, []byte(pod), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(context.Background(), nil, "delete", "pod", "node-smoke", "--wait=true")
	})
	if out, err := cluster.Kubectl(ctx, nil, "wait", "pod/node-smoke", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=120s"); err != nil {
		desc, _ := cluster.Kubectl(ctx, nil, "describe", "pod", "node-smoke")
		t.Fatalf("%v %s\n%s", err, out, desc)
	}
	out, err := cluster.Kubectl(ctx, nil, "logs", "node-smoke")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "hello-from-the-node") || !strings.Contains(string(out), "10.96.0.1") {
		t.Fatalf("logs = %q, want the greeting and the kubernetes Service address", out)
	}
}
