package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"

	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
)

// PostgresOptions tune a throwaway PostgreSQL cluster.
type PostgresOptions struct {
	// LogStatements sets log_statement=all, so tests can scan the server log
	// for secrets (a canary must never reach it).
	LogStatements bool
}

// Postgres is a throwaway PostgreSQL 15 cluster listening on 127.0.0.1 with
// ssl=on and a hostssl-only pg_hba (scram-sha-256): every non-TLS
// connection is refused. The server certificate is issued by a per-run CA
// with SANs DNS:localhost and IP:127.0.0.1.
type Postgres struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// CA signed the server certificate; CAFile holds its PEM.
	CA     *CA
	CAFile string
	// UntrustedCAFile holds a CA that did not sign the server certificate.
	UntrustedCAFile string
	// SuperuserPassword is the password of the "postgres" superuser.
	SuperuserPassword string
	// Dir is the run directory (data dir, certs, log); removed by Close.
	Dir string
	// LogPath is the server log (stderr of the postmaster).
	LogPath string

	binDir  string
	dataDir string
	cred    *syscall.Credential
	proc    *process
	unreg   func()
	// container is set by the testcontainers provider; hba is then the
	// container's pg_hba.conf.
	container testcontainers.Container
	hba       string
}

// PostgresBinDir finds the PostgreSQL 15 server binaries:
// $AYATORI_POSTGRES_BIN_DIR, else /usr/lib/postgresql/15/bin.
func PostgresBinDir() (string, error) {
	dir := os.Getenv("AYATORI_POSTGRES_BIN_DIR")
	if dir == "" {
		dir = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
		return "", fmt.Errorf("PostgreSQL server binaries not found in %s (apt-get install -y postgresql-15, or set AYATORI_POSTGRES_BIN_DIR): %w", dir, err)
	}
	return dir, nil
}

// NewPostgres starts a cluster with the provider SelectProvider chose: a
// local process (newLocalPostgres) or a container (testcontainers
// provider). Both serve the same contract on 127.0.0.1.
func NewPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	p, _, err := SelectProvider()
	if err != nil {
		return nil, err
	}
	if p == ProviderTestcontainers {
		return newPostgresContainer(ctx, opts)
	}
	return newLocalPostgres(ctx, opts)
}

