package database_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// privilegeSnapshot is every role attribute, membership, per-database and
// per-role setting, and database ACL and owner of the server, one per line.
const privilegeSnapshot = `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	SELECT format('role %s super=%s inherit=%s createrole=%s createdb=%s login=%s repl=%s bypassrls=%s',
		rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, rolbypassrls) FROM pg_roles
	UNION ALL SELECT format('member %s in %s admin=%s', m.member::regrole, m.roleid::regrole, m.admin_option) FROM pg_auth_members m
	UNION ALL SELECT format('setting db=%s role=%s %s', setdatabase, setrole, setconfig) FROM pg_db_role_setting
	UNION ALL SELECT format('database %s owner=%s acl=%s', datname, datdba::regrole, datacl) FROM pg_database
) s(x)`

// tenantExec runs statements as the Tenant's own login in its database.
func tenantExec(t *testing.T, s *integration.Stack, role, password, db string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.PG.DSN(role, password, db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, sql := range stmts {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("as %s: %s: %v", role, sql, err)
		}
	}
}

// wipeStatus makes the projector re-check every step (status lost).
func wipeStatus(t *testing.T, s *integration.Stack, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cur); err != nil {
			return err
		}
		cur.Status = databasev1alpha1.PostgreSQLTenantStatus{}
		return s.CP.Client.Status().Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
}

func updateTenant(t *testing.T, s *integration.Stack, namespace, name string, mut func(*databasev1alpha1.PostgreSQLTenant)) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cur); err != nil {
			return err
		}
		mut(cur)
		return s.CP.Client.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTenantCodeNeverRunsWithAdminRights (issue 10 §1): a Tenant plants
