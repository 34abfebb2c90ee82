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
	"time"

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

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	esexec "git.ddupan.top/panxiao81/ayatori/executors/externalsecrets"
	baoexec "git.ddupan.top/panxiao81/ayatori/executors/openbao"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/internal/redact"
	"git.ddupan.top/panxiao81/ayatori/journal"
	dbprojector "git.ddupan.top/panxiao81/ayatori/projectors/database"
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
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster or $KUBECONFIG)")
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
	if names := pgexec.ClearLibpqEnvironment(); len(names) > 0 {
		// Connections are built from the Instances alone; a PGOPTIONS or
		// PGTARGETSESSIONATTRS meant for psql must not change them.
		log.Info("ignoring libpq environment variables", "names", names)
	}
	if o.actor == "" {
		host, _ := os.Hostname()
		o.actor = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	roots, err := pgexec.LoadCABundle(o.postgresqlCABundlePath)
	if err != nil {
		return err
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
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
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
			// Admin Secrets are read only in the controller namespace.
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{o.namespace: {}}},
		}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	natsOpts := journal.ClientOptions("ayatori-manager " + o.actor)
	if o.natsCreds != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(o.natsCreds))
	}
	nc, err := nats.Connect(o.natsURL, natsOpts...)
	if err != nil {
		// The URL and the client's error may quote a password or token.
		return redact.Error(fmt.Errorf("connect to NATS %s: %w", o.natsURL, err), o.natsURL)
	}
	defer nc.Close()
	metrics := journal.NewMetrics(crmetrics.Registry)
	store, err := journal.Open(ctx, nc, journal.Config{StreamName: o.journalStream, SubjectPrefix: o.journalPrefix,
		MaxAge: o.journalMaxAge, Replicas: o.journalReplicas, Actor: o.actor, Metrics: metrics})
	if err != nil {
		return err
	}

	has := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	var router *dbprojector.OutcomeRouter
	if len(o.projectors) > 0 {
		router = dbprojector.NewOutcomeRouter(store)
		if err := mgr.Add(router); err != nil {
			return err
		}
	}
	if has(o.projectors, "tenant") {
		r := &dbprojector.TenantReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Recorder: mgr.GetEventRecorder("ayatori-manager"),
			Config: dbprojector.TenantConfig{KVMount: o.openBaoKVMount, BasePath: o.openBaoTenantBasePath,
				ConsumerAddress: o.openBaoConsumerAddress, StoreName: o.externalSecretStoreName},
			Policy: dbprojector.TenantPolicy{ResyncInterval: o.tenantResync, RetryBase: o.retryBase, RetryMax: o.retryMax, PendingRecheck: 30 * time.Second}}
		if err := r.SetupWithManager(mgr, router.Tenants); err != nil {
			return fmt.Errorf("set up the PostgreSQLTenant projector: %w", err)
		}
	}
	if has(o.projectors, "instance") {
		r := &dbprojector.InstanceReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Namespace: o.namespace,
			Recorder: mgr.GetEventRecorder("ayatori-manager"),
			Policy: dbprojector.InstancePolicy{ResyncInterval: o.instanceResync, RetryBase: o.retryBase, RetryMax: o.retryMax,
				PendingRecheck: 30 * time.Second}}
		if err := r.SetupWithManager(mgr, router.Instances); err != nil {
			return fmt.Errorf("set up the PostgreSQLInstance projector: %w", err)
		}
	}
	// The database domain's intents: one durable consumer, its dispatcher
	// routes each operation to the backend that executes it.
	dispatch, err := journal.NewDispatcher(dbcontract.Domain)
	if err != nil {
		return err
	}
	var pools *pgexec.Pools
	var baoStore *baoexec.Store
	if o.openBaoAddress != "" {
		var auth baoexec.Auth = baoexec.KubernetesAuth{Mount: o.openBaoAuthMount, Role: o.openBaoAuthRole, TokenPath: o.openBaoTokenPath}
		if o.openBaoTokenFile != "" {
			auth = baoexec.TokenFileAuth{Path: o.openBaoTokenFile}
		}
		bc, err := baoexec.NewClient(o.openBaoAddress, auth, o.reconcileTimeout)
		if err != nil {
			return redact.Error(err, o.openBaoAddress)
		}
		baoStore = &baoexec.Store{Client: bc}
	}
	if has(o.executors, "postgresql") {
		pools = pgexec.NewPools(roots, int32(o.postgresMaxConns), o.reconcileTimeout)
		ex := &pgexec.Executor{Pools: pools, Secrets: secretReader{c: mgr.GetClient(), namespace: o.namespace}, Timeout: o.reconcileTimeout}
		if baoStore != nil {
			ex.Passwords = passwordSource{s: baoStore}
		}
		if err := dispatch.HandleAll("postgresql", ex.Handlers()); err != nil {
			return err
		}
		if err := dispatch.HandleAll("postgresql", ex.TenantHandlers()); err != nil {
			return err
		}
	}
	if has(o.executors, "openbao") && baoStore != nil {
		if err := dispatch.HandleAll("openbao", (&baoexec.Executor{Store: baoStore, Timeout: o.reconcileTimeout}).Handlers()); err != nil {
			return err
		}
	}
	if has(o.executors, "externalsecrets") {
		if err := dispatch.HandleAll("externalsecrets", (&esexec.Executor{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Timeout: o.reconcileTimeout}).Handlers()); err != nil {
			return err
		}
	}
	if len(dispatch.Operations()) > 0 {
		cc := journal.ConsumerConfig{Durable: "ayatori-executor-database-v1",
			AckWait: o.ackWait, Concurrency: o.executorConns, BeforeOutcome: failpoint("executor-before-outcome"),
			AfterOutcome: failpoint("executor-after-outcome")}
		if err := mgr.Add(everyReplica(func(ctx context.Context) error {
			return store.Consume(ctx, cc, dispatch)
		})); err != nil {
			return err
		}
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
	err = mgr.Start(ctx)
	if pools != nil {
		pools.CloseAll()
	}
	return err
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
