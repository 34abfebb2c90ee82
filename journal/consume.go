package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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
// and once MaxDeliver is reached a Failed outcome with reason
// RetriesExhausted is recorded instead. Errors may implement
// `Reason() string` to give that outcome a more precise reason; their text
// is never written to the journal.
type Handler func(ctx context.Context, intent Record) (Outcome, error)

// ConsumerConfig configures the durable pull consumer of one domain's
// executors. The consumer receives only the intents of its dispatcher's
// domain.
type ConsumerConfig struct {
	// Durable is the consumer name, e.g. "ayatori-executor-<domain>-v1",
	// one per domain. Consumer settings are mostly immutable in JetStream:
	// change the name (version suffix) when changing filters or limits.
	Durable string
	// AckWait is how long an unacknowledged delivery waits before
	// redelivery (default 30s). Long operations are kept alive by
	// in-progress heartbeats every AckWait/3.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one intent (default 5).
	MaxDeliver int
	// BackOff are the delays before redelivering after a transient failure,
	// indexed by delivery count (default 1s, 5s, 15s, 30s; the last repeats).
	BackOff []time.Duration
	// Concurrency is how many intents run at once (default 4).
	Concurrency int
	// BeforeOutcome, when set, runs after the handler and before its
	// outcome is appended (crash-test failpoint; nil in production).
	BeforeOutcome func(intent Record)
	// AfterOutcome, when set, runs after the outcome is appended and before
	// the intent is acked (crash-test failpoint; nil in production).
	AfterOutcome func(intent Record)
}

func (c *ConsumerConfig) defaults() {
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 5
	}
	if len(c.BackOff) == 0 {
		c.BackOff = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
}

// DurableConsumer creates or updates the durable consumer of the intents of
// domain (a subject token, see Domain) (idempotent).
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
		MaxDeliver:     cfg.MaxDeliver,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  1000,
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
//  2. records a Failed outcome (UndecodableIntent / UnknownOperation) for a
//     poison intent instead of letting it vanish;
//  3. runs the handler d routes it to with in-progress heartbeats every AckWait/3;
//  4. appends the outcome, then acks.
//
// When ctx ends it stops pulling and hands back (naks) every intent it
// holds but has not finished, the buffered ones and those whose handler
// was interrupted, so another replica's consumer gets them at once instead
// of after AckWait. In-flight handlers see ctx cancelled; Consume returns
// after they have.
func (s *Store) Consume(ctx context.Context, cfg ConsumerConfig, d *Dispatcher) error {
	cfg.defaults()
	if d == nil {
		return errors.New("journal: consume without a dispatcher")
	}
	cons, err := s.DurableConsumer(ctx, d.Domain(), cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(cfg.Concurrency * 2))
	if err != nil {
		return fmt.Errorf("journal: consume: %w", err)
	}
	go func() {
		<-ctx.Done()
		// Drain: stop pulling, but let Next return what is buffered so it
		// can be handed back below.
		iter.Drain()
	}()
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("journal: consume: %w", err)
		}
		if ctx.Err() != nil {
			_ = m.Nak()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.handle(ctx, cfg, m, d)
		}()
	}
}

type reasoner interface{ Reason() string }

// finishTimeout bounds recording an outcome (append + ack).
const finishTimeout = 10 * time.Second

