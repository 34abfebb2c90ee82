package postgresql

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// PasswordSource reads a Tenant's password from OpenBao after proving the
// record belongs to the Tenant. The password stays in memory.
type PasswordSource interface {
	TenantPassword(ctx context.Context, mount, path, instanceUID, tenantUID, namespace, name string) (string, error)
}

// TenantHandlers returns the Tenant operations (added to Handlers by the manager).
func (e *Executor) TenantHandlers() map[string]journal.Handler {
	b := e.backend()
	ops := map[string]func(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error){
		dbcontract.OpCheckExtensions:  e.checkExtensions,
		dbcontract.OpClaimOwnership:   e.claim,
		dbcontract.OpCreateRole:       e.createRole,
		dbcontract.OpCreateDatabase:   e.createDatabase,
		dbcontract.OpEnsureExtensions: e.ensureExtensions,
		dbcontract.OpVerifyLogin:      e.verifyLogin,
		dbcontract.OpObserveTenant:    e.observeTenant,
		dbcontract.OpRetainOwnership:  e.retain,
		dbcontract.OpDisableLogin:     e.disableLogin,
		dbcontract.OpDropDatabase:     e.dropDatabase,
		dbcontract.OpDropRole:         e.dropRole,
		dbcontract.OpReleaseOwnership: e.release,
	}
	hs := make(map[string]journal.Handler, len(ops))
	for name, op := range ops {
		hs[name] = journal.Execute(b, journal.Step[dbcontract.TenantIntent]{Run: e.tenantOp(op), Validate: validTenant})
	}
	return hs
}

// validTenant refuses a Tenant payload without the names it acts on.
func validTenant(_ journal.Record, in dbcontract.TenantIntent) error {
	if in.Database == "" || in.Role == "" {
		return errors.New("no database or role name")
	}
	return nil
}

type tenantCall struct {
	rec  journal.Record
	in   dbcontract.TenantIntent
	pool *pgxpool.Pool
	t    Target
}

// tenantOp connects with the Instance's admin pool and runs op; its
// error is classified by the skeleton (a transient one is redelivered).
func (e *Executor) tenantOp(op func(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error)) func(context.Context, journal.Record, dbcontract.TenantIntent) (journal.Outcome, error) {
	return func(ctx context.Context, rec journal.Record, in dbcontract.TenantIntent) (journal.Outcome, error) {
		creds, _, c := e.readCredentials(ctx, in.AdminCredRef)
		if c != nil {
			if !c.Transient {
				c = &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: c.Message}
			}
			return journal.Outcome{}, c
		}
		t := Target{InstanceUID: in.InstanceUID, Endpoint: in.Endpoint, CredRef: in.AdminCredRef, Creds: creds}
		pool, err := e.Pools.Get(t)
		if err != nil {
			return journal.Outcome{}, err
		}
		out, err := op(ctx, tenantCall{rec: rec, in: in, pool: pool, t: t})
		if err != nil {
			cl := Classify(err)
			if cl.Reason == dbcontract.ReasonAuthenticationFailed || cl.Reason == dbcontract.ReasonInsufficientPrivileges {
				// Instance-level problems surface on the Tenant as a provisioning failure.
				cl = &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: cl.Message, Transient: cl.Transient, Cause: err}
			}
			return journal.Outcome{}, failed(cl, out)
		}
		return journal.Outcome{Payload: out}, nil
	}
}

func conflict(format string, args ...any) *dbcontract.Failure {
	return &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: fmt.Sprintf(format, args...)}
}

// ownership is this Tenant's registry row. RoleOID and DatabaseOID are the
// objects Ayatori created for it (nil: not created yet).
type ownership struct {
	Managed     bool
	RoleOID     *uint32
	DatabaseOID *uint32
}

