package database_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The Tenant suites run against the local stack: real apiserver, JetStream,
// PostgreSQL (TLS, log_statement=all), the OpenBao-compatible server, ESO,
// and the ayatori-manager process.
var (
	stack     *integration.Stack
	stackErr  error
	stackOnce sync.Once
)

func getStack(t *testing.T) *integration.Stack {
	t.Helper()
	integration.Servers(t)
	stackOnce.Do(func() {
		stack, stackErr = integration.StartStack(context.Background(), integration.StackOptions{NoWorkload: true,
			ManagerArgs: []string{"--retry-base=300ms", "--retry-max=3s", "--tenant-resync-interval=1h", "--executor-ack-wait=3s"}})
		if stackErr == nil {
			stackErr = applyInstance(stack)
		}
	})
	if stackErr != nil {
		t.Fatal(stackErr)
	}
	return stack
}

// applyInstance creates the admin Secret and Instance "shared" and waits for Ready.
func applyInstance(s *integration.Stack) error {
	ctx := context.Background()
	c := s.CP.Client
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared-admin", Namespace: integration.ControllerNamespace},
		StringData: map[string]string{"username": s.AdminUser, "password": s.AdminPassword}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		i := &databasev1alpha1.PostgreSQLInstance{}
		if err := c.Get(ctx, types.NamespacedName{Name: "shared"}, i); err != nil {
			return false, nil
		}
		return i.Status.Phase == databasev1alpha1.InstancePhaseReady, nil
	})
}