// code where an admin session in its database would resolve it — the
// reported hijack (an operator on = over name, search_path set at the
// database level), functions shadowing pg_catalog in a schema earlier on
// the search_path, a database-level role setting, and RESET ROLE inside
// the planted code. An extension change and a full re-check follow. No
// role attribute, membership, setting or database ACL changes anywhere,
// and the admin role never opened a session in the Tenant database.
func TestTenantCodeNeverRunsWithAdminRights(t *testing.T) {
	s := getStack(t)
	const namespace, name = "hijack", "victim"
	newTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"pg_trgm"} })
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
	pw, _ := kvPassword(t, s, namespace, name)

	// The escalation every planted function attempts: leave any SET ROLE
	// and give the Tenant role CREATEROLE CREATEDB, then behave normally.
	escalate := fmt.Sprintf(`BEGIN RESET ROLE; EXECUTE 'ALTER ROLE %s CREATEROLE CREATEDB'; EXCEPTION WHEN OTHERS THEN NULL; END;`, name)
	rounds := []struct {
		name  string
		plant []string
	}{
		{"operator = over name, search_path at the database level (the reported case)", []string{
			fmt.Sprintf(`ALTER DATABASE %s SET search_path = public, pg_catalog`, name),
			`CREATE FUNCTION public.evil_eq(a name, b name) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN pg_catalog.nameeq(a, b); END $$`,
			`CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = public.evil_eq)`,
		}},
		{"functions and operators shadowing pg_catalog in a schema earlier on the search_path", []string{
			`CREATE SCHEMA evil`,
			`CREATE FUNCTION evil.evil_nt(a name, b text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN pg_catalog.nameeqtext(a, b); END $$`,
			`CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = text, FUNCTION = evil.evil_nt)`,
			`CREATE FUNCTION evil.evil_tt(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN pg_catalog.texteq(a, b); END $$`,
			`CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.evil_tt)`,
			`CREATE FUNCTION evil.current_setting(text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN pg_catalog.current_setting($1); END $$`,
			`CREATE FUNCTION evil.pg_has_role(name, text, text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN pg_catalog.pg_has_role($1, $2, $3); END $$`,
			`CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN pg_catalog.lower($1); END $$`,
			fmt.Sprintf(`ALTER DATABASE %s SET search_path = evil, public, pg_catalog`, name),
		}},
		{"a database-level role setting", []string{
			// An admin session here would start as the Tenant role.
			fmt.Sprintf(`ALTER DATABASE %s SET role = %s`, name, name),
		}},
		{"RESET ROLE in a trigger on a table the Tenant owns", []string{
			fmt.Sprintf(`ALTER DATABASE %s RESET role`, name),
			`CREATE TABLE public.bait(v int)`,
			`CREATE FUNCTION public.evil_trg() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ` + escalate + ` RETURN NEW; END $$`,
			`CREATE TRIGGER evil BEFORE INSERT OR UPDATE OR DELETE ON public.bait FOR EACH ROW EXECUTE FUNCTION public.evil_trg()`,
		}},
	}
	extensions := []string{"citext", "hstore", "ltree", "cube"}
	for i, round := range rounds {
		tenantExec(t, s, name, pw, name, round.plant...)
		before := superQuery[string](t, s, "postgres", privilegeSnapshot)
		// An extension change re-runs every step of the chain.
		updateTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) {
			tn.Spec.Extensions = append(tn.Spec.Extensions, extensions[i])
		})
		waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
		if n := superQuery[int64](t, s, name, "SELECT count(*) FROM pg_extension WHERE extname = '"+extensions[i]+"'"); n != 1 {
			t.Fatalf("%s: extension %s not installed", round.name, extensions[i])
		}
		// A full re-check (status lost) runs every step again.
		wipeStatus(t, s, namespace, name)
		waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
		if after := superQuery[string](t, s, "postgres", privilegeSnapshot); after != before {
			t.Fatalf("%s: privileges changed:\n--- before\n%s\n--- after\n%s", round.name, before, after)
		}
		if attrs := superQuery[string](t, s, "postgres", `SELECT concat_ws(',', rolcreaterole, rolcreatedb, rolsuper) FROM pg_roles WHERE rolname = '`+name+`'`); attrs != "f,f,f" {
			t.Fatalf("%s: the Tenant role gained attributes: %s", round.name, attrs)
		}
	}
	// log_connections and the %u@%d prefix: the admin role never had a
	// session in the Tenant database.
	pglog, err := s.PG.ReadLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if marker := " " + s.AdminUser + "@" + name + " "; strings.Contains(string(pglog), marker) {
		t.Fatalf("the admin role opened a session in the Tenant database (%q in the server log)", marker)
	}
}

// TestTenantUntrustedExtensionRejectedBeforeAnyWrite (issue 10 §3): an
// extension only a superuser can install is InvalidSpec naming it, before
// the registry, OpenBao or PostgreSQL is written.
func TestTenantUntrustedExtensionRejectedBeforeAnyWrite(t *testing.T) {
	s := getStack(t)
	const namespace, name = "untrusted", "fdw"
	newTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"pg_trgm", "postgres_fdw"} })
	tn := waitTenant(t, s, namespace, name, metav1.ConditionFalse, databasev1alpha1.ReasonInvalidSpec, time.Minute)
	if msg := tenantReadyMessage(tn); !strings.Contains(msg, "postgres_fdw") || strings.Contains(msg, "pg_trgm") {
		t.Fatalf("message %q does not name exactly the untrusted extension", msg)
	}
	for what, sql := range map[string]string{
		"registry records": "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '" + string(tn.UID) + "'",
		"roles":            "SELECT count(*) FROM pg_roles WHERE rolname = '" + name + "'",
		"databases":        "SELECT count(*) FROM pg_database WHERE datname = '" + name + "'",
	} {
		if n := superQuery[int64](t, s, "postgres", sql); n != 0 {
			t.Fatalf("%d %s written for an invalid spec", n, what)
		}
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2(integration.KVMount).GetMetadata(context.Background(), integration.TenantBasePath+"/"+namespace+"/"+name); err == nil {
		t.Fatal("a KV record was written for an invalid spec")
	}
}

