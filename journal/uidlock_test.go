package journal_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// issue 12, fault 8: the per-UID lock map was reset once it held more than
// 100k UIDs, even while a goroutine held one of the dropped locks; the
// next goroutine for that UID got a fresh lock and both wrote the UID's
// cached state (concurrent map write). The lock of a UID in use must
// survive any number of other UIDs coming and going.
func TestUIDLockHeldAcrossCacheReset(t *testing.T) {
	defer journal.SetUIDCacheLimit(4)()
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})

	unlockX := s.LockUID("x")
	for i := 0; i < 50; i++ { // far past the limit
		s.LockUID(fmt.Sprintf("churn-%d", i))()
	}
	entered := make(chan struct{})
	go func() {
		unlock := s.LockUID("x")
		close(entered)
		unlock()
	}()
	select {
	case <-entered:
		t.Fatal("a second goroutine locked UID x while the first still held it")
	case <-time.After(300 * time.Millisecond):
	}
	unlockX()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never got UID x after it was unlocked")
	}
	// Locks live only while in use: nothing is left over.
	deadline := time.Now().Add(5 * time.Second)
	for s.UIDLocksInUse() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d UID locks left with no holder", s.UIDLocksInUse())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Many goroutines lock a few shared UIDs while others churn through new
// UIDs past the limit; run under -race: the per-UID counters are plain
// ints, so two holders of one UID at once are a data race, and the
// "inside" count catches it without the race detector too.
func TestUIDLockSerialisesUnderChurn(t *testing.T) {
	defer journal.SetUIDCacheLimit(8)()
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})

	shared := []string{"a", "b", "c"}
	counts := map[string]*int{}
	inside := map[string]*atomic.Int32{}
	for _, u := range shared {
		counts[u] = new(int)
		inside[u] = new(atomic.Int32)
	}
	var overlap atomic.Int32
	var churn atomic.Int64
	var wg sync.WaitGroup
	const workers, rounds = 16, 300
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				u := shared[(w+r)%len(shared)]
				unlock := s.LockUID(u)
				if inside[u].Add(1) != 1 {
					overlap.Add(1)
				}
				*counts[u]++
				for i := 0; i < 3; i++ { // other UIDs pass through meanwhile
					s.LockUID(fmt.Sprintf("churn-%d", churn.Add(1)))()
				}
				inside[u].Add(-1)
				unlock()
			}
		}(w)
	}
	wg.Wait()
	if overlap.Load() != 0 {
		t.Fatalf("%d times two goroutines held one UID's lock at once", overlap.Load())
	}
	total := 0
	for _, u := range shared {
		total += *counts[u]
	}
	if total != workers*rounds {
		t.Fatalf("counted %d, want %d", total, workers*rounds)
	}
}

// The same through Append: concurrent appends to a few shared UIDs while
// other UIDs push the cache of UID states past its (lowered) limit. Each
// shared UID's records must all be stored once, in a journal whose
// per-UID sequence checks never saw a stale cache (run under -race).
func TestAppendAcrossCacheReset(t *testing.T) {
	defer journal.SetUIDCacheLimit(2)()
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx := context.Background()
	shared := []journal.ObjectRef{obj(), obj(), obj()}
	const workers, rounds = 6, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*2)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				o := shared[(w+r)%len(shared)]
				in, _ := journal.NewIntent(o, "ObserveInstance", fmt.Sprintf("w%d", w), r+1, nil)
				if _, err := s.Append(ctx, &in); err != nil {
					errs <- err
				}
				// A fresh UID each round: the cache passes its limit.
				fresh, _ := journal.NewIntent(obj(), "ObserveInstance", "", 1, nil)
				if _, err := s.Append(ctx, &fresh); err != nil {
					errs <- err
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, o := range shared {
		recs, err := s.Read(ctx, o.UID)
		if err != nil {
			t.Fatal(err)
		}
		total += len(recs)
	}
	if total != workers*rounds {
		t.Fatalf("shared UIDs hold %d records, want %d", total, workers*rounds)
	}
	if c := s.CachedUIDs(); c > 2 {
		t.Fatalf("UID cache holds %d entries, limit 2", c)
	}
	if l := s.UIDLocksInUse(); l != 0 {
		t.Fatalf("%d UID locks left with no holder", l)
	}
}
