package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"git.ddupan.top/panxiao81/ayatori/internal/redact"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// options are the manager's shared flags (docs/database/deployment.md,
// "Deployment and manager flags"); each domain binds and validates its own
// (domain.go). validate() checks them all before the manager starts.
type options struct {
	namespace        string
	reconcileTimeout time.Duration

	natsURL         string
	natsCreds       string
	natsNKey        string
	natsTLSCA       string
	natsTLSCert     string
	natsTLSKey      string
	signingKey      string
	trustedKeys     string
	journalStream   string
	journalPrefix   string
	journalMaxAge   time.Duration
	journalViews    int
	journalViewMiB  int
	journalReplicas int

	projectors []string
	executors  []string

	retryBase time.Duration
	retryMax  time.Duration

	leaderElect   bool
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	metricsAddr   string
	probeAddr     string
	pprofAddr     string
	kubeconfig    string
	actor         string
	executorConns int
	// backendConcurrency are --executor-backend-concurrency's bounds by
	// executor name (the rest keep their domain's default).
	backendConcurrency map[string]int
	intentEvents       bool
	kubeAPIQPS         float64
	kubeAPIBurst       int
	ackWait            time.Duration

	// domains are the domains this manager can run, with their flags
	// (bind creates them).
	domains []*domain
}

// components lists every domain's projectors and executors, in order.
func (o *options) components() (projectors, executors []string) {
	for _, d := range o.domains {
		projectors = append(projectors, d.projectors...)
		executors = append(executors, d.executors...)
	}
	return projectors, executors
}

// selection is the --projectors / --executors choice (after validate).
func (o *options) selection() selection {
	return selection{projectors: o.projectors, executors: o.executors}
}