// ownRow reads the registry row of this Tenant (nil: none). A row that
// names another database, role or credential path is a Conflict.
func ownRow(ctx context.Context, q pgxQuerier, sql string, c tenantCall) (*ownership, error) {
	var ns, name, db, role, path string
	var o ownership
	err := q.QueryRow(ctx, sql, c.in.InstanceUID, c.rec.Object.UID).Scan(&ns, &name, &db, &role, &path, &o.Managed, &o.RoleOID, &o.DatabaseOID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if db != c.in.Database || role != c.in.Role || path != c.in.CredentialPath {
		return nil, conflict("the registry records database %s, role %s for this Tenant, not %s, %s", db, role, c.in.Database, c.in.Role)
	}
	return &o, nil
}

// owned reports whether this Tenant has a managed registry row.
func owned(ctx context.Context, q pgxQuerier, c tenantCall) (bool, error) {
	o, err := ownRow(ctx, q, sqlOwnRow, c)
	return o != nil && o.Managed, err
}

// requireManaged returns the managed registry row, or a Conflict.
func requireManaged(ctx context.Context, q pgxQuerier, sql string, c tenantCall) (*ownership, error) {
	o, err := ownRow(ctx, q, sql, c)
	if err != nil {
		return nil, err
	}
	if o == nil || !o.Managed {
		return nil, conflict("the ownership registry has no managed record of this Tenant for database %s", c.in.Database)
	}
	return o, nil
}

func exists(ctx context.Context, q pgxQuerier, sql string, arg string) (bool, error) {
	var b bool
	err := q.QueryRow(ctx, sql, arg).Scan(&b)
	return b, err
}

// catalogRole is a role found by name.
type catalogRole struct {
	OID               uint32
	Super, Replicator bool
}

func roleByName(ctx context.Context, q pgxQuerier, name string) (*catalogRole, error) {
	var r catalogRole
	err := q.QueryRow(ctx, sqlRoleByName, name).Scan(&r.OID, &r.Super, &r.Replicator)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return &r, err
}

// catalogDatabase is a database found by name.
type catalogDatabase struct{ OID, Owner uint32 }

func databaseByName(ctx context.Context, q pgxQuerier, name string) (*catalogDatabase, error) {
	var d catalogDatabase
	err := q.QueryRow(ctx, sqlDatabaseByName, name).Scan(&d.OID, &d.Owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return &d, err
}

// claim records ownership: a same-owner retry succeeds; a database or role
// that exists without our registry record, or a registry record of another
// Tenant, is a Conflict and nothing is written. The registry's unique
// constraints decide races between Tenants. A claim alone proves nothing
// about the objects: CreateRole and CreateDatabase record the OIDs of what
// they create, and only those objects are ever changed or dropped.
func (e *Executor) claim(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	var out dbcontract.TenantOutcome
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
		return "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "no OpenBao client configured"}
	}
	return e.Passwords.TenantPassword(ctx, c.in.CredentialMount, c.in.CredentialPath, c.in.InstanceUID, c.rec.Object.UID, c.rec.Object.Namespace, c.rec.Object.Name)
}

// createRole creates the LOGIN role with the password from OpenBao, sent as
// a SCRAM-SHA-256 verifier computed here, and records its OID in the
// registry in the same transaction: the role is Ayatori's exactly when its
// OID is the recorded one. A role with the name and another OID (created by
// someone else, even after our claim) is a Conflict and nothing is changed.
// Our role keeps its password; only its attributes are enforced.
func (e *Executor) createRole(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	var out dbcontract.TenantOutcome
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return out, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	row, err := requireManaged(ctx, tx, sqlOwnRowLocked, c)
	if err != nil {
		return out, err
	}
	cur, err := roleByName(ctx, tx, c.in.Role)
	if err != nil {
		return out, err
	}
	switch {
	case cur != nil && row.RoleOID != nil && cur.OID == *row.RoleOID:
		if cur.Super || cur.Replicator {
			return out, conflict("role %s has SUPERUSER or REPLICATION; refusing to use it", c.in.Role)
		}
		// PostgreSQL 15 lets only superusers name (NO)SUPERUSER or
		// (NO)REPLICATION in ALTER ROLE: set the rest.
		if _, err := tx.Exec(ctx, sqlEnforceRoleAttributes(c.in.Role)); err != nil {
			return out, err
		}
		if again, err := roleByName(ctx, tx, c.in.Role); err != nil || again == nil || again.OID != cur.OID {
			return out, firstErr(err, conflict("role %s changed while it was altered; nothing was changed", c.in.Role))
		}
		out.RoleOID = cur.OID
		return out, tx.Commit(ctx)
	case cur != nil && row.RoleOID != nil:
		return out, conflict("role %s has OID %d, but the role Ayatori created for this Tenant had OID %d: another role took the name; nothing was changed", c.in.Role, cur.OID, *row.RoleOID)
	case cur != nil:
		return out, conflict("role %s exists but was not created by Ayatori for this Tenant; nothing was changed", c.in.Role)
	}
	if row.RoleOID != nil {
		// Ours is gone under this name: renamed (a Conflict, never a second
		// role) or dropped out of band (created again below).
		if renamed, err := nameByOID(ctx, tx, sqlRoleNameByOID, *row.RoleOID); err != nil {
			return out, err
		} else if renamed != "" {
			return out, conflict("the role Ayatori created for this Tenant (OID %d) was renamed to %q outside Ayatori: rename it back to %s; nothing was changed", *row.RoleOID, renamed, c.in.Role)
		}
	}
	// Absent: create it (again, when ours was dropped out of band) and
	// record its OID before the transaction commits.
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
	if _, err := tx.Exec(ctx, sqlCreateRole(c.in.Role, verifier)); err != nil {
		return out, err
	}
	created, err := roleByName(ctx, tx, c.in.Role)
	if err != nil || created == nil {
		return out, firstErr(err, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "the role did not read back after CREATE ROLE", Transient: true})
	}
	if _, err := tx.Exec(ctx, sqlRecordRoleOID, c.in.InstanceUID, c.rec.Object.UID, created.OID); err != nil {
		return out, err
	}
	out.RoleOID = created.OID
	return out, tx.Commit(ctx)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ourRole returns the OID of this Tenant's role when the role with the
// name is the one Ayatori created (nil, nil: it is absent or not ours;
// why is in the message).
func ourRole(ctx context.Context, q pgxQuerier, c tenantCall, row *ownership) (*catalogRole, string, error) {
	if row.RoleOID == nil {
		return nil, "Ayatori never created role " + c.in.Role + " for this Tenant", nil
	}
	cur, err := roleByName(ctx, q, c.in.Role)
	if err != nil {
		return nil, "", err
	}
	if cur != nil && cur.OID == *row.RoleOID {
		return cur, "", nil
	}
	why := "role " + c.in.Role + " does not exist"
	if cur != nil {
		why = fmt.Sprintf("role %s has OID %d, not the OID %d Ayatori created", c.in.Role, cur.OID, *row.RoleOID)
	}
	if renamed, err := nameByOID(ctx, q, sqlRoleNameByOID, *row.RoleOID); err != nil {
		return nil, "", err
	} else if renamed != "" {
		why += fmt.Sprintf("; the role Ayatori created (OID %d) was renamed to %q outside Ayatori: rename it back to %s, or drop it yourself", *row.RoleOID, renamed, c.in.Role)
	}
	return nil, why + "; left alone", nil
}

// nameByOID returns the current name of a role or database by OID ("": gone).
func nameByOID(ctx context.Context, q pgxQuerier, sql string, oid uint32) (string, error) {
	var name string
	err := q.QueryRow(ctx, sql, oid).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return name, err
}

// renamedDatabase says, when the database Ayatori created is still there
// under another name, what happened and what to do ("" otherwise).
func renamedDatabase(ctx context.Context, q pgxQuerier, c tenantCall, row *ownership) (string, error) {
	if row.DatabaseOID == nil {
		return "", nil
	}
	renamed, err := nameByOID(ctx, q, sqlDatabaseNameByOID, *row.DatabaseOID)
	if err != nil || renamed == "" || renamed == c.in.Database {
		return "", err
	}
	return fmt.Sprintf("the database Ayatori created (OID %d) was renamed to %q outside Ayatori: rename it back to %s, or drop it yourself", *row.DatabaseOID, renamed, c.in.Database), nil
}

// ourDatabase decides whether the database with the name is the one Ayatori
// created for this Tenant: its OID is the recorded one, or (a crash between
// CREATE DATABASE and recording the OID, which cannot share a transaction)
// no OID is recorded yet and the database is owned by our role, which is
// NOCREATEDB and has no member but the admin role, so nobody but this
// executor (or a superuser) could have created it. The string says why not.
func ourDatabase(ctx context.Context, q pgxQuerier, c tenantCall, row *ownership, db *catalogDatabase) (bool, string, error) {
	if row.DatabaseOID != nil {
		if db.OID == *row.DatabaseOID {
			return true, "", nil
		}
		why := fmt.Sprintf("database %s has OID %d, not the OID %d Ayatori created", c.in.Database, db.OID, *row.DatabaseOID)
		if renamed, err := renamedDatabase(ctx, q, c, row); err != nil {
			return false, "", err
		} else if renamed != "" {
			why += "; " + renamed
		}
		return false, why + "; left alone", nil
	}
	if row.RoleOID == nil || db.Owner != *row.RoleOID {
		return false, "database " + c.in.Database + " exists but was not created by Ayatori for this Tenant; left alone", nil
	}
	var others int64
	if err := q.QueryRow(ctx, sqlOtherMembers, *row.RoleOID).Scan(&others); err != nil {
		return false, "", err
	}
	if others > 0 {
		return false, fmt.Sprintf("database %s is owned by role %s but its OID was never recorded, and the role has other members who could have created it; left alone", c.in.Database, c.in.Role), nil
	}
	return true, "", nil
}

// createDatabase creates the database owned by our role (proven by OID),
// records its OID, revokes CONNECT from PUBLIC and grants it to the role.
// A database with the name that Ayatori did not create is a Conflict and
// nothing is changed. Runs only in the admin database.
func (e *Executor) createDatabase(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	var out dbcontract.TenantOutcome
	row, err := requireManaged(ctx, c.pool, sqlOwnRow, c)
	if err != nil {
		return out, err
	}
	role, why, err := ourRole(ctx, c.pool, c, row)
	if err != nil {
		return out, err
	}
	if role == nil {
		return out, conflict("%s; the database is not created", why)
	}
	// PostgreSQL 15: setting OWNER needs membership in the owner role.
	var member bool
	if err := c.pool.QueryRow(ctx, sqlIsMember, role.OID).Scan(&member); err != nil {
		return out, err
	}
	if !member {
		if err := execVerifyingRole(ctx, c, role.OID, sqlGrantRoleToAdmin(c.in.Role)); err != nil {
			return out, err
		}
	}
	db, err := databaseByName(ctx, c.pool, c.in.Database)
	if err != nil {
		return out, err
	}
	if db != nil {
		ours, why, err := ourDatabase(ctx, c.pool, c, row, db)
		if err != nil {
			return out, err
		}
		if !ours {
			return out, conflict("%s; nothing was changed", strings.TrimSuffix(why, "; left alone"))
		}
		if db.Owner != role.OID {
			return out, conflict("database %s is owned by another role than %s (ownership changed outside Ayatori); nothing was changed", c.in.Database, c.in.Role)
		}
	} else {
		if renamed, err := renamedDatabase(ctx, c.pool, c, row); err != nil {
			return out, err
		} else if renamed != "" {
			return out, conflict("%s; nothing was changed", renamed)
		}
		// CREATE DATABASE cannot run in a transaction: its OID is
		// recorded right after, and a crash in between is resolved by
		// ourDatabase (owner = our role), never by the name.
		if _, err := c.pool.Exec(ctx, sqlCreateDatabase(c.in.Database, c.in.Role)); err != nil {
			return out, err
		}
		if db, err = databaseByName(ctx, c.pool, c.in.Database); err != nil || db == nil || db.Owner != role.OID {
			return out, firstErr(err, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "the database did not read back owned by the role after CREATE DATABASE", Transient: true})
		}
	}
	if row.DatabaseOID == nil || *row.DatabaseOID != db.OID {
		tag, err := c.pool.Exec(ctx, sqlRecordDatabaseOID, c.in.InstanceUID, c.rec.Object.UID, db.OID, role.OID)
		if err != nil {
			return out, err
		}
		if tag.RowsAffected() != 1 {
			return out, conflict("the registry record of this Tenant changed while the database was created")
		}
	}
	for _, sql := range []string{sqlRevokePublicConnect(c.in.Database), sqlGrantConnect(c.in.Database, c.in.Role)} {
		if err := execVerifyingDatabase(ctx, c, db.OID, sql); err != nil {
			return out, err
		}
	}
	out.DatabaseOID = db.OID
	out.RoleOID = role.OID
	return out, nil
}

