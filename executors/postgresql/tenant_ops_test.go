package postgresql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The executor's own suite: every Tenant operation against a real
// PostgreSQL 15 (TLS verify-full, a non-superuser CREATEROLE CREATEDB admin),
// called as the journal consumer calls it, each run twice (idempotence).

const adminUser, adminPassword = "ayatori_admin", "CANARY-exec-admin-9c1d"

type adminSecret struct{}

func (adminSecret) ReadSecret(context.Context, string) (map[string][]byte, string, error) {
	return map[string][]byte{"username": []byte(adminUser), "password": []byte(adminPassword)}, "1", nil
}

// passwords is the OpenBao stand-in: one password per Tenant UID.
type passwords map[string]string

func (p passwords) TenantPassword(_ context.Context, _, _, _, tenantUID, _, _ string) (string, error) {
	pw, ok := p[tenantUID]
	if !ok {
		return "", errors.New("no such record")
	}
	return pw, nil
}

type fixture struct {
	pg  *integration.Postgres
	ex  *pgexec.Executor
	ep  dbcontract.Endpoint
	pws passwords
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pg := integration.StartPostgres(t, integration.PostgresOptions{})
	if err := pg.CreateAdminRole(ctx, adminUser, adminPassword, "CREATEROLE", "CREATEDB"); err != nil {
		t.Fatal(err)
	}
	superExec(t, pg, "postgres", "GRANT CREATE ON DATABASE postgres TO "+adminUser)
	roots, err := pgexec.LoadCABundle(pg.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pools := pgexec.NewPools(roots, 4, 5*time.Second)
	t.Cleanup(pools.CloseAll)
	f := &fixture{pg: pg, pws: passwords{}, ep: dbcontract.Endpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(pg.Port), Database: "postgres", SSLMode: "verify-full"}}
	f.ex = &pgexec.Executor{Pools: pools, Secrets: adminSecret{}, Timeout: 20 * time.Second, Passwords: f.pws}
	inst := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLInstance", Name: "exec", UID: "inst-1", Generation: 1}
	out := f.run(t, f.ex.Handlers()[dbcontract.OpBootstrapRegistry], inst, dbcontract.OpBootstrapRegistry,
		dbcontract.InstanceIntent{Endpoint: f.ep, AdminCredRef: dbcontract.AdminCredentialRef{SecretName: "admin", UsernameKey: "username", PasswordKey: "password"}})
	if out.Result.Class != journal.Succeeded {
		t.Fatalf("registry bootstrap: %+v", out.Result)
	}
	return f
}

