package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	esexec "git.ddupan.top/panxiao81/ayatori/executors/externalsecrets"
	baoexec "git.ddupan.top/panxiao81/ayatori/executors/openbao"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/internal/redact"
	"git.ddupan.top/panxiao81/ayatori/journal"
	dbprojector "git.ddupan.top/panxiao81/ayatori/projectors/database"
)

// The database domain: the PostgreSQLInstance and PostgreSQLTenant
// projectors, and the PostgreSQL, OpenBao and External Secrets executors
// of their operations (docs/database/deployment.md).
//
// What each component needs besides the shared flags:
//
//   - instance projector: nothing.
//   - tenant projector: --external-secret-store-name (the ClusterSecretStore
//     its ExternalSecrets reference) and an OpenBao address for consumers
//     (--openbao-consumer-address, by default --openbao-address), written
//     into Tenant status. It never calls OpenBao itself.
//   - postgresql executor: an OpenBao client (--openbao-address, and
//     --openbao-auth-role or --openbao-token-file) for the Tenant operations
//     that read the password (CreateRole, VerifyLogin). Required when the
//     tenant projector runs in this process; otherwise it is used when
//     --openbao-address is given, and without it those operations fail
//     with DependencyUnavailable. Instance operations need none.
//   - openbao executor: an OpenBao client.
//   - externalsecrets executor: nothing (the store name comes with each
//     intent).
const (
	instanceProjector       = "instance"
	tenantProjector         = "tenant"
	postgresqlExecutor      = "postgresql"
	openBaoExecutor         = "openbao"
	externalSecretsExecutor = "externalsecrets"

	// databaseDurable is the domain's durable consumer (docs/architecture.md).
	// v1 still: the unlimited MaxDeliver is applied to the
	// existing consumer in place (docs/journal.md "Delivery budget"). Bump
	// the suffix only for settings JetStream can not update.
	databaseDurable = "ayatori-executor-database-v1"
)

// databaseOptions are the database domain's flags.
type databaseOptions struct {
	openBaoAddress          string
	openBaoAllowPlainHTTP   bool
	openBaoConsumerAddress  string
	openBaoAuthMount        string
	openBaoAuthRole         string
	openBaoKVMount          string
	openBaoTokenPath        string
	openBaoTokenFile        string
	openBaoTenantBasePath   string
	externalSecretStoreName string
	postgresqlCABundlePath  string

	instanceResync   time.Duration
	tenantResync     time.Duration
	tenantWorkers    int
	postgresMaxConns int
}

func newDatabaseDomain() *domain {
	o := &databaseOptions{}
	return &domain{
		name:        dbcontract.Domain,
		projectors:  []string{instanceProjector, tenantProjector},
		executors:   []string{postgresqlExecutor, openBaoExecutor, externalSecretsExecutor},
		bind:        o.bind,
		validate:    o.validate,
		addToScheme: databasev1alpha1.AddToScheme,
		setup:       o.setup,
	}
}

func (o *databaseOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.openBaoAddress, "openbao-address", "", "OpenBao API address the controller uses (absolute http(s) URL); required by the Tenant components")
	fs.BoolVar(&o.openBaoAllowPlainHTTP, "openbao-allow-plain-http", false, "allow an http:// --openbao-address on a non-loopback host (the token and passwords cross the network unencrypted: development only)")
	fs.StringVar(&o.openBaoConsumerAddress, "openbao-consumer-address", "", "OpenBao API address written to Tenant status for consumers (default: --openbao-address)")
	fs.StringVar(&o.openBaoAuthMount, "openbao-auth-mount", "kubernetes", "Kubernetes auth mount (mount-relative path)")
	fs.StringVar(&o.openBaoAuthRole, "openbao-auth-role", "", "Kubernetes auth role of the controller's ServiceAccount")
	fs.StringVar(&o.openBaoKVMount, "openbao-kv-mount", "kv", "KV v2 mount (mount-relative path)")
	fs.StringVar(&o.openBaoTokenPath, "openbao-service-account-token-path", "/var/run/secrets/kubernetes.io/serviceaccount/token", "projected ServiceAccount token used for Kubernetes auth")
	fs.StringVar(&o.openBaoTokenFile, "openbao-token-file", "", "development only: read an OpenBao token from this file instead of Kubernetes auth")
	fs.StringVar(&o.openBaoTenantBasePath, "openbao-tenant-base-path", "postgresql-tenants", "controller-owned KV path prefix (mount-relative)")
	fs.StringVar(&o.externalSecretStoreName, "external-secret-store-name", "", "ClusterSecretStore the controller's ExternalSecrets reference; required by the Tenant components")
	fs.StringVar(&o.postgresqlCABundlePath, "postgresql-ca-bundle-path", "", "PEM CA bundle verifying PostgreSQL servers (required for verify-ca/verify-full)")
	fs.IntVar(&o.tenantWorkers, "tenant-workers", 8, "how many Tenants the Tenant projector reconciles at once (> 0; one Tenant is never reconciled twice at once)")
	fs.DurationVar(&o.tenantResync, "tenant-resync-interval", 10*time.Minute, "re-check a Ready Tenant (one ObserveTenant) this long after its last successful check (> 0)")
	fs.DurationVar(&o.instanceResync, "instance-resync-interval", 5*time.Minute, "re-observe a Ready Instance this long after its last successful observation (> 0)")
	fs.IntVar(&o.postgresMaxConns, "postgresql-max-conns", 4, "connections per Instance pool (> 0)")
}