func (o *options) bind(fs *flag.FlagSet) {
	if o.domains == nil {
		o.domains = newDomains()
	}
	allProjectors, allExecutors := o.components()
	fs.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "controller namespace: admin Secrets are read only here (env POD_NAMESPACE)")
	fs.DurationVar(&o.reconcileTimeout, "reconcile-timeout", 30*time.Second, "deadline for the external operations of one step (> 0)")

	fs.StringVar(&o.natsURL, "nats-url", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server with JetStream holding the journal (env NATS_URL)")
	// The default may come from NATS_URL: --help shows it without credentials.
	fs.Lookup("nats-url").DefValue = redact.URLList(o.natsURL)
	fs.StringVar(&o.natsCreds, "nats-creds", os.Getenv("NATS_CREDS"), "NATS JWT credentials file of the manager identity (env NATS_CREDS; or --nats-nkey)")
	fs.StringVar(&o.natsNKey, "nats-nkey", os.Getenv("NATS_NKEY"), "NKey seed file of the manager's NATS identity (env NATS_NKEY; deploy/nats auth.conf)")
	fs.StringVar(&o.natsTLSCA, "nats-tls-ca", os.Getenv("NATS_TLS_CA"), "PEM CA bundle that verifies the NATS servers' certificates (env NATS_TLS_CA; default: the system roots)")
	fs.StringVar(&o.natsTLSCert, "nats-tls-cert", "", "client certificate for NATS (optional, PEM; with --nats-tls-key)")
	fs.StringVar(&o.natsTLSKey, "nats-tls-key", "", "key of --nats-tls-cert (PEM)")
	fs.StringVar(&o.signingKey, "journal-signing-key", os.Getenv("AYATORI_JOURNAL_SIGNING_KEY"), "PEM Ed25519 private key (PKCS #8) that signs every journal record this manager writes (env AYATORI_JOURNAL_SIGNING_KEY; docs/journal.md \"Proof of origin\")")
	fs.StringVar(&o.trustedKeys, "journal-trusted-keys", os.Getenv("AYATORI_JOURNAL_TRUSTED_KEYS"), "PEM Ed25519 public keys (a file, or a directory of files) whose journal records the manager acts on; must include the signing key's (env AYATORI_JOURNAL_TRUSTED_KEYS)")
	fs.StringVar(&o.journalStream, "journal-stream", journal.DefaultStreamName, "journal stream name")
	fs.StringVar(&o.journalPrefix, "journal-subject-prefix", journal.DefaultSubjectPrefix, "journal subject prefix")
	fs.DurationVar(&o.journalMaxAge, "journal-max-age", journal.DefaultMaxAge, "how long journal records are kept (> 0)")
	fs.IntVar(&o.journalReplicas, "journal-replicas", 1, "journal stream replicas (1, 3 or 5)")
	fs.IntVar(&o.journalViews, "journal-view-cache", journal.DefaultViewCache, "objects whose journal View a projector pass continues from its last read instead of reading its checkpoint again (0: none)")
	fs.IntVar(&o.journalViewMiB, "journal-view-cache-mib", journal.DefaultViewCacheBytes>>20, "bound on the estimated memory of those Views, in MiB; past it the expired and then arbitrary Views are evicted")

	fs.Func("projectors", "comma-separated projectors to run: "+strings.Join(allProjectors, ", ")+" (default: all)", func(v string) error {
		o.projectors = splitList(v)
		return nil
	})
	fs.Func("executors", "comma-separated executors to run: "+strings.Join(allExecutors, ", ")+" (default: all)", func(v string) error {
		o.executors = splitList(v)
		return nil
	})
	fs.DurationVar(&o.retryBase, "retry-base", 5*time.Second, "first back-off after a dependency failure (> 0)")
	fs.DurationVar(&o.retryMax, "retry-max", 5*time.Minute, "longest back-off after repeated failures (>= --retry-base)")
	fs.BoolVar(&o.intentEvents, "intent-events", false, "emit an IntentAppended Event on the object for every step decided (default: only the condition changes get Events; the journal records every step, `kubectl ayatori timeline` shows them)")
	fs.IntVar(&o.executorConns, "executor-concurrency", 0, "bound on each domain's intents executed at once per process; 0: the sum of its executors' --executor-backend-concurrency")
	fs.Func("executor-backend-concurrency", "intents each executor runs at once per process, as executor=n pairs separated by commas (default: postgresql = 2 x --postgresql-max-conns, openbao=8, externalsecrets=8, kubernetes=32, opensandbox=8)", func(v string) error {
		if o.backendConcurrency == nil {
			o.backendConcurrency = map[string]int{}
		}
		for _, kv := range splitList(v) {
			name, n, ok := strings.Cut(kv, "=")
			name = strings.TrimSpace(name)
			c, err := strconv.Atoi(strings.TrimSpace(n))
			if !ok || err != nil || name == "" {
				return fmt.Errorf("%q is not executor=n", kv)
			}
			if _, dup := o.backendConcurrency[name]; dup {
				return fmt.Errorf("executor %s is named twice", name)
			}
			o.backendConcurrency[name] = c
		}
		return nil
	})
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 0, "client-side rate limit of the manager's Kubernetes API requests per second; 0: none (controller-runtime's default, the API server's priority and fairness applies), negative: none")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 0, "burst of --kube-api-qps (>= --kube-api-qps when set)")
	fs.DurationVar(&o.ackWait, "executor-ack-wait", 0, "how long an intent taken by an executor that died stays invisible before redelivery (default: --reconcile-timeout + 30s; in-progress heartbeats keep long operations alive)")

	fs.BoolVar(&o.leaderElect, "leader-elect", false, "enable leader election (run more than one replica): projectors run on the leader, executors on every replica")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the leader's last renewal before taking over (a leader that exits cleanly releases the Lease at once)")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it stops leading (< lease duration)")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease (renew deadline > 1.2 x this)")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "metrics endpoint address (0 disables)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "health and readiness probe address")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Go runtime profiles (/debug/pprof/) on this address, unauthenticated: a loopback IP only, for benchmarks and debugging (0 disables, the default)")
	fs.StringVar(&o.actor, "actor", "", "name written into journal records (default: <hostname>/<pid>)")
	for _, d := range o.domains {
		d.bind(fs)
	}
}

