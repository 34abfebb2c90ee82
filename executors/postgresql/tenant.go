package postgresql

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// PasswordSource reads a Tenant's password from OpenBao after proving the
// record belongs to the Tenant. The password stays in memory.
type PasswordSource interface {
	TenantPassword(ctx context.Context, mount, path, instanceUID, tenantUID, namespace, name string) (string, error)
}

// SQL of the ownership registry (one place to read every statement).
const (
	sqlClaim = `INSERT INTO ` + RegistrySchema + `.tenant_ownership
		(instance_uid, tenant_uid, tenant_namespace, tenant_name, database_name, role_name, credential_path)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`
	sqlOwnRow = `SELECT tenant_namespace, tenant_name, database_name, role_name, credential_path, managed
		FROM ` + RegistrySchema + `.tenant_ownership WHERE instance_uid = $1 AND tenant_uid = $2`
	sqlConflicts = `SELECT tenant_namespace, tenant_name, tenant_uid, managed
		FROM ` + RegistrySchema + `.tenant_ownership
		WHERE (instance_uid = $1 AND (database_name = $2 OR role_name = $3 OR (tenant_namespace = $4 AND tenant_name = $5)))
		   OR credential_path = $6 LIMIT 1`
	sqlRetain = `UPDATE ` + RegistrySchema + `.tenant_ownership
		SET managed = false, retained_at = clock_timestamp(), updated_at = clock_timestamp()
		WHERE instance_uid = $1 AND tenant_uid = $2 AND managed`
	sqlRelease = `DELETE FROM ` + RegistrySchema + `.tenant_ownership WHERE instance_uid = $1 AND tenant_uid = $2`
)

// TenantHandlers returns the Tenant operations (added to Handlers by the manager).
func (e *Executor) TenantHandlers() map[string]journal.Handler {
	return map[string]journal.Handler{
		OpCheckExtensions:  e.tenantOp(e.checkExtensions),
		OpClaimOwnership:   e.tenantOp(e.claim),
		OpCreateRole:       e.tenantOp(e.createRole),
		OpCreateDatabase:   e.tenantOp(e.createDatabase),
		OpEnsureExtensions: e.tenantOp(e.ensureExtensions),
		OpVerifyLogin:      e.tenantOp(e.verifyLogin),
		OpRetainOwnership:  e.tenantOp(e.retain),
		OpDisableLogin:     e.tenantOp(e.disableLogin),
		OpDropDatabase:     e.tenantOp(e.dropDatabase),
		OpDropRole:         e.tenantOp(e.dropRole),
		OpReleaseOwnership: e.tenantOp(e.release),
	}
}

type tenantCall struct {
	rec  journal.Record
	in   TenantIntent
	pool *pgxpool.Pool
	t    Target
}

// tenantOp decodes the intent, connects with the Instance's admin pool,
// runs op and turns its result into an outcome. Classified failures are
// Failed outcomes; the projector decides about retries.
func (e *Executor) tenantOp(op func(ctx context.Context, c tenantCall) (TenantOutcome, error)) journal.Handler {
	return func(ctx context.Context, rec journal.Record) (journal.Outcome, error) {
		var in TenantIntent
		if err := rec.DecodePayload(&in); err != nil || in.Database == "" || in.Role == "" {
			return failed(&Classified{Reason: ReasonInvalidSpec, Message: "undecodable " + rec.Operation + " payload"}, nil), nil
		}
		ctx, cancel := e.withTimeout(ctx)
		defer cancel()
		creds, _, c := e.readCredentials(ctx, in.AdminCredRef)
		if c != nil {
			if c.Transient {
				return journal.Outcome{}, c
			}
			return failed(&Classified{Reason: ReasonDependencyUnavailable, Message: c.Message}, nil), nil
		}
		t := Target{InstanceUID: in.InstanceUID, Endpoint: in.Endpoint, CredRef: in.AdminCredRef, Creds: creds}
		pool, err := e.Pools.Get(t)
		if err != nil {
			return failed(Classify(err), nil), nil
		}
		out, err := op(ctx, tenantCall{rec: rec, in: in, pool: pool, t: t})
		if err != nil {
			cl := Classify(err)
			if cl.Reason == ReasonAuthenticationFailed || cl.Reason == ReasonInsufficientPrivileges {
				// Instance-level problems surface on the Tenant as a provisioning failure.
				cl = &Classified{Reason: ReasonProvisioningFailed, Message: cl.Message}
			}
			return failed(cl, out), nil
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: out}, nil
	}
}

