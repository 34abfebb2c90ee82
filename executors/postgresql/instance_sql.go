package postgresql

import dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"

// Every statement of the Instance operations and the registry bootstrap,
// in one place. All run as the admin role in the Instance's admin database
// (search_path AdminSearchPath); the registry migrations themselves are in
// migrations/*.sql.

// SQL of the registry observation (read-only).
const (
	sqlRegistrySchemaExists = `SELECT to_regnamespace('` + dbcontract.RegistrySchema + `') IS NOT NULL`
	sqlRegistryVersionTable = `SELECT to_regclass('` + RegistryVersionTable + `') IS NOT NULL`
	sqlRegistryVersion      = `SELECT version FROM ` + RegistryVersionTable
	sqlCreateRegistrySchema = `CREATE SCHEMA IF NOT EXISTS ` + dbcontract.RegistrySchema
)

// Observation of the admin role and the registry (read-only).
const (
	sqlServerVersion   = `SELECT pg_catalog.current_setting('server_version')`
	sqlAdminAttributes = `SELECT r.rolsuper, r.rolcreaterole, r.rolcreatedb, pg_catalog.current_database(),
		pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')
		FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user`
	sqlRegistrySchemaPrivileges = `SELECT pg_catalog.has_schema_privilege($1, 'USAGE'), pg_catalog.has_schema_privilege($1, 'CREATE')`
	sqlRegistryTablePrivileges  = `SELECT pg_catalog.has_table_privilege($1, 'SELECT, INSERT, UPDATE, DELETE')`
	sqlRegistrySchemaUsage      = `SELECT pg_catalog.has_schema_privilege($1, 'USAGE')`
	sqlRegistryVersionSelect    = `SELECT pg_catalog.has_table_privilege($1, 'SELECT')`
	// The advisory lock serialising registry bootstraps (registryLockKey).
	sqlAdvisoryLock   = `SELECT pg_catalog.pg_advisory_lock($1)`
	sqlAdvisoryUnlock = `SELECT pg_catalog.pg_advisory_unlock($1)`
)
