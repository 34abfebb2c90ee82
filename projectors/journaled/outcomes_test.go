package journaled_test

import (
	"context"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// TestOutcomeRouterSurvivesJournalOutage: a router that starts while NATS is
// down (a replica that wins the lease during a journal outage) does not
// return an error (which would stop the manager); it keeps trying and routes
// outcomes once the journal is back.
func TestOutcomeRouterSurvivesJournalOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a real NATS server stopped for 8 s")
	}
	n, err := integration.NewNATS(integration.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	st := openJournalOn(t, n)
	n.Stop()
	r := journaled.NewOutcomeRouter(st, "example", "Pod")
	r.RetryInterval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("the router returned while the journal was down: %v", err)
	case <-time.After(8 * time.Second): // beyond the JetStream API timeout (5 s)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	o := journal.ObjectRef{Group: "example.ayatori.ddupan.top", Kind: "Pod", Namespace: "ns", Name: "p", UID: "5d8a8c1e-8f0e-4a53-9a3c-0b7c0f6f2a11", Generation: 1}
	deadline := time.Now().Add(20 * time.Second)
	attempt := 0
	for {
		attempt++
		in, err := journal.NewIntent(o, "Observe", "observe", attempt, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, &in); err == nil {
			out, _ := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, nil)
			if _, err := st.Append(ctx, &out); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case req := <-r.For("Pod"):
			if req.Namespace != "ns" || req.Name != "p" {
				t.Fatalf("routed %v", req)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Start after ctx done: %v", err)
			}
			return
		case err := <-done:
			t.Fatalf("the router returned: %v", err)
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatal("no outcome routed after the journal came back")
		}
	}
}