// waitTenantMessage waits until the Tenant's Ready condition is False
// with the reason and a message containing substr.
func waitTenantMessage(t *testing.T, s *integration.Stack, namespace, name, reason, substr string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tn := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, tn); err != nil {
			return false, nil
		}
		for _, c := range tn.Status.Conditions {
			if c.Type == "Ready" {
				last = string(c.Status) + "/" + c.Reason + ": " + c.Message
				return c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, substr), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Tenant %s/%s never said %s %q; last Ready %s\nmanager log tail:\n%s", namespace, name, reason, substr, last, integration.Tail(s.ManagerLog, 25))
	}
}

func tenantReadyMessage(tn *databasev1alpha1.PostgreSQLTenant) string {
	for _, c := range tn.Status.Conditions {
		if c.Type == "Ready" {
			return c.Message
		}
	}
	return ""
}

// waitNoOtherSessions waits until PostgreSQL has no client session of a
// role other than the superuser the tests use: the manager's (its admin
// role, the Tenant roles it logs in as) are gone, so what it sent before it
// stopped has ended.
func waitNoOtherSessions(t *testing.T, s *integration.Stack) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename <> current_user") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("sessions of the stopped manager still open in PostgreSQL after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTenantForeignObjectsSurviveDelete (issue 10 §2): a role and a
// database with a table, created by someone else at each point between the
// registry claim and Ayatori's own CREATE, are a Conflict and never
// adopted; deleting the Tenant (deletionPolicy Delete) removes only what
// Ayatori created, and the foreign data survives.
func TestTenantForeignObjectsSurviveDelete(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	ns(t, s, "foreign")
	for i, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpWriteCredential, dbcontract.OpCreateRole} {
		name := fmt.Sprintf("foreign%d", i)
		t.Run("after "+op, func(t *testing.T) {
			s.StopManager()
			if err := s.StartManagerEnv([]string{"AYATORI_FAILPOINTS=executor-after-outcome=" + op}); err != nil {
				t.Fatal(err)
			}
			tn := newTenant(t, s, "foreign", name, func(tn *databasev1alpha1.PostgreSQLTenant) {
				tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
			})
			// A failed subtest must not leave the shared stack without
			// its manager (every later test would time out).
			t.Cleanup(func() {
				if s.ManagerPID() == 0 {
					_ = s.StartManager()
				}
			})
			if !s.WaitManagerExit(90 * time.Second) {
				t.Fatalf("the failpoint after %s never fired", op)
			}
			// A statement the manager sent before it was killed still
			// runs to its end in PostgreSQL: the chain's next link may
			// have started in the instant between the outcome and the
			// kill (a CI run saw its CREATE DATABASE collide with the
			// foreign one below). Wait for its sessions to end.
			waitNoOtherSessions(t, s)
			if op == dbcontract.OpCreateRole && superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = '"+name+"'") != 0 {
				if err := s.StartManager(); err != nil {
					t.Fatal(err)
				}
				t.Skipf("the manager's CREATE DATABASE %s ran before the kill: the window between CreateRole and CreateDatabase did not open", name)
			}
			// Someone else takes the names while the manager is down.
			owner := name
			if op == dbcontract.OpCreateRole {
				owner = name + "_other" // the role is Ayatori's already
			}
			superExec(t, s, "postgres", "CREATE ROLE "+owner+" LOGIN")
			superExec(t, s, "postgres", "CREATE DATABASE "+name+" OWNER "+owner)
			superExec(t, s, name, "CREATE TABLE precious(v int); INSERT INTO precious VALUES (42)")
			defer func() {
				superExec(t, s, "postgres", "DROP DATABASE IF EXISTS "+name)
				superExec(t, s, "postgres", "DROP ROLE IF EXISTS "+owner)
			}()
			if err := s.StartManager(); err != nil {
				t.Fatal(err)
			}
			waitTenant(t, s, "foreign", name, metav1.ConditionFalse, databasev1alpha1.ReasonConflict, 2*time.Minute)
			if superQuery[bool](t, s, "postgres", "SELECT NOT has_database_privilege('public', '"+name+"', 'CONNECT')") {
				t.Fatal("CONNECT was revoked on the foreign database")
			}
			if err := s.CP.Client.Delete(ctx, tn); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s, tn)
			if v := superQuery[int32](t, s, name, "SELECT v FROM precious"); v != 42 {
				t.Fatalf("foreign data %d", v)
			}
			if superQuery[string](t, s, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '"+name+"'") != owner {
				t.Fatal("the foreign database changed owner")
			}
			if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = '"+owner+"' AND rolcanlogin"); n != 1 {
				t.Fatal("the foreign role was dropped or altered")
			}
			// The deletion says what it left alone (the Event is written
			// just before the finalizer goes; the recorder is asynchronous).
			var note string
			_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				var evs eventsv1.EventList
				if err := s.CP.Client.List(ctx, &evs, client.InNamespace("foreign")); err != nil {
					return false, nil
				}
				for _, e := range evs.Items {
					if e.Regarding.UID == tn.UID && e.Reason == "LeftInPlace" {
						note = e.Note
					}
				}
				return note != "", nil
			})
			if !strings.Contains(note, "DropDatabase: ") || !strings.Contains(note, name) {
				t.Fatalf("no LeftInPlace Event naming the foreign database: %q", note)
			}
			if op == dbcontract.OpCreateRole {
				if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = '"+name+"'"); n != 0 {
					t.Fatal("the role Ayatori created was left behind")
				}
			}
		})
	}
}