// execVerifyingRole runs a statement on the role in a transaction and
// commits only if the name still denotes the role with the OID afterwards.
func execVerifyingRole(ctx context.Context, c tenantCall, oid uint32, sql string) error {
	return inTx(ctx, c, sql, func(tx pgx.Tx) (bool, error) {
		r, err := roleByName(ctx, tx, c.in.Role)
		return r != nil && r.OID == oid, err
	}, "role "+c.in.Role)
}

// execVerifyingDatabase is execVerifyingRole for a database.
func execVerifyingDatabase(ctx context.Context, c tenantCall, oid uint32, sql string) error {
	return inTx(ctx, c, sql, func(tx pgx.Tx) (bool, error) {
		d, err := databaseByName(ctx, tx, c.in.Database)
		return d != nil && d.OID == oid, err
	}, "database "+c.in.Database)
}

func inTx(ctx context.Context, c tenantCall, sql string, still func(pgx.Tx) (bool, error), what string) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, sql); err != nil {
		return err
	}
	ok, err := still(tx)
	if err != nil {
		return err
	}
	if !ok {
		return conflict("%s was replaced while it was changed; nothing was changed", what)
	}
	return tx.Commit(ctx)
}

// extensionInfo is one available extension's default version.
type extensionInfo struct {
	installable bool
	requires    []string
}

