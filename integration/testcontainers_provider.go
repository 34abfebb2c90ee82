package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"

	natsdeploy "git.ddupan.top/panxiao81/ayatori/deploy/nats"
)

func init() {
	newPostgresContainer = startPostgresContainer
	newOpenBaoContainer = startOpenBaoContainer
	newNATSContainer = startNATSContainer
}

var tcHostOnce sync.Once

// tcLoopbackHost makes testcontainers-go reach containers on 127.0.0.1, where
// withLoopbackPort publishes them (TESTCONTAINERS_HOST_OVERRIDE, unless set).
// Without it, on a machine that is itself a container (/.dockerenv), it dials
// the machine's default gateway, where nothing is published. The containers
// run on the local Docker engine; a remote DOCKER_HOST is not supported.
// It also turns the reaper (Ryuk) off unless TESTCONTAINERS_RYUK_DISABLED is
// set: its image comes from a registry, and the provider does without it
// (each test's cleanup terminates its containers; SweepOrphanContainers
// removes those of killed test processes).
func tcLoopbackHost() {
	tcHostOnce.Do(func() {
		if _, ok := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !ok {
			_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
		}
		if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
			_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
	})
}

// Files the provider copies into the PostgreSQL container.
const (
	tcPGConfDir = "/etc/ayatori-test"
	tcPGCert    = tcPGConfDir + "/server.crt"
	tcPGKey     = tcPGConfDir + "/server.key"
	tcPGHBA     = tcPGConfDir + "/pg_hba.conf"
)

// tcPGEntrypoint runs before the image's own entrypoint, as root: the key
// and certificate are copied in as root-owned 0600 files, and the server,
// which runs as "postgres", must own them (it refuses a key readable by
// others). It execs, so the entrypoint and then postgres are PID 1 and
// `docker stop` reaches postgres. testcontainers-go's WithSSLCert does the
// same chown but from a `sh` script that does not exec and uses `set -o
// pipefail`, which dash (/bin/sh of the Debian-based official image and of
// ayatori-test/postgres) refuses.
const tcPGEntrypoint = `set -e
chown postgres:postgres ` + tcPGCert + ` ` + tcPGKey + `
chmod 0600 ` + tcPGCert + ` ` + tcPGKey + `
exec docker-entrypoint.sh "$@"`

// tcPGHBALines is the container's pg_hba.conf: TLS only, SCRAM only, from any
// address (clients reach the container through Docker's bridge, not from
// 127.0.0.1). The Unix socket line serves the image's init steps.
var tcPGHBALines = []string{
	"# Ayatori test cluster (container): TLS only, SCRAM only.",
	"local   all all      scram-sha-256",
	"hostssl all all all  scram-sha-256",
}

// startPostgresContainer runs PostgreSQL 15 with TLS through the official
// testcontainers-go postgres module: the server settings of the local
// provider, a TLS-only pg_hba, published on 127.0.0.1 only, on a host port
// that stays the same across Stop/Start. The server log is copied to LogPath.
// Stop/Start/Kill act on the container; its data survives Stop/Start.
func startPostgresContainer(ctx context.Context, opts PostgresOptions) (_ *Postgres, err error) {
	dir, err := os.MkdirTemp("", "ayatori-pg-tc-")
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Dir: dir, LogPath: filepath.Join(dir, "postgres.log"), SuperuserPassword: randomHex(16)}
	defer func() {
		if err != nil {
			pg.Close()
		}
	}()
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
	pg.CAFile, pg.UntrustedCAFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "untrusted-ca.crt")
	for path, content := range map[string][]byte{pg.CAFile: pg.CA.CertPEM, pg.UntrustedCAFile: untrusted.CertPEM} {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return nil, err
		}
	}
	if pg.Port, err = FreePort(); err != nil {
		return nil, err
	}
	pg.hba = strings.Join(tcPGHBALines, "\n") + "\n"
	args := []string{
		"-c", "ssl=on", "-c", "ssl_cert_file=" + tcPGCert, "-c", "ssl_key_file=" + tcPGKey,
		"-c", "hba_file=" + tcPGHBA,
		"-c", "password_encryption=scram-sha-256",
		"-c", "max_connections=200",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "log_connections=on",
		"-c", "log_line_prefix=%m [%p] %q%u@%d ",
	}
	if opts.LogStatements {
		args = append(args, "-c", "log_statement=all")
	}
	logs := &containerLog{path: pg.LogPath}
	tcLoopbackHost()
	sweepOrphansOnce()
	c, err := tcpostgres.Run(ctx, containerImages().Postgres,
		ownedByThisProcess(),
		tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword(pg.SuperuserPassword), tcpostgres.WithDatabase("postgres"),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{Reader: bytes.NewReader(server.CertPEM), ContainerFilePath: tcPGCert, FileMode: 0o600},
			testcontainers.ContainerFile{Reader: bytes.NewReader(server.KeyPEM), ContainerFilePath: tcPGKey, FileMode: 0o600},
			testcontainers.ContainerFile{Reader: strings.NewReader(pg.hba), ContainerFilePath: tcPGHBA, FileMode: 0o644},
		),
		testcontainers.WithEntrypoint("bash", "-c", tcPGEntrypoint, "ayatori-postgres-entrypoint"),
		testcontainers.WithCmdArgs(args...),
		withLoopbackPort("5432/tcp", pg.Port),
		logs.option(),
		tcpostgres.BasicWaitStrategies(),
	)
	if c != nil {
		pg.container = c
	}
	if err != nil {
		return nil, fmt.Errorf("testcontainers postgres (%s): %w\n--- last lines of the container log ---\n%s", containerImages().Postgres, err, containerLogTail(c, 30))
	}
	pg.unreg = registerCleanup(pg.Close)
	return pg, nil
}