// TestTenantDeletionBlockedNamesTheBlocker (issue 10 §3): a superuser
// session in a Delete Tenant's database, and a role that still owns an
// object elsewhere, keep the finalizer with reason DeletionBlocked naming
// what blocks; once it is gone the deletion completes by itself.
func TestTenantDeletionBlockedNamesTheBlocker(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	const namespace, name = "blocked", "held"
	tn := newTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)

	cfg, err := pgx.ParseConfig(s.PG.SuperuserDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "dba-console"
	held, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := held.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The role also owns a table in another database.
	superExec(t, s, "postgres", "CREATE TABLE held_elsewhere(); ALTER TABLE held_elsewhere OWNER TO "+name)

	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	waitTenantMessage(t, s, namespace, name, databasev1alpha1.ReasonDeletionBlocked, fmt.Sprintf("pid %d (user postgres, application_name \"dba-console\")", pid))
	_ = held.Close(ctx)
	waitTenantMessage(t, s, namespace, name, databasev1alpha1.ReasonDeletionBlocked, "2BP01")
	waitTenantMessage(t, s, namespace, name, databasev1alpha1.ReasonDeletionBlocked, "REASSIGN OWNED")
	superExec(t, s, "postgres", "DROP TABLE held_elsewhere")
	waitGone(t, s, tn)
}

// TestTenantLoginRejectedByHBA (issue 10 §3): a pg_hba.conf rule that
// rejects the Tenant role is reported as LoginRejected, not as a password
// Conflict, and nothing is rewritten.
func TestTenantLoginRejectedByHBA(t *testing.T) {
	s := getStack(t)
	const namespace, name = "hba", "rejected"
	newTenant(t, s, namespace, name, nil)
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
	_, ver := kvPassword(t, s, namespace, name)
	restore, err := s.PG.PrependHBA("hostssl all " + name + " all reject")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := restore(); err != nil {
			t.Fatal(err)
		}
	}()
	wipeStatus(t, s, namespace, name)
	got := waitTenant(t, s, namespace, name, metav1.ConditionFalse, databasev1alpha1.ReasonLoginRejected, time.Minute)
	if msg := tenantReadyMessage(got); !strings.Contains(msg, "pg_hba.conf") || !strings.Contains(msg, name) {
		t.Fatalf("message %q", msg)
	}
	if _, v := kvPassword(t, s, namespace, name); v != ver {
		t.Fatal("a rejected login made Ayatori write a new password")
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	restore = func() error { return nil }
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
}