// extensionCheck is the read-only check of the requested extensions, in
// the admin database, before any write: each must be available and
// installable by the Tenant role (trusted, or not superuser-only), and so
// must every extension it requires. Unknown or untrusted names are
// InvalidSpec naming them; a failed query is DependencyUnavailable.
func extensionCheck(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, requested []string) error {
	if len(requested) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, sqlExtensionVersions)
	if err != nil {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "could not read pg_available_extension_versions", Transient: true, Cause: err}
	}
	avail := map[string]extensionInfo{}
	var name string
	var info extensionInfo
	_, err = pgx.ForEachRow(rows, []any{&name, &info.installable, &info.requires}, func() error {
		avail[name] = extensionInfo{installable: info.installable, requires: append([]string(nil), info.requires...)}
		return nil
	})
	if err != nil {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "could not read pg_available_extension_versions", Transient: true, Cause: err}
	}
	return judgeExtensions(avail, requested)
}

// judgeExtensions is extensionCheck's decision (pure, table-tested).
func judgeExtensions(avail map[string]extensionInfo, requested []string) error {
	var unknown, untrusted []string
	seen := map[string]bool{}
	var visit func(name, via string)
	visit = func(name, via string) {
		if seen[name] {
			return
		}
		seen[name] = true
		label := name
		if via != "" {
			label = name + " (required by " + via + ")"
		}
		info, ok := avail[name]
		switch {
		case !ok:
			unknown = append(unknown, label)
			return
		case !info.installable:
			untrusted = append(untrusted, label)
		}
		for _, r := range info.requires {
			visit(r, name)
		}
	}
	for _, x := range requested {
		visit(x, "")
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, "extension(s) not available on this Instance: "+strings.Join(unknown, ", "))
	}
	if len(untrusted) > 0 {
		msgs = append(msgs, "extension(s) only a superuser can install (not trusted), which the Tenant role cannot create: "+strings.Join(untrusted, ", "))
	}
	if len(msgs) > 0 {
		return &dbcontract.Failure{Reason: dbcontract.ReasonInvalidSpec, Message: strings.Join(msgs, "; ")}
	}
	return nil
}