// replaceContainerCert installs a server certificate and key in the
// container and reloads the server.
func (pg *Postgres) replaceContainerCert(certPEM, keyPEM []byte) error {
	ctx := context.Background()
	if err := pg.container.CopyToContainer(ctx, certPEM, tcPGCert, 0o600); err != nil {
		return err
	}
	if err := pg.container.CopyToContainer(ctx, keyPEM, tcPGKey, 0o600); err != nil {
		return err
	}
	if !pg.container.IsRunning() {
		return nil // tcPGEntrypoint chowns them at the next start
	}
	return containerExec(ctx, pg.container, "chown postgres:postgres "+tcPGCert+" "+tcPGKey+" && "+pgReloadScript)
}

// writeContainerHBA replaces the container's pg_hba.conf and reloads the server.
func (pg *Postgres) writeContainerHBA(content string) error {
	ctx := context.Background()
	if err := pg.container.CopyToContainer(ctx, []byte(content), tcPGHBA, 0o644); err != nil {
		return err
	}
	pg.hba = content
	if !pg.container.IsRunning() {
		return nil
	}
	if err := containerExec(ctx, pg.container, pgReloadScript); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the postmaster reloads asynchronously
	return nil
}

// pgReloadScript sends SIGHUP to the postmaster (whatever its PID), as root.
const pgReloadScript = `kill -HUP "$(head -n 1 "$PGDATA/postmaster.pid")"`

// startOpenBaoContainer runs the OpenBao-compatible server like the local
// provider does: file storage (in the container, so it survives Stop/Start),
// initialised with one unseal key, unsealed again after Start, KV v2 at "kv".
// The configuration goes to /openbao/config, which the upstream openbao
// image's `server` reads, and so does ayatori-test/openbao. Published on
// 127.0.0.1 only, on a host port that stays the same across Stop/Start.
func startOpenBaoContainer(ctx context.Context) (_ *OpenBao, err error) {
	dir, err := os.MkdirTemp("", "ayatori-bao-tc-")
	if err != nil {
		return nil, err
	}
	o := &OpenBao{Dir: dir, LogPath: filepath.Join(dir, "server.log")}
	defer func() {
		if err != nil {
			o.Close()
		}
	}()
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	o.Address = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`storage "file" {
  path = "/openbao/file"
}
listener "tcp" {
  address     = "0.0.0.0:8200"
  tls_disable = true
}
disable_mlock = true
api_addr      = %q
ui            = false
`, o.Address)
	logs := &containerLog{path: o.LogPath}
	tcLoopbackHost()
	sweepOrphansOnce()
	c, err := testcontainers.Run(ctx, containerImages().OpenBao,
		ownedByThisProcess(),
		testcontainers.WithExposedPorts("8200/tcp"),
		withLoopbackPort("8200/tcp", port),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(cfg), ContainerFilePath: "/openbao/config/ayatori.hcl", FileMode: 0o644,
		}),
		testcontainers.WithCmd("server"),
		logs.option(),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/v1/sys/seal-status").WithPort("8200/tcp").WithStartupTimeout(60*time.Second)),
	)
	if c != nil {
		o.container = c
	}
	if err != nil {
		return nil, fmt.Errorf("testcontainers openbao (%s): %w\n--- last lines of the container log ---\n%s", containerImages().OpenBao, err, containerLogTail(c, 30))
	}
	o.unreg = registerCleanup(o.Close)
	return o, o.initialise(ctx)
}

