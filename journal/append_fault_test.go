package journal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// writerBesideTheLeader starts a three-node cluster with the journal at
// replicas 3 and opens a writer (actor) connected to a node that does not
// lead the stream, so freezing the leader leaves the writer's connection
// up and only silences what the leader answers.
func writerBesideTheLeader(t *testing.T, actor string) (c *integration.NATSCluster, cfg journal.Config, leader *integration.NATSNode, s *journal.Store, on *integration.NATSNode) {
	t.Helper()
	c = integration.StartNATSCluster(t, integration.NATSClusterOptions{})
	ctx := context.Background()
	cfg = journal.Config{Replicas: 3, Actor: actor, Signer: testKey(t)}
	// The first store creates the stream, so it has a leader to find.
	if _, err := journal.Open(ctx, connectFirst(t, c, 0, "setup"), cfg); err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitStreamLeader(ctx, journal.DefaultStreamName, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, on = openAvoiding(t, c, leader, "writer", cfg)
	return c, cfg, leader, s, on
}

// TestAppendInFlightOutlivesItsStreamLeader: an Append whose publish is in
// flight to the stream leader when that leader stops answering (frozen,
// then SIGKILLed) is retried with the same record ID once the remaining
// two nodes elect a new leader, and succeeds; the record is stored once.
// Likewise a Read in flight when the meta leader dies.
// Before the fix the publish waited for an answer the dead leader would
// never send, up to the caller's deadline (5 s without one), and Append
// failed: docs/journal.md, known limitation 3.
func TestAppendInFlightOutlivesItsStreamLeader(t *testing.T) {
	ctx := context.Background()
	c, cfg, leader, s, on := writerBesideTheLeader(t, "append-fault")
	o := obj()
	if _, err := s.Append(ctx, intent(t, o, "CreateRole", 1)); err != nil {
		t.Fatal(err)
	}

	if err := leader.Freeze(); err != nil {
		t.Fatal(err)
	}
	rec := intent(t, o, "CreateDatabase", 1)
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := s.Append(actx, rec); done <- err }()
	time.Sleep(time.Second) // the publish is out, to the frozen leader
	leader.Kill()
	t.Logf("stream leader %s frozen, then killed 1 s into the append (writer on %s)", leader.Name, on.Name)
	if err := <-done; err != nil {
		t.Fatalf("Append in flight when its stream leader died: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("Append returned after %s", time.Since(start).Round(time.Millisecond))

	// A read in flight when the meta leader (which answers the read's
	// consumer create) dies is sent again too: the old leader comes back
	// first so the cluster keeps its quorum, then the meta leader is
	// frozen and killed 1 s into a Read. (In the first run of this test
	// the read after the append ended at its 54 s deadline: its consumer
	// create had gone to a meta leader that had just died.)
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	if err := leader.WaitHealthy(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreamCurrent(ctx, journal.DefaultStreamName, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	meta, err := c.MetaLeader()
	if err != nil {
		t.Fatal(err)
	}
	rd, ron := openAvoiding(t, c, meta, "reader", cfg)
	if err := meta.Freeze(); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	type readResult struct {
		recs []journal.Record
		err  error
	}
	read := make(chan readResult, 1)
	start = time.Now()
	go func() { recs, err := rd.Read(rctx, o.UID); read <- readResult{recs, err} }()
	time.Sleep(time.Second)
	meta.Kill()
	t.Logf("meta leader %s frozen, then killed 1 s into a Read (reader on %s)", meta.Name, ron.Name)
	res := <-read
	if res.err != nil {
		t.Fatalf("Read in flight when the meta leader died: %v (after %s)", res.err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("Read returned after %s", time.Since(start).Round(time.Millisecond))
	recs := res.recs
	n := 0
	for _, r := range recs {
		if r.ID == rec.ID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("record %s stored %d times, want once", rec.ID, n)
	}
}

// TestAppendOutlivesASlowLeader: the stream leader stops answering for
// 2.5 s (frozen, then thawed, too short for an election), so an Append's
// first attempt ends at its 2 s timeout while the publish waits on the
// leader. The retry meets the first attempt still in process there
// (10158 duplicate message id in process, or 10164 on the UID's expected
// sequence) or already stored (Duplicate), and Append succeeds with the
// record stored once, every round.
func TestAppendOutlivesASlowLeader(t *testing.T) {
	ctx := context.Background()
	c, _, leader, s, _ := writerBesideTheLeader(t, "append-slow")
	var err error
	o := obj()
	for round := 1; round <= 4; round++ {
		if _, err := s.Append(ctx, intent(t, o, "Warm", round)); err != nil {
			t.Fatal(err)
		}
		if err := leader.Freeze(); err != nil {
			t.Fatal(err)
		}
		rec := intent(t, o, "CreateDatabase", round)
		actx, cancel := context.WithTimeout(ctx, 60*time.Second)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			res, err := s.Append(actx, rec)
			if err == nil && res.Duplicate {
				// Stored by this call's own first attempt: written, not a
				// record that existed before the call (callers skip the
				// Event and their bookkeeping on Duplicate).
				err = fmt.Errorf("answered Duplicate for a record this call wrote (sequence %d)", res.Sequence)
			}
			done <- err
		}()
		time.Sleep(2500 * time.Millisecond)
		if err := leader.Thaw(); err != nil {
			t.Fatal(err)
		}
		err := <-done
		cancel()
		if err != nil {
			t.Fatalf("round %d: Append through a leader silent for 2.5 s: %v (after %s)", round, err, time.Since(start).Round(time.Millisecond))
		}
		t.Logf("round %d: Append returned after %s", round, time.Since(start).Round(time.Millisecond))
		if leader, err = c.WaitStreamLeader(ctx, journal.DefaultStreamName, nil, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.Read(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.ID]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("record %s stored %d times", id, n)
		}
	}
	if len(seen) != 8 {
		t.Errorf("%d records, want 8", len(seen))
	}
}
