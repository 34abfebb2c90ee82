package postgresql

import (
	"strings"

	"github.com/jackc/pgx/v5"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// Every statement of the Tenant operations, in one place (the audit in
// docs/database/security.md follows this file). Admin statements run only
// in the Instance's admin database; the ones marked "Tenant login" run over
// the Tenant role's own login in its database. Identifiers are quoted with
// pgx's sanitizer; values are bind parameters wherever PostgreSQL takes them.

// SQL of the ownership registry (one place to read every statement). Admin
// sessions run only in the Instance's admin database with search_path
// AdminSearchPath; catalog names are qualified all the same
// (docs/database/security.md lists every admin statement).
const (
	sqlClaim = `INSERT INTO ` + dbcontract.RegistrySchema + `.tenant_ownership
		(instance_uid, tenant_uid, tenant_namespace, tenant_name, database_name, role_name, credential_path)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`
	sqlOwnRow = `SELECT tenant_namespace, tenant_name, database_name, role_name, credential_path, managed, role_oid, database_oid
		FROM ` + dbcontract.RegistrySchema + `.tenant_ownership WHERE instance_uid = $1 AND tenant_uid = $2`
	sqlOwnRowLocked = sqlOwnRow + ` FOR UPDATE`
	sqlConflicts    = `SELECT tenant_namespace, tenant_name, tenant_uid, managed
		FROM ` + dbcontract.RegistrySchema + `.tenant_ownership
		WHERE (instance_uid = $1 AND (database_name = $2 OR role_name = $3 OR (tenant_namespace = $4 AND tenant_name = $5)))
		   OR credential_path = $6 LIMIT 1`
	sqlRecordRoleOID = `UPDATE ` + dbcontract.RegistrySchema + `.tenant_ownership SET role_oid = $3, updated_at = pg_catalog.clock_timestamp()
		WHERE instance_uid = $1 AND tenant_uid = $2`
	sqlRecordDatabaseOID = `UPDATE ` + dbcontract.RegistrySchema + `.tenant_ownership SET database_oid = $3, updated_at = pg_catalog.clock_timestamp()
		WHERE instance_uid = $1 AND tenant_uid = $2 AND role_oid = $4`
	sqlRetain = `UPDATE ` + dbcontract.RegistrySchema + `.tenant_ownership
		SET managed = false, retained_at = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp()
		WHERE instance_uid = $1 AND tenant_uid = $2 AND managed`
	sqlRelease = `DELETE FROM ` + dbcontract.RegistrySchema + `.tenant_ownership WHERE instance_uid = $1 AND tenant_uid = $2`
)

// SQL of the catalog reads (admin database).
const (
	sqlRoleByName        = `SELECT oid, rolsuper, rolreplication FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1`
	sqlDatabaseByName    = `SELECT oid, datdba FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) $1`
	sqlRoleNameByOID     = `SELECT rolname::pg_catalog.text FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid`
	sqlDatabaseNameByOID = `SELECT datname::pg_catalog.text FROM pg_catalog.pg_database WHERE oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid`
	sqlDatabaseExists    = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) $1)`
	sqlRoleExists        = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1)`
	// sqlIsMember: is the admin role a member of the role (by OID)?
	sqlIsMember = `SELECT pg_catalog.pg_has_role(CURRENT_USER, $1::pg_catalog.oid, 'MEMBER')`
	// sqlOtherMembers counts members of the role other than the admin role.
	sqlOtherMembers = `SELECT pg_catalog.count(*) FROM pg_catalog.pg_auth_members m
		WHERE m.roleid OPERATOR(pg_catalog.=) $1::pg_catalog.oid
		  AND m.member OPERATOR(pg_catalog.<>) (SELECT oid FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) CURRENT_USER)`
	// sqlSessions lists the sessions in a database other than this one.
	sqlSessions = `SELECT pid, COALESCE(usename::pg_catalog.text, ''), COALESCE(application_name, '')
		FROM pg_catalog.pg_stat_activity
		WHERE datid OPERATOR(pg_catalog.=) $1::pg_catalog.oid AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
		ORDER BY pid`
	sqlTerminate = `SELECT pg_catalog.pg_terminate_backend($1)`
	// sqlExtensionVersions: the default version of every available
	// extension, whether a non-superuser may install it, and what it requires.
	sqlExtensionVersions = `SELECT v.name::pg_catalog.text, (v.trusted OR NOT v.superuser), COALESCE(v.requires::pg_catalog.text[], '{}')
		FROM pg_catalog.pg_available_extension_versions v
		JOIN pg_catalog.pg_available_extensions e
		  ON e.name OPERATOR(pg_catalog.=) v.name AND e.default_version OPERATOR(pg_catalog.=) v.version`
)

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// DDL takes no bind parameters: identifiers are quoted, the only literal is
// the SCRAM verifier (base64 and '$:' only; quotes doubled all the same).
func sqlCreateRole(role, scramVerifier string) string {
	return "CREATE ROLE " + quoteIdent(role) + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD '" +
		strings.ReplaceAll(scramVerifier, "'", "''") + "'"
}

// sqlEnforceRoleAttributes: PostgreSQL 15 lets only superusers name
// (NO)SUPERUSER or (NO)REPLICATION in ALTER ROLE, so those are read back.
func sqlEnforceRoleAttributes(role string) string {
	return "ALTER ROLE " + quoteIdent(role) + " LOGIN NOCREATEDB NOCREATEROLE"
}
func sqlGrantRoleToAdmin(role string) string { return "GRANT " + quoteIdent(role) + " TO CURRENT_USER" }
func sqlCreateDatabase(db, owner string) string {
	return "CREATE DATABASE " + quoteIdent(db) + " OWNER " + quoteIdent(owner)
}
func sqlRevokePublicConnect(db string) string {
	return "REVOKE CONNECT ON DATABASE " + quoteIdent(db) + " FROM PUBLIC"
}
func sqlGrantConnect(db, role string) string {
	return "GRANT CONNECT ON DATABASE " + quoteIdent(db) + " TO " + quoteIdent(role)
}
func sqlDisableLogin(role string) string { return "ALTER ROLE " + quoteIdent(role) + " NOLOGIN" }
func sqlDropDatabase(db string) string   { return "DROP DATABASE IF EXISTS " + quoteIdent(db) }
func sqlDropRole(role string) string     { return "DROP ROLE " + quoteIdent(role) }

// Tenant login statements.
const (
	sqlInstalledExtensions = `SELECT extname::pg_catalog.text FROM pg_catalog.pg_extension
		WHERE extname::pg_catalog.text OPERATOR(pg_catalog.=) ANY($1::pg_catalog.text[])`
	sqlLoginIdentity = `SELECT current_user, current_database(), rolsuper, rolcreatedb, rolcreaterole
		FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user`
	// sqlLoginProbe must fail with 42501 (run in a rolled-back transaction).
	sqlLoginProbe = "CREATE ROLE ayatori_login_probe"
)

func sqlCreateExtension(name string) string {
	return "CREATE EXTENSION IF NOT EXISTS " + quoteIdent(name) + " CASCADE"
}
