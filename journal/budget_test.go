package journal_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Issue 12, fault 3: an intent must never end without an outcome. The
// retry budget is Ayatori's (ConsumerConfig.MaxDeliver, DeliveryLimit);
// the JetStream consumer redelivers without limit, so whatever ends the
// budgeted last delivery (a hand-back, a failed read or append, a crash,
// an AckWait expiry) another delivery follows, and every path ends with an
// outcome. At rest, `ayatori-journal list --result pending` is empty.

// nothingPending checks what `ayatori-journal list --result pending`
// shows: no object with an intent that has no outcome.
func nothingPending(t *testing.T, s *journal.Store) {
	t.Helper()
	var recs []journal.Record
	if err := s.Scan(context.Background(), journal.ScanOptions{}, func(r journal.Record, err error) error {
		if err == nil {
			recs = append(recs, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, sm := range journal.Summaries(recs) {
		if sm.Pending != 0 {
			t.Fatalf("%s has %d pending intent(s) at rest", sm.Object.UID, sm.Pending)
		}
	}
}

// settled waits until the consumer holds nothing: every intent acked.
func settled(t *testing.T, s *journal.Store, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cons, err := s.JetStream().Consumer(ctx, journal.DefaultStreamName, durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0 {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s not settled: %+v", durable, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var errTransient = errors.New("transient")

// (a) Transient errors until the budget is spent: exactly one
// Failed/RetriesExhausted outcome, after MaxDeliver handler runs, and the
// server never drops the intent on its own (its MaxDeliver is unlimited).
func TestBudgetExhaustedRecordsOneOutcome(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	cc := journal.ConsumerConfig{Durable: "exec-budget", AckWait: 2 * time.Second, MaxDeliver: 3, BackOff: []time.Duration{50 * time.Millisecond}}
	var calls atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateRole": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{}, errTransient
	}})
	out := waitOutcome(t, s, o.UID, in.ID, journal.Failed)
	if out.Result.Reason != journal.ReasonRetriesExhausted {
		t.Fatalf("reason %s", out.Result.Reason)
	}
	info := settled(t, s, "exec-budget")
	time.Sleep(300 * time.Millisecond)
	if c := calls.Load(); c != 3 {
		t.Fatalf("handler ran %d times, want MaxDeliver = 3", c)
	}
	recs, err := s.Read(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want the intent and one outcome: %+v", len(recs), recs)
	}
	if info.Config.MaxDeliver != -1 {
		t.Fatalf("JetStream consumer MaxDeliver = %d, want unlimited (-1): the budget is Ayatori's", info.Config.MaxDeliver)
	}
	nothingPending(t, s)
}

// A consumer created by an earlier version (server-side MaxDeliver 5) is
// updated in place, keeping its name and its acknowledgement state.
func TestDurableConsumerLiftsServerLimitInPlace(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	st, err := s.JetStream().Stream(ctx, journal.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	old := jetstream.ConsumerConfig{Durable: "exec-v1", Description: "Ayatori executor intents",
		FilterSubjects: []string{"ayatori.journal.database.*.intent"}, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: 5, DeliverPolicy: jetstream.DeliverAllPolicy, MaxAckPending: 1000}
	if _, err := st.CreateConsumer(ctx, old); err != nil {
		t.Fatal(err)
	}
	cons, err := s.DurableConsumer(ctx, testDomain, journal.ConsumerConfig{Durable: "exec-v1"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "exec-v1" || info.Config.MaxDeliver != -1 {
		t.Fatalf("consumer %s MaxDeliver %d, want exec-v1 with -1", info.Name, info.Config.MaxDeliver)
	}
}

// (b) A replica shuts down while running the intent's last budgeted
// delivery: the hand-back neither loses the intent nor spends the budget;
// another replica runs it.
func TestHandBackOnLastDeliveryKeepsIntent(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "CreateDatabase", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	cc := journal.ConsumerConfig{Durable: "exec-handback-last", AckWait: 5 * time.Minute, MaxDeliver: 2,
		BackOff: []time.Duration{50 * time.Millisecond}, Concurrency: 1}
	var callsA atomic.Int32
	started := make(chan struct{}, 1)
	actx, stopA := context.WithCancel(ctx)
	done := make(chan error, 1)
	dA := dispatcher(t, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		if callsA.Add(1) == 1 {
			return journal.Outcome{}, errTransient // delivery 1
		}
		started <- struct{}{} // delivery 2, the last of the budget
		<-ctx.Done()
		return journal.Outcome{}, ctx.Err()
	}})
	ccA := cc
	// The hand-back reaches the server before the pull request is
	// withdrawn (the order a loaded machine can produce).
	ccA.BeforeWithdraw = func() { time.Sleep(300 * time.Millisecond) }
	go func() { done <- s.Consume(actx, ccA, dA) }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("replica A never ran the last delivery")
	}
	stopA()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var callsB atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		callsB.Add(1)
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	settled(t, s, cc.Durable)
	if callsB.Load() != 1 {
		t.Fatalf("replica B ran the intent %d times", callsB.Load())
	}
	nothingPending(t, s)
}

// (b3) A replica that shuts down hands back what it holds, and the
// hand-back goes to another replica, never back to the stopping one: a
// nak that reaches the server before the stopping replica's pull request
// is withdrawn is redelivered to that pull request at once, naked again,
// and each round spends a delivery of the intent's DeliveryLimit. Every
// intent is delivered at most once to the stopping replica and once more
// to the next.
func TestHandBackNeverReturnsToTheStoppingReplica(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	const intents = 12
	var ids []string
	var uids []string
	for range intents {
		o := obj()
		in := intent(t, o, "CreateDatabase", 1)
		if _, err := s.Append(ctx, in); err != nil {
			t.Fatal(err)
		}
		ids, uids = append(ids, in.ID), append(uids, o.UID)
	}
	cc := journal.ConsumerConfig{Durable: "exec-handback-once", AckWait: 5 * time.Minute, MaxDeliver: 5,
		BackOff: []time.Duration{50 * time.Millisecond}, Concurrency: 4}
	var running atomic.Int32
	actx, stopA := context.WithCancel(ctx)
	done := make(chan error, 1)
	dA := dispatcher(t, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		running.Add(1)
		<-ctx.Done()
		return journal.Outcome{}, ctx.Err()
	}})
	ccA := cc
	// The hand-backs reach the server before the pull request is
	// withdrawn (what a loaded machine does at random).
	ccA.BeforeWithdraw = func() { time.Sleep(300 * time.Millisecond) }
	go func() { done <- s.Consume(actx, ccA, dA) }()
	for deadline := time.Now().Add(20 * time.Second); running.Load() < int32(cc.Concurrency); {
		if time.Now().After(deadline) {
			t.Fatalf("replica A runs %d intents, want %d", running.Load(), cc.Concurrency)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopA()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deliveries := map[string]int{}
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		mu.Lock()
		deliveries[r.ID] = journal.DeliveryOf(ctx)
		mu.Unlock()
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	for i := range ids {
		waitOutcome(t, s, uids[i], ids[i], journal.Succeeded)
	}
	settled(t, s, cc.Durable)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if deliveries[id] > 2 {
			t.Errorf("intent %s reached replica B on delivery %d, want at most 2 (one to A, one to B)", id, deliveries[id])
		}
	}
	nothingPending(t, s)
}

// updateStream applies change to the journal stream's configuration.
func updateStream(t *testing.T, s *journal.Store, change func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx := context.Background()
	st, err := s.JetStream().Stream(ctx, journal.DefaultStreamName)
	if err != nil {
		t.Error(err)
		return
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	cfg := info.Config
	change(&cfg)
	if _, err := s.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Error(err)
	}
}

// (b') The journal read that checks for an existing outcome fails on the
// last delivery: it is retried, not handed back until the budget is gone.
func TestFailedReadOnLastDeliveryKeepsIntent(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	cc := journal.ConsumerConfig{Durable: "exec-read-last", AckWait: time.Second, MaxDeliver: 2,
		BackOff: []time.Duration{50 * time.Millisecond}}
	var calls atomic.Int32
	restored := make(chan struct{})
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateRole": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		if calls.Add(1) == 1 {
			// Delivery 1 fails transiently, and the journal's reads fail
			// (no direct get) for longer than AckWait from now on.
			updateStream(t, s, func(c *jetstream.StreamConfig) { c.AllowDirect = false })
			go func() {
				time.Sleep(2500 * time.Millisecond)
				updateStream(t, s, func(c *jetstream.StreamConfig) { c.AllowDirect = true })
				close(restored)
			}()
			return journal.Outcome{}, errTransient
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	<-restored
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	settled(t, s, cc.Durable)
	if c := calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times, want 2", c)
	}
	nothingPending(t, s)
}

// (c) The outcome append fails on the last delivery (the stream takes no
// outcomes for longer than AckWait): it is retried in place, the delivery
// kept alive by heartbeats, until the outcome is stored; the handler does
// not run again.
func TestFailedOutcomeAppendOnLastDeliveryKeepsIntent(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	var broke atomic.Bool
	restored := make(chan struct{})
	cc := journal.ConsumerConfig{Durable: "exec-append-last", AckWait: time.Second, MaxDeliver: 2,
		BackOff: []time.Duration{50 * time.Millisecond},
		BeforeOutcome: func(journal.Record) {
			if broke.Swap(true) {
				return
			}
			// Only intents are stored from now on: the outcome's publish
			// finds no stream.
			updateStream(t, s, func(c *jetstream.StreamConfig) { c.Subjects = []string{"ayatori.journal.*.*.intent"} })
			go func() {
				time.Sleep(2500 * time.Millisecond)
				updateStream(t, s, func(c *jetstream.StreamConfig) { c.Subjects = []string{"ayatori.journal.>"} })
				close(restored)
			}()
		}}
	var calls atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateRole": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		if calls.Add(1) == 1 {
			return journal.Outcome{}, errTransient // delivery 1
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil // delivery 2
	}})
	<-restored
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	settled(t, s, cc.Durable)
	if c := calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times, want 2 (a failed append must not re-execute)", c)
	}
	nothingPending(t, s)
}

