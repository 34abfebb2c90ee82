package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	kexec "git.ddupan.top/panxiao81/ayatori/executors/kubernetes"
	osexec "git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/journal"
	exprojector "git.ddupan.top/panxiao81/ayatori/projectors/execution"
)

// The execution domain: the Job and JobClass projectors and the
// executors of executionBackends (docs/execution/operations.md).
//
// What each component needs besides the shared flags:
//
//   - job projector: nothing (it resolves classes, parameters and env
//     references in the management cluster).
//   - jobclass projector: nothing.
//   - jobttl projector: the journal (it notes each TTL deletion).
//   - kubernetes executor: the cluster the native batch/v1 Jobs run in,
//     --execution-kubeconfig (default: the management cluster).
//   - opensandbox executor: nothing required; the endpoint and API key
//     come from each class's OpenSandboxExecutionParameters;
//     --opensandbox-ca-file adds a CA for https endpoints.
const (
	jobProjector      = "job"
	jobClassProjector = "jobclass"
	jobTTLProjector   = "jobttl"

	// executionDurable is the domain's durable consumer.
	executionDurable = "ayatori-executor-execution-v1"
)

// executionBackend is one execution adapter this manager can run: its
// name (the adapter's, and its executor's component name as --executors
// spells it) and how its execution.Adapter is built once the manager
// exists. Its flags, if any, are executionOptions fields bound in bind.
type executionBackend struct {
	name  string
	build func(o *executionOptions, mgr manager.Manager, store *journal.Store, sh shared) (execution.Adapter, error)
}

// executionBackends are the execution adapters of this manager, in order:
// the one place a backend is registered. The Job and JobClass projectors
// and the domain's dispatcher see only what these build.
var executionBackends = []executionBackend{
	{execution.AdapterKubernetes, (*executionOptions).kubernetesAdapter},
	{execution.AdapterOpenSandbox, (*executionOptions).opensandboxAdapter},
}

// executionOptions are the execution domain's flags.
type executionOptions struct {
	workloadKubeconfig string
	jobWorkers         int
	ttlWorkers         int
	observeBase        time.Duration
	observeFollowed    time.Duration
	observeMax         time.Duration
	resolveRecheck     time.Duration
	osCAFile           string
	osProvision        time.Duration
	osMarkerDir        string
	classProbeInterval time.Duration
}

func newExecutionDomain() *domain {
	o := &executionOptions{}
	return &domain{
		name:        execution.Domain,
		projectors:  []string{jobProjector, jobClassProjector, jobTTLProjector},
		executors:   executionBackendNames(),
		bind:        o.bind,
		validate:    o.validate,
		addToScheme: executionv1alpha1.AddToScheme,
		setup:       o.setup,
	}
}

func (o *executionOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.workloadKubeconfig, "execution-kubeconfig", "", "kubeconfig of the cluster the kubernetes executor runs native batch/v1 Jobs in (default: the management cluster)")
	fs.IntVar(&o.jobWorkers, "job-workers", 8, "how many Jobs the job projector reconciles at once (> 0)")
	fs.IntVar(&o.ttlWorkers, "job-ttl-workers", exprojector.DefaultTTLWorkers, "how many Jobs the TTL controller reconciles at once (> 0; an expired Job costs it a fresh read, a journal append, an Event and a delete)")
	fs.DurationVar(&o.observeBase, "job-observe-interval", exprojector.DefaultJobPolicy.ObserveBase, "first pause between Observes of a Job, after its Ensure and after every state change (> 0, at most --job-observe-max-interval); it doubles while the state stays the same")
	fs.DurationVar(&o.observeFollowed, "job-observe-followed-interval", exprojector.DefaultJobPolicy.FollowedObserveBase, "first pause between Observes of a Job whose execution a change feed follows (the kubernetes executor's watch of its native Jobs wakes the Job when the result comes; this timed Observe is the safety net and shows Running); used when longer than --job-observe-interval, capped at --job-observe-max-interval (> 0)")
	fs.DurationVar(&o.observeMax, "job-observe-max-interval", exprojector.DefaultJobPolicy.ObserveMax, "longest pause between two Observes of a running Job whose state does not change (> 0; the pause starts at --job-observe-interval and doubles)")
	fs.StringVar(&o.osCAFile, "opensandbox-ca-file", "", "PEM file of extra CAs the opensandbox executor (and the JobClass probe) trust for https endpoints, besides the system roots")
	fs.DurationVar(&o.osProvision, "opensandbox-provision-timeout", osexec.DefaultProvisionTimeout, "how long one Ensure waits for a new sandbox to run before its delivery is retried (> 0)")
	fs.StringVar(&o.osMarkerDir, "opensandbox-marker-dir", osexec.DefaultMarkerDir, "directory inside the sandbox where a command records that it started the task and its exit code (must be writable by the task's user)")
	fs.DurationVar(&o.classProbeInterval, "jobclass-probe-interval", 30*time.Second, "how often the JobClass projector probes the backend of a class whose adapter has a probe (OpenSandbox: endpoint, API key) for Ready (> 0)")
	fs.DurationVar(&o.resolveRecheck, "job-resolve-interval", exprojector.DefaultJobPolicy.ResolveRecheck, "how often a Job that waits for a class, Secret, ConfigMap or ServiceAccount looks again (> 0; class and namespace changes wake it at once)")
}

