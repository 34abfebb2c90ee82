package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	openbaodeploy "git.ddupan.top/panxiao81/ayatori/deploy/openbao"
)

// ManagerImageUser is the numeric user:group the product image runs as
// (Dockerfile USER; distroless "nonroot").
const ManagerImageUser = "65532:65532"

// ManagerImage is the product image StartManagerContainer runs:
// AYATORI_MANAGER_IMAGE, else ayatori-manager:latest (the name
// deploy/manager/deployment.yaml uses and `make images` builds).
func ManagerImage() string {
	if v := os.Getenv("AYATORI_MANAGER_IMAGE"); v != "" {
		return v
	}
	return "ayatori-manager:latest"
}

// ManagerContainer is the manager running from the product image.
type ManagerContainer struct {
	// Log is the container's log, copied to a file.
	Log string
	// MetricsURL is the manager's Prometheus endpoint on 127.0.0.1.
	MetricsURL string

	c testcontainers.Container
}

// Close terminates the container.
func (m *ManagerContainer) Close() {
	if m.c != nil {
		_ = m.c.Terminate(context.Background())
		m.c = nil
	}
}

// LogTail returns the last n lines of the container's log.
func (m *ManagerContainer) LogTail(n int) string { return containerLogTail(m.c, n) }

// StartManagerContainer runs image as the stack's manager (start the stack
// with NoManager), with the constraints deploy/manager/deployment.yaml puts
// on it: user 65532:65532, a read-only root filesystem with no writable
// mount, every capability dropped, no privilege escalation. The files the
// manager reads (kubeconfig, PostgreSQL CA bundle, OpenBao token) are
// mounted read-only from a copy owned by that user. It shares the host's
// network namespace: the stack's servers listen on 127.0.0.1 (or the Docker
// bridge address), which is where the manager process would reach them too.
// The container is labelled with this test process (SweepOrphanContainers).
func (s *Stack) StartManagerContainer(ctx context.Context, image string, extra ...string) (_ *ManagerContainer, err error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	m := &ManagerContainer{Log: filepath.Join(s.Dir, "manager-container.log"), MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	const mnt = "/etc/ayatori"
	files := filepath.Join(s.Dir, "manager-container-files")
	if err := os.MkdirAll(files, 0o700); err != nil {
		return nil, err
	}
	kc, err := s.CP.ManagerKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	for name, src := range map[string]string{"kubeconfig": kc, "postgresql-ca.crt": s.PG.CAFile, "openbao-sa-token": s.CP.ManagerTokenPath(),
		"nats-manager.nk": s.NATSAuth.ManagerSeedFile, "nats-ca.crt": s.NATSAuth.CAFile,
		"journal-signing.pem": s.JournalKeys.SigningKeyFile, "journal-trusted.pem": s.JournalKeys.TrustedKeysFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(files, name), b, 0o400); err != nil {
			return nil, err
		}
	}
	if err := giveToImageUser(files); err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", mnt + "/kubeconfig", "--namespace", ControllerNamespace, "--nats-url", s.NATSURL,
		"--postgresql-ca-bundle-path", mnt + "/postgresql-ca.crt", "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0",
		"--retry-base", "1s", "--retry-max", "10s",
		"--openbao-address", s.Bao.Address, "--openbao-auth-role", openbaodeploy.ManagerRole, "--openbao-service-account-token-path", mnt + "/openbao-sa-token", "--openbao-kv-mount", KVMount,
		"--external-secret-store-name", StoreName, "--nats-nkey", mnt + "/nats-manager.nk", "--nats-tls-ca", mnt + "/nats-ca.crt",
		"--journal-signing-key", mnt + "/journal-signing.pem", "--journal-trusted-keys", mnt + "/journal-trusted.pem"}, s.opts.ManagerArgs...)
	args = append(args, extra...)
	logs := &containerLog{path: m.Log}
	tcLoopbackHost()
	sweepOrphansOnce()
	m.c, err = testcontainers.Run(ctx, image,
		ownedByThisProcess(),
		testcontainers.WithCmd(args...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.ReadonlyRootfs = true
			hc.CapDrop = []string{"ALL"}
			hc.SecurityOpt = []string{"no-new-privileges"}
			hc.Binds = []string{files + ":" + mnt + ":ro"}
		}),
		testcontainers.WithConfigModifier(func(c *container.Config) { c.User = ManagerImageUser }),
		logs.option(),
		testcontainers.WithWaitStrategy(wait.ForLog("starting manager").WithStartupTimeout(60*time.Second)),
	)
	if err != nil {
		return nil, fmt.Errorf("manager container (%s): %w\n--- last lines of the container log ---\n%s", image, err, containerLogTail(m.c, 30))
	}
	return m, nil
}

// giveToImageUser makes dir and its files readable by the image's user:
// owned by it when this process may chown (root), else world-readable
// (tests only; the files are a throwaway stack's).
func giveToImageUser(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	paths := []string{dir}
	for _, e := range entries {
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	if os.Geteuid() == 0 {
		for _, p := range paths {
			if err := os.Chown(p, 65532, 65532); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range paths {
		mode := os.FileMode(0o444)
		if p == dir {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	return nil
}

// Inspect returns the Docker engine's view of the container (its user,
// host config and the manager's host PID).
func (m *ManagerContainer) Inspect(ctx context.Context) (*container.InspectResponse, error) {
	return m.c.Inspect(ctx)
}
