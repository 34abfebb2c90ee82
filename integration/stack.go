package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openbaodeploy "git.ddupan.top/panxiao81/ayatori/deploy/openbao"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// ControllerNamespace is the manager's namespace in the local stack.
const ControllerNamespace = "ayatori-system"

// StoreName is the ClusterSecretStore of the local stack.
const StoreName = "ayatori-openbao"

// TenantBasePath is the manager's default --openbao-tenant-base-path.
const TenantBasePath = "postgresql-tenants"

// StackOptions tune the local stack.
type StackOptions struct {
	// ManagerArgs are extra manager flags.
	ManagerArgs []string
	// Log receives progress lines (nil: discard).
	Log func(format string, args ...any)
	// NATSCluster runs the journal on a three-node JetStream cluster
	// (NewNATSCluster) instead of one embedded server, and the manager
	// with --journal-replicas=3 and every node's URL in --nats-url.
	NATSCluster bool
	// NoWorkload leaves the workload processes out (Stack.Workload stays
	// nil): for users of the database domain alone, which then save the
	// startup time and the CPU of kube-controller-manager, kube-scheduler
	// and kwok.
	NoWorkload bool
	// NoManager leaves the manager process out: for tests that run the
	// manager another way (StartManagerContainer: the product image).
	NoManager bool
}

// Stack is the local stack: a real control plane that also runs workloads
// (kube-controller-manager, kube-scheduler, kwok fake nodes), JetStream,
// PostgreSQL with TLS, the OpenBao-compatible server, External Secrets
// Operator, and the ayatori-manager process built from this checkout
// running every domain. `make demo`, `make dev` and the stack test use it.
type Stack struct {
	CP *ControlPlane
	// Workload runs the native batch/v1 Jobs the Kubernetes executor
	// creates for Ayatori Jobs, on the same control plane (nil with
	// StackOptions.NoWorkload).
	Workload *Workload
	// NATS is the single JetStream server (nil with NATSCluster).
	NATS *NATS
	// NATSCluster is the three-node cluster (only with NATSCluster).
	NATSCluster *NATSCluster
	// NATSURL is the journal's client URL: the server's, or the
	// comma-separated list of every cluster node.
	NATSURL string
	// NATSAuth is the journal server's TLS material and identities (the
	// single server's or the cluster's).
	NATSAuth *NATSAuth
	// JournalKeys sign the manager's records (journal.SigningKey).
	JournalKeys *JournalKeys
	PG          *Postgres
	Bao         *OpenBao
	ESO         *ExternalSecrets
	// AdminUser and AdminPassword are the non-superuser admin role the
	// sample Instance uses (generated per run, never printed).
	AdminUser, AdminPassword string
	// Dir holds the built binaries and the manager log.
	Dir string
	// ManagerLog is the manager's log file.
	ManagerLog string
	// JournalBin is the built ayatori-journal binary.
	JournalBin string
	// PluginBin is the built kubectl-ayatori plugin.
	PluginBin string
	// MetricsURL is the manager's Prometheus endpoint.
	MetricsURL string

	managerBin string
	manager    *process
	replicas   []*Manager
	opts       StackOptions
	unreg      func()
}

func (s *Stack) logf(format string, args ...any) {
	if s.opts.Log != nil {
		s.opts.Log(format, args...)
	}
}

