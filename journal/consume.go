package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Outcome is what an executor reports for one intent.
type Outcome struct {
	Result  Result
	Payload any
}

// Handler executes one intent idempotently. A nil error means the outcome
// is recorded (whatever its class). A non-nil error means "transient, try
// again": no outcome is recorded, the intent is redelivered with back-off,
// and an error on delivery MaxDeliver or later records a Failed outcome
// with reason RetriesExhausted instead. Errors may implement
// `Reason() string` to give that outcome a more precise reason; their text
// is never written to the journal.
type Handler func(ctx context.Context, intent Record) (Outcome, error)

// ConsumerConfig configures the durable pull consumer of one domain's
// executors. The consumer receives only the intents of its dispatcher's
// domain.
//
// The retry budget is Ayatori's, not JetStream's: the JetStream consumer
// redelivers an intent without limit until it is acked, and Consume acks
// an intent only once its outcome is in the journal, so no intent can end
// without an outcome (docs/journal.md "Delivery budget").
type ConsumerConfig struct {
	// Durable is the consumer name, e.g. "ayatori-executor-<domain>-v1",
	// one per domain. Consumer settings are mostly immutable in JetStream:
	// change the name (version suffix) when changing filters or other
	// settings the server does not update in place.
	Durable string
	// AckWait is how long an unacknowledged delivery waits before
	// redelivery (default 30s). Consume keeps the intents it holds alive
	// with in-progress heartbeats every AckWait/3.
	AckWait time.Duration
	// MaxDeliver is the retry budget of one intent (≤ 0: 5): a
	// transient handler error on delivery MaxDeliver or later records
	// Failed/RetriesExhausted. It is counted by Consume from the delivery
	// count; the JetStream consumer itself has no MaxDeliver (unlimited).
	MaxDeliver int
	// DeliveryLimit bounds the deliveries of one intent whatever ended
	// them without an outcome: a crash of the executor, an AckWait expiry,
	// a hand-back on shutdown. A delivery past it records
	// Failed/RetriesExhausted without running the handler again (default
	// 2 × MaxDeliver, never less than MaxDeliver).
	DeliveryLimit int
	// BackOff are the delays before redelivering after a transient failure,
	// indexed by delivery count (default 1s, 5s, 15s, 30s; the last repeats).
	// They also space the in-process retries of a failed journal read or
	// outcome append, and the hand-backs of an intent of a newer schema
	// version.
	BackOff []time.Duration
	// Concurrency is how many intents run at once (default 4).
	Concurrency int
	// PullExpiry is how long one pull request waits on the server for
	// intents (default 30s, at least 1s). The server sends idle heartbeats
	// every PullExpiry/2; two missed ones (a partitioned consumer leader)
	// make Consume issue a new pull request.
	PullExpiry time.Duration
	// OnPullError, when set, is told every error that ended a pull before
	// Consume pulls again (for logs; the error carries no record data).
	OnPullError func(err error)
	// BeforeHandle, when set, runs after an intent is taken and before its
	// handler (crash-test failpoint; nil in production).
	BeforeHandle func(intent Record)
	// BeforeOutcome, when set, runs after the handler and before its
	// outcome is appended (crash-test failpoint; nil in production).
	BeforeOutcome func(intent Record)
	// AfterOutcome, when set, runs after the outcome is appended and before
	// the intent is acked (crash-test failpoint; nil in production).
	AfterOutcome func(intent Record)
	// BeforeWithdraw, when set, runs on shutdown before Consume withdraws
	// its pull request from the server (race failpoint; nil in
	// production).
	BeforeWithdraw func()
	// OnUntrusted, when set, is told every intent Consume refused for
	// want of a valid proof of origin (for logs and Events; the record is
	// someone else's: its fields are data, never trusted).
	OnUntrusted func(intent Record, seq uint64, err error)
}

func (c *ConsumerConfig) defaults() {
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = 5
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = 2 * c.MaxDeliver
	}
	if c.DeliveryLimit < c.MaxDeliver {
		c.DeliveryLimit = c.MaxDeliver
	}
	if len(c.BackOff) == 0 {
		c.BackOff = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.PullExpiry == 0 {
		c.PullExpiry = 30 * time.Second
	}
	if c.PullExpiry < time.Second {
		c.PullExpiry = time.Second
	}
}

