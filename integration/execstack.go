package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ExecutionStack is the execution domain on real servers: a control plane
// that also runs workloads (Workload: kube-controller-manager,
// kube-scheduler, kwok fake nodes), JetStream, and the ayatori-manager
// process built from this checkout running only the execution domain
// (--projectors=job,jobclass,jobttl --executors=kubernetes,opensandbox;
// the opensandbox executor needs no flag: each OpenSandbox class names its
// endpoint and key).
//
// With ExecutionStackOptions.WorkloadProxy the Kubernetes executor reaches
// the (same) cluster through Proxy, a cuttable TCP forwarder: CutWorkload
// and RestoreWorkload take its backend away and give it back while the
// projectors, the controller-manager, the scheduler and kwok keep the
// control plane.
type ExecutionStack struct {
	CP       *ControlPlane
	Workload *Workload
	NATS     *NATS
	// JournalKeys sign the manager's records.
	JournalKeys *JournalKeys
	// Dir holds the built binaries and the manager log.
	Dir string
	// ManagerLog is the manager's log file; MetricsURL its Prometheus
	// endpoint; JournalBin the built ayatori-journal.
	ManagerLog, MetricsURL, JournalBin string
	// Proxy is the executor's way to the cluster (nil without
	// ExecutionStackOptions.WorkloadProxy); WorkloadKubeconfig the
	// kubeconfig through it, passed as --execution-kubeconfig.
	Proxy              *Forwarder
	WorkloadKubeconfig string

	managerBin string
	args       []string
	manager    *process
	unreg      func()
}

// ExecutionStackOptions tune an ExecutionStack.
type ExecutionStackOptions struct {
	// ManagerArgs are extra manager flags.
	ManagerArgs []string
	// Nodes is the number of fake nodes (default 1).
	Nodes int
	// DefaultTimings runs the manager with its default back-offs and
	// intervals instead of the tests' short ones (--retry-base 1s,
	// --retry-max 5s, --job-resolve-interval 2s,
	// --job-observe-max-interval 2s): for benchmarks.
	DefaultTimings bool
	// ControllerManagerArgs are extra kube-controller-manager flags.
	ControllerManagerArgs []string
	// WorkloadProxy starts a Forwarder on 127.0.0.1 (a random free port)
	// to the kube-apiserver, writes a kubeconfig for it (the admin
	// kubeconfig's CA and credentials, the server replaced) and passes it
	// to the manager as --execution-kubeconfig: only the Kubernetes
	// executor goes through it, so CutWorkload takes the backend away from
	// the executor alone (the projectors keep the management cluster).
	WorkloadProxy bool
}

// StartExecutionStack starts an ExecutionStack for the test; Close runs
// at cleanup.
func StartExecutionStack(t testing.TB, opts ExecutionStackOptions) *ExecutionStack {
	t.Helper()
	s, err := NewExecutionStack(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if lines := ForbiddenRequests(s.ManagerLog); len(lines) > 0 {
			t.Errorf("the manager's shipped RBAC (deploy/rbac) refused requests:\n%s", strings.Join(lines, "\n"))
		}
		if t.Failed() {
			t.Logf("manager log tail:\n%s", fileTail(s.ManagerLog, 60))
		}
		s.Close()
	})
	return s
}