// StartStack builds the binaries, starts every server and the manager.
func StartStack(ctx context.Context, opts StackOptions) (_ *Stack, err error) {
	s := &Stack{opts: opts, AdminUser: "ayatori_admin", AdminPassword: randomHex(20)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Dir, err = os.MkdirTemp("", "ayatori-stack-"); err != nil {
		return nil, err
	}
	s.unreg = registerCleanup(s.Close)
	start := time.Now()
	s.managerBin = filepath.Join(s.Dir, "ayatori-manager")
	s.JournalBin = filepath.Join(s.Dir, "ayatori-journal")
	s.PluginBin = filepath.Join(s.Dir, "kubectl-ayatori")
	s.logf("building ayatori-manager and ayatori-journal")
	build := exec.CommandContext(ctx, "go", "build", "-o", s.Dir+"/", "./cmd/ayatori-manager", "./cmd/ayatori-journal", "./cmd/kubectl-ayatori")
	build.Dir = RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %w\n%s", err, out)
	}
	s.logf("starting kube-apiserver + etcd (with the External Secrets CRDs)")
	if s.CP, err = NewControlPlane(ControlPlaneOptions{ExternalSecretsCRDs: true}); err != nil {
		return nil, err
	}
	if !opts.NoWorkload {
		s.logf("starting kube-controller-manager, kube-scheduler and kwok (one fake node) for the execution domain")
		ws := time.Now()
		if s.Workload, err = NewWorkload(s.CP, WorkloadOptions{}); err != nil {
			return nil, err
		}
		s.logf("workload processes up in %s", time.Since(ws).Round(100*time.Millisecond))
	}
	if opts.NATSCluster {
		s.logf("starting a three-node NATS JetStream cluster (file storage, sync_interval always, stream replicas 3)")
		if s.NATSCluster, err = NewNATSCluster(NATSClusterOptions{Log: opts.Log}); err != nil {
			return nil, err
		}
		s.NATSURL, s.NATSAuth = s.NATSCluster.URL(), s.NATSCluster.Auth
	} else {
		s.logf("starting NATS JetStream (file storage, sync_interval always)")
		if s.NATS, err = NewNATS(NATSOptions{}); err != nil {
			return nil, err
		}
		s.NATSURL, s.NATSAuth = s.NATS.URL, s.NATS.Auth
	}
	if s.JournalKeys, err = WriteJournalKeys(s.Dir); err != nil {
		return nil, err
	}
	s.logf("starting PostgreSQL 15 (TLS only, per-run CA)")
	if s.PG, err = NewPostgres(ctx, PostgresOptions{LogStatements: true}); err != nil {
		return nil, err
	}
	if err := s.PG.CreateAdminRole(ctx, s.AdminUser, s.AdminPassword, "CREATEROLE", "CREATEDB"); err != nil {
		return nil, err
	}
	c, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		return nil, err
	}
	_, err = c.Exec(ctx, "GRANT CREATE ON DATABASE postgres TO "+s.AdminUser)
	c.Close(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.CP.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}); err != nil {
		return nil, err
	}
	s.logf("starting the OpenBao-compatible server (KV v2 at %q)", KVMount)
	if s.Bao, err = NewOpenBao(ctx); err != nil {
		return nil, err
	}
	s.logf("starting External Secrets Operator with the shipped ClusterSecretStore (per-namespace OpenBao logins)")
	if s.ESO, err = NewExternalSecrets(ctx, s.CP, s.Bao, ExternalSecretsOptions{StoreName: StoreName, Namespace: ControllerNamespace}); err != nil {
		return nil, err
	}
	if !opts.NoManager {
		if err := s.StartManager(); err != nil {
			return nil, err
		}
	}
	s.logf("stack up in %s", time.Since(start).Round(100*time.Millisecond))
	return s, nil
}

// StartManager starts (or restarts) the manager process.
func (s *Stack) StartManager(extra ...string) error { return s.StartManagerEnv(nil, extra...) }

// WaitManagerExit waits up to timeout for the manager process to end (for
// example killed by a failpoint) and reports whether it did.
func (s *Stack) WaitManagerExit(timeout time.Duration) bool { return s.manager.waitExit(timeout) }

// StartManagerEnv starts the manager with extra environment variables
// (e.g. AYATORI_FAILPOINTS) and flags.
func (s *Stack) StartManagerEnv(env []string, extra ...string) error {
	if s.manager.running() {
		return fmt.Errorf("manager already running")
	}
	m, err := s.startManager("manager.log", env, extra)
	if err != nil {
		return err
	}
	s.ManagerLog, s.MetricsURL, s.manager = m.Log, m.MetricsURL, m.p
	return nil
}

// Manager is an additional ayatori-manager replica of the stack (see
// StartReplica): same servers and flags, its own log and metrics port.
type Manager struct {
	// Log is the replica's log file; MetricsURL its Prometheus endpoint.
	Log, MetricsURL string
	p               *process
}

// PID returns the replica's PID (0 once it has exited).
func (m *Manager) PID() int {
	if m.p.exited() {
		return 0
	}
	return m.p.pid()
}

// Stop sends sig (SIGTERM: graceful, SIGKILL: crash) and waits up to
// 15 s, then kills.
func (m *Manager) Stop(sig syscall.Signal) { m.p.stop(sig, 15*time.Second) }