// DurableConsumer creates or updates the durable consumer of the intents of
// domain (a subject token, see Domain) (idempotent). The consumer's
// MaxDeliver is unlimited (-1); an existing consumer with a limit (created
// by an earlier version) is updated in place, which JetStream allows.
func (s *Store) DurableConsumer(ctx context.Context, domain string, cfg ConsumerConfig) (jetstream.Consumer, error) {
	cfg.defaults()
	if cfg.Durable == "" {
		return nil, errors.New("journal: consumer needs a durable name")
	}
	if !domainPattern.MatchString(domain) {
		return nil, fmt.Errorf("journal: consumer %s: domain %q is not a subject token", cfg.Durable, domain)
	}
	filters := []string{fmt.Sprintf("%s.%s.*.%s", s.cfg.SubjectPrefix, domain, TypeIntent)}
	cons, err := s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        cfg.Durable,
		Description:    "Ayatori executor intents",
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.AckWait,
		// Unlimited: the budget is counted by Consume (cfg.MaxDeliver,
		// cfg.DeliveryLimit), which ends every intent with an outcome. A
		// server-side limit would drop an intent whose last delivery was
		// handed back, crashed or expired, leaving it pending forever.
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: 1000,
	})
	if err != nil {
		return nil, fmt.Errorf("journal: create or update consumer %s: %w", cfg.Durable, err)
	}
	return cons, nil
}

// Consume runs the executor loop of one domain until ctx is done: it pulls
// the intents of d's domain from the durable consumer and, for each one,
//  1. acks it without re-executing when its outcome already exists
//     (a redelivery after a crash, or a late ack);
//  2. records a Failed outcome (UndecodableIntent, keyed by the stream
//     sequence, see poison; UnknownOperation) for a poison intent instead
//     of letting it vanish (one of a newer schema version is first handed
//     back with back-off, for a newer executor, until DeliveryLimit), and a
//     Failed/RetriesExhausted one for an intent delivered more than
//     DeliveryLimit times;
//  3. runs the handler d routes it to;
//  4. appends the outcome, then acks.
//
// It sends in-progress heartbeats every AckWait/3 from the moment it takes
// an intent until it settles it. An intent is acked only once its outcome
// is in the journal; a failed journal read or outcome append is retried in
// place (with back-off) rather than handed back, so it spends no delivery.
//
// Consume outlives NATS faults: when the pull fails (the consumer's leader
// is partitioned and its heartbeats stop, the consumer was deleted, a
// leader election is under way) it reports the error to cfg.OnPullError,
// waits (0.5 s, 1 s, 2 s, then 5 s between attempts) and creates the
// consumer and a new pull again; intents it had buffered but not started
// are redelivered after AckWait. It returns an error only when the NATS
// connection is closed for good.
//
// When ctx ends it stops pulling and hands back (naks) every intent it
// holds but has not finished, the buffered ones and those whose handler
// was interrupted, so another replica's consumer gets them at once instead
// of after AckWait. Those naks wait until its pull request is withdrawn
// from the server; one sent before would come back to this draining
// consumer and spend the intent's DeliveryLimit. In-flight handlers see ctx cancelled; Consume returns
// nil after they have.
func (s *Store) Consume(ctx context.Context, cfg ConsumerConfig, d *Dispatcher) error {
	s.cfg.Metrics.initOperations(d.Operations())
	cfg.defaults()
	if d == nil {
		return errors.New("journal: consume without a dispatcher")
	}
	if s.cfg.Trust == nil {
		return errors.New("journal: consume without trusted keys (Config.Trust or Config.Signer): an executor acts only on records it can attribute to the manager")
	}
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	// Closed once ctx ended and no pull request of this Consume is left on
	// the server: the hand-backs wait for it (see handBack).
	withdrawn := make(chan struct{})
	defer close(withdrawn) // before wg.Wait: handlers may wait for it
	failures := 0
	for {
		took, err := s.pull(ctx, cfg, d, sem, &wg, withdrawn)
		if ctx.Err() != nil {
			return nil
		}
		if s.nc.IsClosed() {
			return fmt.Errorf("journal: consume %s: connection closed: %w", cfg.Durable, err)
		}
		if took {
			failures = 0
		}
		s.cfg.Metrics.countPullRestart()
		if cfg.OnPullError != nil {
			cfg.OnPullError(err)
		}
		wait := pullRestartBackOff[min(failures, len(pullRestartBackOff)-1)]
		failures++
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// pullRestartBackOff spaces the attempts of Consume to pull again after a
// failed pull, indexed by consecutive failures (the last repeats).
var pullRestartBackOff = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

// pull creates the durable consumer and runs one pull iterator over it
// until the iterator fails (the error) or ctx ends (nil, after handing
// back what it buffered). took reports whether it received any intent.
// Handlers it starts run under wg, at most cap(sem) at once, and may
// outlive it.
func (s *Store) pull(ctx context.Context, cfg ConsumerConfig, d *Dispatcher, sem chan struct{}, wg *sync.WaitGroup, withdrawn <-chan struct{}) (took bool, err error) {
	cons, err := s.DurableConsumer(ctx, d.Domain(), cfg)
	if err != nil {
		return false, err
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(cfg.Concurrency*2), jetstream.PullExpiry(cfg.PullExpiry))
	if err != nil {
		return false, fmt.Errorf("journal: consume %s: %w", cfg.Durable, err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			if cfg.BeforeWithdraw != nil {
				cfg.BeforeWithdraw()
			}
			// Drain: stop pulling, but let Next return what is buffered
			// so it can be handed back below.
			iter.Drain()
		case <-done:
		}
	}()
	// held are the intents received after ctx ended, never started.
	var held []jetstream.Msg
	for {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				// The iterator is drained: the server has processed the
				// withdrawal of the pull request (the client flushes
				// before it closes the iterator), so a nak can no longer
				// come back to this replica.
				for _, m := range held {
					_ = m.Nak()
				}
				return took, nil
			}
			iter.Stop()
			return took, fmt.Errorf("journal: consume %s: %w", cfg.Durable, err)
		}
		took = true
		if ctx.Err() != nil {
			held = append(held, m)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// The running handlers hand back only once the pull
			// request is withdrawn, which waits for this loop.
			held = append(held, m)
			continue
		}
		wg.Add(1)
		var once sync.Once
		free := func() { once.Do(func() { <-sem }) }
		go func() {
			defer func() { free(); wg.Done() }()
			s.handle(context.WithValue(ctx, consumerSlotKey{}, free), cfg, m, d, withdrawn)
		}()
	}
}

