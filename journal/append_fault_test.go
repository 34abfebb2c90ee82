package journal_test

import (
	"context"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestAppendInFlightOutlivesItsStreamLeader: an Append whose publish is in
// flight to the stream leader when that leader stops answering (frozen,
// then SIGKILLed) is retried with the same record ID once the remaining
// two nodes elect a new leader, and succeeds; the record is stored once.
// Before the fix the publish waited for an answer the dead leader would
// never send, up to the caller's deadline (5 s without one), and Append
// failed: docs/journal.md, known limitation 3.
func TestAppendInFlightOutlivesItsStreamLeader(t *testing.T) {
	c := integration.StartNATSCluster(t, integration.NATSClusterOptions{})
	ctx := context.Background()
	cfg := journal.Config{Replicas: 3, Actor: "append-fault", Signer: testKey(t)}
	setup, err := journal.Open(ctx, connectFirst(t, c, 0, "setup"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = setup
	leader, err := c.WaitStreamLeader(ctx, journal.DefaultStreamName, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The writer's connection is on a node that does not lead the stream,
	// so it stays up and only the publish goes unanswered.
	first := 0
	for i, n := range c.Nodes {
		if n != leader {
			first = i
			break
		}
	}
	s, err := journal.Open(ctx, connectFirst(t, c, first, "writer"), cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	t.Logf("stream leader %s frozen, then killed 1 s into the append (writer on %s)", leader.Name, c.Nodes[first].Name)
	if err := <-done; err != nil {
		t.Fatalf("Append in flight when its stream leader died: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("Append returned after %s", time.Since(start).Round(time.Millisecond))

	recs, err := s.Read(actx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
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