// StartReplica starts another manager process named name (log
// manager-<name>.log) with the stack's flags plus extra; Close stops it.
// Run every replica with --leader-elect to test a hand-over.
func (s *Stack) StartReplica(name string, extra ...string) (*Manager, error) {
	m, err := s.startManager("manager-"+name+".log", nil, extra)
	if err != nil {
		return nil, err
	}
	s.replicas = append(s.replicas, m)
	return m, nil
}

func (s *Stack) startManager(logName string, env, extra []string) (*Manager, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	m := &Manager{Log: filepath.Join(s.Dir, logName), MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	kc, err := s.CP.ManagerKubeconfig(context.Background())
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", kc, "--namespace", ControllerNamespace, "--nats-url", s.NATSURL,
		"--postgresql-ca-bundle-path", s.PG.CAFile, "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0",
		"--retry-base", "1s", "--retry-max", "10s",
		"--openbao-address", s.Bao.Address, "--openbao-auth-role", openbaodeploy.ManagerRole,
		"--openbao-service-account-token-path", s.CP.ManagerTokenPath(), "--openbao-kv-mount", KVMount,
		"--external-secret-store-name", StoreName}, s.JournalArgs()...)
	args = append(args, s.opts.ManagerArgs...)
	if s.NATSCluster != nil {
		args = append(args, "--journal-replicas=3")
	}
	args = append(args, extra...)
	if m.p, err = startProcess(processSpec{name: "ayatori-manager", path: s.managerBin, args: args, dir: s.Dir, logPath: m.Log, env: env}); err != nil {
		return nil, err
	}
	return m, nil
}

// JournalArgs are the manager's journal identity flags: its NATS NKey and
// the servers' CA, its signing key and the trusted keys.
func (s *Stack) JournalArgs() []string {
	return append(s.NATSAuth.ManagerArgs(), s.JournalKeys.ManagerJournalArgs()...)
}

// JournalReaderArgs are the ayatori-journal flags of the read-only
// identity (--server, --nkey, --tlsca, --trusted-keys).
func (s *Stack) JournalReaderArgs() []string {
	return append(append([]string{"--server", s.NATSURL}, s.NATSAuth.ReaderArgs()...), "--trusted-keys", s.JournalKeys.TrustedKeysFile)
}

// PluginArgs are the kubectl-ayatori flags for this stack: the admin
// kubeconfig and the journal's read-only identity.
func (s *Stack) PluginArgs() []string {
	return []string{"--kubeconfig", s.CP.KubeconfigPath, "--journal-server", s.NATSURL, "--journal-nkey", s.NATSAuth.ReaderSeedFile,
		"--journal-ca", s.NATSAuth.CAFile, "--journal-trusted-keys", s.JournalKeys.TrustedKeysFile}
}

// ConnectNATS connects to the journal's NATS server(s) as identity id.
func (s *Stack) ConnectNATS(id journal.Identity, extra ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(s.NATSURL, s.NATSAuth.ClientOptions(id, extra...)...)
}

// Primary returns the manager started by StartStack/StartManager as a
// Manager (nil before it started), e.g. to SIGKILL it.
func (s *Stack) Primary() *Manager {
	if s.manager == nil {
		return nil
	}
	return &Manager{Log: s.ManagerLog, MetricsURL: s.MetricsURL, p: s.manager}
}

// StopManager stops the manager (SIGTERM, then SIGKILL).
func (s *Stack) StopManager() { s.manager.stop(syscall.SIGTERM, 15*time.Second) }

// ManagerPID returns the manager's PID (0 when not running).
func (s *Stack) ManagerPID() int { return s.manager.livePID() }

// Close stops everything and removes the stack's files.
func (s *Stack) Close() {
	s.StopManager()
	for _, m := range s.replicas {
		m.Stop(syscall.SIGTERM)
	}
	if s.ESO != nil {
		s.ESO.Close()
	}
	if s.Bao != nil {
		s.Bao.Close()
	}
	if s.PG != nil {
		s.PG.Close()
	}
	if s.NATS != nil {
		s.NATS.Close()
	}
	if s.NATSCluster != nil {
		s.NATSCluster.Close()
	}
	if s.Workload != nil {
		s.Workload.Close()
	}
	if s.CP != nil {
		s.CP.Close()
	}
	if s.unreg != nil {
		s.unreg()
	}
	if s.Dir != "" {
		_ = os.RemoveAll(s.Dir)
	}
}