// newLocalPostgres initialises and starts a cluster. When running as root,
// initdb and postgres run as the "postgres" OS user (initdb refuses root).
func newLocalPostgres(ctx context.Context, opts PostgresOptions) (_ *Postgres, err error) {
	binDir, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ayatori-pg-")
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Dir: dir, binDir: binDir, dataDir: filepath.Join(dir, "data"), LogPath: filepath.Join(dir, "postgres.log")}
	defer func() {
		if err != nil {
			pg.Close()
		}
	}()
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the 'postgres' OS user (apt-get install -y postgresql): %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	pg.SuperuserPassword = randomHex(16)
	if pg.CA, err = NewCA("ayatori-test-postgres-ca"); err != nil {
		return nil, err
	}
	untrusted, err := NewCA("ayatori-test-untrusted-ca")
	if err != nil {
		return nil, err
	}
	server, err := issueServer(pg.CA, []string{"localhost"}, []string{"127.0.0.1"})
	if err != nil {
		return nil, err
	}
	pg.CAFile = filepath.Join(dir, "ca.crt")
	pg.UntrustedCAFile = filepath.Join(dir, "untrusted-ca.crt")
	files := map[string][]byte{
		pg.CAFile:                        pg.CA.CertPEM,
		pg.UntrustedCAFile:               untrusted.CertPEM,
		filepath.Join(dir, "server.crt"): server.CertPEM,
		filepath.Join(dir, "server.key"): server.KeyPEM,
		filepath.Join(dir, "pwfile"):     []byte(pg.SuperuserPassword + "\n"),
	}
	for path, content := range files {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return nil, err
		}
	}
	if pg.cred != nil {
		for _, p := range []string{dir, filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "pwfile"), pg.CAFile, pg.UntrustedCAFile} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", pg.dataDir, "-U", "postgres",
		"--pwfile", filepath.Join(dir, "pwfile"), "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, tail(string(out), 20))
	}
	if err := os.Remove(filepath.Join(dir, "pwfile")); err != nil {
		return nil, err
	}
	if pg.Port, err = FreePort(); err != nil {
		return nil, err
	}
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", pg.Port),
		fmt.Sprintf("unix_socket_directories = '%s'", dir),
		"ssl = on",
		fmt.Sprintf("ssl_cert_file = '%s'", filepath.Join(dir, "server.crt")),
		fmt.Sprintf("ssl_key_file = '%s'", filepath.Join(dir, "server.key")),
		"password_encryption = 'scram-sha-256'",
		"max_connections = 200",
		"fsync = off", // throwaway cluster: speed over durability
		"synchronous_commit = off",
		"full_page_writes = off",
		"logging_collector = off",
		"log_connections = on",
		"log_line_prefix = '%m [%p] %q%u@%d '",
	}
	if opts.LogStatements {
		conf = append(conf, "log_statement = 'all'")
	}
	if err := appendFile(filepath.Join(pg.dataDir, "postgresql.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
		return nil, err
	}
	hba := strings.Join([]string{
		"# Ayatori test cluster: TLS only, SCRAM only.",
		"local   all all                scram-sha-256",
		"hostssl all all 127.0.0.1/32   scram-sha-256",
		"hostssl all all ::1/128        scram-sha-256",
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(pg.dataDir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	if pg.cred != nil {
		if err := os.Chown(filepath.Join(pg.dataDir, "pg_hba.conf"), uid, gid); err != nil {
			return nil, err
		}
	}
	pg.unreg = registerCleanup(pg.Close)
	if err := pg.Start(ctx); err != nil {
		return nil, err
	}
	return pg, nil
}

// Start starts the postmaster on the existing data directory and waits
// until a TLS superuser connection succeeds. Use after Stop to simulate a
// restart.
func (pg *Postgres) Start(ctx context.Context) error {
	ready := func() error {
		c, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
	if pg.container != nil {
		// The container's wait strategy counts readiness lines in the whole
		// log, earlier runs' included: it does not tell this run is ready.
		if err := pg.container.Start(ctx); err != nil {
			return err
		}
		if err := pollReady(60*time.Second, ready); err != nil {
			return fmt.Errorf("postgres container: %w\n--- last lines of %s ---\n%s", err, pg.LogPath, fileTail(pg.LogPath, 30))
		}
		return nil
	}
	if pg.proc != nil && !pg.proc.exited() {
		return errors.New("postgres: already running")
	}
	proc, err := startProcess(processSpec{
		name: "postgres", path: filepath.Join(pg.binDir, "postgres"),
		args: []string{"-D", pg.dataDir}, dir: pg.Dir, logPath: pg.LogPath, credential: pg.cred,
	})
	if err != nil {
		return err
	}
	pg.proc = proc
	return proc.waitReady(60*time.Second, ready)
}

// ReadLog returns the whole server log as written so far: the postmaster's
// stderr file (LogPath) for a local process; for a container, Docker's own
// log of it (complete across Stop/Start), not the streamed copy at
// LogPath: testcontainers-go cuts that stream every few seconds and resumes
// it at "now", so lines still in flight when the stream lagged (a loaded
// machine) are missing from the copy. Docker's log is itself copied from
// the container's output asynchronously, so for a running container
// ReadLog first has the server log a marker (RAISE LOG, after every
// statement that returned before the call) and reads until the marker is
// there, up to 10 s; the marker and what follows it are cut off. Tests
// that count statements in the log read it here.
func (pg *Postgres) ReadLog(ctx context.Context) ([]byte, error) {
	if pg.container == nil {
		return os.ReadFile(pg.LogPath)
	}
	read := func() ([]byte, error) {
		rc, err := pg.container.Logs(ctx)
		if err != nil {
			return nil, fmt.Errorf("postgres container log: %w", err)
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	marker := "ayatori-log-flush-" + hex.EncodeToString(b)
	c, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		// Stopped: nothing is in flight.
		return read()
	}
	_, err = c.Exec(ctx, "DO $$ BEGIN RAISE LOG '"+marker+"'; END $$")
	_ = c.Close(ctx)
	if err != nil {
		return read()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, err := read()
		if err != nil {
			return nil, err
		}
		if i := strings.Index(string(log), marker); i >= 0 {
			if nl := strings.LastIndexByte(string(log[:i]), '\n'); nl >= 0 {
				return log[:nl+1], nil
			}
			return nil, nil
		}
		if time.Now().After(deadline) {
			return log, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (fast shutdown) and keeps the data directory.
func (pg *Postgres) Stop() {
	if pg.container != nil {
		timeout := 30 * time.Second
		_ = pg.container.Stop(context.Background(), &timeout)
		return
	}
	if pg.proc != nil {
		pg.proc.stop(syscall.SIGINT, 30*time.Second)
	}
}

// Kill stops the server abruptly (SIGKILL), as a host crash would.
func (pg *Postgres) Kill() {
	if pg.container != nil {
		timeout := time.Duration(0)
		_ = pg.container.Stop(context.Background(), &timeout)
		return
	}
	if pg.proc != nil {
		pg.proc.kill()
	}
}

// Close stops the server and removes its directory.
func (pg *Postgres) Close() {
	if pg.container != nil {
		_ = pg.container.Terminate(context.Background())
		pg.container = nil
	}
	pg.Stop()
	if pg.unreg != nil {
		pg.unreg()
	}
	if pg.Dir != "" {
		_ = os.RemoveAll(pg.Dir)
	}
}

// PID returns the postmaster's process ID, or 0 when it is not running.
func (pg *Postgres) PID() int {
	if pg.proc == nil || pg.proc.exited() {
		return 0
	}
	return pg.proc.pid()
}

// SuperuserDSN returns a verify-full keyword/value DSN for the superuser
// "postgres" via host=localhost. For fixtures only; the product never runs
// as superuser.
func (pg *Postgres) SuperuserDSN(database string) string {
	return pg.DSN("postgres", pg.SuperuserPassword, database)
}

// DSN returns a keyword/value DSN with sslmode=verify-full against the
// per-run CA, via host=localhost.
func (pg *Postgres) DSN(user, password, database string) string {
	return fmt.Sprintf("host=localhost port=%d user=%s password=%s dbname=%s sslmode=verify-full sslrootcert=%s connect_timeout=5",
		pg.Port, quoteDSN(user), quoteDSN(password), quoteDSN(database), quoteDSN(pg.CAFile))
}

// CreateAdminRole creates a non-superuser LOGIN role with the given extra
// attributes (for example "CREATEROLE", "CREATEDB"), as an Instance admin
// role is set up in production (deployment.md "PostgreSQL admin role").
func (pg *Postgres) CreateAdminRole(ctx context.Context, name, password string, attrs ...string) error {
	c, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	stmt := fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER %s", ident, strings.Join(attrs, " "))
	if _, err := c.Exec(ctx, stmt); err != nil {
		return err
	}
	// Send a SCRAM verifier computed here, so the cleartext never reaches
	// the server's statement log (tests scan it with log_statement=all).
	verifier, err := pgexec.ScramSHA256Verifier(password)
	if err != nil {
		return err
	}
	var sql string
	if err := c.QueryRow(ctx, "SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text)", name, verifier).Scan(&sql); err != nil {
		return err
	}
	_, err = c.Exec(ctx, sql)
	return err
}

// ReplaceServerCert issues a new server certificate from ca with the given
// SANs and reloads the server (SIGHUP), e.g. to serve a wrong-host
// certificate in a negative test. CA and CAFile follow ca, so fixture DSNs
// keep working.
func (pg *Postgres) ReplaceServerCert(ca *CA, dnsNames, ips []string) error {
	cert, err := issueServer(ca, dnsNames, ips)
	if err != nil {
		return err
	}
	// Fixtures (SuperuserDSN) trust whichever CA signed the served certificate.
	if ca != pg.CA {
		pg.CA = ca
		if err := os.WriteFile(pg.CAFile, ca.CertPEM, 0o600); err != nil {
			return err
		}
	}
	for name, content := range map[string][]byte{"server.crt": cert.CertPEM, "server.key": cert.KeyPEM} {
		path := filepath.Join(pg.Dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return err
		}
		if pg.cred != nil {
			if err := os.Chown(path, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
				return err
			}
		}
	}
	if pg.container != nil {
		return pg.replaceContainerCert(cert.CertPEM, cert.KeyPEM)
	}
	if pg.proc == nil || pg.proc.exited() {
		return nil
	}
	return syscall.Kill(pg.proc.pid(), syscall.SIGHUP)
}

// PrependHBA puts line first in pg_hba.conf and reloads the server
// (SIGHUP), e.g. a "reject" rule for one role in a negative test. The
// returned function restores the previous file and reloads again.
func (pg *Postgres) PrependHBA(line string) (restore func() error, err error) {
	if pg.container != nil {
		old := pg.hba
		if err := pg.writeContainerHBA(line + "\n" + old); err != nil {
			return nil, err
		}
		return func() error { return pg.writeContainerHBA(old) }, nil
	}
	if pg.proc == nil || pg.proc.exited() {
		return nil, errors.New("postgres: PrependHBA needs a running server")
	}
	path := filepath.Join(pg.dataDir, "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	write := func(content []byte) error {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return err
		}
		if pg.cred != nil {
			if err := os.Chown(path, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
				return err
			}
		}
		if err := syscall.Kill(pg.proc.pid(), syscall.SIGHUP); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond) // the postmaster reloads asynchronously
		return nil
	}
	if err := write(append([]byte(line+"\n"), old...)); err != nil {
		return nil, err
	}
	return func() error { return write(old) }, nil
}

func quoteDSN(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func appendFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("\n# Ayatori test settings\n" + content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
