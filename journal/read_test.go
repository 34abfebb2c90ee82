package journal_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// apiRequests waits until no consumer is left (a Read deletes its
// consumer in the background) and returns the account's count of
// JetStream API requests then, and how many of them this call made (one
// per poll).
func apiRequests(t *testing.T, s *journal.Store) (total, own uint64) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := s.JetStream().AccountInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		own++
		if info.Consumers == 0 {
			return info.API.Total, own
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers still exist 10 s after the reads", info.Consumers)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Read costs the server one consumer: it creates one and deletes it, two
// JetStream API requests. (An ordered consumer created one, then deleted it
// and created another at its first fetch: four, and twice the consumer
// assignments through the cluster's meta leader.)
func TestReadCreatesOneConsumer(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx := context.Background()
	o := obj()
	for i := 1; i <= 3; i++ {
		if _, err := s.Append(ctx, intent(t, o, "Step", i)); err != nil {
			t.Fatal(err)
		}
	}
	const reads = 10
	before, _ := apiRequests(t, s)
	for range reads {
		recs, err := s.Read(ctx, o.UID)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 3 {
			t.Fatalf("read %d records, want 3", len(recs))
		}
	}
	after, polls := apiRequests(t, s)
	if per := float64(after-before-polls) / reads; per != 2 {
		t.Errorf("%.1f JetStream API requests per Read, want 2 (one consumer created and deleted)", per)
	}
}

// A Read ends at its context's deadline when the server stops answering
// in the middle of it (a partition, a frozen server): it never waits for
// the server to come back. Readers loop through a forwarder that is cut
// three times for 4 s; every Read, whatever step it was at when the cut
// came, must return within its 1 s deadline and a second of slack.
func TestReadEndsAtItsDeadlineWhenTheServerStopsAnswering(t *testing.T) {
	n := integration.StartNATS(t)
	fwd := forwarders(t, n, 1)
	_, s := storeVia(t, n, fwd, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	o := obj()
	if _, err := s.Append(context.Background(), intent(t, o, "Step", 1)); err != nil {
		t.Fatal(err)
	}

	const deadline, slack = time.Second, time.Second
	var (
		mu      sync.Mutex
		longest time.Duration
		late    []string
		ok      int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				_, err := s.Read(ctx, o.UID)
				took := time.Since(start)
				cancel()
				mu.Lock()
				longest = max(longest, took)
				if took > deadline+slack {
					late = append(late, took.Round(time.Millisecond).String())
				}
				if err == nil {
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	for range 3 {
		time.Sleep(500 * time.Millisecond)
		fwd[0].Cut()
		time.Sleep(4 * time.Second)
		fwd[0].Restore()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if len(late) > 0 {
		t.Errorf("%d Reads outlived their %s deadline by more than %s (longest %s): %v", len(late), deadline, slack, longest.Round(time.Millisecond), late)
	}
	if ok == 0 {
		t.Error("no Read succeeded while the forwarder forwarded")
	}
	t.Logf("%d Reads succeeded; the longest took %s", ok, longest.Round(time.Millisecond))
}