func conflict(format string, args ...any) *Classified {
	return &Classified{Reason: ReasonConflict, Message: fmt.Sprintf(format, args...)}
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// owned checks the registry row of this Tenant: it must exist, be managed
// and name the same database, role and credential path.
func owned(ctx context.Context, q pgxQuerier, c tenantCall) (bool, error) {
	var ns, name, db, role, path string
	var managed bool
	err := q.QueryRow(ctx, sqlOwnRow, c.in.InstanceUID, c.rec.Object.UID).Scan(&ns, &name, &db, &role, &path, &managed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if db != c.in.Database || role != c.in.Role || path != c.in.CredentialPath {
		return false, conflict("the registry records database %s, role %s for this Tenant, not %s, %s", db, role, c.in.Database, c.in.Role)
	}
	return managed, nil
}

func requireOwned(ctx context.Context, q pgxQuerier, c tenantCall) error {
	ok, err := owned(ctx, q, c)
	if err != nil {
		return err
	}
	if !ok {
		return conflict("the ownership registry has no managed record of this Tenant for database %s", c.in.Database)
	}
	return nil
}

func exists(ctx context.Context, q pgxQuerier, sql string, arg string) (bool, error) {
	var b bool
	err := q.QueryRow(ctx, sql, arg).Scan(&b)
	return b, err
}

const (
	sqlDatabaseExists = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = $1)`
	sqlRoleExists     = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)`
)

// claim records ownership: a same-owner retry succeeds; a database or role
// that exists without our registry record, or a registry record of another
// Tenant, is a Conflict and nothing is written. The registry's unique
// constraints decide races between Tenants.
func (e *Executor) claim(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	var out TenantOutcome
	ok, err := owned(ctx, c.pool, c)
	if err != nil {
		return out, err
	}
	if ok {
		return out, nil
	}
	var ns, name, uid string
	var managed bool
	err = c.pool.QueryRow(ctx, sqlConflicts, c.in.InstanceUID, c.in.Database, c.in.Role, c.rec.Object.Namespace, c.rec.Object.Name, c.in.CredentialPath).
		Scan(&ns, &name, &uid, &managed)
	if err == nil {
		state := "managed"
		if !managed {
			state = "retained (unmanaged)"
		}
		return out, conflict("database %s / role %s is recorded for Tenant %s/%s (uid %s, %s)", c.in.Database, c.in.Role, ns, name, uid, state)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return out, err
	}
	for _, chk := range []struct{ sql, what, name string }{{sqlDatabaseExists, "database", c.in.Database}, {sqlRoleExists, "role", c.in.Role}} {
		found, err := exists(ctx, c.pool, chk.sql, chk.name)
		if err != nil {
			return out, err
		}
		if found {
			return out, conflict("%s %s already exists and is not managed by this Tenant (nothing was changed)", chk.what, chk.name)
		}
	}
	tag, err := c.pool.Exec(ctx, sqlClaim, c.in.InstanceUID, c.rec.Object.UID, c.rec.Object.Namespace, c.rec.Object.Name, c.in.Database, c.in.Role, c.in.CredentialPath)
	if err != nil {
		return out, err
	}
	if tag.RowsAffected() == 0 {
		// Lost a race: read back who won.
		if ok, err := owned(ctx, c.pool, c); err == nil && ok {
			return out, nil
		}
		return out, conflict("database %s / role %s was claimed concurrently by another Tenant", c.in.Database, c.in.Role)
	}
	return out, nil
}

func (e *Executor) password(ctx context.Context, c tenantCall) (string, error) {
	if e.Passwords == nil {
		return "", &Classified{Reason: ReasonDependencyUnavailable, Message: "no OpenBao client configured"}
	}
	return e.Passwords.TenantPassword(ctx, c.in.CredentialMount, c.in.CredentialPath, c.in.InstanceUID, c.rec.Object.UID, c.rec.Object.Namespace, c.rec.Object.Name)
}

// createRole creates the LOGIN role with the password from OpenBao, sent as
// a SCRAM-SHA-256 verifier computed here. An existing role (ours, from an
// earlier attempt) keeps its password; VerifyLogin proves it.
func (e *Executor) createRole(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	var out TenantOutcome
	if err := requireOwned(ctx, c.pool, c); err != nil {
		return out, err
	}
	found, err := exists(ctx, c.pool, sqlRoleExists, c.in.Role)
	if err != nil {
		return out, err
	}
	attrs := "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
	if found {
		// PostgreSQL 15 lets only superusers name (NO)SUPERUSER or
		// (NO)REPLICATION in ALTER ROLE: set the rest, then read back.
		if _, err := c.pool.Exec(ctx, "ALTER ROLE "+quoteIdent(c.in.Role)+" LOGIN NOCREATEDB NOCREATEROLE"); err != nil {
			return out, err
		}
		var super, repl bool
		if err := c.pool.QueryRow(ctx, "SELECT rolsuper, rolreplication FROM pg_catalog.pg_roles WHERE rolname = $1", c.in.Role).Scan(&super, &repl); err != nil {
			return out, err
		}
		if super || repl {
			return out, conflict("role %s has SUPERUSER or REPLICATION; refusing to use it", c.in.Role)
		}
		return out, nil
	}
	pw, err := e.password(ctx, c)
	if err != nil {
		return out, err
	}
	verifier, err := ScramSHA256Verifier(pw)
	if err != nil {
		return out, err
	}
	// CREATE ROLE takes no bind parameters; the verifier is base64 and '$:'
	// only, and the identifier is quoted by the driver's sanitizer.
	_, err = c.pool.Exec(ctx, "CREATE ROLE "+quoteIdent(c.in.Role)+" "+attrs+" PASSWORD '"+strings.ReplaceAll(verifier, "'", "''")+"'")
	return out, err
}

// createDatabase creates the database owned by the role, revokes CONNECT
// from PUBLIC and grants it to the role, then reads back the OID.
func (e *Executor) createDatabase(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	var out TenantOutcome
	if err := requireOwned(ctx, c.pool, c); err != nil {
		return out, err
	}
	// PostgreSQL 15: setting OWNER needs membership in the owner role.
	var member bool
	if err := c.pool.QueryRow(ctx, "SELECT pg_has_role(current_user, $1, 'MEMBER')", c.in.Role).Scan(&member); err != nil {
		return out, err
	}
	if !member {
		if _, err := c.pool.Exec(ctx, "GRANT "+quoteIdent(c.in.Role)+" TO CURRENT_USER"); err != nil {
			return out, err
		}
	}
	var owner string
	err := c.pool.QueryRow(ctx, "SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database WHERE datname = $1", c.in.Database).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := c.pool.Exec(ctx, "CREATE DATABASE "+quoteIdent(c.in.Database)+" OWNER "+quoteIdent(c.in.Role)); err != nil {
			return out, err
		}
	case err != nil:
		return out, err
	case owner != c.in.Role:
		return out, conflict("database %s exists but is owned by %s, not %s", c.in.Database, owner, c.in.Role)
	}
	db := quoteIdent(c.in.Database)
	for _, sql := range []string{"REVOKE CONNECT ON DATABASE " + db + " FROM PUBLIC", "GRANT CONNECT ON DATABASE " + db + " TO " + quoteIdent(c.in.Role)} {
		if _, err := c.pool.Exec(ctx, sql); err != nil {
			return out, err
		}
	}
	err = c.pool.QueryRow(ctx, "SELECT oid FROM pg_catalog.pg_database WHERE datname = $1", c.in.Database).Scan(&out.DatabaseOID)
	return out, err
}

