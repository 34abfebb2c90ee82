//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestNATSServerDeletedUnderLoad: the journal runs as in prod, on three
// NATS servers with the stream at replicas 3. While Tenants provision and
// Jobs run, the pod of the server leading the journal stream is deleted
// with --grace-period=0 --force; the StatefulSet brings it back on its
// volume. Nothing is lost: every Tenant becomes Ready and every Job
// Completed once, and ayatori-journal verify finds the journal clean.
// Then the PodDisruptionBudget lets one server be evicted, not two.
func TestNATSServerDeletedUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, n = "e2e-nats", 6
	ensureInstance(ctx, t)
	ensureJobClass(ctx, t)
	jobNamespace(ctx, t, ns)
	var load strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&load, `---
apiVersion: database.ayatori.ddupan.top/v1alpha1
kind: PostgreSQLTenant
metadata: {name: load-%[2]d, namespace: %[1]s}
spec: {instanceRef: shared, database: load_%[2]d, loginRole: load_%[2]d, deletionPolicy: Delete}
---
apiVersion: execution.ayatori.ddupan.top/v1alpha1
kind: Job
metadata: {name: load-%[2]d, namespace: %[1]s}
spec:
  task:
    image: ayatori-test/debian:bookworm
    command: ["sh", "-c", "sleep 5; echo load-%[2]d"]
`, ns, i)
	}
	leader := streamLeader(ctx, t)
	apply(ctx, t, load.String())
	waitPlanned(ctx, t, ns, "load-0")
	kubectl(ctx, t, "-n", controllerNS, "delete", "pod", leader, "--grace-period=0", "--force")
	t.Logf("force-deleted %s, the journal stream's leader, under load", leader)
	for i := 0; i < n; i++ {
		waitFor(ctx, t, ns, fmt.Sprintf("postgresqltenant/load-%d", i), "condition=Ready", 5*time.Minute)
		waitFor(ctx, t, ns, fmt.Sprintf("job.execution.ayatori.ddupan.top/load-%d", i), "condition=Succeeded=True", 5*time.Minute)
	}
	if jobs := kubectl(ctx, t, "-n", ns, "get", "jobs.batch", "-o", "name"); strings.Count(jobs, "job.batch/") != n {
		t.Errorf("native Jobs: %q, want exactly %d", jobs, n)
	}
	kubectl(ctx, t, "-n", controllerNS, "rollout", "status", "statefulset/ayatori-nats", "--timeout=180s")
	journalVerify(ctx, t)

	// The PodDisruptionBudget: with the three servers up, one may be
	// evicted (a node drain); a second, while the first is away, may not
	// (the stream would lose its quorum).
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, controllerNS, "pdb/ayatori-nats", "jsonpath={.status.disruptionsAllowed}=1", time.Minute)
	evict := func(pod string) error {
		return cs.PolicyV1().Evictions(controllerNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: controllerNS}})
	}
	if err := evict("ayatori-nats-0"); err != nil {
		t.Fatalf("evicting one NATS server of three: %v", err)
	}
	if err := evict("ayatori-nats-1"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting a second NATS server while one is away: %v, want refused by the PodDisruptionBudget", err)
	}
	kubectl(ctx, t, "-n", controllerNS, "rollout", "status", "statefulset/ayatori-nats", "--timeout=180s")
}

// streamLeader is the NATS pod whose server leads the journal stream, read
// from a server's monitoring endpoint (the test runs on the node, which
// reaches pod addresses).
func streamLeader(ctx context.Context, t *testing.T) string {
	t.Helper()
	ip := kubectl(ctx, t, "-n", controllerNS, "get", "pod", "ayatori-nats-0", "-o", "jsonpath={.status.podIP}")
	deadline := time.Now().Add(time.Minute)
	for {
		if leader := jszLeader(ctx, "http://"+ip+":8222/jsz?accounts=true&streams=true"); leader != "" {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatal("no NATS server reports a leader of the journal stream")
		}
		time.Sleep(time.Second)
	}
}

func jszLeader(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return ""
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if strings.HasPrefix(s.Name, "AYATORI_JOURNAL") && s.Cluster.Leader != "" {
				return s.Cluster.Leader
			}
		}
	}
	return ""
}