func (s *Store) handle(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, d *Dispatcher) {
	md, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	rec, derr := DecodeRecord(m.Data(), md.Sequence.Stream)
	if derr != nil || rec.Type != TypeIntent {
		s.poison(ctx, m, md.Sequence.Stream)
		return
	}
	if md.NumDelivered == 1 {
		s.cfg.Metrics.observeDelivery(s.cfg.Clock.Now().Sub(rec.Time))
	}
	// 1. Outcome exists: ack without re-executing.
	if done, err := s.hasRecord(ctx, rec.Object.UID, OutcomeID(rec.ID)); err != nil {
		if ctx.Err() != nil {
			_ = m.Nak() // shutting down: hand it to another replica now
			return
		}
		_ = m.NakWithDelay(cfg.backoff(md.NumDelivered))
		return
	} else if done {
		_ = m.DoubleAck(ctx)
		return
	}
	h, why := d.handler(rec)
	if h == nil {
		s.finish(ctx, cfg, m, rec, Outcome{Result: Result{Class: Failed, Reason: ReasonUnknownOperation, Message: why}}, md.NumDelivered)
		return
	}
	// 3. Run with heartbeats.
	hbCtx, stop := context.WithCancel(ctx)
	go func() {
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
	out, herr := h(ctx, rec)
	stop()
	if herr != nil {
		if ctx.Err() != nil {
			_ = m.Nak() // shutting down: hand it to another replica now
			return
		}
		if int(md.NumDelivered) >= cfg.MaxDeliver {
			reason := ReasonRetriesExhausted
			var r reasoner
			if errors.As(herr, &r) && r.Reason() != "" {
				reason = r.Reason()
			}
			s.finish(ctx, cfg, m, rec, Outcome{Result: Result{Class: Failed, Reason: reason,
				Message: fmt.Sprintf("gave up after %d deliveries (%s)", md.NumDelivered, ReasonRetriesExhausted)}}, md.NumDelivered)
			return
		}
		_ = m.NakWithDelay(cfg.backoff(md.NumDelivered))
		return
	}
	if ctx.Err() != nil && out.Result.Class != Succeeded {
		// Shutting down: a failure may be our own cancellation, not the
		// backend's answer. Hand the intent to another replica instead of
		// recording it.
		_ = m.Nak()
		return
	}
	if cfg.BeforeOutcome != nil {
		cfg.BeforeOutcome(rec)
	}
	s.finish(ctx, cfg, m, rec, out, md.NumDelivered)
}

// finish appends the outcome of rec and acks the message. It runs even
// when ctx was cancelled meanwhile (shutdown): an operation that completed
// is recorded rather than executed again elsewhere, within finishTimeout.
func (s *Store) finish(ctx context.Context, cfg ConsumerConfig, m jetstream.Msg, rec Record, out Outcome, delivered uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	o, err := NewOutcome(rec, out.Result, out.Payload)
	if err == nil {
		o.Actor = s.cfg.Actor
		_, err = s.Append(ctx, &o)
	}
	if err != nil {
		if errors.Is(err, ErrInvalidRecord) {
			// The executor produced an invalid outcome: record that instead.
			o2, _ := NewOutcome(rec, Result{Class: Failed, Reason: "InvalidOutcome", Message: "the executor produced an invalid outcome record"}, nil)
			if _, err2 := s.Append(ctx, &o2); err2 == nil {
				_ = m.DoubleAck(ctx)
				return
			}
		}
		_ = m.NakWithDelay(cfg.backoff(delivered))
		return
	}
	s.cfg.Metrics.countOutcome(rec.Operation, out.Result.Class)
	if cfg.AfterOutcome != nil {
		cfg.AfterOutcome(rec)
	}
	_ = m.DoubleAck(ctx)
}

// poison records a Failed outcome for an undecodable intent, keyed by the
// UID in its subject, then acks it. A message without a usable subject is
// terminated (it can not be attributed to any object).
func (s *Store) poison(ctx context.Context, m jetstream.Msg, seq uint64) {
	parts := strings.Split(strings.TrimPrefix(m.Subject(), s.cfg.SubjectPrefix+"."), ".")
	if len(parts) != 3 {
		_ = m.Term()
		return
	}
	causation := m.Headers().Get(jetstream.MsgIDHeader)
	if causation == "" {
		causation = fmt.Sprintf("%s/seq%d", parts[1], seq)
	}
	intent := Record{ID: causation, Operation: "Unknown", Attempt: 1,
		Object: ObjectRef{Group: parts[0], Kind: "Unknown", Name: "unknown", UID: parts[1]}}
	o, _ := NewOutcome(intent, Result{Class: Failed, Reason: ReasonUndecodableIntent,
		Message: fmt.Sprintf("intent at stream sequence %d could not be decoded", seq)}, nil)
	if _, err := s.Append(ctx, &o); err != nil {
		if errors.Is(err, ErrInvalidRecord) {
			_ = m.Term()
			return
		}
		_ = m.Nak()
		return
	}
	_ = m.DoubleAck(ctx)
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