// crashOnce takes one delivery of the consumer's next intent on its own
// connection and dies without acking it, as a crashed executor does: the
// delivery ends by AckWait expiry.
func crashOnce(t *testing.T, n *integration.NATS, durable string) {
	t.Helper()
	ctx := context.Background()
	dying := connect(t, n)
	defer dying.Close()
	djs, err := jetstream.New(dying)
	if err != nil {
		t.Fatal(err)
	}
	dcons, err := djs.Consumer(ctx, journal.DefaultStreamName, durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := dcons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++
	}
	if got != 1 {
		t.Fatalf("crashing executor fetched %d intents", got)
	}
}

// (d) The executor crashes on the intent's last budgeted delivery (it is
// redelivered after AckWait): the next delivery still runs it.
func TestCrashOnLastDeliveryKeepsIntent(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	cc := journal.ConsumerConfig{Durable: "exec-crash-last", AckWait: time.Second, MaxDeliver: 2,
		BackOff: []time.Duration{50 * time.Millisecond}}
	if _, err := s.DurableConsumer(ctx, testDomain, cc); err != nil {
		t.Fatal(err)
	}
	o := obj()
	in := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	crashOnce(t, n, cc.Durable) // delivery 1
	crashOnce(t, n, cc.Durable) // delivery 2, the last of the budget
	var calls atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateRole": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	settled(t, s, cc.Durable)
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	nothingPending(t, s)
}