// loopbackOnly refuses an address that is not a literal loopback IP and
// port ("0" and "" are off; a host name is refused, since it resolves
// through /etc/hosts or DNS). The pprof endpoints are served without
// authentication: they show the command line and every goroutine's
// stack, and anyone who reaches them can make the process spend CPU, so
// they are never offered to the network.
func loopbackOnly(addr string) error {
	if addr == "" || addr == "0" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback IP address (the profiles are unauthenticated; use 127.0.0.1:PORT and a port-forward)", addr)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// validate checks every flag and returns all problems at once: the shared
// ones, then those of each domain with an enabled component.
func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	allProjectors, allExecutors := o.components()
	if o.projectors == nil {
		o.projectors = allProjectors
	}
	if o.executors == nil {
		o.executors = allExecutors
	}
	for _, p := range o.projectors {
		if !slices.Contains(allProjectors, p) {
			bad("--projectors: unknown projector %q (known: %s)", p, strings.Join(allProjectors, ", "))
		}
	}
	for _, e := range o.executors {
		if !slices.Contains(allExecutors, e) {
			bad("--executors: unknown executor %q (known: %s)", e, strings.Join(allExecutors, ", "))
		}
	}
	if o.namespace == "" {
		bad("--namespace (or POD_NAMESPACE) is required: admin Secrets are read only from the controller namespace")
	}
	for name, d := range map[string]time.Duration{"--reconcile-timeout": o.reconcileTimeout, "--journal-max-age": o.journalMaxAge,
		"--retry-base": o.retryBase, "--retry-max": o.retryMax} {
		if d <= 0 {
			bad("%s must be a positive duration, got %s", name, d)
		}
	}
	if o.ackWait < 0 {
		bad("--executor-ack-wait must not be negative")
	}
	if o.ackWait == 0 {
		o.ackWait = o.reconcileTimeout + 30*time.Second
	}
	if o.leaderElect {
		if o.leaseDuration <= o.renewDeadline {
			bad("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", o.leaseDuration, o.renewDeadline)
		}
		if o.retryPeriod <= 0 || float64(o.renewDeadline) <= 1.2*float64(o.retryPeriod) {
			bad("--leader-elect-renew-deadline (%s) must be longer than 1.2 x --leader-elect-retry-period (%s)", o.renewDeadline, o.retryPeriod)
		}
	}
	if o.retryMax < o.retryBase {
		bad("--retry-max (%s) must not be shorter than --retry-base (%s)", o.retryMax, o.retryBase)
	}
	if o.executorConns < 0 {
		bad("--executor-concurrency must not be negative")
	}
	if o.journalViews < 0 {
		bad("--journal-view-cache must not be negative")
	}
	if o.journalViewMiB < 1 {
		bad("--journal-view-cache-mib must be at least 1")
	}
	for _, name := range slices.Sorted(maps.Keys(o.backendConcurrency)) {
		if !slices.Contains(allExecutors, name) {
			bad("--executor-backend-concurrency: unknown executor %q (known: %s)", name, strings.Join(allExecutors, ", "))
		} else if o.backendConcurrency[name] <= 0 {
			bad("--executor-backend-concurrency: %s=%d must be positive", name, o.backendConcurrency[name])
		}
	}
	if err := loopbackOnly(o.pprofAddr); err != nil {
		bad("--pprof-bind-address: %v", err)
	}
	if o.kubeAPIQPS > 0 && float64(o.kubeAPIBurst) < o.kubeAPIQPS {
		bad("--kube-api-burst (%d) must be at least --kube-api-qps (%g)", o.kubeAPIBurst, o.kubeAPIQPS)
	}
	switch o.journalReplicas {
	case 1, 3, 5:
	default:
		bad("--journal-replicas must be 1, 3 or 5, got %d", o.journalReplicas)
	}
	// Both become subject tokens (the stream name in JetStream API subjects).
	if err := journal.ValidateStreamName(o.journalStream); err != nil {
		bad("--journal-stream %v", err)
	}
	if err := journal.ValidateSubjectPrefix(o.journalPrefix); err != nil {
		bad("--journal-subject-prefix %v", err)
	}
	if err := validateNATSURLs(o.natsURL); err != nil {
		bad("--nats-url: %v", err)
	}
	if o.natsNKey == "" && o.natsCreds == "" {
		bad("--nats-nkey (or --nats-creds) is required: the journal's NATS server admits no anonymous client")
	}
	if o.natsNKey != "" && o.natsCreds != "" {
		bad("--nats-nkey and --nats-creds: give one")
	}
	if (o.natsTLSCert == "") != (o.natsTLSKey == "") {
		bad("--nats-tls-cert and --nats-tls-key go together")
	}
	if o.signingKey == "" {
		bad("--journal-signing-key is required: every journal record carries the manager's proof of origin")
	}
	if o.trustedKeys == "" {
		bad("--journal-trusted-keys is required: executors act only on records signed by a trusted key")
	}
	on := o.selection()
	for _, d := range o.domains {
		if on.enables(d) {
			errs = append(errs, d.validate(on)...)
		}
	}
	// Some checks iterate maps: sort, so the same flags give the same message.
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// natsAuth is the manager's NATS client identity.
func (o *options) natsAuth() journal.ClientAuth {
	return journal.ClientAuth{Identity: journal.IdentityManager, NKeySeedFile: o.natsNKey, CredsFile: o.natsCreds,
		TLSCAFile: o.natsTLSCA, TLSCertFile: o.natsTLSCert, TLSKeyFile: o.natsTLSKey}
}

// journalKeys loads the signing key and the trusted keys; the signing key
// must be trusted (journal.Open checks it too).
func (o *options) journalKeys() (*journal.SigningKey, *journal.TrustedKeys, error) {
	signer, err := journal.LoadSigningKey(o.signingKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--journal-signing-key: %w", err)
	}
	trust, err := journal.LoadTrustedKeys(o.trustedKeys)
	if err != nil {
		return nil, nil, fmt.Errorf("--journal-trusted-keys: %w", err)
	}
	return signer, trust, nil
}

// validateNATSURLs: a comma-separated list of nats://, tls://, ws:// or
// wss:// URLs with a host (credentials in them are allowed). Error
// messages show each URL redacted (redact.URL): it may carry a password or
// token.
func validateNATSURLs(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("must not be empty")
	}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("%q is not a parseable URL", redact.URL(s))
		}
		if (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			return fmt.Errorf("%q must be a nats://, tls://, ws:// or wss:// URL", redact.URL(s))
		}
	}
	return nil
}