// availableCheck returns an InvalidSpec error naming the requested
// extensions that are not in pg_available_extensions; a failed query is
// DependencyUnavailable, never "unsupported".
func availableCheck(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, requested []string) error {
	if len(requested) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, "SELECT name FROM pg_catalog.pg_available_extensions WHERE name = ANY($1)", requested)
	if err != nil {
		return &Classified{Reason: ReasonDependencyUnavailable, Message: "could not read pg_available_extensions", Transient: true, cause: err}
	}
	avail, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return &Classified{Reason: ReasonDependencyUnavailable, Message: "could not read pg_available_extensions", Transient: true, cause: err}
	}
	var unknown []string
	for _, x := range requested {
		found := false
		for _, a := range avail {
			found = found || a == x
		}
		if !found {
			unknown = append(unknown, x)
		}
	}
	if len(unknown) > 0 {
		return &Classified{Reason: ReasonInvalidSpec, Message: "extension(s) not available on this Instance: " + strings.Join(unknown, ", ")}
	}
	return nil
}

// checkExtensions is the read-only pre-check before any external write.
func (e *Executor) checkExtensions(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	return TenantOutcome{Extensions: c.in.Extensions}, availableCheck(ctx, c.pool, c.in.Extensions)
}

// ensureExtensions checks every requested name against
// pg_available_extensions before any write (unknown -> InvalidSpec, query
// failure -> DependencyUnavailable), installs the missing ones in the
// tenant database as the owner role, and reads them back. Nothing is dropped.
func (e *Executor) ensureExtensions(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	out := TenantOutcome{Extensions: []string{}}
	if err := requireOwned(ctx, c.pool, c); err != nil {
		return out, err
	}
	if len(c.in.Extensions) == 0 {
		return out, nil
	}
	if err := availableCheck(ctx, c.pool, c.in.Extensions); err != nil {
		return out, err
	}
	t := c.t
	t.Endpoint.Database = c.in.Database
	conn, err := e.Pools.Connect(ctx, t, false)
	if err != nil {
		return out, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET ROLE "+quoteIdent(c.in.Role)); err != nil {
		return out, err
	}
	for _, x := range c.in.Extensions {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS "+quoteIdent(x)); err != nil {
			return out, err
		}
	}
	rows, err := conn.Query(ctx, "SELECT extname FROM pg_catalog.pg_extension WHERE extname = ANY($1)", c.in.Extensions)
	if err != nil {
		return out, err
	}
	installed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out, err
	}
	sort.Strings(installed)
	if len(installed) != len(c.in.Extensions) {
		return out, &Classified{Reason: ReasonProvisioningFailed, Message: "extensions did not read back as installed"}
	}
	out.Extensions = installed
	return out, nil
}

