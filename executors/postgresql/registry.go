package postgresql

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// RegistryVersionTable is tern's version table, inside the registry schema.
const RegistryVersionTable = dbcontract.RegistrySchema + ".schema_version"

// registryLockKey is the advisory lock serialising registry bootstraps
// across controllers (tern also takes its own lock around each migration).
const registryLockKey = int64(0x61796174_6f726931) // "ayatori1"

// KnownRegistryVersion is the number of registry migrations this build has.
func KnownRegistryVersion() int32 {
	names, _ := fs.Glob(migrationFiles, "migrations/*.sql")
	return int32(len(names))
}

// observeRegistry reports the registry's state and version.
func observeRegistry(ctx context.Context, q pgxQuerier) (dbcontract.RegistryState, int32, error) {
	var schema, table bool
	if err := q.QueryRow(ctx, sqlRegistrySchemaExists).Scan(&schema); err != nil {
		return "", 0, err
	}
	if !schema {
		return dbcontract.RegistryAbsent, 0, nil
	}
	var usage bool
	if err := q.QueryRow(ctx, sqlRegistrySchemaUsage, dbcontract.RegistrySchema).Scan(&usage); err != nil {
		return "", 0, err
	}
	if !usage {
		return "", 0, &dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges, Message: "the admin role lacks: USAGE on schema " + dbcontract.RegistrySchema}
	}
	if err := q.QueryRow(ctx, sqlRegistryVersionTable).Scan(&table); err != nil {
		return "", 0, err
	}
	if !table {
		return dbcontract.RegistryNeedsMigration, 0, nil
	}
	var sel bool
	if err := q.QueryRow(ctx, sqlRegistryVersionSelect, RegistryVersionTable).Scan(&sel); err != nil {
		return "", 0, err
	}
	if !sel {
		return "", 0, &dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges, Message: "the admin role lacks: SELECT on " + RegistryVersionTable}
	}
	var v int32
	if err := q.QueryRow(ctx, sqlRegistryVersion).Scan(&v); err != nil {
		return "", 0, err
	}
	known := KnownRegistryVersion()
	switch {
	case v > known:
		return "", v, &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable,
			Message: fmt.Sprintf("the ownership registry has schema version %d, newer than this controller knows (%d); upgrade the controller", v, known)}
	case v < known:
		return dbcontract.RegistryNeedsMigration, v, nil
	default:
		return dbcontract.RegistryUsable, v, nil
	}
}

type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// errMigrationStarted marks errors after a migration began: the outcome is
// ResultUnknown and the projector observes before retrying.
var errMigrationStarted = errors.New("registry migration interrupted")

// bootstrapRegistry creates the registry schema and applies the tern
// migrations under an advisory lock, refusing a registry newer than this
// build. It returns the version read back and how many migrations ran.
func bootstrapRegistry(ctx context.Context, conn *pgx.Conn) (version, applied int32, err error) {
	if _, err := conn.Exec(ctx, sqlAdvisoryLock, registryLockKey); err != nil {
		return 0, 0, err
	}
	defer func() {
		// Unlock with a fresh context: the operation's may be done.
		_, _ = conn.Exec(context.WithoutCancel(ctx), sqlAdvisoryUnlock, registryLockKey)
	}()
	if _, err := conn.Exec(ctx, sqlCreateRegistrySchema); err != nil {
		return 0, 0, err
	}
	m, err := migrate.NewMigrator(ctx, conn, RegistryVersionTable)
	if err != nil {
		return 0, 0, err
	}
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return 0, 0, err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return 0, 0, fmt.Errorf("load registry migrations: %w", err)
	}
	cur, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, err
	}
	known := int32(len(m.Migrations))
	if cur > known {
		// Never migrate down: a newer controller owns this registry.
		return cur, 0, &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable,
			Message: fmt.Sprintf("the ownership registry has schema version %d, newer than this controller knows (%d); upgrade the controller", cur, known)}
	}
	if cur < known {
		if err := m.MigrateTo(ctx, known); err != nil {
			return 0, 0, fmt.Errorf("%w: %w", errMigrationStarted, err)
		}
	}
	st, v, err := observeRegistry(ctx, conn)
	if err != nil {
		return 0, 0, err
	}
	if st != dbcontract.RegistryUsable {
		return v, 0, &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the registry reads back as %s after migration", st)}
	}
	return v, known - cur, nil
}