// TestTenantCleartextAuthRefused: a pg_hba.conf rule that makes the server
// ask the Tenant role for its password in cleartext gets no password from
// the login proof (SCRAM only); the Tenant says why, and is Ready again once
// the rule is gone.
func TestTenantCleartextAuthRefused(t *testing.T) {
	s := getStack(t)
	const namespace, name = "cleartext", "plainauth"
	newTenant(t, s, namespace, name, nil)
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
	password, _ := kvPassword(t, s, namespace, name)
	restore, err := s.PG.PrependHBA("hostssl all " + name + " all password")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = restore() }()
	wipeStatus(t, s, namespace, name)
	got := waitTenant(t, s, namespace, name, metav1.ConditionFalse, databasev1alpha1.ReasonProvisioningFailed, time.Minute)
	if msg := tenantReadyMessage(got); !strings.Contains(msg, "no password was sent") || !strings.Contains(msg, "scram-sha-256") {
		t.Fatalf("message %q", msg)
	}
	if log, err := s.PG.ReadLog(context.Background()); err != nil || strings.Contains(string(log), password) {
		t.Fatalf("the Tenant's password reached the server's log (%v)", err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
}

// TestTenantTwoInstancesOneServerRace (issue 10 §2): two Instances register
// the same server and two Tenants claim the same names through them, both
// claims landing before either creates anything. Exactly one creates the
// role and database; the other is a Conflict and never adopts them, and
// deleting it (deletionPolicy Delete) leaves the winner's data intact.
func TestTenantTwoInstancesOneServerRace(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	if err := s.CP.Client.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "twin"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		i := &databasev1alpha1.PostgreSQLInstance{}
		return s.CP.Client.Get(ctx, client.ObjectKey{Name: "twin"}, i) == nil && i.Status.Phase == databasev1alpha1.InstancePhaseReady, nil
	}); err != nil {
		t.Fatal("Instance twin never Ready")
	}
	const name = "contested"
	s.StopManager()
	if err := s.StartManagerEnv([]string{"AYATORI_FAILPOINTS=executor-after-outcome=" + dbcontract.OpClaimOwnership}); err != nil {
		t.Fatal(err)
	}
	del := func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	}
	a := newTenant(t, s, "twin-a", name, del)
	if !s.WaitManagerExit(90 * time.Second) {
		t.Fatal("the failpoint never fired")
	}
	b := newTenant(t, s, "twin-b", name, func(tn *databasev1alpha1.PostgreSQLTenant) { del(tn); tn.Spec.InstanceRef = "twin" })
	if err := s.StartManager(); err != nil {
		t.Fatal(err)
	}
	// One becomes Ready, the other a Conflict.
	var winner, loser *databasev1alpha1.PostgreSQLTenant
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var ready, conflicted []*databasev1alpha1.PostgreSQLTenant
		for _, tn := range []*databasev1alpha1.PostgreSQLTenant{a, b} {
			cur := &databasev1alpha1.PostgreSQLTenant{}
			if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
				return false, nil
			}
			for _, c := range cur.Status.Conditions {
				if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
					ready = append(ready, cur)
				}
				if c.Type == "Ready" && c.Reason == databasev1alpha1.ReasonConflict {
					conflicted = append(conflicted, cur)
				}
			}
		}
		if len(ready) == 1 && len(conflicted) == 1 {
			winner, loser = ready[0], conflicted[0]
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("not exactly one Ready and one Conflict\nmanager log tail:\n%s", integration.Tail(s.ManagerLog, 25))
	}
	wpw, _ := kvPassword(t, s, winner.Namespace, name)
	tenantExec(t, s, name, wpw, name, "CREATE TABLE precious(v int)", "INSERT INTO precious VALUES (7)")
	if err := s.CP.Client.Delete(ctx, loser); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, loser)
	if v := superQuery[int32](t, s, name, "SELECT v FROM precious"); v != 7 {
		t.Fatalf("winner's data %d", v)
	}
	wipeStatus(t, s, winner.Namespace, name)
	waitTenant(t, s, winner.Namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
	if err := s.CP.Client.Delete(ctx, winner); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, winner)
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = '"+name+"'"); n != 0 {
		t.Fatal("the winner's Delete left its database")
	}
}