// verifyLogin connects as the Tenant role to its database with TLS, once
// by host (DNS SAN) and once by hostaddr (IP SAN), and proves the role
// cannot create a database or role.
func (e *Executor) verifyLogin(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	var out TenantOutcome
	if err := requireOwned(ctx, c.pool, c); err != nil {
		return out, err
	}
	pw, err := e.password(ctx, c)
	if err != nil {
		return out, err
	}
	t := c.t
	t.Endpoint.Database = c.in.Database
	t.Creds = Credentials{Username: c.in.Role, Password: pw}
	targets := []bool{false}
	if t.Endpoint.SSLMode != "disable" && t.Endpoint.HostAddr != "" {
		targets = append(targets, true)
	}
	for _, viaIP := range targets {
		conn, err := e.Pools.Connect(ctx, t, viaIP)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000") {
				return out, conflict("the Tenant role cannot log in with the password stored in OpenBao (SQLSTATE %s)", pgErr.Code)
			}
			return out, err
		}
		var user, db string
		var super, createDB, createRole bool
		err = conn.QueryRow(ctx, `SELECT current_user, current_database(), rolsuper, rolcreatedb, rolcreaterole
			FROM pg_catalog.pg_roles WHERE rolname = current_user`).Scan(&user, &db, &super, &createDB, &createRole)
		if err == nil && (user != c.in.Role || db != c.in.Database) {
			err = &Classified{Reason: ReasonProvisioningFailed, Message: "logged in as the wrong user or database"}
		}
		if err == nil && (super || createDB || createRole) {
			err = &Classified{Reason: ReasonProvisioningFailed, Message: "the Tenant role has SUPERUSER, CREATEDB or CREATEROLE"}
		}
		if err == nil {
			// Prove it: creating a role must fail with insufficient_privilege.
			tx, terr := conn.Begin(ctx)
			if terr == nil {
				_, perr := tx.Exec(ctx, "CREATE ROLE ayatori_login_probe")
				_ = tx.Rollback(ctx)
				var pgErr *pgconn.PgError
				if perr == nil || !errors.As(perr, &pgErr) || pgErr.Code != "42501" {
					err = &Classified{Reason: ReasonProvisioningFailed, Message: "the Tenant role could create a role"}
				}
			}
		}
		_ = conn.Close(ctx)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// retain marks the registry record unmanaged (Retain deletion policy).
