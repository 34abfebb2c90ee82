package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

const crashCanary = "CANARY-crash-admin-pw-91c4"

// TestManagerKilledBetweenIntentAndOutcome kills the manager process
// (SIGKILL, through a failpoint) after it executed BootstrapRegistry but
// before the outcome was appended, restarts it, and checks the Instance
// converges to Ready with no second registry migration and a clean journal.
func TestManagerKilledBetweenIntentAndOutcome(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	n := integration.StartNATS(t)
	pg := integration.StartPostgres(t, integration.PostgresOptions{})
	ctx := context.Background()
	if err := pg.CreateAdminRole(ctx, "ayatori_admin", crashCanary, "CREATEROLE", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	super, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close(ctx)
	if _, err := super.Exec(ctx, "GRANT CREATE ON DATABASE postgres TO ayatori_admin"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ayatori-system"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: "ayatori-system"},
			StringData: map[string]string{"username": "ayatori_admin", "password": crashCanary}},
		&databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "crash"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
			Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(pg.Port)},
			AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "admin"}}},
	} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "ayatori-manager")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	keys := integration.TestJournalKeys(t)
	var logs bytes.Buffer
	start := func(failpoints string) *exec.Cmd {
		args := append(append([]string{"--kubeconfig", cp.KubeconfigPath, "--namespace", "ayatori-system", "--nats-url", n.URL,
			"--postgresql-ca-bundle-path", pg.CAFile, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
			"--instance-resync-interval", "1h", "--retry-base", "500ms", "--retry-max", "2s",
			"--projectors=instance", "--executors=postgresql", "--executor-ack-wait=5s"}, n.Auth.ManagerArgs()...), keys.ManagerJournalArgs()...)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "AYATORI_FAILPOINTS="+failpoints)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	first := start("executor-before-outcome=" + dbcontract.OpBootstrapRegistry)
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	select {
	case err := <-done:
		if ws, ok := first.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("manager exited without the failpoint kill: %v\n%s", err, logs.String())
		}
	case <-time.After(90 * time.Second):
		_ = first.Process.Kill()
		t.Fatalf("failpoint never fired\n%s", logs.String())
	}
	inst := &databasev1alpha1.PostgreSQLInstance{}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: "crash"}, inst); err != nil {
		t.Fatal(err)
	}
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	store, err := journal.Open(ctx, nc, journal.Config{Signer: integration.JournalSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := store.Read(ctx, string(inst.UID))
	if p := journal.Fold(recs).Pending(); len(p) != 1 || p[0].Operation != dbcontract.OpBootstrapRegistry {
		t.Fatalf("after the crash want one pending BootstrapRegistry, got %v", p)
	}

	second := start("")
	defer func() {
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
	}()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		cur := &databasev1alpha1.PostgreSQLInstance{}
		if err := cp.Client.Get(ctx, types.NamespacedName{Name: "crash"}, cur); err != nil {
			return false, nil
		}
		return cur.Status.Phase == databasev1alpha1.InstancePhaseReady, nil
	})
	if err != nil {
		t.Fatalf("Instance did not converge after the restart\n%s", logs.String())
	}
	recs, err = store.Read(ctx, string(inst.UID))
	if err != nil {
		t.Fatal(err)
	}
	boots, applied := 0, int32(0)
	for _, r := range recs {
		if r.Operation == dbcontract.OpBootstrapRegistry && r.Type == journal.TypeIntent {
			boots++
		}
		if r.Operation == dbcontract.OpBootstrapRegistry && r.Type == journal.TypeOutcome {
			var p dbcontract.BootstrapOutcome
			_ = json.Unmarshal(r.Payload, &p)
			applied += p.MigrationsApplied
		}
	}
	// The killed execution applied the migration; the redelivered one
	// found the registry current and applied nothing.
	if boots != 1 || applied != 0 {
		t.Fatalf("BootstrapRegistry intents %d, migrations applied by outcomes %d; want 1 and 0", boots, applied)
	}
	var rows int
	if err := super.QueryRow(ctx, "SELECT count(*) FROM postgresql_tenant_operator.schema_version").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("schema_version rows %d, %v", rows, err)
	}
	var all []journal.Record
	if err := store.Scan(ctx, journal.ScanOptions{}, func(r journal.Record, err error) error {
		if err == nil {
			all = append(all, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v := journal.Verify(all, nil); len(v) > 0 {
		t.Fatalf("journal invariants violated: %+v", v)
	}
	if strings.Contains(logs.String(), crashCanary) {
		t.Fatal("the admin password appears in the manager log")
	}
	if hits, _ := store.ScanForSecret(ctx, crashCanary); len(hits) > 0 {
		t.Fatalf("the admin password appears in the journal at %v", hits)
	}
}