func superExec(t *testing.T, pg *integration.Postgres, db, sql string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.SuperuserDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func superQuery[T any](t *testing.T, pg *integration.Postgres, db, sql string) T {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.SuperuserDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v T
	if err := c.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

var attempts = map[string]int{}

// run calls a handler with a fresh intent record, as the consumer does.
func (f *fixture) run(t *testing.T, h journal.Handler, obj journal.ObjectRef, op string, payload any) journal.Outcome {
	t.Helper()
	attempts[obj.UID+op]++
	rec, err := journal.NewIntent(obj, op, "", attempts[obj.UID+op], payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := h(context.Background(), rec)
	if err != nil {
		t.Fatalf("%s: transient error %v", op, err)
	}
	return out
}

// tenant runs op for the Tenant and returns the outcome.
func (f *fixture) tenant(t *testing.T, uid, name, op string, extensions ...string) (journal.Outcome, dbcontract.TenantOutcome) {
	t.Helper()
	obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: name, UID: uid, Generation: 1}
	in := dbcontract.TenantIntent{Endpoint: f.ep, InstanceUID: "inst-1", Database: name, Role: name, CredentialMount: "kv",
		CredentialPath: "tenants/ns/" + name, Extensions: extensions,
		AdminCredRef: dbcontract.AdminCredentialRef{SecretName: "admin", UsernameKey: "username", PasswordKey: "password"}}
	out := f.run(t, f.ex.TenantHandlers()[op], obj, op, in)
	var payload dbcontract.TenantOutcome
	if p, ok := out.Payload.(dbcontract.TenantOutcome); ok {
		payload = p
	}
	return out, payload
}

func must(t *testing.T, op string, out journal.Outcome) {
	t.Helper()
	if out.Result.Class != journal.Succeeded {
		t.Fatalf("%s: %s/%s: %s", op, out.Result.Class, out.Result.Reason, out.Result.Message)
	}
}

func TestTenantOperationsIdempotent(t *testing.T) {
	f := newFixture(t)
	const uid, name = "t-1", "shop"
	f.pws[uid] = "CANARY-exec-tenant-4e7a"
	var roleOID, dbOID uint32
	for _, op := range []string{dbcontract.OpCheckExtensions, dbcontract.OpClaimOwnership, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase,
		dbcontract.OpEnsureExtensions, dbcontract.OpVerifyLogin, dbcontract.OpObserveTenant} {
		for run := 1; run <= 2; run++ {
			out, p := f.tenant(t, uid, name, op, "pg_trgm", "citext")
			must(t, fmt.Sprintf("%s (run %d)", op, run), out)
			if op == dbcontract.OpCreateRole {
				if roleOID != 0 && p.RoleOID != roleOID {
					t.Fatalf("CreateRole run %d: role OID %d, then %d", run, roleOID, p.RoleOID)
				}
				roleOID = p.RoleOID
			}
			if op == dbcontract.OpCreateDatabase {
				if dbOID != 0 && p.DatabaseOID != dbOID {
					t.Fatalf("CreateDatabase run %d: database OID %d, then %d", run, dbOID, p.DatabaseOID)
				}
				dbOID = p.DatabaseOID
			}
		}
	}
	reg := superQuery[string](t, f.pg, "postgres", "SELECT concat_ws(',', role_oid, database_oid) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '"+uid+"'")
	if want := fmt.Sprintf("%d,%d", roleOID, dbOID); reg != want || roleOID == 0 || dbOID == 0 {
		t.Fatalf("registry OIDs %q, want %q", reg, want)
	}
	if n := superQuery[int64](t, f.pg, name, "SELECT count(*) FROM pg_extension WHERE extname IN ('pg_trgm', 'citext')"); n != 2 {
		t.Fatalf("%d extensions", n)
	}
	// The superuser session of the check above ends asynchronously on the
	// server; a superuser session still there would (rightly) block the drop.
	waitNoSessions(t, f.pg, name)
	for _, op := range []string{dbcontract.OpDisableLogin, dbcontract.OpDropDatabase, dbcontract.OpDropRole, dbcontract.OpReleaseOwnership} {
		for run := 1; run <= 2; run++ {
			out, _ := f.tenant(t, uid, name, op)
			must(t, fmt.Sprintf("%s (run %d)", op, run), out)
		}
	}
	for what, sql := range map[string]string{
		"roles": "SELECT count(*) FROM pg_roles WHERE rolname = '" + name + "'", "databases": "SELECT count(*) FROM pg_database WHERE datname = '" + name + "'",
		"registry rows": "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '" + uid + "'",
	} {
		if n := superQuery[int64](t, f.pg, "postgres", sql); n != 0 {
			t.Fatalf("%d %s left", n, what)
		}
	}
}

// TestTenantOperationFailures: each failure path gives the reason the
// projector acts on, and the message names what to do.
func TestTenantOperationFailures(t *testing.T) {
	f := newFixture(t)
	t.Run("name taken before the claim: Conflict, nothing written", func(t *testing.T) {
		superExec(t, f.pg, "postgres", "CREATE ROLE taken")
		out, _ := f.tenant(t, "t-taken", "taken", dbcontract.OpClaimOwnership)
		if out.Result.Reason != string(dbcontract.ReasonConflict) {
			t.Fatalf("%+v", out.Result)
		}
	})
	t.Run("role taken after the claim: Conflict, never adopted", func(t *testing.T) {
		f.pws["t-late"] = "pw-late"
		must(t, "claim", first(f.tenant(t, "t-late", "late", dbcontract.OpClaimOwnership)))
		superExec(t, f.pg, "postgres", "CREATE ROLE late LOGIN")
		out, _ := f.tenant(t, "t-late", "late", dbcontract.OpCreateRole)
		if out.Result.Reason != string(dbcontract.ReasonConflict) || !strings.Contains(out.Result.Message, "not created by Ayatori") {
			t.Fatalf("%+v", out.Result)
		}
		// Delete steps skip it.
		for _, op := range []string{dbcontract.OpDisableLogin, dbcontract.OpDropDatabase, dbcontract.OpDropRole} {
			out, p := f.tenant(t, "t-late", "late", op)
			must(t, op, out)
			if p.Skipped == "" {
				t.Fatalf("%s touched the foreign role", op)
			}
		}
		if n := superQuery[int64](t, f.pg, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'late' AND rolcanlogin"); n != 1 {
			t.Fatal("the foreign role was altered or dropped")
		}
	})
	t.Run("untrusted extension: InvalidSpec naming it", func(t *testing.T) {
		out, _ := f.tenant(t, "t-fdw", "fdw", dbcontract.OpCheckExtensions, "postgres_fdw")
		if out.Result.Reason != string(dbcontract.ReasonInvalidSpec) || !strings.Contains(out.Result.Message, "postgres_fdw") {
			t.Fatalf("%+v", out.Result)
		}
	})
	t.Run("wrong password in OpenBao: Conflict (28P01)", func(t *testing.T) {
		f.pws["t-pw"] = "first"
		for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase} {
			must(t, op, first(f.tenant(t, "t-pw", "pw", op)))
		}
		f.pws["t-pw"] = "second"
		out, _ := f.tenant(t, "t-pw", "pw", dbcontract.OpVerifyLogin)
		if out.Result.Reason != string(dbcontract.ReasonConflict) || !strings.Contains(out.Result.Message, "28P01") {
			t.Fatalf("%+v", out.Result)
		}
	})
	t.Run("login proof: a role given CREATEDB outside Ayatori fails VerifyLogin", func(t *testing.T) {
		f.pws["t-cdb"] = "pw-cdb"
		for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase, dbcontract.OpVerifyLogin} {
			must(t, op, first(f.tenant(t, "t-cdb", "cdb", op)))
		}
		superExec(t, f.pg, "postgres", "ALTER ROLE cdb CREATEDB")
		out, _ := f.tenant(t, "t-cdb", "cdb", dbcontract.OpVerifyLogin)
		if out.Result.Class == journal.Succeeded || out.Result.Reason != string(dbcontract.ReasonProvisioningFailed) ||
			!strings.Contains(out.Result.Message, "CREATEDB") {
			t.Fatalf("%+v", out.Result)
		}
		// Both logins (host name and endpoint.hostAddr, at once) pass again.
		superExec(t, f.pg, "postgres", "ALTER ROLE cdb NOCREATEDB")
		must(t, dbcontract.OpVerifyLogin, first(f.tenant(t, "t-cdb", "cdb", dbcontract.OpVerifyLogin)))
	})
	t.Run("role owns an object elsewhere: DeletionBlocked (2BP01)", func(t *testing.T) {
		f.pws["t-own"] = "pw-own"
		for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole} {
			must(t, op, first(f.tenant(t, "t-own", "own", op)))
		}
		superExec(t, f.pg, "postgres", "CREATE TABLE owned_elsewhere(); ALTER TABLE owned_elsewhere OWNER TO own")
		out, _ := f.tenant(t, "t-own", "own", dbcontract.OpDropRole)
		if out.Result.Reason != string(dbcontract.ReasonDeletionBlocked) || !strings.Contains(out.Result.Message, "2BP01: owner of table public.owned_elsewhere") {
			t.Fatalf("%+v", out.Result)
		}
	})
	t.Run("role and database renamed outside Ayatori: named, never re-created or adopted", func(t *testing.T) {
		f.pws["t-ren"] = "pw-ren"
		for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase} {
			must(t, op, first(f.tenant(t, "t-ren", "ren", op)))
		}
		superExec(t, f.pg, "postgres", "ALTER DATABASE ren RENAME TO ren_db_moved")
		superExec(t, f.pg, "postgres", "ALTER ROLE ren RENAME TO ren_moved")
		for _, op := range []string{dbcontract.OpCreateRole, dbcontract.OpCreateDatabase} {
			out, _ := f.tenant(t, "t-ren", "ren", op)
			if out.Result.Reason != string(dbcontract.ReasonConflict) || !strings.Contains(out.Result.Message, "renamed to") {
				t.Fatalf("%s: %+v", op, out.Result)
			}
		}
		for op, want := range map[string]string{dbcontract.OpDisableLogin: `"ren_moved"`, dbcontract.OpDropDatabase: `"ren_db_moved"`, dbcontract.OpDropRole: `"ren_moved"`} {
			out, p := f.tenant(t, "t-ren", "ren", op)
			must(t, op, out)
			if !strings.Contains(p.Skipped, want) {
				t.Fatalf("%s: skipped %q does not name %s", op, p.Skipped, want)
			}
		}
		if n := superQuery[int64](t, f.pg, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname IN ('ren', 'ren_moved')"); n != 1 {
			t.Fatalf("%d roles: a second role was created or the renamed one dropped", n)
		}
	})
	t.Run("no admin session in a Tenant database", func(t *testing.T) {
		f.pws["t-ext"] = "pw-ext"
		for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase, dbcontract.OpEnsureExtensions} {
			must(t, op, first(f.tenant(t, "t-ext", "ext", op, "pg_trgm")))
		}
		// log_connections with the %u@%d prefix: every session is in the log.
		log, err := f.pg.ReadLog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), " ext@ext ") || strings.Contains(string(log), " "+adminUser+"@ext ") {
			t.Fatal("extensions were not installed over the Tenant's own login, or the admin role had a session in the Tenant database")
		}
	})
}