// needsOpenBao names the enabled components that cannot run without an
// OpenBao client.
func needsOpenBao(on selection) []string {
	var by []string
	if on.executor(openBaoExecutor) {
		by = append(by, "the openbao executor")
	}
	if on.executor(postgresqlExecutor) && on.projector(tenantProjector) {
		by = append(by, "the postgresql executor next to the tenant projector (it reads Tenant passwords from OpenBao)")
	}
	return by
}

// usesOpenBao: an OpenBao client is built when a component needs one, or
// when the postgresql executor can use the given address.
func (o *databaseOptions) usesOpenBao(on selection) bool {
	return len(needsOpenBao(on)) > 0 || on.executor(postgresqlExecutor) && o.openBaoAddress != ""
}

func (o *databaseOptions) validate(on selection) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if by := needsOpenBao(on); len(by) > 0 && o.openBaoAddress == "" {
		bad("--openbao-address is required by %s", strings.Join(by, " and "))
	}
	if o.usesOpenBao(on) && o.openBaoAuthRole == "" && o.openBaoTokenFile == "" {
		by := needsOpenBao(on)
		if len(by) == 0 {
			by = []string{"the postgresql executor (--openbao-address is given)"}
		}
		bad("--openbao-auth-role (Kubernetes auth) or --openbao-token-file (development) is required by %s", strings.Join(by, " and "))
	}
	if on.projector(tenantProjector) {
		if o.externalSecretStoreName == "" {
			bad("--external-secret-store-name is required by the tenant projector")
		}
		if o.openBaoConsumerAddress == "" && o.openBaoAddress == "" {
			bad("--openbao-consumer-address or --openbao-address is required by the tenant projector (the OpenBao address written to Tenant status)")
		}
	}
	if o.openBaoConsumerAddress == "" {
		o.openBaoConsumerAddress = o.openBaoAddress
	}
	if o.tenantWorkers <= 0 {
		errs = append(errs, fmt.Errorf("--tenant-workers must be positive, got %d", o.tenantWorkers))
	}
	for name, d := range map[string]time.Duration{"--instance-resync-interval": o.instanceResync, "--tenant-resync-interval": o.tenantResync} {
		if d <= 0 {
			bad("%s must be a positive duration, got %s", name, d)
		}
	}
	if o.postgresMaxConns <= 0 {
		bad("--postgresql-max-conns must be positive")
	}
	for name, v := range map[string]string{"--openbao-address": o.openBaoAddress, "--openbao-consumer-address": o.openBaoConsumerAddress} {
		if v == "" {
			continue
		}
		if err := validateHTTPURL(v); err != nil {
			bad("%s: %v", name, err)
		}
	}
	if o.openBaoAddress != "" && validateHTTPURL(o.openBaoAddress) == nil {
		if err := baoexec.CheckTransport(o.openBaoAddress, o.openBaoAllowPlainHTTP); err != nil {
			bad("--openbao-address: %v", err)
		}
	}
	for name, v := range map[string]string{"--openbao-auth-mount": o.openBaoAuthMount, "--openbao-kv-mount": o.openBaoKVMount} {
		if err := validateMountPath(v, false); err != nil {
			bad("%s: %v", name, err)
		}
	}
	if err := validateMountPath(o.openBaoTenantBasePath, true); err != nil {
		bad("--openbao-tenant-base-path: %v", err)
	}
	if o.postgresqlCABundlePath != "" {
		if st, err := os.Stat(o.postgresqlCABundlePath); err != nil || st.IsDir() {
			bad("--postgresql-ca-bundle-path %q is not a readable file", o.postgresqlCABundlePath)
		}
	}
	if o.openBaoTokenFile != "" {
		if st, err := os.Stat(o.openBaoTokenFile); err != nil || st.IsDir() {
			bad("--openbao-token-file %q is not a readable file", o.openBaoTokenFile)
		}
	}
	return errs
}