// consumerSlotKey carries, in a handler's context, the function that
// gives the intent's consumer slot back before it ends (see
// Dispatcher.Limit): an intent that waits for a saturated backend's slot
// does not hold one the other backends' intents need.
type consumerSlotKey struct{}

// releaseConsumerSlot gives ctx's consumer slot back (once; a no-op
// outside Consume).
func releaseConsumerSlot(ctx context.Context) {
	if free, ok := ctx.Value(consumerSlotKey{}).(func()); ok {
		free()
	}
}

type reasoner interface{ Reason() string }

// exhausted is the Failed outcome of an intent whose last delivery the
// budget allows failed transiently with herr: the Failure's reason and
// safe message when herr is one (see Execute), else the error's Reason()
// or RetriesExhausted; the error's text is never recorded.
func exhausted(herr error, delivered int) Outcome {
	if f := AsFailure(herr); f != nil && f.Reason != "" {
		msg := fmt.Sprintf("gave up after %d deliveries (%s)", delivered, ReasonRetriesExhausted)
		if f.Message != "" {
			msg = f.Message + "; " + msg
		}
		return Outcome{Result: Result{Class: Failed, Reason: f.Reason, Message: msg}, Payload: f.Payload}
	}
	reason := ReasonRetriesExhausted
	var r reasoner
	if errors.As(herr, &r) && r.Reason() != "" {
		reason = r.Reason()
	}
	return Outcome{Result: Result{Class: Failed, Reason: reason, Message: fmt.Sprintf("gave up after %d deliveries (%s)", delivered, ReasonRetriesExhausted)}}
}

// finishTimeout bounds one append or ack, and how long recording an
// outcome goes on after ctx ended (shutdown).
const finishTimeout = 10 * time.Second

// settlement is how handle settles a message once it is done with it.
type settlement int

