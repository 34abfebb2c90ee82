package journal

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// Dispatcher routes the intents of one domain to handlers: each handler is
// registered for an operation of the domain by the backend (executor) that
// executes it, so operations are keyed by (domain, operation). One
// Dispatcher is consumed by one durable consumer (Store.Consume), so every
// domain has its own.
//
// Usually one backend owns an operation. When several backends execute
// the same operation (for example each for the objects of its own class),
// the domain declares with Route, before registering them, the function
// that names the backend owning an intent's object.
type Dispatcher struct {
	domain     string
	ops        map[string]*route
	persistent map[string]bool
	guard      Guard
	// limits are the backends' bounds on intents in flight (Limit).
	limits map[string]chan struct{}
}

// Guard checks a trusted intent against what the live objects say before
// its handler runs: the record's proof says the manager wrote it, the
// guard that its parameters (endpoint, names, credential reference, the
// object's state) are still what the API holds. A refusal ("" = none) is
// recorded as one Failed/UntrustedIntent outcome with that message, and
// nothing runs; an error means the live objects could not be read: the
// intent is redelivered as after a transient handler error.
type Guard func(ctx context.Context, intent Record) (refusal string, err error)

type route struct {
	owner    func(Record) string
	backends map[string]Handler
}

// NewDispatcher returns an empty dispatcher for domain (a subject token,
// see Domain).
func NewDispatcher(domain string) (*Dispatcher, error) {
	if !domainPattern.MatchString(domain) {
		return nil, fmt.Errorf("journal: dispatcher domain %q is not a subject token", domain)
	}
	return &Dispatcher{domain: domain, ops: map[string]*route{}, persistent: map[string]bool{}, limits: map[string]chan struct{}{}}, nil
}

// Limit bounds how many intents of backend run at once in this process
// (n > 0; n <= 0 removes the bound): each backend is sized by what it
// talks to (PostgreSQL by its connection pool, the Kubernetes executor by
// the API server), not by one number for all. An intent over the bound
// waits for a slot of its own backend (its message kept in progress), so
// a saturated backend never holds another's slots: an intent that has to
// wait gives its consumer slot (ConsumerConfig.Concurrency) back first, so
// the consumer keeps pulling the other backends' intents (at most the
// consumer's MaxAckPending wait). Call it before Consume.
func (d *Dispatcher) Limit(backend string, n int) {
	if n <= 0 {
		delete(d.limits, backend)
		return
	}
	d.limits[backend] = make(chan struct{}, n)
}

