package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// A projector's pass reads its object's View again after every outcome.
// The records up to the last sequence it read never change, so a read of
// a UID this process read before asks the stream leader for what is new
// only: one request when nothing is (the last sequence), two when an
// executor appended one outcome (the last sequence and the next record),
// and no consumer. (Before, every read cost the checkpoint's last message,
// the UID's last sequence, and a consumer created and deleted for the
// tail since the checkpoint.) The append that follows such a read needs
// no read of its own: the read brought the UID's state up to date.
func TestReadViewOfAKnownUIDReadsOnlyWhatIsNew(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{}) // the projector
	x := open(t, n, journal.Config{}) // an executor
	ctx := context.Background()
	o := obj()
	v, err := s.ReadView(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 10
	var afterOutcome, afterOwn, appends uint64
	for i := 1; i <= rounds; i++ {
		in := intent(t, o, "Step", i)
		before, _ := apiRequests(t, s)
		if _, err := s.Append(ctx, in, journal.ExpectLastSequence(v.Last)); err != nil {
			t.Fatal(err)
		}
		after, polls := apiRequests(t, s)
		if i > 1 {
			appends += after - before - polls
		}
		before, _ = apiRequests(t, s)
		if v, err = s.ReadView(ctx, o.UID); err != nil {
			t.Fatal(err)
		}
		after, polls = apiRequests(t, s)
		afterOwn += after - before - polls
		if len(v.Records) != 2*i-1 {
			t.Fatalf("round %d: the view after the intent holds %d records, want %d", i, len(v.Records), 2*i-1)
		}
		if _, err := x.Append(ctx, outcome(t, in, journal.Succeeded)); err != nil {
			t.Fatal(err)
		}
		before, _ = apiRequests(t, s)
		if v, err = s.ReadView(ctx, o.UID); err != nil {
			t.Fatal(err)
		}
		after, polls = apiRequests(t, s)
		afterOutcome += after - before - polls
		if len(v.Records) != 2*i || v.Records[len(v.Records)-1].CausationID != in.ID {
			t.Fatalf("round %d: the view after the outcome holds %d records (want %d), the last not the outcome", i, len(v.Records), 2*i)
		}
	}
	if per := float64(afterOwn) / rounds; per > 1 {
		t.Errorf("%.1f JetStream API requests per ReadView after the reader's own append, want 1 (the last sequence)", per)
	}
	if per := float64(afterOutcome) / rounds; per > 2 {
		t.Errorf("%.1f JetStream API requests per ReadView after another writer's outcome, want 2 (the last sequence and the next record)", per)
	}
	// The append after that read checks the journal as the read left it:
	// the publish itself, which is not an API request.
	if per := float64(appends) / (rounds - 1); per > 0 {
		t.Errorf("%.1f JetStream API requests per Append after a ReadView that saw another writer's outcome, want 0", per)
	}
}