// TestTenantInstanceRefFixedAfterProvisioning (found by a hostile test):
// the CEL rules let spec changes through while the phase is Pending, and a
// failing CheckExtensions used to put a provisioned Tenant back at
// Pending. Now the phase stays past Pending (the API refuses the move);
// with the status wiped, moving it to another Instance is ImmutableField
// (checked against the journal's claim, not the phase), and a Delete still
// cleans up on the Instance the Tenant was provisioned on.
func TestTenantInstanceRefFixedAfterProvisioning(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	inst := &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}
	if err := s.CP.Client.Create(ctx, inst); err != nil {
		t.Fatal(err)
	}
	const namespace, name = "moved", "mover"
	tn := newTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
	updateTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"no_such_extension"} })
	failing := waitTenant(t, s, namespace, name, metav1.ConditionFalse, databasev1alpha1.ReasonInvalidSpec, time.Minute)
	// Issue 12, fault 4: the phase no longer falls back to Pending once
	// something was provisioned, so the API's rules refuse the move.
	if failing.Status.Phase == databasev1alpha1.TenantPhasePending {
		t.Fatalf("a provisioned Tenant is back at phase Pending: %+v", failing.Status)
	}
	// Read afresh and again on a conflict: a Conflict is answered
	// before validation, so a write of the projector's meanwhile would
	// hide the rule.
	var err error
	for try := 0; try < 10; try++ {
		moved := &databasev1alpha1.PostgreSQLTenant{}
		if err = s.CP.Client.Get(ctx, client.ObjectKeyFromObject(failing), moved); err != nil {
			t.Fatal(err)
		}
		moved.Spec.InstanceRef = "elsewhere"
		if err = s.CP.Client.Update(ctx, moved); !apierrors.IsConflict(err) {
			break
		}
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("moving a provisioned Tenant: %v, want the API's immutability rule", err)
	}
	// With the status wiped the rules let it through; the journal's claim
	// still catches it.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			return err
		}
		cur.Status = databasev1alpha1.PostgreSQLTenantStatus{}
		if err := s.CP.Client.Status().Update(ctx, cur); err != nil {
			return err
		}
		cur.Spec.InstanceRef = "elsewhere"
		cur.Spec.Extensions = nil
		return s.CP.Client.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	waitTenantMessage(t, s, namespace, name, databasev1alpha1.ReasonImmutableField, "spec.instanceRef names PostgreSQLInstance elsewhere")
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, tn)
	for what, sql := range map[string]string{
		"roles":            "SELECT count(*) FROM pg_roles WHERE rolname = '" + name + "'",
		"databases":        "SELECT count(*) FROM pg_database WHERE datname = '" + name + "'",
		"registry records": "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '" + string(tn.UID) + "'",
	} {
		if n := superQuery[int64](t, s, "postgres", sql); n != 0 {
			t.Fatalf("Delete left %d %s", n, what)
		}
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2(integration.KVMount).GetMetadata(ctx, integration.TenantBasePath+"/"+namespace+"/"+name); err == nil {
		t.Fatal("Delete left the KV record")
	}
}

// TestTenantNamespaceNotAllowed: a Tenant whose namespace the Instance's
// spec.allowedNamespaces does not admit is NamespaceNotAllowed and nothing
// is written for it (no registry row, no KV record); admitting the
// namespace (by a label the selector matches) provisions it.
func TestTenantNamespaceNotAllowed(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	if err := s.CP.Client.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "fenced"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"},
		AllowedNamespaces: &databasev1alpha1.AllowedNamespaces{Names: []string{"fenced-team"},
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"ayatori.test/databases": "yes"}}}}}); err != nil {
		t.Fatal(err)
	}
	const namespace, name = "fenced-outsider", "outsider"
	tn := newTenant(t, s, namespace, name, func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.InstanceRef = "fenced" })
	got := waitTenant(t, s, namespace, name, metav1.ConditionFalse, databasev1alpha1.ReasonNamespaceNotAllowed, time.Minute)
	if msg := tenantReadyMessage(got); !strings.Contains(msg, namespace) || !strings.Contains(msg, "fenced") {
		t.Fatalf("message %q", msg)
	}
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)); n != 0 {
		t.Fatalf("%d registry rows for a Tenant outside the allow-list", n)
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if sec, err := root.Logical().Read(integration.KVMount + "/data/" + integration.TenantBasePath + "/" + namespace + "/" + name); err != nil || sec != nil {
		t.Fatalf("a KV record exists for a Tenant outside the allow-list (%v)", err)
	}
	ns := &corev1.Namespace{}
	if err := s.CP.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"ayatori.test/databases": "yes"}
	if err := s.CP.Client.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
}

