package postgresql

import "testing"

// TestTenantDDL: the exact statements, with names no Tenant API accepts
// today but a future one might (quotes, spaces, upper case, semicolons):
// every identifier stays one quoted identifier.
func TestTenantDDL(t *testing.T) {
	const evil = `a"; DROP ROLE postgres; --`
	const q = `"a""; DROP ROLE postgres; --"`
	for got, want := range map[string]string{
		sqlCreateRole("shop", "SCRAM-SHA-256$4096:c2FsdA==$a2V5:c2Vydg=="): `CREATE ROLE "shop" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a2V5:c2Vydg=='`,
		sqlCreateRole(evil, "x'y"):           `CREATE ROLE ` + q + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD 'x''y'`,
		sqlEnforceRoleAttributes(evil):       `ALTER ROLE ` + q + ` LOGIN NOCREATEDB NOCREATEROLE`,
		sqlGrantRoleToAdmin(evil):            `GRANT ` + q + ` TO CURRENT_USER`,
		sqlCreateDatabase(evil, "Owner"):     `CREATE DATABASE ` + q + ` OWNER "Owner"`,
		sqlRevokePublicConnect(evil):         `REVOKE CONNECT ON DATABASE ` + q + ` FROM PUBLIC`,
		sqlGrantConnect("db", evil):          `GRANT CONNECT ON DATABASE "db" TO ` + q,
		sqlDisableLogin(evil):                `ALTER ROLE ` + q + ` NOLOGIN`,
		sqlDropDatabase(evil):                `DROP DATABASE IF EXISTS ` + q,
		sqlDropRole(evil):                    `DROP ROLE ` + q,
		sqlCreateExtension(`uuid-ossp`):      `CREATE EXTENSION IF NOT EXISTS "uuid-ossp" CASCADE`,
		sqlCreateExtension(`x" CASCADE; --`): `CREATE EXTENSION IF NOT EXISTS "x"" CASCADE; --" CASCADE`,
	} {
		if got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