// A View read from this process's cache decides what a fresh read decides:
// after every step of a random run of appends by the reader and by an
// executor, checkpoints (also while the reader's own process appends an
// outcome), records without a valid proof and a dropped checkpoint, the cached read (s) and a read by a store that never read the
// UID (fresh) hold the same records, last sequence and checkpoint; when
// another writer wrote the checkpoint, the same compaction and last
// sequence, and the reader's next checkpoint loses quietly.
func TestReadViewFromItsCacheEqualsAFreshRead(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	x := open(t, n, journal.Config{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(28, 2026))
	for run := range 8 {
		o := obj()
		var pending []*journal.Record
		foreignCheckpoint := false
		attempt := 0
		for step := range 60 {
			v, err := s.ReadView(ctx, o.UID)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := open(t, n, journal.Config{}).ReadView(ctx, o.UID)
			if err != nil {
				t.Fatal(err)
			}
			where := fmt.Sprintf("run %d step %d", run, step)
			compareViews(t, where, v, fresh, foreignCheckpoint)
			switch op := rng.IntN(9); op {
			case 0, 1: // the projector decides
				attempt++
				in := intent(t, o, "Step", attempt)
				if _, err := s.Append(ctx, in, journal.ExpectLastSequence(v.Last)); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				pending = append(pending, in)
			case 2, 3: // an executor reports
				if len(pending) == 0 {
					continue
				}
				in := pending[0]
				pending = pending[1:]
				if _, err := x.Append(ctx, outcome(t, in, journal.Succeeded)); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
			case 4: // the projector checkpoints what it read
				if err := s.WriteCheckpoint(ctx, v); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				foreignCheckpoint = false
			case 5: // another replica checkpoints
				if rng.IntN(3) != 0 {
					continue
				}
				if err := x.WriteCheckpoint(ctx, fresh); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				foreignCheckpoint = fresh.Records != nil
			case 6: // a record without a proof on the UID's subject
				forged := intent(t, o, "Step", 1000+step)
				subject, err := s.Subject(o, journal.TypeIntent)
				if err != nil {
					t.Fatal(err)
				}
				data, _ := json.Marshal(forged)
				if _, err := s.JetStream().Publish(ctx, subject, data); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
			case 8: // the projector checkpoints while this process's executor reports
				if len(pending) == 0 {
					continue
				}
				in := pending[0]
				pending = pending[1:]
				done := make(chan error, 1)
				go func() {
					_, err := s.Append(ctx, outcome(t, in, journal.Succeeded))
					done <- err
				}()
				if err := s.WriteCheckpoint(ctx, v); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if err := <-done; err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				foreignCheckpoint = false
			case 7: // the object goes, rarely
				if rng.IntN(6) != 0 {
					continue
				}
				if err := s.DropCheckpoint(ctx, o.UID); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				foreignCheckpoint = false
			}
		}
	}
}

func compareViews(t *testing.T, where string, cached, fresh journal.View, foreignCheckpoint bool) {
	t.Helper()
	if cached.Last != fresh.Last {
		t.Fatalf("%s: cached view's last sequence %d, a fresh read's %d", where, cached.Last, fresh.Last)
	}
	if fresh.HasCheckpoint() && !cached.HasCheckpoint() {
		t.Fatalf("%s: the UID has a checkpoint (a fresh read sees it), the cached view says none: the object's deletion would not drop it", where)
	}
	if foreignCheckpoint {
		// The reader has not seen the other writer's checkpoint; what it
		// holds compacts to the same.
		if a, b := ids(journal.Compact(cached.Records)), ids(journal.Compact(fresh.Records)); !slices.Equal(a, b) {
			t.Fatalf("%s: cached view compacts to %v, a fresh read to %v", where, a, b)
		}
		return
	}
	if a, b := ids(cached.Records), ids(fresh.Records); !slices.Equal(a, b) {
		t.Fatalf("%s: cached view holds %v, a fresh read %v", where, a, b)
	}
	if cached.Through != fresh.Through || cached.Tail != fresh.Tail {
		t.Fatalf("%s: cached view through %d tail %d, a fresh read through %d tail %d", where,
			cached.Through, cached.Tail, fresh.Through, fresh.Tail)
	}
}

func ids(rs []journal.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%s@%d", r.ID, r.Sequence)
	}
	return out
}

// A store that trusts keys it does not sign with never admits its own
// records or checkpoints into a cached View: the cached read holds what a
// fresh read by a trusting reader holds.
func TestReadViewCacheAdmitsOnlyTrustedRecords(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	trust := journal.NewTrustedKeys(testKey(t).Public())
	u, err := journal.Open(ctx, connect(t, n), journal.Config{Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, n, journal.Config{})
	o := obj()
	signed := intent(t, o, "Step", 1)
	if _, err := s.Append(ctx, signed); err != nil {
		t.Fatal(err)
	}
	v, err := u.ReadView(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Append(ctx, intent(t, o, "Step", 2), journal.ExpectLastSequence(v.Last)); err != nil {
		t.Fatal(err)
	}
	if v, err = u.ReadView(ctx, o.UID); err != nil {
		t.Fatal(err)
	}
	if err := u.WriteCheckpoint(ctx, v); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		cached, err := u.ReadView(ctx, o.UID)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := journal.Open(ctx, connect(t, n), journal.Config{Trust: trust})
		if err != nil {
			t.Fatal(err)
		}
		fv, err := fresh.ReadView(ctx, o.UID)
		if err != nil {
			t.Fatal(err)
		}
		compareViews(t, fmt.Sprintf("read %d", i), cached, fv, false)
		if got := ids(cached.Records); len(got) != 1 {
			t.Fatalf("read %d: the view holds %v, want the signed intent only", i, got)
		}
	}
}
