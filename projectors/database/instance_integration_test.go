package database_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	dbprojector "git.ddupan.top/panxiao81/ayatori/projectors/database"
)

func opsOf(t *testing.T, e *env, uid types.UID) (intents, outcomes map[string]int) {
	t.Helper()
	recs, err := e.store.Read(context.Background(), string(uid))
	if err != nil {
		t.Fatal(err)
	}
	intents, outcomes = map[string]int{}, map[string]int{}
	for _, r := range recs {
		if r.Type == journal.TypeIntent {
			intents[r.Operation]++
		} else if r.Type == journal.TypeOutcome {
			outcomes[r.Operation+"/"+string(r.Result.Class)]++
		}
	}
	return intents, outcomes
}

// TestInstanceReady: a valid Instance reaches Ready through one
// ObserveInstance and one BootstrapRegistry intent/outcome pair.
func TestInstanceReady(t *testing.T) {
	e := getEnv(t)
	e.adminSecret(t, "ready-admin", "ayatori_admin", adminCanary)
	inst := e.instance(t, "ready", "ready-admin", nil)
	got := e.waitReady(t, "ready", metav1.ConditionTrue, "Ready", 60*time.Second)
	if got.Status.Phase != databasev1alpha1.InstancePhaseReady || !strings.HasPrefix(got.Status.PostgreSQLVersion, "15.") {
		t.Fatalf("status %s version %q", dumpStatus(got), got.Status.PostgreSQLVersion)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
	}
	found := false
	for _, f := range got.Finalizers {
		found = found || f == dbprojector.InstanceFinalizer
	}
	if !found {
		t.Fatalf("finalizer missing: %v", got.Finalizers)
	}
	intents, outcomes := opsOf(t, e, inst.UID)
	if intents[dbcontract.OpBootstrapRegistry] != 1 || outcomes[dbcontract.OpBootstrapRegistry+"/Succeeded"] != 1 || outcomes[dbcontract.OpObserveInstance+"/Succeeded"] < 1 {
		t.Fatalf("journal: intents %v outcomes %v", intents, outcomes)
	}
	// The forensics CLI shows the pairs.
	out, err := exec.Command("go", append(append([]string{"run", "../../cmd/ayatori-journal", "--server", e.nats.URL}, e.nats.Auth.ReaderArgs()...), "timeline", "--uid", string(inst.UID))...).CombinedOutput()
	if err != nil {
		t.Fatalf("ayatori-journal timeline: %v\n%s", err, out)
	}
	for _, want := range []string{"ObserveInstance", "BootstrapRegistry", "intent→outcome", "Succeeded"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("timeline lacks %q:\n%s", want, out)
		}
	}
	// The registry exists, at the version of this build's migrations.
	var v int32
	c, err := pgx.Connect(context.Background(), e.pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(context.Background(), "SELECT version FROM postgresql_tenant_operator.schema_version").Scan(&v); err != nil || v != pgexec.KnownRegistryVersion() {
		t.Fatalf("registry version %d, %v", v, err)
	}
}