func ns(t *testing.T, s *integration.Stack, name string) {
	t.Helper()
	if err := s.CP.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

func newTenant(t *testing.T, s *integration.Stack, namespace, name string, mut func(*databasev1alpha1.PostgreSQLTenant)) *databasev1alpha1.PostgreSQLTenant {
	t.Helper()
	ns(t, s, namespace)
	tn := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}
	if mut != nil {
		mut(tn)
	}
	if err := s.CP.Client.Create(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn
}

func waitTenant(t *testing.T, s *integration.Stack, namespace, name string, status metav1.ConditionStatus, reason string, timeout time.Duration) *databasev1alpha1.PostgreSQLTenant {
	t.Helper()
	var last *databasev1alpha1.PostgreSQLTenant
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		tn := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, tn); err != nil {
			return false, nil
		}
		last = tn
		for _, c := range tn.Status.Conditions {
			if c.Type == "Ready" && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == tn.Generation {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		msg := "<none>"
		if last != nil {
			b, _ := json.Marshal(last.Status)
			msg = string(b)
		}
		t.Fatalf("Tenant %s/%s never reached Ready=%s/%s; status %s\nmanager log tail:\n%s", namespace, name, status, reason, msg, integration.Tail(s.ManagerLog, 25))
	}
	return last
}

func superQuery[T any](t *testing.T, s *integration.Stack, db, sql string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.PG.SuperuserDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v T
	if err := c.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func superExec(t *testing.T, s *integration.Stack, db, sql string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.PG.SuperuserDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func kvPassword(t *testing.T, s *integration.Stack, namespace, name string) (string, int) {
	t.Helper()
	root, _ := s.Bao.Client(s.Bao.RootToken)
	sec, err := root.KVv2(integration.KVMount).Get(context.Background(), integration.TenantBasePath+"/"+namespace+"/"+name)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := sec.Data["password"].(string)
	return pw, sec.VersionMetadata.Version
}

// Acceptance criteria 3, 4, 15, 16 (and 17 through VerifyLogin).
func TestTenantProvisioned(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	newTenant(t, s, "acme", "shop", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"pg_trgm", "citext"} })
	tn := waitTenant(t, s, "acme", "shop", metav1.ConditionTrue, "Ready", 2*time.Minute)
	st := tn.Status
	if st.Phase != databasev1alpha1.TenantPhaseReady || st.Database != "shop" || st.LoginRole != "shop" || st.DatabaseOID == 0 ||
		st.Credential.SecretRef.Name != "shared-shop-postgresql" ||
		st.Credential.OpenBaoURL != s.Bao.Address+"/v1/kv/data/postgresql-tenants/acme/shop" {
		t.Fatalf("status %+v", st)
	}
	if strings.Contains(st.Credential.OpenBaoURL, "token") || strings.Contains(st.Credential.OpenBaoURL, "@") {
		t.Fatalf("openBaoURL carries credentials: %s", st.Credential.OpenBaoURL)
	}
	// Criterion 3: database owned by the login role, PUBLIC cannot connect, extensions present.
	if owner := superQuery[string](t, s, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'shop'"); owner != "shop" {
		t.Fatalf("owner %s", owner)
	}
	if superQuery[bool](t, s, "postgres", "SELECT has_database_privilege('public', 'shop', 'CONNECT')") {
		t.Fatal("PUBLIC can connect to the tenant database")
	}
	if n := superQuery[int64](t, s, "shop", "SELECT count(*) FROM pg_extension WHERE extname IN ('pg_trgm', 'citext')"); n != 2 {
		t.Fatalf("%d extensions", n)
	}
	if attrs := superQuery[string](t, s, "postgres", `SELECT concat_ws(',', rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication) FROM pg_roles WHERE rolname = 'shop'`); attrs != "t,f,f,f,f" {
		t.Fatalf("role attributes %s", attrs)
	}
	// The KV record: seven keys and ownership metadata.
	root, _ := s.Bao.Client(s.Bao.RootToken)
	sec, err := root.KVv2("kv").Get(ctx, "postgresql-tenants/acme/shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"username", "password", "database", "host", "hostaddr", "port", "sslmode"} {
		if _, ok := sec.Data[k]; !ok {
			t.Errorf("KV record lacks %s", k)
		}
	}
	if len(sec.Data) != 7 {
		t.Errorf("KV record has %d keys", len(sec.Data))
	}
	md, err := root.KVv2("kv").GetMetadata(ctx, "postgresql-tenants/acme/shop")
	if err != nil || md.CustomMetadata["ayatori.ddupan.top/tenant-uid"] != string(tn.UID) {
		t.Fatalf("metadata %+v %v", md, err)
	}
	// Criteria 4, 15: the projected Secret logs in, and the role cannot create a database or role.
	projected := &corev1.Secret{}
	if err := s.CP.Client.Get(ctx, types.NamespacedName{Namespace: "acme", Name: "shared-shop-postgresql"}, projected); err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=%s sslrootcert=%s", projected.Data["hostaddr"], projected.Data["port"],
		projected.Data["database"], projected.Data["username"], projected.Data["password"], projected.Data["sslmode"], s.PG.CAFile)
	app, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("login with the projected Secret via hostaddr: %v", err)
	}
	defer app.Close(ctx)
	if _, err := app.Exec(ctx, "CREATE DATABASE sneaky"); err == nil {
		t.Fatal("the tenant role created a database")
	}
	if _, err := app.Exec(ctx, "CREATE ROLE sneaky"); err == nil {
		t.Fatal("the tenant role created a role")
	}
	if _, err := app.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
		t.Fatalf("the owner cannot create a table in its database: %v", err)
	}
	// Another tenant's database is off limits (CONNECT revoked from PUBLIC).
	newTenant(t, s, "acme", "shop2", nil)
	waitTenant(t, s, "acme", "shop2", metav1.ConditionTrue, "Ready", 2*time.Minute)
	if c2, err := pgx.Connect(ctx, strings.Replace(dsn, "dbname=shop", "dbname=shop2", 1)); err == nil {
		c2.Close(ctx)
		t.Fatal("the tenant role can connect to another tenant's database")
	}
	// The condition change gets its Event; the steps are the journal's
	// (--intent-events is off by default: no API write per step).
	var evs eventsv1.EventList
	if err := s.CP.Client.List(ctx, &evs, client.InNamespace("acme")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if e.Regarding.UID == tn.UID {
			seen[e.Reason+"/"+e.Action] = true
		}
	}
	if !seen["Ready/Reconcile"] {
		t.Errorf("no Ready Event for the Tenant (have %v)", seen)
	}
	for k := range seen {
		if strings.HasPrefix(k, "IntentAppended/") {
			t.Errorf("an IntentAppended Event (%s) without --intent-events", k)
		}
	}
}