// (d') Crashes are bounded too: an intent delivered DeliveryLimit times
// without an outcome (a crash loop) records Failed/RetriesExhausted
// without running again.
func TestCrashLoopEndsWithRetriesExhausted(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	cc := journal.ConsumerConfig{Durable: "exec-crash-loop", AckWait: time.Second, MaxDeliver: 1, DeliveryLimit: 2,
		BackOff: []time.Duration{50 * time.Millisecond}}
	if _, err := s.DurableConsumer(ctx, testDomain, cc); err != nil {
		t.Fatal(err)
	}
	o := obj()
	in := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	crashOnce(t, n, cc.Durable)
	crashOnce(t, n, cc.Durable)
	var calls atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateRole": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	out := waitOutcome(t, s, o.UID, in.ID, journal.Failed)
	if out.Result.Reason != journal.ReasonRetriesExhausted {
		t.Fatalf("reason %s", out.Result.Reason)
	}
	settled(t, s, cc.Durable)
	if calls.Load() != 0 {
		t.Fatalf("handler ran %d times past the delivery limit", calls.Load())
	}
	nothingPending(t, s)
}

// Issue 12, fault 6: an operation that runs after its object is gone
// (Dispatcher.Persistent) is retried until it succeeds, past MaxDeliver
// and DeliveryLimit: no projector is left to decide a retry of a Failed
// outcome.
func TestPersistentOperationRetriedUntilItSucceeds(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "RetainOwnership", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	cc := journal.ConsumerConfig{Durable: "exec-persistent", AckWait: 2 * time.Second, MaxDeliver: 2, DeliveryLimit: 3,
		BackOff: []time.Duration{20 * time.Millisecond}}
	var calls atomic.Int32
	d := dispatcher(t, map[string]journal.Handler{"RetainOwnership": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		if calls.Add(1) < 8 {
			return journal.Outcome{}, errTransient // e.g. PostgreSQL down for a while
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	d.Persistent("RetainOwnership")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Consume(cctx, cc, d) }()
	t.Cleanup(func() { cancel(); <-done })
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	if c := calls.Load(); c != 8 {
		t.Fatalf("handler ran %d times, want 8", c)
	}
	settled(t, s, "exec-persistent")
	nothingPending(t, s)
}
