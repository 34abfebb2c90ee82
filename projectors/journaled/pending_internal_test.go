package journaled

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestPendingIntentsCollector: per domain, kind and operation, the count
// of pending intents and the age of the oldest (on this process's clock);
// an object with nothing pending, or gone, leaves no series.
func TestPendingIntentsCollector(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	p := &pendingSet{objects: map[pendingKey]pendingObject{}, now: func() time.Time { return now }}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	kind, domain := kindOf(&executionv1alpha1.Job{})
	if kind != "Job" || domain != "execution" {
		t.Fatalf("kindOf = %q, %q", kind, domain)
	}
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	p.set(kind, domain, a, []journal.Record{{Operation: "Ensure", Time: now.Add(-90 * time.Second)}, {Operation: "Observe", Time: now.Add(-5 * time.Second)}})
	p.set(kind, domain, b, []journal.Record{{Operation: "Ensure", Time: now.Add(-30 * time.Second)}})
	want := `
# HELP ayatori_intent_oldest_pending_age_seconds Age of the oldest pending intent, by domain, kind and operation: seconds since the leader first observed it (its own clock).
# TYPE ayatori_intent_oldest_pending_age_seconds gauge
ayatori_intent_oldest_pending_age_seconds{domain="execution",kind="Job",operation="Ensure"} 90
ayatori_intent_oldest_pending_age_seconds{domain="execution",kind="Job",operation="Observe"} 5
# HELP ayatori_intents_pending Intents decided and not yet answered by an outcome, as the leader's last pass of each object saw them, by domain, kind and operation.
# TYPE ayatori_intents_pending gauge
ayatori_intents_pending{domain="execution",kind="Job",operation="Ensure"} 2
ayatori_intents_pending{domain="execution",kind="Job",operation="Observe"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	p.set(kind, domain, a, nil)
	p.set(kind, domain, b, nil)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series after every object settled (err %v), want 0", n, err)
	}
}