const (
	// ack: the intent's outcome is in the journal.
	ack settlement = iota
	// retry: the handler failed transiently and the budget is not spent:
	// nak with back-off.
	retry
	// handBack: shutting down; nak as soon as this replica's pull
	// request is withdrawn, so another replica takes it at once.
	handBack
	// term: a message that can not be attributed to any object.
	term
)

func (s *Store) handle(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, d *Dispatcher, withdrawn <-chan struct{}) {
	md, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	// Heartbeats from taking the intent until settling it: the journal
	// read, the handler and the outcome append may all wait.
	hbCtx, stopHB := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	how := s.process(ctx, cfg, m, md, d)
	stopHB()
	<-hbDone // no heartbeat after the ack or nak
	switch how {
	case ack:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		// A lost ack only means a redelivery, which finds the outcome.
		_ = m.DoubleAck(actx)
	case retry:
		_ = m.NakWithDelay(cfg.backoff(md.NumDelivered))
	case handBack:
		if ctx.Err() != nil {
			// A nak that reaches the server while this replica's pull
			// request is still there is redelivered to it at once, naked
			// again, and so on: each round spends a delivery of
			// DeliveryLimit. Wait until the pull request is withdrawn.
			<-withdrawn
		}
		_ = m.Nak()
	case term:
		_ = m.Term()
	}
}

// process handles one delivery of an intent and says how to settle it.
func (s *Store) process(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, md *jetstream.MsgMetadata, d *Dispatcher) settlement {
	delivered := int(md.NumDelivered)
	rec, derr := DecodeRecord(m.Data(), md.Sequence.Stream)
	if derr != nil {
		if errors.Is(derr, ErrNewerSchema) {
			if !s.newerIsOurs(storedMsg{subject: m.Subject(), data: m.Data(), hdr: m.Headers()}) {
				// Nothing of it but its ID (in the message) is kept: its
				// other fields need not be valid in this version.
				unknown := Record{ID: rec.ID, Operation: "Unknown", Object: ObjectRef{Kind: "Unknown", Name: "unknown"}, Attempt: 1}
				return s.refuse(ctx, cfg, m, unknown, md.Sequence.Stream,
					fmt.Errorf("%w: a record of schema version %d without a valid message proof", ErrUntrusted, rec.SchemaVersion))
			}
			if delivered < cfg.DeliveryLimit && s.holdNewer(cfg, md.Sequence.Stream) {
				// Written by a newer manager (a rolling upgrade): hand
				// it back with back-off for a newer executor to take.
				return retry
			}
		}
		return s.poison(ctx, cfg, m, md.Sequence.Stream, derr, delivered)
	}
	if err := s.admitStored(m.Subject(), m.Data(), &rec); err != nil {
		return s.refuse(ctx, cfg, m, rec, md.Sequence.Stream, err)
	}
	if rec.Type != TypeIntent {
		// Unreachable for a record admitStored admits (its subject names
		// its type), kept as the second line.
		return s.refuse(ctx, cfg, m, rec, md.Sequence.Stream, fmt.Errorf("%w: a %s record on an intent subject", ErrUntrusted, rec.Type))
	}
	if delivered == 1 {
		s.cfg.Metrics.observeDelivery(s.cfg.Clock.Now().Sub(rec.Time))
	} else {
		s.cfg.Metrics.countRedelivery(rec.Operation)
	}
	// 0. A redelivery of an intent this process is still executing (its
	// heartbeats were lost in a NATS fault, or AckWait passed while the
	// backend was slow) waits for that execution instead of running the
	// handler a second time at once; the outcome check below then finds
	// its outcome.
	release, ok := s.takeIntent(ctx, rec.ID)
	if !ok {
		return handBack
	}
	defer release()
	// 1. Outcome exists: ack without re-executing.
	done, ok := s.outcomeExists(ctx, cfg, rec)
	if !ok {
		return handBack
	}
	if done {
		return ack
	}
	// 1b. Ordered after another intent: run only once that one succeeded.
	if rec.After != "" {
		out, ok := s.awaitDependency(ctx, rec)
		if !ok {
			return handBack
		}
		if out != nil {
			return s.finish(ctx, cfg, rec, *out)
		}
	}
	// 2. Delivered too often without an outcome (crashes, AckWait
	// expiries, hand-backs): record that instead of running it again.
	if delivered > cfg.DeliveryLimit && !d.isPersistent(rec.Operation) {
		s.cfg.Metrics.countExhausted(rec.Operation, "deliveries")
		return s.finish(ctx, cfg, rec, Outcome{Result: Result{Class: Failed, Reason: ReasonRetriesExhausted,
			Message: fmt.Sprintf("delivered %d times without an outcome (executor crash, AckWait expiry or hand-back); not run again", delivered)}})
	}
	h, why := d.handler(rec)
	if h == nil {
		return s.finish(ctx, cfg, rec, Outcome{Result: Result{Class: Failed, Reason: ReasonUnknownOperation, Message: why}})
	}
	// 3. Run.
	if cfg.BeforeHandle != nil {
		cfg.BeforeHandle(rec)
	}
	started := s.cfg.Clock.Now()
	out, herr := h(withDelivery(ctx, delivered), rec)
	s.cfg.Metrics.observeExecution(rec.Operation, started.Sub(rec.Time), s.cfg.Clock.Since(started), delivered == 1)
	if herr != nil {
		if ctx.Err() != nil {
			return handBack // shutting down: hand it to another replica now
		}
		if delivered >= cfg.MaxDeliver && !d.isPersistent(rec.Operation) {
			s.cfg.Metrics.countExhausted(rec.Operation, "retries")
			return s.finish(ctx, cfg, rec, exhausted(herr, delivered))
		}
		s.cfg.Metrics.countTransient(rec.Operation, herr)
		return retry
	}
	if ctx.Err() != nil && out.Result.Class != Succeeded {
		// Shutting down: a failure may be our own cancellation, not the
		// backend's answer. Hand the intent to another replica instead of
		// recording it.
		return handBack
	}
	if cfg.BeforeOutcome != nil {
		cfg.BeforeOutcome(rec)
	}
	// 4. Record.
	return s.finish(ctx, cfg, rec, out)
}