// Criterion 8: an extension the Instance can not install is rejected
// before any external write.
func TestTenantUnknownExtension(t *testing.T) {
	s := getStack(t)
	newTenant(t, s, "ext", "badext", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"no_such_extension"} })
	tn := waitTenant(t, s, "ext", "badext", metav1.ConditionFalse, "InvalidSpec", time.Minute)
	if !strings.Contains(readyMsg(tn.Status.Conditions), "no_such_extension") {
		t.Fatalf("message %q", readyMsg(tn.Status.Conditions))
	}
	// Nothing was written: no registry record, role, database or KV record.
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)) +
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'badext'") +
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'badext'"); n != 0 {
		t.Fatalf("%d external writes before the extension check", n)
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2("kv").GetMetadata(context.Background(), "postgresql-tenants/ext/badext"); err == nil {
		t.Fatal("a KV record was written before the extension check")
	}
}

func readyMsg(conds []metav1.Condition) string {
	for _, c := range conds {
		if c.Type == "Ready" {
			return c.Message
		}
	}
	return ""
}

// Criterion 7: pre-existing foreign database, role, KV record and a forged
// COMMENT each give Conflict, and nothing is modified.
func TestTenantConflicts(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	superExec(t, s, "postgres", "CREATE DATABASE foreigndb")
	superExec(t, s, "postgres", "COMMENT ON DATABASE foreigndb IS 'ayatori tenant conflicts/forged'")
	superExec(t, s, "postgres", "CREATE ROLE foreignrole LOGIN PASSWORD 'foreign-role-pw'")
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2("kv").Put(ctx, "postgresql-tenants/conflicts/kvtaken", map[string]any{"password": "someone-elses"}); err != nil {
		t.Fatal(err)
	}
	newTenant(t, s, "conflicts", "forged", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Database = "foreigndb" })
	newTenant(t, s, "conflicts", "role", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.LoginRole = "foreignrole" })
	newTenant(t, s, "conflicts", "kvtaken", nil)
	for _, name := range []string{"forged", "role", "kvtaken"} {
		waitTenant(t, s, "conflicts", name, metav1.ConditionFalse, "Conflict", time.Minute)
	}
	if owner := superQuery[string](t, s, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'foreigndb'"); owner != "postgres" {
		t.Fatalf("foreign database owner changed to %s", owner)
	}
	if superQuery[bool](t, s, "postgres", "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'foreignrole'") != true {
		t.Fatal("foreign role modified")
	}
	sec, err := root.KVv2("kv").Get(ctx, "postgresql-tenants/conflicts/kvtaken")
	if err != nil || sec.Data["password"] != "someone-elses" || sec.VersionMetadata.Version != 1 {
		t.Fatalf("foreign KV record modified: %v %v", sec, err)
	}
}

// Criterion 12: two namespaces ask for the same database concurrently:
// exactly one is Ready, the other Conflict, the winner untouched. Repeated.
func TestTenantSameNameRace(t *testing.T) {
	s := getStack(t)
	for i := 0; i < 5; i++ {
		db := fmt.Sprintf("race%d", i)
		var wg sync.WaitGroup
		for _, n := range []string{"race-a", "race-b"} {
			ns(t, s, n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				tn := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: db},
					Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}
				if err := s.CP.Client.Create(context.Background(), tn); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		ready, conflict := 0, 0
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			ready, conflict = 0, 0
			for _, n := range []string{"race-a", "race-b"} {
				tn := &databasev1alpha1.PostgreSQLTenant{}
				if err := s.CP.Client.Get(ctx, types.NamespacedName{Namespace: n, Name: db}, tn); err != nil {
					return false, nil
				}
				for _, c := range tn.Status.Conditions {
					if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
						ready++
					}
					if c.Type == "Ready" && c.Reason == "Conflict" {
						conflict++
					}
				}
			}
			return ready == 1 && conflict == 1, nil
		})
		if err != nil {
			t.Fatalf("round %d: %d Ready, %d Conflict", i, ready, conflict)
		}
		if owners := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = $1", db); owners != 1 {
			t.Fatalf("round %d: %d databases", i, owners)
		}
	}
}