// checkExtensions is the read-only pre-check before any external write.
func (e *Executor) checkExtensions(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	return dbcontract.TenantOutcome{Extensions: c.in.Extensions}, extensionCheck(ctx, c.pool, c.in.Extensions)
}

// tenantLogin connects as the Tenant role to its database with the
// password from OpenBao. A rejected login says what was rejected: a wrong
// password (28P01) is a Conflict between OpenBao and PostgreSQL; 28000 is
// pg_hba or a role that may not log in.
func (e *Executor) tenantLogin(ctx context.Context, c tenantCall, viaIP bool) (*pgx.Conn, error) {
	pw, err := e.password(ctx, c)
	if err != nil {
		return nil, err
	}
	conn, err := e.Pools.ConnectTenant(ctx, c.t, TenantLogin{Role: c.in.Role, Password: pw, Database: c.in.Database}, viaIP)
	if err != nil {
		return nil, classifyTenantLogin(err, c.in.Role, c.in.Database)
	}
	return conn, nil
}

// ensureExtensions installs the requested extensions over the Tenant role's
// own login (docs/decisions/0003): the admin role never opens a session in
// a Tenant database, so nothing the Tenant placed there (operators,
// functions, search_path, database-level settings) runs with more rights
// than the Tenant's. Only trusted extensions pass extensionCheck, which
// runs first in the admin database. Nothing is dropped.
func (e *Executor) ensureExtensions(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	out := dbcontract.TenantOutcome{Extensions: []string{}}
	if _, err := requireManaged(ctx, c.pool, sqlOwnRow, c); err != nil {
		return out, err
	}
	if len(c.in.Extensions) == 0 {
		return out, nil
	}
	if err := extensionCheck(ctx, c.pool, c.in.Extensions); err != nil {
		return out, err
	}
	conn, err := e.tenantLogin(ctx, c, false)
	if err != nil {
		return out, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, x := range c.in.Extensions {
		if _, err := conn.Exec(ctx, sqlCreateExtension(x)); err != nil {
			if code := sqlstate(err); code != "" {
				return out, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Cause: err,
					Message: fmt.Sprintf("CREATE EXTENSION %s as role %s failed (SQLSTATE %s); the database's own objects or settings may prevent it", x, c.in.Role, code)}
			}
			return out, err
		}
	}
	installed, err := installedExtensions(ctx, conn, c.in.Extensions)
	if err != nil {
		return out, err
	}
	if len(installed) != len(c.in.Extensions) {
		return out, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "extensions did not read back as installed"}
	}
	out.Extensions = installed
	return out, nil
}