// startNATSContainer runs nats-server with JetStream, file storage in the
// container and sync_interval always (the embedded server's settings),
// published on 127.0.0.1 only, on a host port that stays the same across
// Stop/Start; the store survives Stop/Start.
func startNATSContainer(ctx context.Context) (_ *NATS, err error) {
	n := &NATS{StoreDir: "/data/jetstream"}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.port, err = FreePort(); err != nil {
		return nil, err
	}
	n.URL = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	// The shipped configuration (deploy/nats), rendered for the container's
	// paths; its TLS material and identities are made on this host.
	if n.dir, err = os.MkdirTemp("", "ayatori-nats-"); err != nil {
		return nil, err
	}
	if n.Auth, err = NewNATSAuth(filepath.Join(n.dir, "auth")); err != nil {
		return nil, err
	}
	confDir := filepath.Join(n.dir, "conf")
	if err := os.MkdirAll(confDir, 0o700); err != nil {
		return nil, err
	}
	settings := n.Auth.Settings()
	settings.ServerName, settings.Client, settings.Monitor, settings.StoreDir = "ayatori-test", "0.0.0.0:4222", "0.0.0.0:8222", "/data/jetstream"
	settings.TLSDir = "/etc/nats/tls"
	if _, err := natsdeploy.Render(confDir, settings); err != nil {
		return nil, err
	}
	var files []testcontainers.ContainerFile
	for _, f := range []struct{ host, container string }{
		{filepath.Join(confDir, "nats.conf"), "/etc/nats/nats.conf"}, {filepath.Join(confDir, "auth.conf"), "/etc/nats/auth.conf"},
		{filepath.Join(n.Auth.TLSDir, "tls.crt"), "/etc/nats/tls/tls.crt"}, {filepath.Join(n.Auth.TLSDir, "tls.key"), "/etc/nats/tls/tls.key"},
		{filepath.Join(n.Auth.TLSDir, "ca.crt"), "/etc/nats/tls/ca.crt"},
	} {
		// World-readable inside the container: the image's server may run
		// as another user than this process.
		files = append(files, testcontainers.ContainerFile{HostFilePath: f.host, ContainerFilePath: f.container, FileMode: 0o644})
	}
	tcLoopbackHost()
	sweepOrphansOnce()
	c, err := testcontainers.Run(ctx, containerImages().NATS,
		ownedByThisProcess(),
		testcontainers.WithExposedPorts("4222/tcp", "8222/tcp"),
		withLoopbackPort("4222/tcp", n.port),
		testcontainers.WithFiles(files...),
		testcontainers.WithCmd("-c", "/etc/nats/nats.conf"),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/healthz?js-enabled-only=true").WithPort("8222/tcp").WithStartupTimeout(60*time.Second)),
	)
	if c != nil {
		n.container = c
	}
	if err != nil {
		return nil, fmt.Errorf("testcontainers nats (%s): %w\n--- last lines of the container log ---\n%s", containerImages().NATS, err, containerLogTail(c, 30))
	}
	n.unreg = registerCleanup(n.Close)
	return n, nil
}

// withLoopbackPort publishes the container port on 127.0.0.1:hostPort only.
// A fixed host port (instead of Docker's ephemeral one) stays the same when
// the container is stopped and started again, so addresses handed out before
// a Stop keep working after Start.
func withLoopbackPort(port string, hostPort int) testcontainers.CustomizeRequestOption {
	p := network.MustParsePort(port)
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[p] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hostPort)}}
	})
}