// Criterion 10: Retain keeps database, role and KV record, marks the
// registry record unmanaged; recreating the same name is a Conflict.
func TestTenantRetain(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "keep", "kept", nil)
	waitTenant(t, s, "keep", "kept", metav1.ConditionTrue, "Ready", 2*time.Minute)
	pw, ver := kvPassword(t, s, "keep", "kept")
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, tn)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return !superQuery[bool](t, s, "postgres", "SELECT managed FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)), nil
	})
	if err != nil {
		t.Fatal("registry record not marked unmanaged")
	}
	if superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'kept'") != 1 ||
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'kept'") != 1 {
		t.Fatal("Retain deleted the database or role")
	}
	if pw2, ver2 := kvPassword(t, s, "keep", "kept"); pw2 != pw || ver2 != ver {
		t.Fatal("Retain changed the KV record")
	}
	newTenant(t, s, "keep", "kept", nil)
	waitTenant(t, s, "keep", "kept", metav1.ConditionFalse, "Conflict", time.Minute)
}

func waitGone(t *testing.T, s *integration.Stack, o client.Object) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	if err != nil {
		t.Fatalf("%s still exists\nmanager log tail:\n%s", client.ObjectKeyFromObject(o), integration.Tail(s.ManagerLog, 25))
	}
}

// Criterion 13: Delete with PostgreSQL down at the delete step keeps the
// finalizer; the retry completes and everything is gone.
func TestTenantDeleteRetriesAfterFailure(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "drop", "gone", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	waitTenant(t, s, "drop", "gone", metav1.ConditionTrue, "Ready", 2*time.Minute)
	s.PG.Stop()
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	cur := &databasev1alpha1.PostgreSQLTenant{}
	if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
		t.Fatalf("the Tenant went away while PostgreSQL was down: %v", err)
	}
	if err := s.PG.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, tn)
	if superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'gone'")+
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'gone'")+
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)) != 0 {
		t.Fatal("Delete left PostgreSQL resources")
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2("kv").GetMetadata(ctx, "postgresql-tenants/drop/gone"); err == nil {
		t.Fatal("Delete left the KV record")
	}
}

// Criteria 9 and 18: a wiped status is rebuilt from the external facts
// without a second password.
func TestTenantStatusRebuilt(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	newTenant(t, s, "rebuild", "app", nil)
	tn := waitTenant(t, s, "rebuild", "app", metav1.ConditionTrue, "Ready", 2*time.Minute)
	pw, ver := kvPassword(t, s, "rebuild", "app")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			return err
		}
		cur.Status = databasev1alpha1.PostgreSQLTenantStatus{}
		return s.CP.Client.Status().Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	got := waitTenant(t, s, "rebuild", "app", metav1.ConditionTrue, "Ready", 2*time.Minute)
	if got.Status.Database != "app" || got.Status.DatabaseOID == 0 {
		t.Fatalf("rebuilt status %+v", got.Status)
	}
	if pw2, ver2 := kvPassword(t, s, "rebuild", "app"); pw2 != pw || ver2 != ver {
		t.Fatal("the rebuild wrote a second password")
	}
}