func (o *executionOptions) validate(on selection) []error {
	var errs []error
	if o.observeMax <= 0 {
		errs = append(errs, fmt.Errorf("--job-observe-max-interval must be a positive duration, got %s", o.observeMax))
	}
	if o.observeBase <= 0 || o.observeBase > o.observeMax {
		errs = append(errs, fmt.Errorf("--job-observe-interval must be a positive duration not above --job-observe-max-interval, got %s", o.observeBase))
	}
	if o.observeFollowed <= 0 {
		errs = append(errs, fmt.Errorf("--job-observe-followed-interval must be a positive duration, got %s", o.observeFollowed))
	}
	if o.jobWorkers <= 0 {
		errs = append(errs, fmt.Errorf("--job-workers must be positive, got %d", o.jobWorkers))
	}
	if o.ttlWorkers <= 0 {
		errs = append(errs, fmt.Errorf("--job-ttl-workers must be positive, got %d", o.ttlWorkers))
	}
	if o.resolveRecheck <= 0 {
		errs = append(errs, fmt.Errorf("--job-resolve-interval must be a positive duration, got %s", o.resolveRecheck))
	}
	if o.osProvision <= 0 {
		errs = append(errs, fmt.Errorf("--opensandbox-provision-timeout must be a positive duration, got %s", o.osProvision))
	}
	if o.classProbeInterval <= 0 {
		errs = append(errs, fmt.Errorf("--jobclass-probe-interval must be a positive duration, got %s", o.classProbeInterval))
	}
	if !strings.HasPrefix(o.osMarkerDir, "/") {
		errs = append(errs, fmt.Errorf("--opensandbox-marker-dir must be an absolute path, got %q", o.osMarkerDir))
	}
	if o.osCAFile != "" {
		if _, err := o.osHTTPClient(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.workloadKubeconfig != "" && on.executor(execution.AdapterKubernetes) {
		if st, err := os.Stat(o.workloadKubeconfig); err != nil || st.IsDir() {
			errs = append(errs, fmt.Errorf("--execution-kubeconfig %q is not a readable file", o.workloadKubeconfig))
		}
	}
	return errs
}

// executionBackendNames are the names of executionBackends, in order.
func executionBackendNames() []string {
	names := make([]string, 0, len(executionBackends))
	for _, b := range executionBackends {
		names = append(names, b.name)
	}
	return names
}

// adapters builds the adapters of executionBackends (none connects to
// anything: each executor is built by its NewHandlers, only when enabled).
func (o *executionOptions) adapters(mgr manager.Manager, store *journal.Store, sh shared) (execution.Adapters, error) {
	as := make(execution.Adapters, 0, len(executionBackends))
	for _, b := range executionBackends {
		a, err := b.build(o, mgr, store, sh)
		if err != nil {
			return nil, fmt.Errorf("execution backend %s: %w", b.name, err)
		}
		if a.Name != b.name {
			return nil, fmt.Errorf("execution backend %s built an adapter named %q", b.name, a.Name)
		}
		as = append(as, a)
	}
	return as, as.Validate()
}

// kubernetesAdapter runs native batch/v1 Jobs in the management cluster
// or the one --execution-kubeconfig names.
func (o *executionOptions) kubernetesAdapter(mgr manager.Manager, store *journal.Store, sh shared) (execution.Adapter, error) {
	a := kexec.Adapter(func() (*kexec.Executor, error) {
		workload, err := o.workloadClient(mgr)
		if err != nil {
			return nil, err
		}
		return &kexec.Executor{Management: mgr.GetAPIReader(), Cached: mgr.GetCache(), Workload: workload, Timeout: sh.reconcileTimeout,
			Log: executorLog(execution.AdapterKubernetes), Proof: journal.ObjectProof{Signer: store.Config().Signer, Trust: store.Config().Trust}}, nil
	})
	a.Changes = o.kubernetesChanges(mgr)
	return a, nil
}

// opensandboxAdapter runs Jobs as commands in OpenSandbox sandboxes; the
// endpoint and API key come from each class's parameters, extra CAs from
// --opensandbox-ca-file.
func (o *executionOptions) opensandboxAdapter(mgr manager.Manager, _ *journal.Store, sh shared) (execution.Adapter, error) {
	hc, err := o.osHTTPClient()
	if err != nil {
		return execution.Adapter{}, err
	}
	ex := &osexec.Executor{Management: mgr.GetAPIReader(), SecretNamespace: sh.namespace, HTTPClient: hc, Timeout: sh.reconcileTimeout,
		ProbeTimeout: min(sh.reconcileTimeout, osexec.DefaultProbeTimeout), ProvisionTimeout: o.osProvision,
		Marker: osexec.Marker{Dir: o.osMarkerDir}, Log: executorLog(execution.AdapterOpenSandbox)}
	return ex.Adapter(), nil
}

// setup registers the enabled projectors and the enabled executors'
// handlers (routed by the intent's adapter) behind the domain's durable
// consumer.
func (o *executionOptions) setup(_ context.Context, mgr manager.Manager, store *journal.Store, sh shared) (func(), error) {
	on := sh.on
	rec := mgr.GetEventRecorder("ayatori-manager")
	adapters, err := o.adapters(mgr, store, sh)
	if err != nil {
		return nil, err
	}
	if on.projector(jobClassProjector) {
		r := &exprojector.JobClassReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec,
			Adapters: adapters, ProbeInterval: o.classProbeInterval}
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("set up the JobClass projector: %w", err)
		}
	}
	if on.projector(jobTTLProjector) {
		r := &exprojector.TTLReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Recorder: rec, Workers: o.ttlWorkers}
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("set up the Job TTL controller: %w", err)
		}
	}
	if on.projector(jobProjector) {
		router := exprojector.NewOutcomeRouter(store)
		router.OnWatchError = watchError(execution.Domain)
		if err := mgr.Add(router); err != nil {
			return nil, err
		}
		policy := exprojector.DefaultJobPolicy
		policy.ObserveBase, policy.ObserveMax, policy.ResolveRecheck = o.observeBase, o.observeMax, o.resolveRecheck
		policy.FollowedObserveBase = o.observeFollowed
		policy.RetryBase, policy.RetryMax = sh.retryBase, sh.retryMax
		r := &exprojector.JobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Recorder: rec,
			Policy: policy, Adapters: adapters, Workers: o.jobWorkers, NoIntentEvents: !sh.intentEvents}
		if err := r.SetupWithManager(mgr, router.For(exprojector.KindJob)); err != nil {
			return nil, fmt.Errorf("set up the Job projector: %w", err)
		}
	}
	dispatch, err := execution.NewDispatcher()
	if err != nil {
		return nil, err
	}
	if err := adapters.Register(dispatch, on.executor); err != nil {
		return nil, err
	}
	dispatch.SetGuard(liveGuard(mgr, execution.CheckLive))
	// A native Job costs the API server a few writes: it takes many at
	// once; an OpenSandbox server is sized by its own limit.
	return nil, sh.consume(mgr, store, executionDurable, dispatch, map[string]int{execution.AdapterKubernetes: 32, execution.AdapterOpenSandbox: 8})
}

