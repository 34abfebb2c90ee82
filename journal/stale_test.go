package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestReadsAreNotStaleWhenAReplicaIsBehind (docs/journal.md, known
// limitation 2): direct gets are answered by any member of the stream's
// direct-get group, and a member may be behind the stream leader (a
// replica catching up after a restart, on a cluster). Here the member
// that is behind is a real one on a single server: a mirror of the
// journal with mirror_direct, filtered so that it never holds the records
// under test, which answers about half of the direct gets. Every read
// must still see every record acknowledged before it started: Read,
// ReadView, ReadAfter, Latest, Append's read-first check, and the
// read-only tools' reads, which use direct gets only.
func TestReadsAreNotStaleWhenAReplicaIsBehind(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx := context.Background()
	s, err := journal.Open(ctx, nc, journal.Config{Signer: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The member behind: it mirrors only the records of one other UID.
	other, o := obj(), obj()
	if _, err := s.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "BEHIND", Storage: jetstream.MemoryStorage, MirrorDirect: true,
		Mirror: &jetstream.StreamSource{Name: journal.DefaultStreamName, FilterSubject: "ayatori.journal.*." + other.UID + ".*"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, intent(t, other, "Step", 1)); err != nil {
		t.Fatal(err)
	}
	// The mirror joins the direct-get group when it has received a record.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.JetStream().Stream(ctx, "BEHIND")
		if err != nil {
			t.Fatal(err)
		}
		if m.CachedInfo().State.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mirror did not receive its record")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)

	first := intent(t, o, "Step", 1)
	for _, r := range []*journal.Record{first, intent(t, o, "Step", 2), intent(t, o, "Step", 3)} {
		if _, err := s.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := journal.OpenExisting(ctx, nc, journal.Config{Trust: s.Config().Trust})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	stale := map[string]int{}
	for range rounds {
		if recs, err := s.Read(ctx, o.UID); err != nil {
			t.Fatal(err)
		} else if len(recs) != 3 {
			stale["Read"]++
		}
		if v, err := s.ReadView(ctx, o.UID); err != nil {
			t.Fatal(err)
		} else if len(v.Records) != 3 {
			stale["ReadView"]++
		}
		if recs, err := s.ReadAfter(ctx, o.UID, 0); err != nil {
			t.Fatal(err)
		} else if len(recs) != 3 {
			stale["ReadAfter"]++
		}
		if r, err := s.Latest(ctx, o.UID); err != nil {
			t.Fatal(err)
		} else if r == nil {
			stale["Latest"]++
		}
		if recs, err := ro.Read(ctx, o.UID); err != nil {
			t.Fatal(err)
		} else if len(recs) != 3 {
			stale["Read (read-only store)"]++
		}
		// A fresh store has no cache: its read-first check reads.
		fresh, err := journal.Open(ctx, nc, journal.Config{Signer: testKey(t)})
		if err != nil {
			t.Fatal(err)
		}
		again := *first
		if res, err := fresh.Append(ctx, &again); err != nil {
			t.Fatal(err)
		} else if !res.Duplicate || res.Sequence == 0 {
			stale["Append read-first check"]++
		}
	}
	for what, n := range stale {
		t.Errorf("%s missed acknowledged records in %d of %d rounds", what, n, rounds)
	}
	if n := streamMsgs(t, s); n != 4 {
		t.Errorf("the journal holds %d records, want 4", n)
	}
}