// Backends lists the backends with at least one handler, sorted.
func (d *Dispatcher) Backends() []string {
	set := map[string]bool{}
	for _, r := range d.ops {
		for b := range r.backends {
			set[b] = true
		}
	}
	out := make([]string, 0, len(set))
	for b := range set {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// Capacity is the sum of the limits of the backends with handlers: the
// intents the dispatcher runs at once when every backend is busy (0 when
// one of them has no limit: the consumer's Concurrency alone bounds it).
func (d *Dispatcher) Capacity() int {
	total := 0
	for _, b := range d.Backends() {
		l, ok := d.limits[b]
		if !ok {
			return 0
		}
		total += cap(l)
	}
	return total
}

// Persistent marks operations whose intents are retried until they
// succeed: a transient handler error is redelivered with back-off
// whatever the delivery count (ConsumerConfig.MaxDeliver and
// DeliveryLimit do not apply). For steps that run after the object is
// gone, when no projector is left to decide a retry.
// Their handlers must return a transient error only for what a retry can
// cure.
func (d *Dispatcher) Persistent(operations ...string) {
	for _, op := range operations {
		d.persistent[op] = true
	}
}

// SetGuard installs the domain's guard (see Guard), run before every
// handler of the dispatcher.
func (d *Dispatcher) SetGuard(g Guard) { d.guard = g }

// isPersistent reports whether operation was marked Persistent.
func (d *Dispatcher) isPersistent(operation string) bool { return d.persistent[operation] }

// Domain returns the dispatcher's domain.
func (d *Dispatcher) Domain() string { return d.domain }

// Route declares that several backends execute operation and that owner
// names the backend owning an intent's object. It must come before those
// backends' Handle calls; declaring it twice is an error.
func (d *Dispatcher) Route(operation string, owner func(Record) string) error {
	if owner == nil {
		return fmt.Errorf("journal: %s/%s: route without an owner function", d.domain, operation)
	}
	if r, ok := d.ops[operation]; ok {
		if r.owner != nil {
			return fmt.Errorf("journal: %s/%s: route declared twice", d.domain, operation)
		}
		return fmt.Errorf("journal: %s/%s: route declared after a handler", d.domain, operation)
	}
	d.ops[operation] = &route{owner: owner, backends: map[string]Handler{}}
	return nil
}

// Handle registers backend's handler of operation. Registering an
// operation that already has a handler is an error, unless the operation
// has a Route and this backend has none for it yet.
func (d *Dispatcher) Handle(backend, operation string, h Handler) error {
	if !opPattern.MatchString(operation) {
		return fmt.Errorf("journal: %s/%s: operation must be CamelCase", d.domain, operation)
	}
	if backend == "" || h == nil {
		return fmt.Errorf("journal: %s/%s: a handler needs a backend name and a function", d.domain, operation)
	}
	r, ok := d.ops[operation]
	if !ok {
		r = &route{backends: map[string]Handler{}}
		d.ops[operation] = r
	}
	if _, dup := r.backends[backend]; dup || (r.owner == nil && len(r.backends) > 0) {
		return fmt.Errorf("journal: %s/%s registered twice (backend %s)", d.domain, operation, backend)
	}
	r.backends[backend] = h
	return nil
}

// HandleAll registers backend's handlers by operation name.
func (d *Dispatcher) HandleAll(backend string, handlers map[string]Handler) error {
	ops := make([]string, 0, len(handlers))
	for op := range handlers {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		if err := d.Handle(backend, op, handlers[op]); err != nil {
			return err
		}
	}
	return nil
}

// Operations lists the operations with at least one handler, sorted.
func (d *Dispatcher) Operations() []string {
	var out []string
	for op, r := range d.ops {
		if len(r.backends) > 0 {
			out = append(out, op)
		}
	}
	sort.Strings(out)
	return out
}

// handler returns the handler for intent, or a message saying why there
// is none (recorded as a Failed/UnknownOperation outcome).
func (d *Dispatcher) handler(intent Record) (Handler, string) {
	if dom, err := Domain(intent.Object.Group); err != nil || dom != d.domain {
		return nil, fmt.Sprintf("no executor of domain %s handles operation %s of group %q", d.domain, intent.Operation, intent.Object.Group)
	}
	r, ok := d.ops[intent.Operation]
	if !ok || len(r.backends) == 0 {
		return nil, fmt.Sprintf("no executor handles operation %s", intent.Operation)
	}
	if r.owner == nil {
		for b, h := range r.backends {
			return d.limited(b, d.guarded(h)), ""
		}
	}
	b := r.owner(intent)
	if h, ok := r.backends[b]; ok {
		return d.limited(b, d.guarded(h)), ""
	}
	return nil, fmt.Sprintf("no executor handles operation %s for backend %q", intent.Operation, b)
}

// limited runs h in one of backend's slots (Limit), waiting for one; a
// context that ends first is a transient error (the intent is handed back).
func (d *Dispatcher) limited(backend string, h Handler) Handler {
	slots, ok := d.limits[backend]
	if !ok {
		return h
	}
	return func(ctx context.Context, intent Record) (Outcome, error) {
		select {
		case slots <- struct{}{}:
		default:
			// The backend is saturated: wait without holding the
			// consumer's slot, so the other backends' intents keep
			// flowing. The wait is heartbeated like a running handler;
			// the consumer's MaxAckPending bounds how many wait.
			releaseConsumerSlot(ctx)
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return Outcome{}, fmt.Errorf("journal: waiting for a %s slot: %w", backend, ctx.Err())
			}
		}
		defer func() { <-slots }()
		return h(ctx, intent)
	}
}

// guarded runs the dispatcher's guard before h.
func (d *Dispatcher) guarded(h Handler) Handler {
	g := d.guard
	if g == nil {
		return h
	}
	return func(ctx context.Context, intent Record) (Outcome, error) {
		why, err := g(ctx, intent)
		if err != nil {
			return Outcome{}, err
		}
		if why != "" {
			return Outcome{Result: Result{Class: Failed, Reason: ReasonUntrustedIntent, Message: "not executed: " + why}}, nil
		}
		return h(ctx, intent)
	}
}

// HandlerFor returns the handler an intent is routed to, or an error
// saying why there is none (what Consume records as a Failed/
// UnknownOperation outcome).
func (d *Dispatcher) HandlerFor(intent Record) (Handler, error) {
	h, why := d.handler(intent)
	if h == nil {
		return nil, errors.New(why)
	}
	return h, nil
}