// waitNoSessions waits until no backend is connected to the database.
func waitNoSessions(t *testing.T, pg *integration.Postgres, db string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if superQuery[int64](t, pg, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname = '"+db+"'") == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("sessions in database %s did not end", db)
}

func first(out journal.Outcome, _ dbcontract.TenantOutcome) journal.Outcome { return out }

// TestObserveTenant: the periodic re-check succeeds on a provisioned
// Tenant (twice, changing nothing) and fails, naming the fact, when the
// database, an extension or the role is not what was provisioned.
func TestObserveTenant(t *testing.T) {
	f := newFixture(t)
	const uid, name = "t-obs", "observed"
	f.pws[uid] = "pw-observed"
	for _, op := range []string{dbcontract.OpClaimOwnership, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase, dbcontract.OpEnsureExtensions} {
		must(t, op, first(f.tenant(t, uid, name, op, "citext")))
	}
	for run := 1; run <= 2; run++ {
		out, p := f.tenant(t, uid, name, dbcontract.OpObserveTenant, "citext")
		must(t, fmt.Sprintf("ObserveTenant (run %d)", run), out)
		if p.DatabaseOID == 0 || len(p.Extensions) != 1 {
			t.Fatalf("outcome %+v", p)
		}
	}
	waitNoSessions(t, f.pg, name)
	superExec(t, f.pg, name, "DROP EXTENSION citext")
	out, _ := f.tenant(t, uid, name, dbcontract.OpObserveTenant, "citext")
	if out.Result.Class != journal.Failed || out.Result.Reason != string(dbcontract.ReasonProvisioningFailed) || !strings.Contains(out.Result.Message, "extensions") {
		t.Fatalf("extension dropped: %+v", out.Result)
	}
	must(t, "EnsureExtensions (repair)", first(f.tenant(t, uid, name, dbcontract.OpEnsureExtensions, "citext")))
	waitNoSessions(t, f.pg, name)
	superExec(t, f.pg, "postgres", "ALTER DATABASE "+name+" RENAME TO "+name+"_moved")
	out, _ = f.tenant(t, uid, name, dbcontract.OpObserveTenant, "citext")
	if out.Result.Class != journal.Failed || !strings.Contains(out.Result.Message, "does not exist") {
		t.Fatalf("database renamed away: %+v", out.Result)
	}
	superExec(t, f.pg, "postgres", "ALTER DATABASE "+name+"_moved RENAME TO "+name)
	superExec(t, f.pg, "postgres", "ALTER ROLE "+name+" RENAME TO "+name+"_moved")
	out, _ = f.tenant(t, uid, name, dbcontract.OpObserveTenant, "citext")
	if out.Result.Class != journal.Failed || !strings.Contains(out.Result.Message, "renamed") {
		t.Fatalf("role renamed away: %+v", out.Result)
	}
}