// takeIntent marks the intent id as being processed by this process and
// returns the function that unmarks it. When another delivery of the same
// intent is being processed here, it waits for that one to finish first;
// ok is false when ctx ended while waiting.
func (s *Store) takeIntent(ctx context.Context, id string) (release func(), ok bool) {
	for {
		s.mu.Lock()
		busy, taken := s.inflight[id]
		if !taken {
			if s.inflight == nil {
				s.inflight = map[string]chan struct{}{}
			}
			done := make(chan struct{})
			s.inflight[id] = done
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.inflight, id)
				s.mu.Unlock()
				close(done)
			}, true
		}
		s.mu.Unlock()
		// Waiting here holds no consumer slot: the first delivery may
		// itself wait for an intent that has to be delivered again.
		releaseConsumerSlot(ctx)
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// outcomeExists reports whether rec's outcome is in the journal. A failed
// read is retried in place with back-off (the journal's trouble is not the
// intent's, and must not spend a delivery); ok is false only when ctx
// ended first.
func (s *Store) outcomeExists(ctx context.Context, cfg ConsumerConfig, rec Record) (done, ok bool) {
	for i := uint64(1); ; i++ {
		rctx, cancel := context.WithTimeout(ctx, finishTimeout)
		done, err := s.hasRecord(rctx, rec.Object.UID, OutcomeID(rec.ID))
		cancel()
		if err == nil {
			return done, true
		}
		select {
		case <-ctx.Done():
			return false, false
		case <-time.After(cfg.backoff(i)):
		}
	}
}

// finish appends the outcome of rec and says to ack. An outcome the
// journal refuses as invalid is replaced by a Failed/InvalidOutcome one.
// A failed append is retried in place with back-off until it succeeds, so
// an intent is never acked without an outcome and a journal outage spends
// no delivery; the outcome's ID is deterministic, so a retry never stores
// it twice. When ctx ends (shutdown) it keeps trying for finishTimeout,
// since an operation that completed is better recorded than executed
// again elsewhere, and then hands the intent back.
func (s *Store) finish(ctx context.Context, cfg ConsumerConfig, rec Record, out Outcome) settlement {
	o, err := NewOutcome(rec, out.Result, out.Payload)
	if err == nil {
		o.Actor = s.cfg.Actor
		err = s.appendRetrying(ctx, cfg, &o)
	}
	if errors.Is(err, ErrInvalidRecord) || errors.Is(err, nats.ErrMaxPayload) {
		// The executor produced an invalid outcome: record that instead.
		o, _ = NewOutcome(rec, Result{Class: Failed, Reason: "InvalidOutcome", Message: "the executor produced an invalid outcome record"}, nil)
		o.Actor = s.cfg.Actor
		err = s.appendRetrying(ctx, cfg, &o)
	}
	if err != nil {
		return handBack
	}
	s.cfg.Metrics.countOutcome(rec.Operation, *o.Result)
	s.signalOutcome(rec.Object.UID)
	if cfg.AfterOutcome != nil {
		cfg.AfterOutcome(rec)
	}
	return ack
}

