package main

import (
	"context"
	"flag"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// domain is how one domain wires itself into the manager: the components
// it owns, its own flags, and the setup of whatever of it is enabled. The
// shared wiring (main.go, options.go) knows domains only through this, so
// a manager that runs one domain needs none of another's flags or
// dependencies. Each domain lives in its own file (database.go).
type domain struct {
	// name is the journal domain: the subject token of its records and the
	// domain of its Dispatcher.
	name string
	// projectors and executors are the component names it owns, as
	// --projectors and --executors spell them; no two domains share one.
	projectors, executors []string
	// bind registers the domain's own flags.
	bind func(fs *flag.FlagSet)
	// validate checks the domain's flags for the enabled components and
	// fills in defaults derived from other flags. It runs only when at
	// least one of the domain's components is enabled.
	validate func(on selection) []error
	// addToScheme registers the domain's API types (only when enabled).
	addToScheme func(*runtime.Scheme) error
	// setup registers the enabled components with mgr: the projectors, and
	// the handlers of the enabled executors behind the domain's durable
	// consumer (shared.consume). cleanup, when not nil, runs after the
	// manager stopped.
	setup func(ctx context.Context, mgr manager.Manager, store *journal.Store, sh shared) (cleanup func(), err error)
}

// newDomains returns every domain the manager can run, each with its own
// flag values.
func newDomains() []*domain {
	return []*domain{newDatabaseDomain(), newExecutionDomain()}
}

// selection is the validated choice of --projectors and --executors.
type selection struct{ projectors, executors []string }

func (s selection) projector(name string) bool { return slices.Contains(s.projectors, name) }
func (s selection) executor(name string) bool  { return slices.Contains(s.executors, name) }

// enables reports whether at least one of d's components is selected.
func (s selection) enables(d *domain) bool {
	return slices.ContainsFunc(d.projectors, s.projector) || slices.ContainsFunc(d.executors, s.executor)
}

// defaultBackendConcurrency bounds an executor its domain gives no
// default and the flags do not name.
const defaultBackendConcurrency = 8

// shared is what every domain's setup gets from the shared flags.
type shared struct {
	on        selection
	namespace string
	// reconcileTimeout bounds the external operations of one step.
	reconcileTimeout    time.Duration
	retryBase, retryMax time.Duration
	// consumer is the executor consumer configuration (ack wait,
	// concurrency, failpoints) without the durable name.
	consumer journal.ConsumerConfig
	// backendConcurrency are the executors' bounds the flags set
	// (--executor-backend-concurrency); the others keep the defaults their
	// domain passes to consume.
	backendConcurrency map[string]int
	// intentEvents: an IntentAppended Event for every step decided
	// (--intent-events).
	intentEvents bool
	// durables collects the durable consumers this replica pulls from
	// (the journal probe reports their lag).
	durables *[]string
}

// consume runs the operations d has handlers for from the domain's durable
// consumer, on every replica; it adds nothing when d has none (no executor
// of the domain is enabled).
//
// Each executor (backend) runs at most its own number of intents at once:
// --executor-backend-concurrency, else defaults[backend]. The consumer
// pulls as many as all of them run (--executor-concurrency, when set,
// bounds that sum).
func (sh shared) consume(mgr manager.Manager, store *journal.Store, durable string, d *journal.Dispatcher, defaults map[string]int) error {
	if len(d.Operations()) == 0 {
		return nil
	}
	for _, b := range d.Backends() {
		n := defaults[b]
		if v, ok := sh.backendConcurrency[b]; ok {
			n = v
		}
		if n <= 0 {
			n = defaultBackendConcurrency
		}
		d.Limit(b, n)
	}
	cc := sh.consumer
	if cc.Concurrency == 0 {
		cc.Concurrency = max(d.Capacity(), 1)
	}
	cc.Durable = durable
	if sh.durables != nil {
		*sh.durables = append(*sh.durables, durable)
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		return store.Consume(ctx, cc, d)
	}))
}

// liveGuard is a journal.Guard from a domain's check of an intent against
// the live objects it reads through a client.Reader: the check runs on the
// manager's cache, and once more on the API server before it refuses (the
// cache may not have the projector's latest view yet).
func liveGuard(mgr manager.Manager, check func(ctx context.Context, r client.Reader, rec journal.Record) (string, error)) journal.Guard {
	cached, fresh := mgr.GetClient(), mgr.GetAPIReader()
	return func(ctx context.Context, rec journal.Record) (string, error) {
		why, err := check(ctx, cached, rec)
		if err != nil || why == "" {
			return why, err
		}
		return check(ctx, fresh, rec)
	}
}

// watchError logs a failed attempt to open a domain's outcome watch (the
// router tries again; the manager keeps running).
func watchError(domain string) func(error) {
	log := ctrl.Log.WithName("outcome-router").WithValues("domain", domain)
	return func(err error) { log.Info("outcome watch not open; trying again", "error", err.Error()) }
}

// executorLog is the logger of one executor backend: the executor
// skeleton writes one line per attempt to it.
func executorLog(backend string) logr.Logger {
	return ctrl.Log.WithName("executor").WithName(backend)
}