// TestCrossNamespaceExternalSecretGetsNothing: an ExternalSecret in another
// namespace that names a Tenant's KV record through the shipped
// ClusterSecretStore, by data, dataFrom.extract or dataFrom.find (with its
// own ayatori-secrets-reader ServiceAccount, as a namespace user may
// create), gets nothing: OpenBao lets that namespace's login read its own
// records only. The Tenant's own projection stays Ready.
func TestCrossNamespaceExternalSecretGetsNothing(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	const victimNS, victim, malloryNS = "xns-victim", "xvictim", "xns-mallory"
	newTenant(t, s, victimNS, victim, nil)
	waitTenant(t, s, victimNS, victim, metav1.ConditionTrue, "Ready", 2*time.Minute)
	password, _ := kvPassword(t, s, victimNS, victim)
	ns(t, s, malloryNS)
	if err := s.CP.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: malloryNS, Name: dbcontract.ReaderServiceAccount}}); err != nil {
		t.Fatal(err)
	}
	key := integration.TenantBasePath + "/" + victimNS + "/" + victim
	specs := map[string]map[string]any{
		"by-data":    {"data": []any{map[string]any{"secretKey": "stolen", "remoteRef": map[string]any{"key": key, "property": "password"}}}},
		"by-extract": {"dataFrom": []any{map[string]any{"extract": map[string]any{"key": key}}}},
		"by-find":    {"dataFrom": []any{map[string]any{"find": map[string]any{"path": integration.TenantBasePath, "name": map[string]any{"regexp": ".*"}}}}},
	}
	for name, spec := range specs {
		es := &unstructured.Unstructured{}
		es.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
		es.SetNamespace(malloryNS)
		es.SetName(name)
		spec["refreshInterval"] = "10s"
		spec["secretStoreRef"] = map[string]any{"kind": "ClusterSecretStore", "name": integration.StoreName}
		spec["target"] = map[string]any{"name": name}
		es.Object["spec"] = spec
		if err := s.CP.Client.Create(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	// ESO tries (and is refused) within a few seconds; give it two refreshes.
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		for name := range specs {
			if sec, ok := getSecret(t, s, malloryNS, name); ok {
				t.Fatalf("ExternalSecret %s produced Secret %s with keys %v", name, sec.Name, keysOf(sec))
			}
			if es, ok := getES(t, s, malloryNS, name); ok && integration.ConditionStatus(es, "Ready") == "True" {
				t.Fatalf("ExternalSecret %s is Ready", name)
			}
		}
		time.Sleep(time.Second)
	}
	var list corev1.SecretList
	if err := s.CP.Client.List(ctx, &list, client.InNamespace(malloryNS)); err != nil {
		t.Fatal(err)
	}
	for _, sec := range list.Items {
		for _, v := range sec.Data {
			if strings.Contains(string(v), password) {
				t.Fatalf("Secret %s/%s holds the victim's password", malloryNS, sec.Name)
			}
		}
	}
	waitTenant(t, s, victimNS, victim, metav1.ConditionTrue, "Ready", 10*time.Second)
}

func keysOf(sec *corev1.Secret) []string {
	var out []string
	for k := range sec.Data {
		out = append(out, k)
	}
	return out
}
