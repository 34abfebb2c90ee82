package journal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// A manager's connection (journal.ClientOptions) leaves a server that
// stops answering without closing the connection (a partition, a frozen
// host) within three ping intervals, and its appends go on through another
// server. Two forwarders stand for two servers of one cluster; the first
// is frozen. The bound is 9 s (with the 5 s interval before, 10-15 s): an
// append in flight on a frozen server only ends at its timeout, and an
// election (when the frozen server led the stream) takes 4-9 s, so
// leaving later than that is what keeps appends stopped (docs/journal.md
// "What losing a server costs").
func TestClientLeavesASilentServer(t *testing.T) {
	n := integration.StartNATS(t)
	fwd := forwarders(t, n, 2)
	nc, s := storeVia(t, n, fwd, append(journal.ClientOptions("manager"), nats.DontRandomize())...)
	if !strings.Contains(nc.ConnectedUrl(), fwd[0].Addr) {
		t.Fatalf("connected to %s, want the first server %s", nc.ConnectedUrl(), fwd[0].Addr)
	}
	o := obj()
	if _, err := s.Append(context.Background(), intent(t, o, "Step", 1)); err != nil {
		t.Fatal(err)
	}

	const bound = 9 * time.Second
	fwd[0].Freeze()
	frozen := time.Now()
	for !strings.Contains(nc.ConnectedUrl(), fwd[1].Addr) || !nc.IsConnected() {
		if time.Since(frozen) > 30*time.Second {
			t.Fatalf("still on the frozen server after 30 s (%s)", nc.ConnectedUrl())
		}
		time.Sleep(20 * time.Millisecond)
	}
	left := time.Since(frozen)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Append(ctx, intent(t, o, "Step", 2)); err != nil {
		t.Fatalf("append through the other server: %v", err)
	}
	if left > bound {
		t.Errorf("the client left the frozen server after %s, want within %s (3 ping intervals of %s)", left.Round(time.Millisecond), bound, journal.ClientPingInterval)
	}
	t.Logf("left the frozen server after %s; appended through the other", left.Round(time.Millisecond))
	fwd[0].Thaw()
}

// forwarders starts k forwarders to n: k servers of one cluster, as its
// clients see them.
func forwarders(t *testing.T, n *integration.NATS, k int) []*integration.Forwarder {
	t.Helper()
	fwd := make([]*integration.Forwarder, k)
	for i := range fwd {
		f, err := integration.NewForwarder(strings.TrimPrefix(n.URL, "nats://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fwd[i] = f
	}
	return fwd
}

// storeVia opens a store as the manager on a connection to n through fwd
// (in this order), with opts.
func storeVia(t *testing.T, n *integration.NATS, fwd []*integration.Forwarder, opts ...nats.Option) (*nats.Conn, *journal.Store) {
	t.Helper()
	urls := make([]string, len(fwd))
	for i, f := range fwd {
		urls[i] = "nats://" + f.Addr
	}
	nc, err := nats.Connect(strings.Join(urls, ","), n.ClientOptions(journal.IdentityManager, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := journal.Open(context.Background(), nc, journal.Config{Signer: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	return nc, s
}
