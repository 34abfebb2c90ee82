package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Container images of the testcontainers provider. Pin them by digest
// (image@sha256:...) through AYATORI_TC_POSTGRES_IMAGE / AYATORI_TC_OPENBAO_IMAGE;
// the defaults are version tags because the build machines cannot reach a
// registry to resolve digests (see docs/testing.md).
var (
	tcPostgresImage = envDefault("AYATORI_TC_POSTGRES_IMAGE", "docker.io/library/postgres:15.18-bookworm")
	tcOpenBaoImage  = envDefault("AYATORI_TC_OPENBAO_IMAGE", "quay.io/openbao/openbao:2.4.1")
)

func envDefault(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func init() {
	newPostgresContainer = startPostgresContainer
	newOpenBaoContainer = startOpenBaoContainer
}

// startPostgresContainer runs PostgreSQL 15 with TLS through the official
// testcontainers-go postgres module. Stop/Start/Kill act on the container.
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
	server, err := pg.CA.IssueServer([]string{"localhost"}, []string{"127.0.0.1"})
	if err != nil {
		return nil, err
	}
	pg.CAFile, pg.UntrustedCAFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "untrusted-ca.crt")
	for path, content := range map[string][]byte{pg.CAFile: pg.CA.CertPEM, pg.UntrustedCAFile: untrusted.CertPEM,
		filepath.Join(dir, "server.crt"): server.CertPEM, filepath.Join(dir, "server.key"): server.KeyPEM} {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return nil, err
		}
	}
	args := []string{"-c", "ssl=on", "-c", "password_encryption=scram-sha-256"}
	if opts.LogStatements {
		args = append(args, "-c", "log_statement=all")
	}
	c, err := tcpostgres.Run(ctx, tcPostgresImage,
		tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword(pg.SuperuserPassword), tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithSSLCert(pg.CAFile, filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")),
		testcontainers.WithCmdArgs(args...),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return nil, fmt.Errorf("testcontainers postgres: %w", err)
	}
	pg.container = c
	port, err := c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return nil, err
	}
	pg.Port, _ = strconv.Atoi(port.Port())
	pg.unreg = registerCleanup(pg.Close)
	return pg, nil
}

// startOpenBaoContainer runs an OpenBao dev server with KV v2 at "kv".
// Dev mode keeps data in memory: Stop/Start lose it (local provider only).
func startOpenBaoContainer(ctx context.Context) (*OpenBao, error) {
	token := randomHex(16)
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        tcOpenBaoImage,
			ExposedPorts: []string{"8200/tcp"},
			Env:          map[string]string{"BAO_DEV_ROOT_TOKEN_ID": token, "BAO_DEV_LISTEN_ADDRESS": "0.0.0.0:8200"},
			Cmd:          []string{"server", "-dev"},
			WaitingFor:   wait.ForHTTP("/v1/sys/health").WithPort("8200/tcp").WithStartupTimeout(60 * time.Second),
		},
		Started: true,
	})
	if err != nil {
		return nil, fmt.Errorf("testcontainers openbao: %w", err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		return nil, err
	}
	port, err := c.MappedPort(ctx, "8200/tcp")
	if err != nil {
		return nil, err
	}
	o := &OpenBao{Address: fmt.Sprintf("http://%s:%s", host, port.Port()), RootToken: token, container: c}
	o.unreg = registerCleanup(o.Close)
	cl, err := o.Client(token)
	if err != nil {
		o.Close()
		return nil, err
	}
	if err := cl.Sys().MountWithContext(ctx, KVMount, &baoMountInput); err != nil {
		o.Close()
		return nil, fmt.Errorf("mount kv v2: %w", err)
	}
	return o, nil
}
