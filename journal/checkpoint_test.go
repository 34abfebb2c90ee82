package journal_test

import (
	"context"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

func outcome(t *testing.T, in *journal.Record, class journal.ResultClass) *journal.Record {
	t.Helper()
	r, err := journal.NewOutcome(*in, journal.Result{Class: class}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &r
}

// Compact keeps, per step key, the CheckpointKeep latest intents, the
// latest success and every pending intent (with their outcomes), and the
// latest note per operation.
func TestCompact(t *testing.T) {
	o := obj()
	var recs []journal.Record
	seq := uint64(0)
	add := func(r *journal.Record) *journal.Record {
		seq++
		r.Sequence = seq
		recs = append(recs, *r)
		return r
	}
	// Observe: a success at attempt 1, then 10 failures.
	in := add(intent(t, o, "Observe", 1))
	add(outcome(t, in, journal.Succeeded))
	for a := 2; a <= 11; a++ {
		in := add(intent(t, o, "Observe", a))
		add(outcome(t, in, journal.Failed))
	}
	// Claim: pending at attempt 1 (an older pending intent is kept too).
	add(intent(t, o, "Claim", 1))
	for i := 0; i < 3; i++ {
		add(&journal.Record{ID: o.UID + "/note/" + string(rune('a'+i)), Type: journal.TypeNote, Operation: "Revalidate", Object: o, Attempt: 1})
	}
	kept := journal.Compact(recs)
	attempts := map[int]bool{}
	notes, pending := 0, 0
	for i, r := range kept {
		if i > 0 && kept[i-1].Sequence >= r.Sequence {
			t.Fatal("not in stream order")
		}
		switch {
		case r.Type == journal.TypeIntent && r.Operation == "Observe":
			attempts[r.Attempt] = true
		case r.Type == journal.TypeIntent && r.Operation == "Claim":
			pending++
		case r.Type == journal.TypeNote:
			notes++
			if r.ID != o.UID+"/note/c" {
				t.Fatalf("kept note %s, want the latest", r.ID)
			}
		}
	}
	if !attempts[1] || len(attempts) != journal.CheckpointKeep+1 || !attempts[11] || attempts[3] {
		t.Fatalf("Observe attempts kept %v: want 1 (latest success) and the %d latest", attempts, journal.CheckpointKeep)
	}
	if pending != 1 || notes != 1 {
		t.Fatalf("pending %d notes %d", pending, notes)
	}
	// Every kept intent with an outcome keeps its outcome.
	st := journal.Fold(kept)
	for id := range st.Intents {
		if _, ok := st.OutcomeOf(id); !ok && st.Intents[id].Operation != "Claim" {
			t.Fatalf("intent %s lost its outcome", id)
		}
	}
	if len(st.Orphans) != 0 {
		t.Fatalf("orphans kept: %d", len(st.Orphans))
	}
}

// Issue 12, fault 1: records removed by retention do not change what a
// reader of the UID sees once a checkpoint holds them; the view's Last is
// the server's (0 when all aged out), so the next append is accepted.
func TestCheckpointOutlivesRetention(t *testing.T) {
	n := integration.StartNATS(t)
	// Retention by age, for real: records older than 2 s are removed.
	s := open(t, n, journal.Config{MaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	ctx := context.Background()
	o := obj()
	for a := 1; a <= 5; a++ {
		in := intent(t, o, "Observe", a)
		if _, err := s.Append(ctx, in); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, outcome(t, in, journal.Succeeded)); err != nil {
			t.Fatal(err)
		}
	}
	v, err := s.ReadView(ctx, o.UID)
	if err != nil || v.Through != 0 || v.Tail != 10 || v.Last != 10 {
		t.Fatalf("view before the checkpoint %+v %v", v, err)
	}
	if err := s.WriteCheckpoint(ctx, v); err != nil {
		t.Fatal(err)
	}
	// Everything ages out.
	waitAgedOut(t, s)
	v, err = s.ReadView(ctx, o.UID)
	if err != nil || v.Through != 10 || v.Tail != 0 || v.Last != 0 || len(v.Records) != 10 {
		t.Fatalf("view after retention %+v %v", v, err)
	}
	// The next attempt (from the checkpoint) is new and appends against
	// the server's last sequence.
	res, err := s.Append(ctx, intent(t, o, "Observe", 6), journal.ExpectLastSequence(v.Last))
	if err != nil || res.Duplicate {
		t.Fatalf("append after retention: %+v %v", res, err)
	}
	v2, err := s.ReadView(ctx, o.UID)
	if err != nil || v2.Tail != 1 || len(v2.Records) != 11 || v2.Last != res.Sequence {
		t.Fatalf("view after the append %+v %v", v2, err)
	}
	// A stale checkpoint writer loses quietly; the newer one wins.
	if err := s.WriteCheckpoint(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteCheckpoint(ctx, v2); err != nil {
		t.Fatalf("second writer of the same view: %v", err)
	}
	v3, _ := s.ReadView(ctx, o.UID)
	if v3.Through != res.Sequence || v3.Tail != 0 {
		t.Fatalf("checkpoint not advanced: %+v", v3)
	}
	// Dropped with the object.
	if err := s.DropCheckpoint(ctx, o.UID); err != nil {
		t.Fatal(err)
	}
	if v4, _ := s.ReadView(ctx, o.UID); v4.Through != 0 || len(v4.Records) != 1 {
		t.Fatalf("after drop: %+v", v4)
	}
}

// The secret canary scan covers the checkpoint stream too: checkpoints
// hold copies of journal records.
func TestCanaryScanCoversCheckpoints(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{MaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	ctx := context.Background()
	o := obj()
	in, err := journal.NewIntent(o, "Observe", "CANARY-in-a-checkpoint", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, &in); err != nil {
		t.Fatal(err)
	}
	v, err := s.ReadView(ctx, o.UID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteCheckpoint(ctx, v); err != nil {
		t.Fatal(err)
	}
	waitAgedOut(t, s)
	hits, err := s.ScanForSecret(ctx, "CANARY-in-a-checkpoint")
	if err != nil || len(hits) != 1 || hits[0] < journal.CheckpointHitBase {
		t.Fatalf("hits %v, %v: want one in the checkpoint stream", hits, err)
	}
}

// waitAgedOut waits until retention (the stream's MaxAge) has removed
// every record of the journal stream.
func waitAgedOut(t *testing.T, s *journal.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for streamMsgs(t, s) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("records still stored after %s of MaxAge %s", 30*time.Second, s.Config().MaxAge)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
