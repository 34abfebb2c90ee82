package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func connect(t *testing.T, n *integration.NATS) *nats.Conn {
	t.Helper()
	nc, err := n.Connect(journal.IdentityManager, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// open opens a store as the manager, signing with the test process's
// journal key unless cfg names a signer.
func open(t *testing.T, n *integration.NATS, cfg journal.Config) *journal.Store {
	t.Helper()
	if cfg.Signer == nil {
		cfg.Signer = testKey(t)
	}
	s, err := journal.Open(context.Background(), connect(t, n), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testKey(t testing.TB) *journal.SigningKey {
	t.Helper()
	k, err := integration.JournalSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var uidCounter atomic.Int64

func obj() journal.ObjectRef {
	return journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: "app",
		UID: fmt.Sprintf("00000000-0000-0000-0000-%012d", uidCounter.Add(1)), Generation: 1}
}

func intent(t *testing.T, o journal.ObjectRef, op string, attempt int) *journal.Record {
	t.Helper()
	r, err := journal.NewIntent(o, op, "", attempt, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &r
}

func streamMsgs(t *testing.T, s *journal.Store) uint64 {
	t.Helper()
	st, err := s.JetStream().Stream(context.Background(), s.Config().StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestAppendAckedBeforeReturn(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Actor: "test"})
	ctx := context.Background()
	o := obj()
	res, err := s.Append(ctx, intent(t, o, "ObserveInstance", 1))
	if err != nil {
		t.Fatal(err)
	}
	// A different connection sees the record at the acked sequence at once.
	other := open(t, n, journal.Config{})
	st, _ := other.JetStream().Stream(ctx, journal.DefaultStreamName)
	m, err := st.GetMsg(ctx, res.Sequence)
	if err != nil {
		t.Fatalf("acked record not stored: %v", err)
	}
	r, err := journal.DecodeRecord(m.Data, m.Sequence)
	if err != nil || r.Object.UID != o.UID || r.Actor != "test" || r.Time.IsZero() {
		t.Fatalf("stored record %+v, err %v", r, err)
	}
	latest, err := other.Latest(ctx, o.UID)
	if err != nil || latest == nil || latest.Sequence != res.Sequence {
		t.Fatalf("Latest = %+v, %v", latest, err)
	}
}

func TestAppendRejectsInvalidRecordBeforeWriting(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	bad := intent(t, obj(), "ObserveInstance", 1)
	bad.Object.UID = "not a uid!"
	if _, err := s.Append(context.Background(), bad); !errors.Is(err, journal.ErrInvalidRecord) {
		t.Fatalf("want ErrInvalidRecord, got %v", err)
	}
	if got := streamMsgs(t, s); got != 0 {
		t.Fatalf("stream has %d messages after a rejected append", got)
	}
}

func TestDedupeInsideWindow(t *testing.T) {
	n := integration.StartNATS(t)
	a := open(t, n, journal.Config{})
	b := open(t, n, journal.Config{})
	ctx := context.Background()
	o := obj()
	r1, err := a.Append(ctx, intent(t, o, "ClaimOwnership", 1))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Append(ctx, intent(t, o, "ClaimOwnership", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Duplicate || r2.Sequence != r1.Sequence || streamMsgs(t, a) != 1 {
		t.Fatalf("second append %+v, stream holds %d", r2, streamMsgs(t, a))
	}
	// The server's own de-duplication also holds for a raw re-publish of
	// the stored message (its Nats-Msg-Id: the ID and the start of the
	// signature).
	st, _ := a.JetStream().Stream(ctx, journal.DefaultStreamName)
	stored, err := st.GetMsg(ctx, r1.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	pub := nats.NewMsg("ayatori.journal.database." + o.UID + ".intent")
	pub.Data = stored.Data
	pub.Header.Set(jetstream.MsgIDHeader, stored.Header.Get(jetstream.MsgIDHeader))
	ack, err := a.JetStream().PublishMsg(ctx, pub)
	if err != nil || !ack.Duplicate {
		t.Fatalf("raw re-publish: ack %+v err %v", ack, err)
	}
}

func TestNoDuplicateAfterWindowExpires(t *testing.T) {
	n := integration.StartNATS(t)
	cfg := journal.Config{DuplicateWindow: 200 * time.Millisecond}
	a := open(t, n, cfg)
	ctx := context.Background()
	o := obj()
	if _, err := a.Append(ctx, intent(t, o, "WriteCredential", 1)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // well past the server's window
	// A fresh store (no cache), as after a manager restart an hour later.
	b := open(t, n, cfg)
	res, err := b.Append(ctx, intent(t, o, "WriteCredential", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || streamMsgs(t, b) != 1 {
		t.Fatalf("re-decided intent after the window: %+v, stream holds %d", res, streamMsgs(t, b))
	}
}

func TestStaleWriterGetsConflict(t *testing.T) {
	n := integration.StartNATS(t)
	a := open(t, n, journal.Config{Actor: "replica-a"})
	b := open(t, n, journal.Config{Actor: "replica-b"})
	ctx := context.Background()
	o := obj()
	first, err := a.Append(ctx, intent(t, o, "ObserveInstance", 1))
	if err != nil {
		t.Fatal(err)
	}
	// Both replicas read up to `first` and decide; b wins, a is stale.
	if _, err := b.Append(ctx, intent(t, o, "BootstrapRegistry", 1), journal.ExpectLastSequence(first.Sequence)); err != nil {
		t.Fatal(err)
	}
	_, err = a.Append(ctx, intent(t, o, "ClaimOwnership", 1), journal.ExpectLastSequence(first.Sequence))
	if !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale writer: want ErrConflict, got %v", err)
	}
	// After re-reading, a can append on top.
	recs, err := a.Read(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	st := journal.Fold(recs)
	if _, err := a.Append(ctx, intent(t, o, "ClaimOwnership", 1), journal.ExpectLastSequence(st.LastSequence)); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentDecisionsNeverInterleave(t *testing.T) {
	n := integration.StartNATS(t)
	stores := []*journal.Store{open(t, n, journal.Config{Actor: "a"}), open(t, n, journal.Config{Actor: "b"})}
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		o := obj()
		base, err := stores[0].Append(ctx, intent(t, o, "ObserveInstance", 1))
		if err != nil {
			t.Fatal(err)
		}
		var wins, conflicts atomic.Int32
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Append(ctx, intent(t, o, fmt.Sprintf("Decision%d", i), 1), journal.ExpectLastSequence(base.Sequence))
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, journal.ErrConflict):
					conflicts.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || conflicts.Load() != 1 {
			t.Fatalf("round %d: %d wins, %d conflicts; want exactly one of each", round, wins.Load(), conflicts.Load())
		}
	}
}

func TestReadAndFold(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx := context.Background()
	o, other := obj(), obj()
	i1 := intent(t, o, "ObserveInstance", 1)
	i2 := intent(t, o, "BootstrapRegistry", 1)
	for _, r := range []*journal.Record{i1, intent(t, other, "ObserveInstance", 1), i2} {
		if _, err := s.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := journal.NewOutcome(*i1, journal.Result{Class: journal.Succeeded}, nil)
	if _, err := s.Append(ctx, &out); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Read(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("read %d records of the UID, want 3", len(recs))
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Sequence <= recs[i-1].Sequence {
			t.Fatal("records out of order")
		}
	}
	st := journal.Fold(recs)
	if p := st.Pending(); len(p) != 1 || p[0].ID != i2.ID {
		t.Fatalf("pending = %v", p)
	}
	if lo := st.LastOutcome["ObserveInstance"]; lo.Result.Class != journal.Succeeded {
		t.Fatalf("last outcome = %+v", lo)
	}
}

func TestConsumeRedeliversAfterWorkerDies(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	cc := journal.ConsumerConfig{Durable: "exec-die", AckWait: time.Second, MaxDeliver: 5}
	cons, err := s.DurableConsumer(ctx, testDomain, cc)
	if err != nil {
		t.Fatal(err)
	}
	o := obj()
	in := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	// A worker takes the intent and dies without acking.
	dying := connect(t, n)
	djs, _ := jetstream.New(dying)
	dcons, _ := djs.Consumer(ctx, journal.DefaultStreamName, cons.CachedInfo().Name)
	batch, err := dcons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++
	}
	if got != 1 {
		t.Fatalf("dying worker fetched %d intents", got)
	}
	dying.Close()

	var calls atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateRole": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
}

// A replica shutting down (rolling update, leader hand-over) hands back
// the intent it is executing and the ones it has buffered: another
// consumer gets them at once, not after AckWait.
func TestShutdownHandsBackIntents(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	var ins []*journal.Record
	var objs []journal.ObjectRef
	for i := 0; i < 3; i++ {
		o := obj()
		in := intent(t, o, "CreateDatabase", 1)
		if _, err := s.Append(ctx, in); err != nil {
			t.Fatal(err)
		}
		ins, objs = append(ins, in), append(objs, o)
	}
	cc := journal.ConsumerConfig{Durable: "exec-handback", AckWait: 5 * time.Minute, MaxDeliver: 5, Concurrency: 1}
	started := make(chan struct{}, 3)
	actx, stopA := context.WithCancel(ctx)
	done := make(chan error, 1)
	dA := dispatcher(t, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		started <- struct{}{}
		<-ctx.Done()
		// As an executor that maps its cancelled backend call to a
		// failure: not the backend's answer, so not recorded.
		return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: "DependencyUnavailable"}}, nil
	}})
	go func() { done <- s.Consume(actx, cc, dA) }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("replica A never started an intent")
	}
	stopA()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	for i, in := range ins {
		waitOutcome(t, s, objs[i].UID, in.ID, journal.Succeeded) // 20 s, far below AckWait
	}
	if calls.Load() != 3 {
		t.Fatalf("replica B executed %d intents, want 3", calls.Load())
	}
}

func TestHeartbeatPreventsRedelivery(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "VerifyLogin", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	cc := journal.ConsumerConfig{Durable: "exec-hb", AckWait: time.Second, MaxDeliver: 5, Concurrency: 2}
	runConsumer(t, s, cc, map[string]journal.Handler{"VerifyLogin": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		time.Sleep(3500 * time.Millisecond) // 3.5 x AckWait
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	waitOutcome(t, s, o.UID, in.ID, journal.Succeeded)
	time.Sleep(1500 * time.Millisecond)
	if calls.Load() != 1 {
		t.Fatalf("long operation ran %d times; heartbeats did not prevent redelivery", calls.Load())
	}
}

func TestPoisonIntentBecomesFailedOutcome(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	msg := nats.NewMsg("ayatori.journal.database." + o.UID + ".intent")
	msg.Data = []byte("{not json")
	msg.Header.Set(jetstream.MsgIDHeader, o.UID+"/garbage")
	garbage, err := s.JetStream().PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	exhaust := obj()
	in := intent(t, exhaust, "CreateDatabase", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	unknown := obj()
	inUnknown := intent(t, unknown, "NoSuchOperation", 1)
	if _, err := s.Append(ctx, inUnknown); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	cc := journal.ConsumerConfig{Durable: "exec-poison", AckWait: 2 * time.Second, MaxDeliver: 3, BackOff: []time.Duration{50 * time.Millisecond}}
	runConsumer(t, s, cc, map[string]journal.Handler{"CreateDatabase": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{}, errors.New("connection refused (raw driver text must not reach the journal)")
	}})
	// Keyed by its stream sequence, not by the ID in its header.
	waitOutcome(t, s, o.UID, journal.UndecodableIntentID(o.UID, garbage.Sequence), journal.Failed)
	out := waitOutcome(t, s, exhaust.UID, in.ID, journal.Failed)
	if out.Result.Reason != journal.ReasonRetriesExhausted || calls.Load() != 3 {
		t.Fatalf("exhausted: reason %s after %d calls", out.Result.Reason, calls.Load())
	}
	if hits, _ := s.ScanForSecret(ctx, "raw driver text"); len(hits) != 0 {
		t.Fatalf("handler error text reached the journal at %v", hits)
	}
	if u := waitOutcome(t, s, unknown.UID, inUnknown.ID, journal.Failed); u.Result.Reason != journal.ReasonUnknownOperation {
		t.Fatalf("unknown op reason %s", u.Result.Reason)
	}
}

func TestOutcomeExistsAcksWithoutReexecution(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	o := obj()
	in := intent(t, o, "WriteCredential", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	out, _ := journal.NewOutcome(*in, journal.Result{Class: journal.Succeeded}, nil)
	if _, err := s.Append(ctx, &out); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	cc := journal.ConsumerConfig{Durable: "exec-done", AckWait: time.Second}
	if _, err := s.DurableConsumer(ctx, testDomain, cc); err != nil {
		t.Fatal(err)
	}
	runConsumer(t, s, cc, map[string]journal.Handler{"WriteCredential": func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		calls.Add(1)
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		cons, err := s.JetStream().Consumer(ctx, journal.DefaultStreamName, "exec-done")
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err == nil && info.AckFloor.Stream >= 1 && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("intent not acked: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if calls.Load() != 0 {
		t.Fatalf("handler re-executed an intent whose outcome exists (%d calls)", calls.Load())
	}
}

func TestWatchOutcomes(t *testing.T) {
	n := integration.StartNATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := open(t, n, journal.Config{})
	ch, err := s.WatchOutcomes(ctx, "database")
	if err != nil {
		t.Fatal(err)
	}
	o := obj()
	in := intent(t, o, "ObserveInstance", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	out, _ := journal.NewOutcome(*in, journal.Result{Class: journal.Succeeded}, nil)
	if _, err := s.Append(ctx, &out); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if r.Object.UID != o.UID || r.Object.Name != "app" || r.Object.Namespace != "ns" || r.Type != journal.TypeOutcome {
			t.Fatalf("watched %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome watched")
	}
}

func TestCanaryScan(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx := context.Background()
	o := obj()
	if _, err := s.Append(ctx, intent(t, o, "ObserveInstance", 1)); err != nil {
		t.Fatal(err)
	}
	const canary = "CANARY-7f3a9c-never-store-me"
	if hits, err := s.ScanForSecret(ctx, canary); err != nil || len(hits) != 0 {
		t.Fatalf("clean stream: hits %v err %v", hits, err)
	}
	note := journal.Record{ID: o.UID + "/note/1", Type: journal.TypeNote, Operation: "Note", Object: o, Attempt: 1,
		Result: nil, Payload: []byte(`{"text":"` + canary + `"}`)}
	res, err := s.Append(ctx, &note)
	if err != nil {
		t.Fatal(err)
	}
	hits, err := s.ScanForSecret(ctx, canary)
	if err != nil || len(hits) != 1 || hits[0] != res.Sequence {
		t.Fatalf("planted canary: hits %v err %v, want [%d]", hits, err, res.Sequence)
	}
}

func TestServerRestartLosesNoAckedRecord(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx := context.Background()
	o := obj()
	const total = 200
	for i := 1; i <= total; i++ {
		if _, err := s.Append(ctx, intent(t, o, "ObserveInstance", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	fresh := open(t, n, journal.Config{})
	recs, err := fresh.Read(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != total {
		t.Fatalf("after restart %d of %d acked records remain", len(recs), total)
	}
}

// testDomain is the domain of obj().
const testDomain = "database"

// dispatcher routes the test domain's operations to h (one backend).
func dispatcher(t *testing.T, h map[string]journal.Handler) *journal.Dispatcher {
	t.Helper()
	d, err := journal.NewDispatcher(testDomain)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.HandleAll("test", h); err != nil {
		t.Fatal(err)
	}
	return d
}

func runConsumer(t *testing.T, s *journal.Store, cc journal.ConsumerConfig, h map[string]journal.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	d := dispatcher(t, h)
	go func() { done <- s.Consume(ctx, cc, d) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
}

func waitOutcome(t *testing.T, s *journal.Store, uid, intentID string, class journal.ResultClass) journal.Record {
	t.Helper()
	return waitOutcomeWithin(t, s, uid, intentID, class, 20*time.Second)
}

func waitOutcomeWithin(t *testing.T, s *journal.Store, uid, intentID string, class journal.ResultClass, d time.Duration) journal.Record {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		recs, err := s.Read(context.Background(), uid)
		if err != nil {
			// A read may fail while a cluster settles; the deadline bounds it.
			t.Logf("read %s: %v", uid, err)
			time.Sleep(time.Second)
			continue
		}
		if o, ok := journal.Fold(recs).OutcomeOf(intentID); ok {
			if o.Result.Class != class {
				t.Fatalf("outcome of %s is %s/%s (%q), want %s", intentID, o.Result.Class, o.Result.Reason, o.Result.Message, class)
			}
			return o
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no outcome for %s", intentID)
	return journal.Record{}
}

// A saturated backend does not hold the consumer's slots: with
// Concurrency 2 and three intents of a backend limited to one at once
// (its handler blocked), an intent of another backend still runs; the
// blocked backend's intents all run once it is released, each once.
func TestBackendLimitNoHeadOfLineBlocking(t *testing.T) {
	ctx := context.Background()
	s, d := storeAndDispatcher(t)
	release := make(chan struct{})
	var slowCalls atomic.Int32
	if err := d.Handle("slow", "CreateDatabase", func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		slowCalls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return journal.Outcome{}, ctx.Err()
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.Handle("fast", "VerifyLogin", func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	d.Limit("slow", 1)
	d.Limit("fast", 1)
	var slow []*journal.Record
	for range 3 {
		o := obj()
		in := intent(t, o, "CreateDatabase", 1)
		if _, err := s.Append(ctx, in); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, in)
	}
	o := obj()
	fast := intent(t, o, "VerifyLogin", 1)
	if _, err := s.Append(ctx, fast); err != nil {
		t.Fatal(err)
	}
	consumeUntilCleanup(t, s, journal.ConsumerConfig{Durable: "exec-hol", AckWait: 30 * time.Second, MaxDeliver: 5, Concurrency: 2}, d)
	waitOutcomeWithin(t, s, o.UID, fast.ID, journal.Succeeded, 15*time.Second)
	if c := slowCalls.Load(); c != 1 {
		t.Fatalf("the limited backend ran %d intents at once, want 1", c)
	}
	close(release)
	for _, in := range slow {
		waitOutcome(t, s, in.Object.UID, in.ID, journal.Succeeded)
	}
	if c := slowCalls.Load(); c != 3 {
		t.Fatalf("the limited backend ran %d times for 3 intents", c)
	}
}

// consumeUntilCleanup runs s.Consume with cfg and d until the test's
// cleanup, which stops it and fails the test if it returned an error.
func consumeUntilCleanup(t *testing.T, s *journal.Store, cfg journal.ConsumerConfig, d *journal.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Consume(ctx, cfg, d) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
}

// storeAndDispatcher starts a NATS server, opens a store on it as the
// manager and returns it with an empty dispatcher of testDomain.
func storeAndDispatcher(t *testing.T) (*journal.Store, *journal.Dispatcher) {
	t.Helper()
	s := open(t, integration.StartNATS(t), journal.Config{})
	d, err := journal.NewDispatcher(testDomain)
	if err != nil {
		t.Fatal(err)
	}
	return s, d
}