// verifyLogin connects as the Tenant role to its database with TLS, once
// by host (DNS SAN) and once by hostaddr (IP SAN), and proves the role
// cannot create a database or role.
func (e *Executor) verifyLogin(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	var out dbcontract.TenantOutcome
	if _, err := requireManaged(ctx, c.pool, sqlOwnRow, c); err != nil {
		return out, err
	}
	targets := []bool{false}
	if c.t.Endpoint.SSLMode != "disable" && c.t.Endpoint.HostAddr != "" {
		targets = append(targets, true)
	}
	// One password read for both logins, which run at once (each is a TLS
	// handshake and a SCRAM exchange: the step's latency is the slower
	// one's, not their sum). The first target's error wins when both fail.
	pw, err := e.password(ctx, c)
	if err != nil {
		return out, err
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, viaIP := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.proveLogin(ctx, c, pw, viaIP)
		}()
	}
	wg.Wait()
	return out, firstNonNil(errs)
}

func firstNonNil(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// proveLogin logs in as the Tenant role with pw (by host name, or by
// endpoint.hostAddr when viaIP) and proves the session is the Tenant's:
// the right user and database, no SUPERUSER, CREATEDB or CREATEROLE, and
// creating a role fails with insufficient_privilege.
func (e *Executor) proveLogin(ctx context.Context, c tenantCall, pw string, viaIP bool) error {
	conn, err := e.Pools.ConnectTenant(ctx, c.t, TenantLogin{Role: c.in.Role, Password: pw, Database: c.in.Database}, viaIP)
	if err != nil {
		return classifyTenantLogin(err, c.in.Role, c.in.Database)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var user, db string
	var super, createDB, createRole bool
	if err := conn.QueryRow(ctx, sqlLoginIdentity).Scan(&user, &db, &super, &createDB, &createRole); err != nil {
		return err
	}
	if user != c.in.Role || db != c.in.Database {
		return &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "logged in as the wrong user or database"}
	}
	if super || createDB || createRole {
		return &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "the Tenant role has SUPERUSER, CREATEDB or CREATEROLE"}
	}
	// Prove it: creating a role must fail with insufficient_privilege.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err // the session broke: nothing proven, the step is retried
	}
	_, perr := tx.Exec(ctx, sqlLoginProbe)
	_ = tx.Rollback(ctx)
	if perr == nil || !isInsufficientPrivilege(perr) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "the Tenant role could create a role"}
	}
	return nil
}

// installedExtensions returns which of requested are installed in the
// database conn is connected to, sorted.
func installedExtensions(ctx context.Context, conn *pgx.Conn, requested []string) ([]string, error) {
	rows, err := conn.Query(ctx, sqlInstalledExtensions, requested)
	if err != nil {
		return nil, err
	}
	installed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	sort.Strings(installed)
	return installed, nil
}

