package database_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestLeaderHandOver: two manager replicas with --leader-elect. The leader
// is stopped while Tenants are provisioning, first gracefully (SIGTERM: it
// hands its intents back and releases the Lease), then by a crash (SIGKILL:
// the standby waits for the Lease to expire, the intents the dead replica
// held come back after --executor-ack-wait). Every Tenant still becomes
// Ready with one password, and the journal holds no duplicate intent:
// Verify (no intent while the same step is pending) and RepeatedSteps (no
// step decided again after it succeeded) are both empty. `make bench` runs
// the same hand-over with 100 Tenants.
func TestLeaderHandOver(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	le := []string{"--leader-elect", "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}
	s.StopManager()
	t.Cleanup(func() {
		s.StopManager()
		if err := s.StartManager(); err != nil {
			t.Errorf("restart the single manager: %v", err)
		}
	})
	if err := s.StartManager(append(le, "--actor=replica-1")...); err != nil {
		t.Fatal(err)
	}
	ns(t, s, "handover")
	var names []string
	create := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s%d", prefix, i)
			newTenant(t, s, "handover", name, nil)
			names = append(names, name)
		}
	}
	startReplica := func(actor string) *integration.Manager {
		m, err := s.StartReplica(actor, append(le, "--actor="+actor)...)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if resp, err := http.Get(m.MetricsURL); err == nil {
				resp.Body.Close()
				return m
			}
			if time.Now().After(deadline) || m.PID() == 0 {
				t.Fatalf("replica %s did not come up:\n%s", actor, integration.Tail(m.Log, 20))
			}
		}
	}

	// Round 1: graceful hand-over while replica-1 leads.
	create("a", 4)
	waitTenant(t, s, "handover", "a0", metav1.ConditionTrue, "Ready", 2*time.Minute)
	second := startReplica("replica-2")
	s.Primary().Stop(syscall.SIGTERM)
	create("b", 2) // only the new leader can provision these
	for _, n := range names {
		waitTenant(t, s, "handover", n, metav1.ConditionTrue, "Ready", 2*time.Minute)
	}

	// Round 2: replica-2 leads with replica-3 standing by; it dies mid-run.
	if err := s.StartManager(append(le, "--actor=replica-3")...); err != nil {
		t.Fatal(err)
	}
	create("c", 4)
	time.Sleep(time.Second)
	second.Stop(syscall.SIGKILL)
	for _, n := range names {
		waitTenant(t, s, "handover", n, metav1.ConditionTrue, "Ready", 2*time.Minute)
	}

	st := journalStore(t, s)
	actors := map[string]int{}
	for _, n := range names {
		tn := waitTenant(t, s, "handover", n, metav1.ConditionTrue, "Ready", time.Second)
		recs, err := st.Read(ctx, string(tn.UID))
		if err != nil {
			t.Fatal(err)
		}
		if v := journal.Verify(recs, nil); len(v) > 0 {
			t.Errorf("%s: journal invariants violated: %+v", n, v)
		}
		if v := journal.RepeatedSteps(recs); len(v) > 0 {
			t.Errorf("%s: duplicate intents: %+v", n, v)
		}
		if _, ver := kvPassword(t, s, "handover", n); ver != 1 {
			t.Errorf("%s: KV version %d: a second password was written", n, ver)
		}
		for _, r := range recs {
			if r.Type == journal.TypeIntent {
				actors[r.Actor]++
			}
		}
	}
	t.Logf("intents by deciding replica: %v", actors)
	if actors["replica-2"] == 0 {
		t.Errorf("replica-2 never decided anything: the hand-over did not happen (%v)", actors)
	}
}