// TestInstanceTLSAndAuthFailures: wrong CA, wrong host name, wrong IP SAN
// and sslMode disable against a TLS-only server are AuthenticationFailed,
// and nothing is written to PostgreSQL.
func TestInstanceTLSAndAuthFailures(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	pg2 := integration.StartPostgres(t, integration.PostgresOptions{})
	if err := pg2.CreateAdminRole(ctx, "ayatori_admin", adminCanary, "CREATEROLE", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	e.adminSecret(t, "tls-admin", "ayatori_admin", adminCanary)
	// pg2's own CA is not the executor's trusted bundle (that is the shared
	// server's CA): re-issue pg2's certificate from the trusted CA where a
	// case needs a trusted chain.
	on2 := func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Port = int32(pg2.Port) }
	t.Run("untrusted CA", func(t *testing.T) {
		e.instance(t, "tls-wrong-ca", "tls-admin", on2)
		got := e.waitReady(t, "tls-wrong-ca", metav1.ConditionFalse, "AuthenticationFailed", 30*time.Second)
		if !strings.Contains(readyMessage(got), "trusted CA") {
			t.Fatalf("message %q", readyMessage(got))
		}
	})
	if err := pg2.ReplaceServerCert(e.pg.CA, []string{"localhost"}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // SIGHUP reload
	t.Run("wrong host name", func(t *testing.T) {
		e.instance(t, "tls-wrong-host", "tls-admin", func(i *databasev1alpha1.PostgreSQLInstance) { on2(i); i.Spec.Endpoint.Host = "wrong.example" })
		got := e.waitReady(t, "tls-wrong-host", metav1.ConditionFalse, "AuthenticationFailed", 30*time.Second)
		if !strings.Contains(readyMessage(got), "host name") {
			t.Fatalf("message %q", readyMessage(got))
		}
	})
	t.Run("sslMode disable against a TLS-only server", func(t *testing.T) {
		e.instance(t, "tls-disable", "tls-admin", func(i *databasev1alpha1.PostgreSQLInstance) {
			on2(i)
			i.Spec.Endpoint.SSLMode = databasev1alpha1.SSLModeDisable
		})
		e.waitReady(t, "tls-disable", metav1.ConditionFalse, "AuthenticationFailed", 30*time.Second)
	})
	t.Run("a server that asks for the admin password in cleartext", func(t *testing.T) {
		restore, err := pg2.PrependHBA("hostssl all ayatori_admin all password")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = restore() }()
		e.instance(t, "auth-cleartext", "tls-admin", on2)
		got := e.waitReady(t, "auth-cleartext", metav1.ConditionFalse, "AuthenticationFailed", 30*time.Second)
		if msg := readyMessage(got); !strings.Contains(msg, "no password was sent") || !strings.Contains(msg, "scram-sha-256") {
			t.Fatalf("message %q", msg)
		}
		if log, err := pg2.ReadLog(ctx); err == nil && strings.Contains(string(log), adminCanary) {
			t.Fatal("the admin password reached the server")
		}
	})
	t.Run("certificate without the hostaddr IP SAN", func(t *testing.T) {
		if err := pg2.ReplaceServerCert(e.pg.CA, []string{"localhost"}, []string{"192.0.2.1"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		e.instance(t, "tls-wrong-ip", "tls-admin", on2)
		got := e.waitReady(t, "tls-wrong-ip", metav1.ConditionFalse, "AuthenticationFailed", 30*time.Second)
		if !strings.Contains(readyMessage(got), "hostaddr") {
			t.Fatalf("message %q", readyMessage(got))
		}
	})
	// Nothing was written: pg2 has no registry.
	c, err := pgx.Connect(ctx, pg2.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, "SELECT to_regnamespace('postgresql_tenant_operator') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("registry schema exists on the rejected server: %v %v", exists, err)
	}
}

func readyMessage(i *databasev1alpha1.PostgreSQLInstance) string {
	for _, c := range i.Status.Conditions {
		if c.Type == "Ready" {
			return c.Message
		}
	}
	return ""
}

// TestInstanceCredentials: missing Secret -> not Ready, created later ->
// Ready without touching the Instance; password rotated in PostgreSQL and
// the Secret -> reconnect and Ready; metadata-only change -> no reconnect.
func TestInstanceCredentials(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	if err := e.pg.CreateAdminRole(ctx, "rotating_admin", adminCanary+"-1", "CREATEROLE", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	// Inherit the registry privileges of the role that owns it.
	if err := e.superExec(ctx, "GRANT ayatori_admin TO rotating_admin"); err != nil {
		t.Fatal(err)
	}
	inst := e.instance(t, "creds", "creds-admin", nil)
	got := e.waitReady(t, "creds", metav1.ConditionFalse, "DependencyUnavailable", 30*time.Second)
	if got.Status.Phase != databasev1alpha1.InstancePhasePending {
		t.Fatalf("phase %s before the Secret exists", got.Status.Phase)
	}
	sec := e.adminSecret(t, "creds-admin", "rotating_admin", adminCanary+"-1")
	e.waitReady(t, "creds", metav1.ConditionTrue, "Ready", 30*time.Second)
	gen1 := e.pools.Generation(string(inst.UID))
	if gen1 == 0 {
		t.Fatal("no pool for the Instance")
	}

	// Metadata-only change: re-observed, same pool.
	patch := client.MergeFrom(sec.DeepCopy())
	sec.Labels = map[string]string{"touched": "yes"}
	if err := e.cp.Client.Patch(ctx, sec, patch); err != nil {
		t.Fatal(err)
	}
	waitObservedSecret(t, e, inst.UID, sec.ResourceVersion)
	e.waitReady(t, "creds", metav1.ConditionTrue, "Ready", 30*time.Second)
	if g := e.pools.Generation(string(inst.UID)); g != gen1 {
		t.Fatalf("metadata-only Secret change reconnected (pool generation %d -> %d)", gen1, g)
	}

	// Password rotated by the admin in PostgreSQL and in the Secret.
	if err := e.superExec(ctx, "ALTER ROLE rotating_admin PASSWORD '"+adminCanary+"-2'"); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(sec.DeepCopy())
	sec.Data["password"] = []byte(adminCanary + "-2")
	if err := e.cp.Client.Patch(ctx, sec, patch); err != nil {
		t.Fatal(err)
	}
	waitObservedSecret(t, e, inst.UID, sec.ResourceVersion)
	e.waitReady(t, "creds", metav1.ConditionTrue, "Ready", 30*time.Second)
	if g := e.pools.Generation(string(inst.UID)); g == gen1 {
		t.Fatal("credential change did not open a new pool")
	}
}

// waitObservedSecret waits for a successful observation that used the
// Secret at resourceVersion rv.
func waitObservedSecret(t *testing.T, e *env, uid types.UID, rv string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		recs, err := e.store.Read(ctx, string(uid))
		if err != nil {
			return false, nil
		}
		for _, r := range recs {
			if r.Type == journal.TypeOutcome && r.Operation == dbcontract.OpObserveInstance && r.Result.Class == journal.Succeeded {
				var p dbcontract.ObserveOutcome
				if json.Unmarshal(r.Payload, &p) == nil && p.SecretResourceVersion == rv {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no successful observation with Secret resourceVersion %s", rv)
	}
}

// TestInstancePrivileges: without CREATEROLE -> InsufficientPrivileges;
// granting it -> Ready, automatically.
func TestInstancePrivileges(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	if err := e.pg.CreateAdminRole(ctx, "weak_admin", adminCanary+"-w", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	e.adminSecret(t, "weak-admin", "weak_admin", adminCanary+"-w")
	e.instance(t, "weak", "weak-admin", nil)
	got := e.waitReady(t, "weak", metav1.ConditionFalse, "InsufficientPrivileges", 30*time.Second)
	if !strings.Contains(readyMessage(got), "CREATEROLE") {
		t.Fatalf("message %q", readyMessage(got))
	}
	for _, sql := range []string{"ALTER ROLE weak_admin CREATEROLE", "GRANT ayatori_admin TO weak_admin"} {
		if err := e.superExec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	e.waitReady(t, "weak", metav1.ConditionTrue, "Ready", 60*time.Second)
}

// TestInstanceDependencyOutage: PostgreSQL stopped -> DependencyUnavailable;
// restarted -> Ready again, automatically.
func TestInstanceDependencyOutage(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	pg3 := integration.StartPostgres(t, integration.PostgresOptions{})
	if err := pg3.ReplaceServerCert(e.pg.CA, []string{"localhost"}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := pg3.CreateAdminRole(ctx, "ayatori_admin", adminCanary, "CREATEROLE", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg3.SuperuserDSN("postgres"))
	if err == nil {
		_, err = c.Exec(ctx, "GRANT CREATE ON DATABASE postgres TO ayatori_admin")
		c.Close(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.adminSecret(t, "outage-admin", "ayatori_admin", adminCanary)
	e.instance(t, "outage", "outage-admin", func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Port = int32(pg3.Port) })
	e.waitReady(t, "outage", metav1.ConditionTrue, "Ready", 60*time.Second)
	pg3.Stop()
	e.waitReady(t, "outage", metav1.ConditionFalse, "DependencyUnavailable", 60*time.Second)
	if err := pg3.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, "outage", metav1.ConditionTrue, "Ready", 60*time.Second)
}

// TestInstanceStatusRebuilt: a cleared status is rebuilt to Ready from a
// fresh observation; a forged phase: Ready on a fresh Instance does not
// skip validation.
func TestInstanceStatusRebuilt(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	e.adminSecret(t, "rebuild-admin", "ayatori_admin", adminCanary)
	inst := e.instance(t, "rebuild", "rebuild-admin", nil)
	e.waitReady(t, "rebuild", metav1.ConditionTrue, "Ready", 60*time.Second)
	intentsBefore, _ := opsOf(t, e, inst.UID)

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLInstance{}
		if err := e.cp.Client.Get(ctx, types.NamespacedName{Name: "rebuild"}, cur); err != nil {
			return err
		}
		cur.Status = databasev1alpha1.PostgreSQLInstanceStatus{}
		return e.cp.Client.Status().Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, "rebuild", metav1.ConditionTrue, "Ready", 60*time.Second)
	intentsAfter, _ := opsOf(t, e, inst.UID)
	if intentsAfter[dbcontract.OpObserveInstance] <= intentsBefore[dbcontract.OpObserveInstance] {
		t.Fatal("status was rebuilt without a fresh observation")
	}

	// Forged phase on a brand-new Instance whose Secret does not work.
	e.adminSecret(t, "forged-admin", "ayatori_admin", "wrong-password")
	e.instance(t, "forged", "forged-admin", nil)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		forged := &databasev1alpha1.PostgreSQLInstance{}
		if err := e.cp.Client.Get(ctx, types.NamespacedName{Name: "forged"}, forged); err != nil {
			return err
		}
		forged.Status = databasev1alpha1.PostgreSQLInstanceStatus{Phase: databasev1alpha1.InstancePhaseReady, ObservedGeneration: forged.Generation,
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", Message: "forged", LastTransitionTime: metav1.Now(), ObservedGeneration: forged.Generation}}}
		return e.cp.Client.Status().Update(ctx, forged)
	}); err != nil {
		t.Fatal(err)
	}
	got := e.waitReady(t, "forged", metav1.ConditionFalse, "AuthenticationFailed", 30*time.Second)
	if got.Status.Phase == databasev1alpha1.InstancePhaseReady {
		t.Fatal("forged phase survived")
	}
}

// TestInstanceDeletionWaitsForTenants: a referenced Instance keeps its
// finalizer; removing the reference releases it; nothing external is deleted.
func TestInstanceDeletionWaitsForTenants(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	e.adminSecret(t, "del-admin", "ayatori_admin", adminCanary)
	e.instance(t, "del", "del-admin", nil)
	e.waitReady(t, "del", metav1.ConditionTrue, "Ready", 60*time.Second)
	if err := e.cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "del-app"}}); err != nil {
		t.Fatal(err)
	}
	tenant := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "del-app"},
		Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "del"}}
	if err := e.cp.Client.Create(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	inst := &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "del"}}
	if err := e.cp.Client.Delete(ctx, inst); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		cur := &databasev1alpha1.PostgreSQLInstance{}
		if err := e.cp.Client.Get(ctx, types.NamespacedName{Name: "del"}, cur); err != nil {
			return false, err
		}
		return cur.Status.Phase == databasev1alpha1.InstancePhaseDeleting, nil
	})
	if err != nil {
		t.Fatalf("Instance did not enter Deleting: %v", err)
	}
	time.Sleep(2 * time.Second)
	cur := &databasev1alpha1.PostgreSQLInstance{}
	if err := e.cp.Client.Get(ctx, types.NamespacedName{Name: "del"}, cur); err != nil {
		t.Fatalf("referenced Instance is gone: %v", err)
	}
	if err := e.cp.Client.Delete(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := e.cp.Client.Get(ctx, types.NamespacedName{Name: "del"}, &databasev1alpha1.PostgreSQLInstance{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	if err != nil {
		t.Fatal("Instance not released after its last Tenant went away")
	}
	// Nothing external was deleted: the registry is still there.
	var exists bool
	c, err := pgx.Connect(ctx, e.pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.QueryRow(ctx, "SELECT to_regclass('postgresql_tenant_operator.tenant_ownership') IS NOT NULL").Scan(&exists); err != nil || !exists {
		t.Fatalf("registry gone after Instance deletion: %v %v", exists, err)
	}
}

// TestZZAdminCanaryNeverLeaks runs last (alphabetical order within the file
// set): the admin password appears in no log, Event, Condition, CR dump,
// metrics output or journal record.
func TestZZAdminCanaryNeverLeaks(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	if !strings.Contains(e.logs.String(), "Reconcile") && e.logs.String() == "" {
		t.Log("manager log is empty")
	}
	check := func(where, text string) {
		t.Helper()
		if strings.Contains(text, "CANARY-admin-pw") {
			t.Errorf("admin password canary found in %s", where)
		}
	}
	check("manager logs", e.logs.String())
	var insts databasev1alpha1.PostgreSQLInstanceList
	if err := e.cp.Client.List(ctx, &insts); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(insts)
	check("Instance dumps (spec, status, conditions)", string(b))
	var evs eventsv1.EventList
	if err := e.cp.Client.List(ctx, &evs); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(evs)
	check("Events", string(b))
	var coreEvs corev1.EventList
	if err := e.cp.Client.List(ctx, &coreEvs); err == nil {
		b, _ = json.Marshal(coreEvs)
		check("core Events", string(b))
	}
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var mb strings.Builder
	for _, mf := range mfs {
		_, _ = expfmt.MetricFamilyToText(&mb, mf)
	}
	check("metrics", mb.String())
	hits, err := e.store.ScanForSecret(ctx, "CANARY-admin-pw")
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) > 0 {
		t.Errorf("admin password canary in journal records %v", hits)
	}
	if len(insts.Items) == 0 || len(evs.Items)+len(coreEvs.Items) == 0 {
		t.Fatalf("the scan saw %d Instances and %d Events: nothing to scan means nothing proven", len(insts.Items), len(evs.Items)+len(coreEvs.Items))
	}
}

// Issue 12, fault 1 for the Instance: once its journal aged out (every
// record purged, the checkpoint kept), a Ready Instance is still
// re-observed — it reports a PostgreSQL outage and recovers. Before
// checkpoints the next attempt was computed from a count, its intent ID
// existed already, Append answered Duplicate, and the Instance stayed
// Ready while PostgreSQL was down.
func TestInstanceReobservedAfterJournalRetention(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	pg4 := integration.StartPostgres(t, integration.PostgresOptions{})
	if err := pg4.ReplaceServerCert(e.pg.CA, []string{"localhost"}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := pg4.CreateAdminRole(ctx, "ayatori_admin", adminCanary, "CREATEROLE", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg4.SuperuserDSN("postgres"))
	if err == nil {
		_, err = c.Exec(ctx, "GRANT CREATE ON DATABASE postgres TO ayatori_admin")
		c.Close(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.adminSecret(t, "aged-admin", "ayatori_admin", adminCanary)
	inst := e.instance(t, "aged", "aged-admin", func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Port = int32(pg4.Port) })
	e.waitReady(t, "aged", metav1.ConditionTrue, "Ready", 60*time.Second)
	uid := string(inst.UID)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, err := e.store.ReadView(ctx, uid)
		return err == nil && v.Through > 0, nil
	}); err != nil {
		t.Fatal("no checkpoint written")
	}
	nc, err := e.nats.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := integration.AgeOutJournal(ctx, nc, uid); err != nil {
		t.Fatal(err)
	}
	pg4.Stop()
	e.waitReady(t, "aged", metav1.ConditionFalse, "DependencyUnavailable", 60*time.Second)
	if err := pg4.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, "aged", metav1.ConditionTrue, "Ready", 60*time.Second)
}
