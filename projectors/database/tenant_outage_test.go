package database_test

import (
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestJournalOutage: the NATS server (the journal) goes away for a while
// during provisioning and comes back on the same port with its data. The
// manager keeps running (readiness reports the outage), no step is decided
// without the journal, and every Tenant then becomes Ready with a clean
// journal.
func TestJournalOutage(t *testing.T) {
	const outage = 8 * time.Second // also passed with 45 s (beyond the consumer's heartbeat checks)
	s := getStack(t)
	ns(t, s, "outage")
	names := []string{"o0", "o1", "o2", "o3"}
	for _, n := range names[:2] {
		newTenant(t, s, "outage", n, nil)
	}
	time.Sleep(500 * time.Millisecond)
	s.NATS.Stop()
	pid := s.ManagerPID()
	for _, n := range names[2:] { // created while the journal is down
		newTenant(t, s, "outage", n, nil)
	}
	time.Sleep(outage)
	if s.ManagerPID() != pid || pid == 0 {
		t.Fatalf("the manager exited while the journal was down:\n%s", integration.Tail(s.ManagerLog, 30))
	}
	if err := s.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		waitTenant(t, s, "outage", n, metav1.ConditionTrue, "Ready", 2*time.Minute)
	}
	if s.ManagerPID() != pid {
		t.Fatalf("the manager restarted during the outage:\n%s", integration.Tail(s.ManagerLog, 30))
	}
	// The consumer resumed too: a Tenant created now goes through every step.
	newTenant(t, s, "outage", "o4", nil)
	waitTenant(t, s, "outage", "o4", metav1.ConditionTrue, "Ready", 2*time.Minute)
	st := journalStore(t, s)
	for _, n := range append(names, "o4") {
		tn := waitTenant(t, s, "outage", n, metav1.ConditionTrue, "Ready", time.Second)
		recs, err := st.Read(t.Context(), string(tn.UID))
		if err != nil {
			t.Fatal(err)
		}
		if v := journal.Verify(recs, nil); len(v) > 0 {
			t.Errorf("%s: journal invariants violated: %+v", n, v)
		}
		if _, ver := kvPassword(t, s, "outage", n); ver != 1 {
			t.Errorf("%s: KV version %d", n, ver)
		}
	}
	if resp, err := http.Get(s.MetricsURL); err != nil {
		t.Fatalf("metrics endpoint gone after the outage: %v", err)
	} else {
		resp.Body.Close()
	}
}

// TestBackendContainersKilledMidProvisioning: the journal's and OpenBao's
// containers are killed (`docker stop -t 0`: SIGKILL right after SIGTERM,
// no time to shut down) while Tenants are being
// provisioned, and started again on the same volumes and ports. As in
// TestJournalOutage, the manager keeps running, every Tenant becomes Ready,
// the journal is clean and each password was generated once. A container
// fault: under the local provider the journal is embedded in the test
// process and cannot be killed alone.
func TestBackendContainersKilledMidProvisioning(t *testing.T) {
	if p := integration.Servers(t); p != integration.ProviderTestcontainers {
		t.Skip("kills the journal's container: AYATORI_TEST_PROVIDER=testcontainers (make test-containers)")
	}
	s := getStack(t)
	ns(t, s, "killed")
	names := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	for _, n := range names {
		newTenant(t, s, "killed", n, nil)
	}
	time.Sleep(300 * time.Millisecond)
	pid := s.ManagerPID()
	if !s.NATS.Kill() {
		t.Fatal("the journal is not a container")
	}
	s.Bao.Kill()
	time.Sleep(3 * time.Second)
	if err := s.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Bao.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := journalStore(t, s)
	for _, n := range names {
		tn := waitTenant(t, s, "killed", n, metav1.ConditionTrue, "Ready", 2*time.Minute)
		recs, err := st.Read(t.Context(), string(tn.UID))
		if err != nil {
			t.Fatal(err)
		}
		if v := journal.Verify(recs, nil); len(v) > 0 {
			t.Errorf("%s: journal invariants violated: %+v", n, v)
		}
		if _, ver := kvPassword(t, s, "killed", n); ver != 1 {
			t.Errorf("%s: KV version %d", n, ver)
		}
	}
	if s.ManagerPID() != pid {
		t.Fatalf("the manager restarted:\n%s", integration.Tail(s.ManagerLog, 30))
	}
}