// observeTenant re-checks every PostgreSQL fact of a Ready Tenant in one
// read-only operation (the periodic re-check): the managed registry row,
// the role and database Ayatori created (by OID, the database owned by the
// role), the login (verifyLogin) and the requested extensions, read over
// the Tenant's own login. A fact that does not hold is a Failed outcome
// naming it (reason ProvisioningFailed or Conflict); nothing is changed.
func (e *Executor) observeTenant(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	out := dbcontract.TenantOutcome{Extensions: []string{}}
	row, err := requireManaged(ctx, c.pool, sqlOwnRow, c)
	if err != nil {
		return out, err
	}
	role, why, err := ourRole(ctx, c.pool, c, row)
	if err != nil {
		return out, err
	}
	if role == nil {
		return out, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: why}
	}
	db, err := databaseByName(ctx, c.pool, c.in.Database)
	if err != nil {
		return out, err
	}
	if db == nil {
		return out, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "database " + c.in.Database + " does not exist"}
	}
	if ours, why, err := ourDatabase(ctx, c.pool, c, row, db); err != nil {
		return out, err
	} else if !ours || row.DatabaseOID == nil || db.Owner != role.OID {
		if why == "" {
			why = "database " + c.in.Database + " is not owned by role " + c.in.Role
		}
		return out, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: why}
	}
	out.DatabaseOID = db.OID
	if _, err := e.verifyLogin(ctx, c); err != nil {
		return out, err
	}
	if len(c.in.Extensions) == 0 {
		return out, nil
	}
	conn, err := e.tenantLogin(ctx, c, false)
	if err != nil {
		return out, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	installed, err := installedExtensions(ctx, conn, c.in.Extensions)
	if err != nil {
		return out, err
	}
	if len(installed) != len(c.in.Extensions) {
		return out, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed,
			Message: fmt.Sprintf("%d of %d requested extensions are installed", len(installed), len(c.in.Extensions))}
	}
	out.Extensions = installed
	return out, nil
}

// retain marks the registry record unmanaged (Retain deletion policy).
func (e *Executor) retain(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	_, err := c.pool.Exec(ctx, sqlRetain, c.in.InstanceUID, c.rec.Object.UID)
	return dbcontract.TenantOutcome{}, err
}

// skipped is the outcome of a delete step that found nothing of ours.
func skipped(why string) (dbcontract.TenantOutcome, error) {
	return dbcontract.TenantOutcome{Skipped: why}, nil
}

// roleToDelete is the prelude of the role's delete steps: the role when
// this Tenant's managed registry row records it and the name still denotes
// that OID; otherwise nil and why it is skipped ("not owned", or ourRole's
// reason).
func roleToDelete(ctx context.Context, c tenantCall) (*catalogRole, string, error) {
	row, err := ownRow(ctx, c.pool, sqlOwnRow, c)
	if err != nil || row == nil || !row.Managed {
		return nil, "not owned", err
	}
	role, why, err := ourRole(ctx, c.pool, c, row)
	if err != nil {
		return nil, "", err
	}
	return role, why, nil
}

// disableLogin: ALTER ROLE ... NOLOGIN when the role is the one Ayatori
// created (by OID). A foreign or absent role is skipped and reported.
func (e *Executor) disableLogin(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	role, why, err := roleToDelete(ctx, c)
	if err != nil || role == nil {
		return dbcontract.TenantOutcome{Skipped: why}, err
	}
	return dbcontract.TenantOutcome{}, execVerifyingRole(ctx, c, role.OID, sqlDisableLogin(c.in.Role))
}

// dropDatabase terminates the database's sessions and drops it, when it is
// the database Ayatori created (ourDatabase). Never CASCADE. Sessions the
// admin role may not terminate (a superuser's) block the deletion: they
// are named, and the step is retried until they end.
func (e *Executor) dropDatabase(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	row, err := ownRow(ctx, c.pool, sqlOwnRow, c)
	if err != nil || row == nil || !row.Managed {
		return dbcontract.TenantOutcome{Skipped: "not owned"}, err
	}
	db, err := databaseByName(ctx, c.pool, c.in.Database)
	if err != nil {
		return dbcontract.TenantOutcome{}, err
	}
	if db == nil {
		renamed, err := renamedDatabase(ctx, c.pool, c, row)
		if err != nil {
			return dbcontract.TenantOutcome{}, err
		}
		if renamed != "" {
			return skipped(renamed + "; left alone")
		}
		return skipped("absent")
	}
	ours, why, err := ourDatabase(ctx, c.pool, c, row, db)
	if err != nil {
		return dbcontract.TenantOutcome{}, err
	}
	if !ours {
		return skipped(why)
	}
	sessions, err := listSessions(ctx, c.pool, db.OID)
	if err != nil {
		return dbcontract.TenantOutcome{}, err
	}
	var blocking []session
	for _, s := range sessions {
		if _, err := c.pool.Exec(ctx, sqlTerminate, s.pid); err != nil {
			if isInsufficientPrivilege(err) {
				blocking = append(blocking, s)
				continue
			}
			return dbcontract.TenantOutcome{}, err
		}
	}
	if len(blocking) > 0 {
		return dbcontract.TenantOutcome{}, deletionBlocked(c.in.Database, blocking)
	}
	if again, err := databaseByName(ctx, c.pool, c.in.Database); err != nil || again == nil || again.OID != db.OID {
		return dbcontract.TenantOutcome{}, firstErr(err, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Transient: true, Message: "database " + c.in.Database + " changed while its sessions were ended"})
	}
	if _, err := c.pool.Exec(ctx, sqlDropDatabase(c.in.Database)); err != nil {
		if isObjectInUse(err) {
			// New sessions arrived (or could not be ended): name them.
			left, lerr := listSessions(ctx, c.pool, db.OID)
			if lerr == nil && len(left) > 0 {
				return dbcontract.TenantOutcome{}, deletionBlocked(c.in.Database, left)
			}
		}
		return dbcontract.TenantOutcome{}, err
	}
	found, err := exists(ctx, c.pool, sqlDatabaseExists, c.in.Database)
	if err == nil && found {
		err = &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "the database still exists after DROP DATABASE", Transient: true}
	}
	return dbcontract.TenantOutcome{}, err
}