func (e *Executor) retain(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	_, err := c.pool.Exec(ctx, sqlRetain, c.in.InstanceUID, c.rec.Object.UID)
	return TenantOutcome{}, err
}

// disableLogin: ALTER ROLE ... NOLOGIN when the role is ours.
func (e *Executor) disableLogin(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	ok, err := owned(ctx, c.pool, c)
	if err != nil || !ok {
		return TenantOutcome{Skipped: "not owned"}, err
	}
	found, err := exists(ctx, c.pool, sqlRoleExists, c.in.Role)
	if err != nil || !found {
		return TenantOutcome{Skipped: "absent"}, err
	}
	_, err = c.pool.Exec(ctx, "ALTER ROLE "+quoteIdent(c.in.Role)+" NOLOGIN")
	return TenantOutcome{}, err
}

// dropDatabase terminates the database's sessions and drops it, when the
// registry says it is ours and it is owned by our role. Never CASCADE.
func (e *Executor) dropDatabase(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	ok, err := owned(ctx, c.pool, c)
	if err != nil || !ok {
		return TenantOutcome{Skipped: "not owned"}, err
	}
	var owner string
	err = c.pool.QueryRow(ctx, "SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database WHERE datname = $1", c.in.Database).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return TenantOutcome{Skipped: "absent"}, nil
	}
	if err != nil {
		return TenantOutcome{}, err
	}
	if owner != c.in.Role {
		return TenantOutcome{}, conflict("refusing to drop database %s: owned by %s, not %s", c.in.Database, owner, c.in.Role)
	}
	if _, err := c.pool.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", c.in.Database); err != nil {
		return TenantOutcome{}, err
	}
	if _, err := c.pool.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(c.in.Database)); err != nil {
		return TenantOutcome{}, err
	}
	found, err := exists(ctx, c.pool, sqlDatabaseExists, c.in.Database)
	if err == nil && found {
		err = &Classified{Reason: ReasonProvisioningFailed, Message: "the database still exists after DROP DATABASE", Transient: true}
	}
	return TenantOutcome{}, err
}

// dropRole drops the role when the registry says it is ours. It fails
// (2BP01) if the role still owns objects elsewhere: never CASCADE.
func (e *Executor) dropRole(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	ok, err := owned(ctx, c.pool, c)
	if err != nil || !ok {
		return TenantOutcome{Skipped: "not owned"}, err
	}
	if _, err := c.pool.Exec(ctx, "DROP ROLE IF EXISTS "+quoteIdent(c.in.Role)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "2BP01" {
			return TenantOutcome{}, &Classified{Reason: ReasonProvisioningFailed, Message: "role " + c.in.Role + " still owns objects outside its database (SQLSTATE 2BP01); nothing was dropped with CASCADE"}
		}
		return TenantOutcome{}, err
	}
	return TenantOutcome{}, nil
}

// release deletes the registry record (Delete policy, after everything else).
func (e *Executor) release(ctx context.Context, c tenantCall) (TenantOutcome, error) {
	_, err := c.pool.Exec(ctx, sqlRelease, c.in.InstanceUID, c.rec.Object.UID)
	return TenantOutcome{}, err
}
