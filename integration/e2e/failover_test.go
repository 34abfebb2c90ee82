//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLeaderForceDeletedMidWork: the leader replica's pod is deleted with
// --grace-period=0 --force while a Tenant is being provisioned and a Job
// runs; the other replica takes the Lease and everything converges (the
// Tenant Ready, the Job Completed, exactly once), and ayatori-journal
// verify, run in the cluster as the read-only forensics identity, finds
// the journal clean.
func TestLeaderForceDeletedMidWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ensureInstance(ctx, t)
	ensureJobClass(ctx, t)
	jobNamespace(ctx, t, "e2e-failover")
	leader := leaderPod(ctx, t)
	// The Job first: its container runs while the leader dies.
	apply(ctx, t, `apiVersion: execution.ayatori.ddupan.top/v1alpha1
kind: Job
metadata: {name: across-failover, namespace: e2e-failover}
spec:
  task:
    image: ayatori-test/debian:bookworm
    command: ["sh", "-c", "sleep 15; echo done"]
`)
	waitFor(ctx, t, "e2e-failover", "job.execution.ayatori.ddupan.top/across-failover",
		`jsonpath={.status.conditions[?(@.type=="Succeeded")].reason}=Running`, 2*time.Minute)
	var tenants strings.Builder
	for i := 0; i < 3; i++ {
		fmt.Fprintf(&tenants, `---
apiVersion: database.ayatori.ddupan.top/v1alpha1
kind: PostgreSQLTenant
metadata: {name: failover-%[1]d, namespace: e2e-failover}
spec: {instanceRef: shared, database: failover_%[1]d, loginRole: failover_%[1]d, deletionPolicy: Delete}
`, i)
	}
	apply(ctx, t, tenants.String())
	// Mid-provisioning: as soon as the first step is decided.
	waitPlanned(ctx, t, "e2e-failover", "failover-0")
	kubectl(ctx, t, "-n", controllerNS, "delete", "pod", leader, "--grace-period=0", "--force")
	t.Logf("force-deleted the leader %s", leader)

	for i := 0; i < 3; i++ {
		waitFor(ctx, t, "e2e-failover", fmt.Sprintf("postgresqltenant/failover-%d", i), "condition=Ready", 4*time.Minute)
	}
	waitFor(ctx, t, "e2e-failover", "job.execution.ayatori.ddupan.top/across-failover", "condition=Succeeded=True", 3*time.Minute)
	if next := leaderPod(ctx, t); next == leader {
		t.Errorf("the Lease is still held by the deleted pod %s", leader)
	}
	// One native Job: the execution was not started twice.
	if n := kubectl(ctx, t, "-n", "e2e-failover", "get", "jobs.batch", "-o", "name"); strings.Count(n, "job.batch/") != 1 {
		t.Errorf("native Jobs after the failover: %q, want exactly one", n)
	}
	kubectl(ctx, t, "-n", controllerNS, "rollout", "status", "deployment/ayatori-manager", "--timeout=120s")
	journalVerify(ctx, t)
}

// leaderPod is the manager pod holding the leader-election Lease.
func leaderPod(ctx context.Context, t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		holder := kubectl(ctx, t, "-n", controllerNS, "get", "lease", "ayatori-manager.ayatori.ddupan.top", "-o", "jsonpath={.spec.holderIdentity}")
		pods := strings.Fields(kubectl(ctx, t, "-n", controllerNS, "get", "pods", "-l", "app.kubernetes.io/name=ayatori-manager", "-o", "jsonpath={.items[*].metadata.name}"))
		for _, p := range pods {
			if holder == p || strings.HasPrefix(holder, p+"_") {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no manager pod holds the Lease (holder %q, pods %v)", holder, pods)
		}
		time.Sleep(time.Second)
	}
}

// journalVerify runs ayatori-journal verify over the whole stream in a pod
// of the controller namespace, as docs/journal.md tells an operator: the
// product image, the read-only identity's NKey, the NATS CA and the
// trusted keys, labelled so the NetworkPolicy admits it.
func journalVerify(ctx context.Context, t *testing.T) {
	t.Helper()
	kubectl(ctx, t, "-n", controllerNS, "delete", "pod", "journal-verify", "--ignore-not-found", "--wait=true")
	apply(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: journal-verify
  namespace: %s
  labels: {app.kubernetes.io/name: ayatori-journal}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: verify
    image: %s
    command: ["/usr/local/bin/ayatori-journal", "verify",
      "--server", "tls://ayatori-nats:4222", "--nkey", "/etc/nats-reader/nkey",
      "--tlsca", "/etc/nats-ca/ca.crt", "--trusted-keys", "/etc/journal-trusted"]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
    volumeMounts:
    - {name: reader, mountPath: /etc/nats-reader, readOnly: true}
    - {name: ca, mountPath: /etc/nats-ca, readOnly: true}
    - {name: trusted, mountPath: /etc/journal-trusted, readOnly: true}
  volumes:
  - {name: reader, secret: {secretName: ayatori-nats-reader, defaultMode: 0440}}
  - {name: ca, configMap: {name: ayatori-nats-ca}}
  - {name: trusted, configMap: {name: ayatori-journal-trusted-keys}}
`, controllerNS, managerImage))
	waitPodDone(ctx, t, controllerNS, "journal-verify")
	logs := kubectl(ctx, t, "-n", controllerNS, "logs", "journal-verify")
	phase := kubectl(ctx, t, "-n", controllerNS, "get", "pod", "journal-verify", "-o", "jsonpath={.status.phase}")
	t.Logf("ayatori-journal verify:\n%s", logs)
	if phase != "Succeeded" {
		t.Fatalf("ayatori-journal verify failed (%s):\n%s", phase, logs)
	}
	kubectl(ctx, t, "-n", controllerNS, "delete", "pod", "journal-verify", "--wait=true")
}

// ensureInstance makes the Instance "shared" (idempotent) and waits until
// it is Ready.
func ensureInstance(ctx context.Context, t *testing.T) {
	t.Helper()
	apply(ctx, t, fmt.Sprintf(`apiVersion: database.ayatori.ddupan.top/v1alpha1
kind: PostgreSQLInstance
metadata: {name: shared}
spec:
  endpoint: {host: %s, hostaddr: %s, port: 5432, database: postgres, sslMode: verify-full}
  adminCredentialRef: {name: shared-postgresql-admin}
`, postgresHost, postgresHostaddr))
	waitFor(ctx, t, "", "postgresqlinstance/shared", "condition=Ready", 3*time.Minute)
}

// waitPlanned waits until Tenant ns/name has left Pending: its first step
// is decided and provisioning is under way.
func waitPlanned(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		phase := kubectl(ctx, t, "-n", ns, "get", "postgresqltenant", name, "-o", "jsonpath={.status.phase}")
		if phase != "" && phase != "Pending" {
			t.Logf("%s/%s is %s", ns, name, phase)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s was not planned within a minute", ns, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
