package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// consumeWatched runs Consume until the test ends and returns a channel
// that receives its result if it returns earlier: the executor loop must
// outlive every NATS fault while its context is alive, because the
// manager treats its return as fatal.
func consumeWatched(t *testing.T, s *journal.Store, cc journal.ConsumerConfig, h map[string]journal.Handler) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	d := dispatcher(t, h)
	go func() { done <- s.Consume(ctx, cc, d) }()
	early := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		select {
		case err := <-done:
			early <- err
			close(stopped)
		case <-ctx.Done():
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case err := <-done:
			if err != nil {
				t.Errorf("consume: %v", err)
			}
		}
	})
	return early
}

func succeed(context.Context, journal.Record) (journal.Outcome, error) {
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
}

// expectRunning fails the test when Consume returned.
func expectRunning(t *testing.T, early <-chan error, when string) {
	t.Helper()
	select {
	case err := <-early:
		t.Fatalf("%s: Consume returned (%v); the executor loop must outlive NATS faults", when, err)
	default:
	}
}

// A durable consumer deleted under a running Consume (an operator's
// `nats consumer rm`, a stream restored from backup) is recreated: the
// executor loop goes on instead of returning and taking the manager down.
func TestConsumeSurvivesConsumerDeleted(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	s := open(t, n, journal.Config{})
	cc := journal.ConsumerConfig{Durable: "exec-deleted", AckWait: 2 * time.Second}
	early := consumeWatched(t, s, cc, map[string]journal.Handler{"CreateRole": succeed})

	o := obj()
	first := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitOutcome(t, s, o.UID, first.ID, journal.Succeeded)

	js, err := jetstream.New(connect(t, n))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, journal.DefaultStreamName, cc.Durable); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	expectRunning(t, early, "after the consumer was deleted")

	second := intent(t, o, "CreateRole", 2)
	if _, err := s.Append(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitOutcome(t, s, o.UID, second.ID, journal.Succeeded)
	expectRunning(t, early, "after the next intent")
}

// The node leading the durable consumer stops answering (partition,
// SIGSTOP) while the executor's connection stays on a healthy node: the
// pull request parked on the old leader sends no more heartbeats. Consume
// issues a new pull request and goes on once a leader answers again,
// rather than returning "no heartbeat received" (which took the manager
// down in TestTenantsOnR3Cluster).
func TestConsumeSurvivesConsumerLeaderPartition(t *testing.T) {
	c := integration.StartNATSCluster(t, integration.NATSClusterOptions{})
	ctx := context.Background()
	cfg := journal.Config{Replicas: 3, Actor: "consume-partition", Signer: testKey(t)}
	cc := journal.ConsumerConfig{Durable: "exec-partition", AckWait: 3 * time.Second, PullExpiry: 2 * time.Second}

	setup, err := journal.Open(ctx, connectFirst(t, c, 0, "setup"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.DurableConsumer(ctx, testDomain, cc); err != nil {
		t.Fatal(err)
	}
	leader, err := c.ConsumerLeader(ctx, journal.DefaultStreamName, cc.Durable)
	if err != nil {
		t.Fatal(err)
	}
	// The executor connects to a node that does not lead the consumer, so
	// freezing the leader only silences the pull request.
	s, on := openAvoiding(t, c, leader, "executor", cfg)
	early := consumeWatched(t, s, cc, map[string]journal.Handler{"CreateRole": succeed})

	o := obj()
	in1 := intent(t, o, "CreateRole", 1)
	if _, err := s.Append(ctx, in1); err != nil {
		t.Fatal(err)
	}
	waitOutcome(t, s, o.UID, in1.ID, journal.Succeeded)

	t.Logf("freezing consumer leader %s for 8s (executor on %s)", leader.Name, on.Name)
	if err := leader.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := leader.Thaw(); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	time.Sleep(8 * time.Second)
	expectRunning(t, early, "while the consumer leader was frozen")
	// Thawed, the old leader rejoins in its own time (up to minutes on a
	// loaded machine); the other two nodes hold quorum, so nothing here
	// waits for it.
	thaw()

	in2 := intent(t, o, "CreateRole", 2)
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := s.Append(ctx, in2)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("append after thaw: %v", err)
		}
		time.Sleep(time.Second)
	}
	// A Read may stall while the cluster settles: give the outcome time.
	waitOutcomeWithin(t, s, o.UID, in2.ID, journal.Succeeded, 90*time.Second)
	expectRunning(t, early, "after the next intent")
}
