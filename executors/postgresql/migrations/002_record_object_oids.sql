-- Ownership by what Ayatori created, not by a name (issue 10 §2): the OIDs
-- of the role and database the executor created for the Tenant. role_oid is
-- written in the same transaction as CREATE ROLE; database_oid right after
-- CREATE DATABASE (which cannot run in a transaction), and a database that
-- exists under the name without a recorded OID is taken as ours only when it
-- is owned by the recorded role (docs/database/security.md, "Ownership").
--
-- Rows written by an earlier controller have no OIDs. They are filled from
-- the objects that exist under the recorded names when this migration runs,
-- and only when the database is owned by the role: the best evidence such a
-- registry holds (the earlier controller created both under its claim).
ALTER TABLE postgresql_tenant_operator.tenant_ownership
    ADD COLUMN role_oid oid,
    ADD COLUMN database_oid oid;

UPDATE postgresql_tenant_operator.tenant_ownership t
   SET role_oid = r.oid, database_oid = d.oid
  FROM pg_catalog.pg_roles r, pg_catalog.pg_database d
 WHERE r.rolname OPERATOR(pg_catalog.=) t.role_name
   AND d.datname OPERATOR(pg_catalog.=) t.database_name
   AND d.datdba OPERATOR(pg_catalog.=) r.oid;

---- create above / drop below ----

ALTER TABLE postgresql_tenant_operator.tenant_ownership
    DROP COLUMN database_oid,
    DROP COLUMN role_oid;