// osHTTPClient is the opensandbox executor's HTTP client: the system
// roots plus --opensandbox-ca-file.
func (o *executionOptions) osHTTPClient() (*http.Client, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if o.osCAFile != "" {
		pem, err := os.ReadFile(o.osCAFile)
		if err != nil {
			return nil, fmt.Errorf("--opensandbox-ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--opensandbox-ca-file %s holds no PEM certificate", o.osCAFile)
		}
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}}}, nil
}

// workloadClient is the client of the cluster native Jobs run in: the
// manager's own (uncached: the executor reads what it acts on) or one
// built from --execution-kubeconfig.
func (o *executionOptions) workloadClient(mgr manager.Manager) (client.Client, error) {
	cfg, scheme, err := o.workloadConfig(mgr)
	if err != nil {
		return nil, err
	}
	// With watch: Delete waits for a finished native Job's removal on a
	// watch instead of reading it again (executors/kubernetes).
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// workloadConfig is the workload cluster's REST config (the management
// cluster's, or --execution-kubeconfig's) and the scheme of its kinds.
func (o *executionOptions) workloadConfig(mgr manager.Manager) (*rest.Config, *runtime.Scheme, error) {
	cfg := mgr.GetConfig()
	if o.workloadKubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", o.workloadKubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("--execution-kubeconfig: %w", err)
		}
		cfg = c
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	return cfg, scheme, nil
}

// kubernetesChanges is the Kubernetes adapter's change feed: a cache of
// the workload cluster's native Jobs, started with the Job projector (only
// on the leader), and the source over it.
func (o *executionOptions) kubernetesChanges(mgr manager.Manager) func(func(execution.Reference, string) []reconcile.Request) (source.Source, error) {
	return func(changed func(execution.Reference, string) []reconcile.Request) (source.Source, error) {
		cfg, scheme, err := o.workloadConfig(mgr)
		if err != nil {
			return nil, err
		}
		c, err := cache.New(cfg, kexec.ChangeCacheOptions(scheme))
		if err != nil {
			return nil, fmt.Errorf("native Job change feed: %w", err)
		}
		if err := mgr.Add(c); err != nil {
			return nil, err
		}
		return kexec.ChangeSource(c, changed), nil
	}
}