// NewExecutionStack builds the binaries and starts every server and the
// manager.
func NewExecutionStack(ctx context.Context, opts ExecutionStackOptions) (_ *ExecutionStack, err error) {
	s := &ExecutionStack{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Dir, err = os.MkdirTemp("", "ayatori-exec-stack-"); err != nil {
		return nil, err
	}
	s.unreg = registerCleanup(s.Close)
	s.managerBin = filepath.Join(s.Dir, "ayatori-manager")
	s.JournalBin = filepath.Join(s.Dir, "ayatori-journal")
	build := exec.CommandContext(ctx, "go", "build", "-o", s.Dir+"/", "./cmd/ayatori-manager", "./cmd/ayatori-journal")
	build.Dir = RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %w\n%s", err, out)
	}
	if s.CP, err = NewControlPlane(ControlPlaneOptions{}); err != nil {
		return nil, err
	}
	if s.Workload, err = NewWorkload(s.CP, WorkloadOptions{Nodes: opts.Nodes, ControllerManagerArgs: opts.ControllerManagerArgs}); err != nil {
		return nil, err
	}
	if s.NATS, err = NewNATS(NATSOptions{}); err != nil {
		return nil, err
	}
	if s.JournalKeys, err = WriteJournalKeys(s.Dir); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	kc, err := s.CP.ManagerKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	var workload []string
	if opts.WorkloadProxy {
		s.WorkloadKubeconfig = filepath.Join(s.Dir, "workload.kubeconfig")
		if s.Proxy, err = writeForwardedKubeconfig(kc, s.WorkloadKubeconfig); err != nil {
			return nil, fmt.Errorf("workload proxy: %w", err)
		}
		workload = []string{"--execution-kubeconfig", s.WorkloadKubeconfig}
	}
	s.ManagerLog = filepath.Join(s.Dir, "manager.log")
	s.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	s.args = []string{"--kubeconfig", kc, "--namespace", ControllerNamespace, "--nats-url", s.NATS.URL,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0"}
	s.args = append(append(s.args, s.NATS.Auth.ManagerArgs()...), s.JournalKeys.ManagerJournalArgs()...)
	if !opts.DefaultTimings {
		s.args = append(s.args, "--retry-base", "1s", "--retry-max", "5s", "--job-resolve-interval", "2s", "--job-observe-max-interval", "2s")
	}
	s.args = append(append(append(s.args, "--projectors", "job,jobclass,jobttl", "--executors", "kubernetes,opensandbox"), workload...), opts.ManagerArgs...)
	if err := s.StartManager(nil); err != nil {
		return nil, err
	}
	return s, nil
}

// StartManager starts (or restarts) the manager with extra environment
// variables (e.g. AYATORI_FAILPOINTS) and flags.
func (s *ExecutionStack) StartManager(env []string, extra ...string) error {
	if s.manager.running() {
		return fmt.Errorf("manager already running")
	}
	p, err := startProcess(processSpec{name: "ayatori-manager", path: s.managerBin, args: append(append([]string(nil), s.args...), extra...),
		dir: s.Dir, logPath: s.ManagerLog, env: env})
	if err != nil {
		return err
	}
	s.manager = p
	return nil
}

// CutWorkload takes the executor's cluster away: every open connection of
// the workload proxy is reset and new ones are closed at once, until
// RestoreWorkload. It panics without ExecutionStackOptions.WorkloadProxy.
func (s *ExecutionStack) CutWorkload() { s.Proxy.Cut() }

// RestoreWorkload lets the executor reach its cluster again.
func (s *ExecutionStack) RestoreWorkload() { s.Proxy.Restore() }

// KillManager sends SIGKILL to the manager and waits for it to end.
func (s *ExecutionStack) KillManager() { s.manager.kill() }

// StopManager stops the manager (SIGTERM, then SIGKILL).
func (s *ExecutionStack) StopManager() { s.manager.stop(syscall.SIGTERM, 15*time.Second) }

// WaitManagerExit waits up to timeout for the manager to end (for example
// killed by a failpoint) and reports whether it did.
func (s *ExecutionStack) WaitManagerExit(timeout time.Duration) bool {
	return s.manager.waitExit(timeout)
}

// ManagerPID returns the manager's PID (0 when not running).
func (s *ExecutionStack) ManagerPID() int { return s.manager.livePID() }

// JournalReaderArgs are the ayatori-journal flags of the read-only
// identity (--server, --nkey, --tlsca, --trusted-keys).
func (s *ExecutionStack) JournalReaderArgs() []string {
	return append(append([]string{"--server", s.NATS.URL}, s.NATS.Auth.ReaderArgs()...), "--trusted-keys", s.JournalKeys.TrustedKeysFile)
}

// Close stops everything and removes the stack's files.
func (s *ExecutionStack) Close() {
	s.StopManager()
	if s.Proxy != nil {
		s.Proxy.Close()
	}
	if s.NATS != nil {
		s.NATS.Close()
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