// setup registers the enabled projectors (with their outcome router) and
// the handlers of the enabled executors behind the domain's durable
// consumer.
func (o *databaseOptions) setup(_ context.Context, mgr manager.Manager, store *journal.Store, sh shared) (func(), error) {
	log := ctrl.Log.WithName("setup").WithValues("domain", dbcontract.Domain)
	on := sh.on
	if on.projector(instanceProjector) || on.projector(tenantProjector) {
		router := dbprojector.NewOutcomeRouter(store)
		router.OnWatchError = watchError(dbcontract.Domain)
		if err := mgr.Add(router); err != nil {
			return nil, err
		}
		if on.projector(tenantProjector) {
			r := &dbprojector.TenantReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Recorder: mgr.GetEventRecorder("ayatori-manager"),
				Config: dbprojector.TenantConfig{KVMount: o.openBaoKVMount, BasePath: o.openBaoTenantBasePath,
					ConsumerAddress: o.openBaoConsumerAddress, StoreName: o.externalSecretStoreName},
				Policy:  dbprojector.TenantPolicy{ResyncInterval: o.tenantResync, RetryBase: sh.retryBase, RetryMax: sh.retryMax, PendingRecheck: 30 * time.Second},
				Workers: o.tenantWorkers, NoIntentEvents: !sh.intentEvents}
			if err := r.SetupWithManager(mgr, router.Tenants); err != nil {
				return nil, fmt.Errorf("set up the PostgreSQLTenant projector: %w", err)
			}
		}
		if on.projector(instanceProjector) {
			r := &dbprojector.InstanceReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Namespace: sh.namespace,
				Recorder: mgr.GetEventRecorder("ayatori-manager"),
				Policy: dbprojector.InstancePolicy{ResyncInterval: o.instanceResync, RetryBase: sh.retryBase, RetryMax: sh.retryMax,
					PendingRecheck: 30 * time.Second}}
			if err := r.SetupWithManager(mgr, router.Instances); err != nil {
				return nil, fmt.Errorf("set up the PostgreSQLInstance projector: %w", err)
			}
		}
	}

	// The domain's intents: one durable consumer, its dispatcher routes
	// each operation to the backend that executes it.
	dispatch, err := journal.NewDispatcher(dbcontract.Domain)
	if err != nil {
		return nil, err
	}
	var baoStore *baoexec.Store
	if o.usesOpenBao(on) {
		var auth baoexec.Auth = baoexec.KubernetesAuth{Mount: o.openBaoAuthMount, Role: o.openBaoAuthRole, TokenPath: o.openBaoTokenPath}
		if o.openBaoTokenFile != "" {
			auth = baoexec.TokenFileAuth{Path: o.openBaoTokenFile}
		}
		bc, err := baoexec.NewClient(o.openBaoAddress, auth, sh.reconcileTimeout, o.openBaoAllowPlainHTTP)
		if err != nil {
			return nil, redact.Error(err, o.openBaoAddress)
		}
		baoStore = &baoexec.Store{Client: bc}
	}
	var pools *pgexec.Pools
	cleanup := func() {
		if pools != nil {
			pools.CloseAll()
		}
	}
	if on.executor(postgresqlExecutor) {
		if names := pgexec.ClearLibpqEnvironment(); len(names) > 0 {
			// Connections are built from the Instances alone; a PGOPTIONS or
			// PGTARGETSESSIONATTRS meant for psql must not change them.
			log.Info("ignoring libpq environment variables", "names", names)
		}
		roots, err := pgexec.LoadCABundle(o.postgresqlCABundlePath)
		if err != nil {
			return nil, err
		}
		pools = pgexec.NewPools(roots, int32(o.postgresMaxConns), sh.reconcileTimeout)
		ex := &pgexec.Executor{Pools: pools, Secrets: secretReader{c: mgr.GetClient(), namespace: sh.namespace}, Timeout: sh.reconcileTimeout, Log: executorLog(postgresqlExecutor)}
		if baoStore != nil {
			ex.Passwords = passwordSource{s: baoStore}
		} else {
			log.Info("the postgresql executor has no OpenBao client (--openbao-address): Tenant operations that read the password fail")
		}
		if err := dispatch.HandleAll(postgresqlExecutor, ex.Handlers()); err != nil {
			return cleanup, err
		}
		if err := dispatch.HandleAll(postgresqlExecutor, ex.TenantHandlers()); err != nil {
			return cleanup, err
		}
		dispatch.Persistent(dbcontract.PersistentOperations...)
	}
	if on.executor(openBaoExecutor) && baoStore != nil {
		if err := dispatch.HandleAll(openBaoExecutor, (&baoexec.Executor{Store: baoStore, Timeout: sh.reconcileTimeout, Log: executorLog(openBaoExecutor)}).Handlers()); err != nil {
			return cleanup, err
		}
	}
	if on.executor(externalSecretsExecutor) {
		if err := dispatch.HandleAll(externalSecretsExecutor, (&esexec.Executor{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Timeout: sh.reconcileTimeout, Log: executorLog(externalSecretsExecutor)}).Handlers()); err != nil {
			return cleanup, err
		}
	}
	dispatch.SetGuard(liveGuard(mgr, databaseLiveCheck(dbcontract.NameConfig{KVMount: o.openBaoKVMount, BasePath: o.openBaoTenantBasePath,
		StoreName: o.externalSecretStoreName})))
	// PostgreSQL: twice one Instance's pool, so that two Instances'
	// intents run at once and one Instance's beyond its pool wait for a
	// connection; OpenBao and the ExternalSecret writes by their servers.
	return cleanup, sh.consume(mgr, store, databaseDurable, dispatch, map[string]int{postgresqlExecutor: 2 * o.postgresMaxConns,
		openBaoExecutor: 8, externalSecretsExecutor: 8})
}