// TestZZTenantCanary (criterion 11): the generated passwords and the admin
// password appear in none of the manager log, Events, Conditions, CR
// dumps, the journal, or PostgreSQL's server log (log_statement=all); and
// the manager, running with deploy/rbac's rights, was refused no request.
func TestZZTenantCanary(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	var secrets []string
	root, _ := s.Bao.Client(s.Bao.RootToken)
	for _, p := range []string{"acme/shop", "rebuild/app", "keep/kept", "kvlost/lostapp", "kvsoft/softapp", "again/againapp", "moving/app", "repair/repairapp"} {
		if sec, err := root.KVv2("kv").Get(ctx, "postgresql-tenants/"+p); err == nil {
			secrets = append(secrets, sec.Data["password"].(string))
		}
	}
	if len(secrets) == 0 {
		t.Fatal("no tenant password to scan for")
	}
	secrets = append(secrets, s.AdminPassword)
	logs, _ := os.ReadFile(s.ManagerLog)
	pglog, _ := s.PG.ReadLog(ctx)
	var tenants databasev1alpha1.PostgreSQLTenantList
	_ = s.CP.Client.List(ctx, &tenants)
	var insts databasev1alpha1.PostgreSQLInstanceList
	_ = s.CP.Client.List(ctx, &insts)
	var evs eventsv1.EventList
	_ = s.CP.Client.List(ctx, &evs)
	crs, _ := json.Marshal([]any{tenants, insts})
	events, _ := json.Marshal(evs)
	var metrics string
	if resp, err := http.Get(s.MetricsURL); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
	}
	if !strings.Contains(metrics, "ayatori_journal_append_seconds") {
		t.Fatalf("manager metrics not readable at %s", s.MetricsURL)
	}
	if len(pglog) == 0 || !strings.Contains(string(pglog), "CREATE ROLE") {
		t.Fatal("the PostgreSQL statement log is empty: nothing to scan")
	}
	if lines := integration.ForbiddenRequests(s.ManagerLog); len(lines) > 0 {
		t.Errorf("the manager's shipped RBAC (deploy/rbac) refused requests:\n%s", strings.Join(lines, "\n"))
	}
	for i, secret := range secrets {
		for where, text := range map[string]string{"manager log": string(logs), "PostgreSQL server log": string(pglog), "metrics": metrics,
			"CR dumps (spec, status, conditions)": string(crs), "Events": string(events)} {
			if strings.Contains(text, secret) {
				t.Errorf("secret #%d found in the %s", i, where)
			}
		}
		store := journalStore(t, s)
		if hits, err := store.ScanForSecret(ctx, secret); err != nil || len(hits) > 0 {
			t.Errorf("secret #%d in the journal at %v (%v)", i, hits, err)
		}
	}
}

func journalStore(t *testing.T, s *integration.Stack) *journal.Store {
	t.Helper()
	nc, err := s.NATS.Connect(journal.IdentityReader)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := journal.OpenExisting(context.Background(), nc, journal.Config{Trust: integration.JournalTrust(t)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Criterion 13 with OpenBao down at the credential-destroy step: the
// finalizer stays, the retry completes once OpenBao is back.
func TestTenantDeleteRetriesWhenOpenBaoIsDown(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "dropbao", "vault", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	waitTenant(t, s, "dropbao", "vault", metav1.ConditionTrue, "Ready", 2*time.Minute)
	s.Bao.Stop()
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	// PostgreSQL steps run, then DestroyCredential fails while OpenBao is down.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'vault'") == 0, nil
	})
	if err != nil {
		t.Fatal("the database was not dropped")
	}
	time.Sleep(2 * time.Second)
	cur := &databasev1alpha1.PostgreSQLTenant{}
	if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
		t.Fatalf("the Tenant went away while OpenBao was down: %v", err)
	}
	if err := s.Bao.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, tn)
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2("kv").GetMetadata(ctx, "postgresql-tenants/dropbao/vault"); err == nil {
		t.Fatal("Delete left the KV record")
	}
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)); n != 0 {
		t.Fatal("Delete left the registry record")
	}
}

// Criterion 18: a forged advanced phase on a fresh Tenant is corrected and
// no step is skipped.
func TestTenantForgedPhase(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "forged", "app", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.InstanceRef = "missing" })
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			return err
		}
		cur.Status = databasev1alpha1.PostgreSQLTenantStatus{Phase: databasev1alpha1.TenantPhaseCredentialProjected}
		return s.CP.Client.Status().Update(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := waitTenant(t, s, "forged", "app", metav1.ConditionFalse, "InstanceNotReady", time.Minute)
	if got.Status.Phase != databasev1alpha1.TenantPhasePending {
		t.Fatalf("forged phase not corrected: %s", got.Status.Phase)
	}
	recs, err := journalStore(t, s).Read(ctx, string(tn.UID))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Fatalf("%d journal records for a Tenant whose Instance does not exist", len(recs))
	}
}