// appendRetrying appends rec, retrying a failed append with back-off. It
// returns nil once rec is stored (or found stored), an invalid-record
// error at once, and any other error only when ctx has been done for
// finishTimeout.
func (s *Store) appendRetrying(ctx context.Context, cfg ConsumerConfig, rec *Record) error {
	var giveUp time.Time
	for i := uint64(1); ; i++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		_, err := s.Append(actx, rec)
		cancel()
		if err == nil || errors.Is(err, ErrInvalidRecord) || errors.Is(err, nats.ErrMaxPayload) {
			return err
		}
		wait := cfg.backoff(i)
		if ctx.Err() != nil {
			// Shutting down: keep trying for finishTimeout, then give up.
			if giveUp.IsZero() {
				giveUp = time.Now().Add(finishTimeout)
			}
			left := time.Until(giveUp)
			if left <= 0 {
				return err
			}
			time.Sleep(min(wait, left))
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// poison answers an intent message this executor can not decode (or one
// of a newer schema version, once it was handed back DeliveryLimit times
// without a newer executor taking it) with one Failed/UndecodableIntent
// outcome on the object its subject names, and says to ack. The outcome's
// ID derives from the stream sequence (UndecodableIntentID), never from
// the message: its Nats-Msg-Id header and its content are whatever its
// publisher chose, and an outcome keyed by them would answer, so cancel,
// an intent of the manager's with that ID. A message whose subject names
// no object is terminated (nothing can wait for it).
func (s *Store) poison(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, seq uint64, why error, delivered int) settlement {
	parts := strings.Split(strings.TrimPrefix(m.Subject(), s.cfg.SubjectPrefix+"."), ".")
	if len(parts) != 3 || ValidateUID(parts[1]) != nil {
		return term
	}
	intent := Record{ID: UndecodableIntentID(parts[1], seq), Operation: "Unknown", Attempt: 1,
		Object: ObjectRef{Group: parts[0], Kind: "Unknown", Name: "unknown", UID: parts[1]}}
	msg := fmt.Sprintf("intent at stream sequence %d could not be decoded", seq)
	if errors.Is(why, ErrNewerSchema) {
		msg = fmt.Sprintf("intent at stream sequence %d has a schema version newer than this executor reads (1..%d); ", seq, SchemaVersion)
		if delivered >= cfg.DeliveryLimit {
			msg += fmt.Sprintf("delivered %d times, no newer executor took it", delivered)
		} else {
			msg += fmt.Sprintf("not handed back for a newer executor: %d such intents already are", newerHeldLimit)
		}
	}
	o, err := NewOutcome(intent, Result{Class: Failed, Reason: ReasonUndecodableIntent, Message: msg}, nil)
	if err != nil {
		return term
	}
	o.Actor = s.cfg.Actor
	if err := s.appendRetrying(ctx, cfg, &o); err != nil {
		if errors.Is(err, ErrInvalidRecord) {
			return term
		}
		return handBack
	}
	s.releaseNewer(seq)
	return ack
}

// newerHeldLimit bounds how many intents of a newer schema version one
// executor process (all its consumers) holds handed back at a time. A
// handed-back message stays pending at the server and counts against its
// consumer's MaxAckPending (1000): whoever can publish on the journal's
// subjects, signing key or not, could otherwise keep it full of "newer"
// messages and stall every executor of the domain. Past the limit a newer
// intent is answered at once, as an undecodable one.
var newerHeldLimit = 64

// holdNewer reports whether the newer-schema intent at stream sequence seq
// may be handed back (again) for a newer executor, and counts it. An entry
// counts from its latest hand-back until its next delivery is due
// (2 × the longest back-off + AckWait): answered by another replica or a
// newer executor, it stops counting then.
func (s *Store) holdNewer(cfg ConsumerConfig, seq uint64) bool {
	ttl := 2*slices.Max(cfg.BackOff) + cfg.AckWait
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.newerHeld == nil {
		s.newerHeld = map[uint64]time.Time{}
	}
	for held, until := range s.newerHeld {
		if now.After(until) {
			delete(s.newerHeld, held)
		}
	}
	if _, ok := s.newerHeld[seq]; !ok && len(s.newerHeld) >= newerHeldLimit {
		return false
	}
	s.newerHeld[seq] = now.Add(ttl)
	return true
}

// releaseNewer stops counting the intent at seq (it was answered).
func (s *Store) releaseNewer(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.newerHeld, seq)
}

// refuse answers an intent without a valid proof of origin (forged,
// changed, or copied from another object's subject) with one
// Failed/UntrustedIntent outcome on the subject's object, and says to ack;
// no handler runs. The outcome's ID derives from the stream sequence, not
// from the record's ID, so it never answers (or blocks) an intent of the
// manager's with the same ID; a redelivery finds it and only acks.
func (s *Store) refuse(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, rec Record, seq uint64, why error) settlement {
	s.cfg.Metrics.countUntrusted("executor")
	if cfg.OnUntrusted != nil {
		cfg.OnUntrusted(rec, seq, why)
	}
	parts := strings.Split(strings.TrimPrefix(m.Subject(), s.cfg.SubjectPrefix+"."), ".")
	if len(parts) != 3 || ValidateUID(parts[1]) != nil {
		return term
	}
	obj := rec.Object
	obj.UID = parts[1]
	if d, err := Domain(obj.Group); err != nil || d != parts[0] {
		obj.Group = parts[0]
	}
	intent := Record{ID: UntrustedIntentID(obj.UID, seq), Operation: rec.Operation, Object: obj, Step: rec.Step, Attempt: max(rec.Attempt, 1)}
	o, err := NewOutcome(intent, Result{Class: Failed, Reason: ReasonUntrustedIntent,
		Message: fmt.Sprintf("intent %s at stream sequence %d not executed: %v", shorten(rec.ID), seq, why)}, nil)
	if err != nil {
		return term
	}
	o.Actor = s.cfg.Actor
	if err := s.appendRetrying(ctx, cfg, &o); err != nil {
		if errors.Is(err, ErrInvalidRecord) {
			return term
		}
		return handBack
	}
	s.cfg.Metrics.countOutcome("Untrusted", *o.Result)
	return ack
}

// UntrustedIntentID is the causation ID of the Failed/UntrustedIntent
// outcome an executor appends for the untrusted record at stream sequence
// seq on uid's subject.
func UntrustedIntentID(uid string, seq uint64) string {
	return fmt.Sprintf("%s/untrusted/seq%d", uid, seq)
}

func (c ConsumerConfig) backoff(delivered uint64) time.Duration {
	i := int(delivered) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(c.BackOff) {
		i = len(c.BackOff) - 1
	}
	return c.BackOff[i]
}

// hasRecord reports whether the UID's journal holds a record with this ID.
func (s *Store) hasRecord(ctx context.Context, uid, id string) (bool, error) {
	unlock := s.lockUID(uid)
	defer unlock()
	st, err := s.refresh(ctx, uid)
	if err != nil {
		return false, err
	}
	_, ok := st.ids[id]
	return ok, nil
}

// awaitDependency waits until the intent rec is ordered after
// (Record.After) has an outcome in the journal, without holding the
// consumer's slot (the wait is heartbeated like a running handler). It
// returns a nil outcome when rec may run (that intent succeeded), the
// Failed/DependencyFailed outcome to record instead of running it (that
// intent did not succeed, or is not an earlier intent of the object in the
// journal: never taken, or removed by retention), and ok false when ctx
// ended first. Only records with a valid proof count (the UID's cached
// state holds no other), so a forged outcome can not release rec.
func (s *Store) awaitDependency(ctx context.Context, rec Record) (out *Outcome, ok bool) {
	skip := func(msg string) (*Outcome, bool) {
		return &Outcome{Result: Result{Class: Failed, Reason: ReasonDependencyFailed, Message: "not executed: " + msg}}, true
	}
	wait := 20 * time.Millisecond
	released := false
	for {
		signal := s.outcomeSignal(rec.Object.UID)
		// While this process's executor runs the intent waited for, its
		// end wakes this wait (its outcome signals, or it finishes without
		// one): no need to ask the server in between.
		busy := s.running(rec.After)
		rctx, cancel := context.WithTimeout(ctx, finishTimeout)
		dep, err := s.dependency(rctx, rec.Object.UID, rec.After, rec.Sequence)
		cancel()
		switch {
		case err != nil || !dep.covered:
			// The journal's trouble, or a read that does not reach this
			// intent yet (a lagging server answered): try again below.
		case !dep.known || dep.seq >= rec.Sequence:
			return skip(fmt.Sprintf("it is ordered after intent %s, which is not an earlier intent of this object in the journal", shorten(rec.After)))
		case dep.done && dep.failed == nil:
			return nil, true
		case dep.done:
			return skip(fmt.Sprintf("the intent it is ordered after (%s) ended %s", shorten(rec.After), dep.failed.String()))
		}
		if !released {
			releaseConsumerSlot(ctx)
			released = true
		}
		poll := wait
		if busy != nil {
			poll = runningPoll
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-signal:
		case <-busy:
		case <-time.After(poll):
			wait = min(2*wait, time.Second)
		}
	}
}

// runningPoll is how often a wait for an intent this process is running
// asks the server anyway (the running one's end wakes it at once).
const runningPoll = 10 * time.Second

// running returns the channel closed when this process's executor stops
// processing intent id (nil: it is not processing it).
func (s *Store) running(id string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.inflight[id]; ok {
		return ch
	}
	return nil
}

// dependencyState is what the journal says of the intent another one is
// ordered after.
type dependencyState struct {
	covered bool    // the read reached the waiting intent's own sequence
	known   bool    // the intent is in the journal
	seq     uint64  // its sequence
	done    bool    // it has an outcome
	failed  *Result // that outcome, when it did not succeed
}

// dependency reads the UID's journal for intent id and its outcome; seq is
// the sequence of the intent waiting for it.
//
// An outcome this process already knows of (it recorded it, or read it)
// is taken from the UID's cached state without asking the server: the
// records up to the state's last sequence never change.
func (s *Store) dependency(ctx context.Context, uid, id string, seq uint64) (dependencyState, error) {
	unlock := s.lockUID(uid)
	defer unlock()
	if st := s.cached(uid); st != nil {
		if d := st.dependency(id, seq); d.covered && d.known && d.done {
			return d, nil
		}
	}
	st, err := s.refresh(ctx, uid)
	if err != nil {
		return dependencyState{}, err
	}
	return st.dependency(id, seq), nil
}

// dependency is what st says of intent id for the intent at seq waiting
// for it.
func (st *uidState) dependency(id string, seq uint64) dependencyState {
	d := dependencyState{covered: st.lastSeq >= seq}
	d.seq, d.known = st.ids[id]
	_, d.done = st.ids[OutcomeID(id)]
	if r, ok := st.failed[OutcomeID(id)]; ok {
		d.failed = &r
	}
	return d
}

// outcomeSignal returns the channel closed at the next outcome this
// process records for uid.
func (s *Store) outcomeSignal(uid string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.outcomeSignals[uid]
	if !ok {
		if s.outcomeSignals == nil || len(s.outcomeSignals) >= uidCacheLimit {
			// Entries of UIDs whose outcomes another replica recorded
			// are never closed here: drop them all (their waiters poll).
			s.outcomeSignals = map[string]chan struct{}{}
		}
		ch = make(chan struct{})
		s.outcomeSignals[uid] = ch
	}
	return ch
}

// signalOutcome wakes the intents waiting for an outcome of uid.
func (s *Store) signalOutcome(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.outcomeSignals[uid]; ok {
		close(ch)
		delete(s.outcomeSignals, uid)
	}
}

// UndecodableIntentID is the causation ID of the Failed/UndecodableIntent
// outcome an executor appends for the intent message at stream sequence
// seq on uid's subject that it can not decode.
func UndecodableIntentID(uid string, seq uint64) string {
	return fmt.Sprintf("%s/undecodable/seq%d", uid, seq)
}
