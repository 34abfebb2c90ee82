// Command ayatori-manager runs Ayatori's projectors (reconcilers) and
// executors (journal workers) in one process; flags choose which. See
// docs/database/deployment.md for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"git.ddupan.top/panxiao81/ayatori/internal/redact"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "ayatori-manager:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("ayatori-manager", flag.ContinueOnError)
	o.bind(fs)
	// Errors are logged without a stack trace unless --zap-stacktrace-level
	// asks for one: a missing kubeconfig is not a programming error.
	zopts := zap.Options{StacktraceLevel: zapcore.DPanicLevel}
	zopts.BindFlags(fs)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)")
	// The flag list is printed for --help only; a bad flag gets one line.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintln(os.Stderr, "Usage of ayatori-manager (flags documented in docs/database/deployment.md):")
			fs.PrintDefaults()
			return err
		}
		return fmt.Errorf("%w (run ayatori-manager --help for the flags)", err)
	}
	if err := o.validate(); err != nil {
		return fmt.Errorf("invalid flags:\n%w", err)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName("setup")
	if o.actor == "" {
		host, _ := os.Hostname()
		o.actor = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	// Only the domains with an enabled component are wired: a manager
	// that runs one domain needs none of another's flags or dependencies.
	on := o.selection()
	var domains []*domain
	for _, d := range o.domains {
		if on.enables(d) {
			domains = append(domains, d)
		}
	}

	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			return fmt.Errorf("--kubeconfig: %w", err)
		}
		os.Setenv("KUBECONFIG", o.kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes API configuration (pass --kubeconfig, set KUBECONFIG, or run in a Pod): %w", err)
	}
	if o.kubeAPIQPS != 0 {
		cfg.QPS, cfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	}
	// Request latency and client-side throttling of the manager's API
	// calls, by verb (the bench's critical-path breakdown reads them).
	crmetrics.RegisterRESTClientMetrics(crmetrics.MetricRequestLatency, crmetrics.MetricRateLimiterLatency)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	for _, d := range domains {
		if err := d.addToScheme(scheme); err != nil {
			return fmt.Errorf("register the %s domain's types: %w", d.name, err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "ayatori-manager.ayatori.ddupan.top",
		LeaderElectionNamespace: o.namespace,
		// The process exits right after the manager stops, so the Lease can
		// be released at once: a standby takes over without waiting for it
		// to expire (rolling update, SIGTERM).
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Secrets are cached (listed and watched) only in the controller
			// namespace: the RBAC grants list/watch there alone.
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{o.namespace: {}}},
		}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	signer, trust, err := o.journalKeys()
	if err != nil {
		return err
	}
	authOpts, err := o.natsAuth().Options()
	if err != nil {
		return err
	}
	natsOpts := append(journal.ClientOptions("ayatori-manager "+o.actor), authOpts...)
	nc, err := nats.Connect(o.natsURL, natsOpts...)
	if err != nil {
		// The URL and the client's error may quote a password or token.
		return redact.Error(fmt.Errorf("connect to NATS %s: %w", o.natsURL, err), o.natsURL)
	}
	defer nc.Close()
	metrics := journal.NewMetrics(crmetrics.Registry)
	store, err := journal.Open(ctx, nc, journal.Config{StreamName: o.journalStream, SubjectPrefix: o.journalPrefix,
		MaxAge: o.journalMaxAge, Replicas: o.journalReplicas, ViewCache: viewCache(o.journalViews), ViewCacheBytes: o.journalViewMiB << 20, Actor: o.actor, Metrics: metrics, Signer: signer, Trust: trust})
	if err != nil {
		return err
	}

	var durables []string
	sh := shared{on: on, namespace: o.namespace, durables: &durables, backendConcurrency: o.backendConcurrency, intentEvents: o.intentEvents, reconcileTimeout: o.reconcileTimeout, retryBase: o.retryBase, retryMax: o.retryMax,
		consumer: journal.ConsumerConfig{AckWait: o.ackWait, Concurrency: o.executorConns,
			BeforeHandle: failpoint("executor-before-handle"), BeforeOutcome: failpoint("executor-before-outcome"), AfterOutcome: failpoint("executor-after-outcome"),
			OnPullError: func(err error) {
				ctrl.Log.WithName("executor").Info("intent pull failed; pulling again", "error", err.Error())
			},
			OnUntrusted: func(rec journal.Record, seq uint64, err error) {
				// The record is someone else's: only its sequence, subject
				// fields and why it was refused are logged.
				ctrl.Log.WithName("executor").Error(err, "refused an intent the manager did not write; not executed",
					"sequence", seq, "operation", rec.Operation, "uid", rec.Object.UID, "keyID", proofKey(rec))
			}}}
	for _, d := range domains {
		cleanup, err := d.setup(ctx, mgr, store, sh)
		if cleanup != nil {
			// After the manager stopped (or setup failed): nothing runs then.
			defer cleanup()
		}
		if err != nil {
			return fmt.Errorf("set up the %s domain: %w", d.name, err)
		}
	}
	if err := registerMetrics(crmetrics.Registry, mgr, store, on, durables); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("journal", func(*http.Request) error {
		if !nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return nil
	}); err != nil {
		return err
	}
	log.Info("starting manager", "projectors", strings.Join(o.projectors, ","), "executors", strings.Join(o.executors, ","),
		"namespace", o.namespace, "actor", o.actor, "stream", o.journalStream)
	return mgr.Start(ctx)
}

func proofKey(rec journal.Record) string {
	if rec.Proof == nil {
		return "none"
	}
	if len(rec.Proof.KeyID) > 40 {
		return rec.Proof.KeyID[:40] + "..."
	}
	return rec.Proof.KeyID
}

// everyReplica is a runnable that does not wait for leadership: executors
// run on every replica and share the durable consumer's work (each intent
// goes to one of them; the journal makes a redelivered one idempotent).
// Projectors, in contrast, run only on the leader.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (everyReplica) NeedLeaderElection() bool { return false }

var _ manager.LeaderElectionRunnable = everyReplica(nil)

// failpoint returns a crash hook for AYATORI_FAILPOINTS="<name>=<Operation>":
// the process kills itself with SIGKILL at that point for that operation.
// Crash-recovery tests use it; it is inert when the variable is unset.
func failpoint(name string) func(journal.Record) {
	spec := os.Getenv("AYATORI_FAILPOINTS")
	if spec == "" {
		return nil
	}
	var ops []string
	for _, fp := range strings.Split(spec, ",") {
		if k, v, ok := strings.Cut(fp, "="); ok && k == name {
			ops = append(ops, v)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	return func(r journal.Record) {
		for _, op := range ops {
			if op == r.Operation {
				fmt.Fprintf(os.Stderr, "failpoint %s=%s: killing the process\n", name, op)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
}

// viewCache is journal.Config.ViewCache for --journal-view-cache n (0:
// none).
func viewCache(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