// session is a backend connected to a database.
type session struct {
	pid           int32
	user, appName string
}

func listSessions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, dbOID uint32) ([]session, error) {
	rows, err := q.Query(ctx, sqlSessions, dbOID)
	if err != nil {
		return nil, err
	}
	var out []session
	var s session
	_, err = pgx.ForEachRow(rows, []any{&s.pid, &s.user, &s.appName}, func() error {
		out = append(out, s)
		return nil
	})
	return out, err
}

// deletionBlocked names the sessions that keep a database from being
// dropped. application_name is the client's text: shortened and quoted.
func deletionBlocked(database string, sessions []session) *dbcontract.Failure {
	var parts []string
	for i, s := range sessions {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(sessions)-5))
			break
		}
		app := s.appName
		if len(app) > 40 {
			app = app[:40] + "…"
		}
		parts = append(parts, fmt.Sprintf("pid %d (user %s, application_name %q)", s.pid, s.user, app))
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDeletionBlocked, Message: fmt.Sprintf(
		"database %s has sessions the admin role may not terminate: %s; end them (pg_terminate_backend as a superuser) and the deletion continues", database, strings.Join(parts, ", "))}
}

// dropRole drops the role when it is the one Ayatori created (by OID),
// re-checked in the same transaction. It is blocked (2BP01) while the role
// still owns objects or holds privileges elsewhere: never CASCADE.
func (e *Executor) dropRole(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	role, why, err := roleToDelete(ctx, c)
	if err != nil || role == nil {
		return dbcontract.TenantOutcome{Skipped: why}, err
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return dbcontract.TenantOutcome{}, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if again, err := roleByName(ctx, tx, c.in.Role); err != nil || again == nil || again.OID != role.OID {
		return dbcontract.TenantOutcome{}, firstErr(err, &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Transient: true, Message: "role " + c.in.Role + " changed while it was dropped"})
	}
	if _, err := tx.Exec(ctx, sqlDropRole(c.in.Role)); err != nil {
		if detail, ok := dependentObjects(err); ok {
			return dbcontract.TenantOutcome{}, &dbcontract.Failure{Reason: dbcontract.ReasonDeletionBlocked, Cause: err, Message: "role " + c.in.Role +
				" still owns objects or holds privileges outside its database (SQLSTATE 2BP01" + dependents(detail) + "); nothing was dropped with CASCADE: " +
				"REASSIGN OWNED BY / DROP OWNED BY " + c.in.Role + " in each database named (or have its owner REVOKE the privileges), and the deletion continues"}
		}
		return dbcontract.TenantOutcome{}, err
	}
	return dbcontract.TenantOutcome{}, tx.Commit(ctx)
}

// dependents shortens PostgreSQL's DETAIL of a 2BP01 (one object or
// privilege per line, names only) into ": a; b; c" for a condition message.
func dependents(detail string) string {
	lines := strings.FieldsFunc(detail, func(r rune) bool { return r == '\n' })
	if len(lines) == 0 {
		return ""
	}
	if len(lines) > 5 {
		lines = append(lines[:5], fmt.Sprintf("and %d more", len(lines)-5))
	}
	out := strings.Join(lines, "; ")
	if len(out) > 400 {
		out = out[:400] + "…"
	}
	return ": " + out
}

// release deletes the registry record (Delete policy, after everything else).
func (e *Executor) release(ctx context.Context, c tenantCall) (dbcontract.TenantOutcome, error) {
	_, err := c.pool.Exec(ctx, sqlRelease, c.in.InstanceUID, c.rec.Object.UID)
	return dbcontract.TenantOutcome{}, err
}
