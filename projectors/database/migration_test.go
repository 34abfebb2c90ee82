package database_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestMigrationRunbook (criterion 14) runs docs/database/migration.md step
// by step: an existing unmanaged database moves to a Tenant-managed one by
// dump and restore, and the old service can be restored within the
// rollback window.
func TestMigrationRunbook(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	bin, err := integration.PostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	// The legacy application: role and database "blog", data, pg_trgm.
	superExec(t, s, "postgres", "CREATE ROLE blog LOGIN PASSWORD 'legacy-blog-pw'")
	superExec(t, s, "postgres", "CREATE DATABASE blog OWNER blog")
	superExec(t, s, "blog", "CREATE EXTENSION pg_trgm")
	legacy := func(db string) *pgx.Conn {
		c, err := pgx.Connect(ctx, s.PG.DSN("blog", "legacy-blog-pw", db))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := legacy("blog")
	if _, err := c.Exec(ctx, "CREATE TABLE posts (id int PRIMARY KEY, title text); INSERT INTO posts VALUES (1,'a'),(2,'b'),(3,'c')"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)

	pgEnv := append(os.Environ(), "PGHOST=localhost", fmt.Sprintf("PGPORT=%d", s.PG.Port), "PGUSER=postgres",
		"PGPASSWORD="+s.PG.SuperuserPassword, "PGSSLMODE=verify-full", "PGSSLROOTCERT="+s.PG.CAFile)
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env = pgEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	// Steps 1-4: inventory, stop writes, final logical backup without ownership.
	dump := filepath.Join(t.TempDir(), "blog.dump")
	// The application is stopped; keep it out and end its sessions.
	superExec(t, s, "postgres", "REVOKE CONNECT ON DATABASE blog FROM PUBLIC, blog")
	superExec(t, s, "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'blog'")
	run("pg_dump", "--format=custom", "--no-owner", "--no-privileges", "--dbname=blog", "--file="+dump)
	// Step 5: keep the old database and role under timestamped names.
	suffix := "premigration_" + time.Now().UTC().Format("20060102")
	superExec(t, s, "postgres", "ALTER DATABASE blog RENAME TO blog_"+suffix)
	superExec(t, s, "postgres", "ALTER ROLE blog RENAME TO blog_"+suffix)
	superExec(t, s, "postgres", "ALTER ROLE blog_"+suffix+" PASSWORD 'legacy-blog-pw'") // rename clears MD5 only; keep it explicit
	// Steps 6-7: the Tenant creates the final database, role and credential.
	newTenant(t, s, "blog", "blog", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"pg_trgm"} })
	tn := waitTenant(t, s, "blog", "blog", metav1.ConditionTrue, "Ready", 2*time.Minute)
	// Step 8: restore as the new owner and verify.
	run("pg_restore", "--no-owner", "--no-privileges", "--role=blog", "--dbname=blog", dump)
	sec := &corev1.Secret{}
	if err := s.CP.Client.Get(ctx, types.NamespacedName{Namespace: "blog", Name: tn.Status.Credential.SecretRef.Name}, sec); err != nil {
		t.Fatal(err)
	}
	app, err := pgx.Connect(ctx, s.PG.DSN(string(sec.Data["username"]), string(sec.Data["password"]), "blog"))
	if err != nil {
		t.Fatalf("step 9: the application cannot log in with the projected Secret: %v", err)
	}
	defer app.Close(ctx)
	var rows int
	var owner string
	if err := app.QueryRow(ctx, "SELECT count(*), (SELECT tableowner FROM pg_tables WHERE tablename = 'posts') FROM posts").Scan(&rows, &owner); err != nil {
		t.Fatal(err)
	}
	if rows != 3 || owner != "blog" {
		t.Fatalf("restored %d rows owned by %s", rows, owner)
	}
	if _, err := app.Exec(ctx, "INSERT INTO posts VALUES (4, 'written after the migration')"); err != nil {
		t.Fatalf("step 10: the application cannot write: %v", err)
	}
	// Rollback window: the old service comes back with its old credentials
	// and the renamed database, untouched.
	superExec(t, s, "postgres", "GRANT CONNECT ON DATABASE blog_"+suffix+" TO blog_"+suffix)
	old, err := pgx.Connect(ctx, s.PG.DSN("blog_"+suffix, "legacy-blog-pw", "blog_"+suffix))
	if err != nil {
		t.Fatalf("rollback: the old credentials no longer work: %v", err)
	}
	defer old.Close(ctx)
	if err := old.QueryRow(ctx, "SELECT count(*) FROM posts").Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("rollback: old database has %d rows (%v)", rows, err)
	}
}