// containerLog copies a container's log to a file, as the local provider's
// servers write theirs, so tests can scan it. testcontainers-go re-reads the
// whole log after each start, so the file is rewritten at each start.
type containerLog struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func (l *containerLog) Accept(m testcontainers.Log) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_, _ = l.f.Write(m.Content)
	}
}

func (l *containerLog) close(context.Context, testcontainers.Container) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func (l *containerLog) reopen(context.Context, testcontainers.Container) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_ = l.f.Close()
	}
	f, err := os.Create(l.path)
	l.f = f
	return err
}

// option registers the log consumer, the hook that rewrites the file
// (user-defined post-start hooks run before the default one that starts
// copying the log) and the one that closes it once the container is gone.
func (l *containerLog) option() testcontainers.CustomizeRequestOption {
	return func(req *testcontainers.GenericContainerRequest) error {
		if err := testcontainers.WithLogConsumers(l)(req); err != nil {
			return err
		}
		return testcontainers.WithAdditionalLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostStarts:     []testcontainers.ContainerHook{l.reopen},
			PostTerminates: []testcontainers.ContainerHook{l.close},
		})(req)
	}
}

// containerLogTail returns the last n lines of a container's log, for errors.
func containerLogTail(c testcontainers.Container, n int) string {
	if c == nil {
		return "(no container)"
	}
	rc, err := c.Logs(context.Background())
	if err != nil {
		return fmt.Sprintf("(logs: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return tail(string(b), n)
}

// containerExec runs a bash script in the container as root and fails on a
// non-zero exit, with its output.
func containerExec(ctx context.Context, c testcontainers.Container, script string) error {
	code, out, err := c.Exec(ctx, []string{"bash", "-c", script})
	if err != nil {
		return err
	}
	if code != 0 {
		b, _ := io.ReadAll(out)
		return fmt.Errorf("exec %q in container: exit %d: %s", script, code, b)
	}
	return nil
}

// LabelOwnerPID is on every container the provider starts: the PID of the
// test process that owns it. With no reaper (the reaper image can not be
// pulled where no registry answers), a test binary killed before its
// cleanup leaves its containers; the next provider start in any test
// process removes those whose owner is gone (SweepOrphanContainers).
const LabelOwnerPID = "org.ayatori.test-owner-pid"

func ownedByThisProcess() testcontainers.CustomizeRequestOption {
	return testcontainers.WithLabels(map[string]string{LabelOwnerPID: strconv.Itoa(os.Getpid())})
}

var sweepOnce sync.Once

func sweepOrphansOnce() {
	sweepOnce.Do(func() {
		if removed, err := SweepOrphanContainers(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: sweeping orphaned containers: %v\n", err)
		} else if len(removed) > 0 {
			fmt.Fprintf(os.Stderr, "integration: removed %d container(s) of killed test processes: %s\n", len(removed), strings.Join(removed, " "))
		}
	})
}

// SweepOrphanContainers removes (with their volumes) the containers labelled
// LabelOwnerPID whose owner process no longer runs on this machine, and
// returns their IDs. A PID reused by another process keeps its containers
// until that process ends (never a live owner's container removed).
func SweepOrphanContainers() ([]string, error) {
	c, base, err := dockerAPIWithTimeout(time.Minute)
	if err != nil {
		return nil, err
	}
	filters := `{"label":["` + LabelOwnerPID + `"]}`
	resp, err := c.Get(base + "/containers/json?all=true&filters=" + url.QueryEscape(filters))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list containers: HTTP %d", resp.StatusCode)
	}
	var list []struct {
		ID     string            `json:"Id"`
		Labels map[string]string `json:"Labels"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	var removed []string
	for _, ct := range list {
		pid, err := strconv.Atoi(ct.Labels[LabelOwnerPID])
		if err != nil || pid <= 0 || pidRuns(pid) {
			continue
		}
		req, _ := http.NewRequest(http.MethodDelete, base+"/containers/"+ct.ID+"?force=true&v=true", nil)
		r, err := c.Do(req)
		if err != nil {
			return removed, err
		}
		r.Body.Close()
		if r.StatusCode == http.StatusNoContent || r.StatusCode == http.StatusNotFound {
			removed = append(removed, ct.ID[:min(12, len(ct.ID))])
		}
	}
	return removed, nil
}

// pidRuns reports whether pid runs on this machine (a zombie counts as
// gone).
func pidRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z'
}