// validateHTTPURL: absolute http(s) URL without userinfo, query or fragment.
// Error messages show the URL redacted (redact.URL): a rejected value may
// carry a password or token.
func validateHTTPURL(v string) error {
	shown := redact.URL(v)
	u, err := url.Parse(v)
	if err != nil {
		return fmt.Errorf("%q is not a parseable URL", shown)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q must be an absolute http or https URL", shown)
	case u.Host == "":
		return fmt.Errorf("%q has no host", shown)
	case u.User != nil:
		return fmt.Errorf("%q must not contain user information", shown)
	case u.RawQuery != "" || u.Fragment != "" || strings.Contains(v, "?") || strings.Contains(v, "#"):
		return fmt.Errorf("%q must not contain a query or fragment", shown)
	}
	return nil
}

// validateMountPath: mount-relative path without leading '/', empty, '.'
// or '..' segments; a base path also must not encode the KV v2 API layers.
func validateMountPath(v string, basePath bool) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	if strings.HasPrefix(v, "/") {
		return fmt.Errorf("%q must be mount-relative (no leading '/')", v)
	}
	for _, seg := range strings.Split(strings.TrimSuffix(v, "/"), "/") {
		switch seg {
		case "", ".", "..":
			return fmt.Errorf("%q has an empty, '.' or '..' segment", v)
		case "data", "metadata":
			if basePath {
				return fmt.Errorf("%q must not contain the KV v2 API segment %q", v, seg)
			}
		}
	}
	return nil
}