// databaseLiveCheck runs dbcontract.CheckIntent with the objects an intent
// of the domain names.
func databaseLiveCheck(cfg dbcontract.NameConfig) func(ctx context.Context, r client.Reader, rec journal.Record) (string, error) {
	return func(ctx context.Context, r client.Reader, rec journal.Record) (string, error) {
		return checkDatabaseIntent(ctx, r, rec, cfg)
	}
}

// checkDatabaseIntent reads the Instance or Tenant of an intent (and the
// Instance a Tenant intent names) and runs dbcontract.CheckIntent.
func checkDatabaseIntent(ctx context.Context, r client.Reader, rec journal.Record, cfg dbcontract.NameConfig) (string, error) {
	var live dbcontract.LiveObjects
	switch rec.Object.Kind {
	case "PostgreSQLInstance":
		inst := &databasev1alpha1.PostgreSQLInstance{}
		if err := r.Get(ctx, types.NamespacedName{Name: rec.Object.Name}, inst); err == nil {
			live.Instance = inst
		} else if !apierrors.IsNotFound(err) {
			return "", err
		}
	case "PostgreSQLTenant":
		t := &databasev1alpha1.PostgreSQLTenant{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}, t); err == nil {
			live.Tenant = t
		} else if !apierrors.IsNotFound(err) {
			return "", err
		}
		if uid := dbcontract.IntentInstanceUID(rec); uid != "" {
			var list databasev1alpha1.PostgreSQLInstanceList
			if err := r.List(ctx, &list); err != nil {
				return "", err
			}
			for i := range list.Items {
				if string(list.Items[i].UID) == uid {
					live.Instance = &list.Items[i]
				}
			}
		}
		if a := live.Instance; a != nil && a.Spec.AllowedNamespaces != nil && a.Spec.AllowedNamespaces.Selector != nil {
			ns := &corev1.Namespace{}
			if err := r.Get(ctx, types.NamespacedName{Name: rec.Object.Namespace}, ns); err == nil {
				live.NamespaceLabels = ns.Labels
			} else if !apierrors.IsNotFound(err) {
				return "", err
			}
		}
	}
	return dbcontract.CheckIntent(rec, live, cfg), nil
}

// secretReader reads admin Secrets from the controller namespace only.
type secretReader struct {
	c         client.Reader
	namespace string
}

func (s secretReader) ReadSecret(ctx context.Context, name string) (map[string][]byte, string, error) {
	sec := &corev1.Secret{}
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", pgexec.ErrSecretNotFound
		}
		return nil, "", err
	}
	return sec.Data, sec.ResourceVersion, nil
}

// passwordSource adapts the OpenBao store to the PostgreSQL executor. The
// store's errors are already the domain's Failure (reason, safe message,
// no response body: executors/openbao/classify.go), and the PostgreSQL
// executor's Classify keeps a Failure as it is, so nothing is translated
// here.
type passwordSource struct{ s *baoexec.Store }

func (p passwordSource) TenantPassword(ctx context.Context, mount, path, instanceUID, tenantUID, namespace, name string) (string, error) {
	pw, _, err := p.s.Read(ctx, mount, path, baoexec.Owner{InstanceUID: instanceUID, TenantUID: tenantUID, Namespace: namespace, Name: name})
	return pw, err
}
