package journal_test

import (
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// seq builds records in stream order with sequences 1..n.
type seq struct {
	t    *testing.T
	recs []journal.Record
}

func (s *seq) intent(o journal.ObjectRef, op string, attempt int) journal.Record {
	s.t.Helper()
	r, err := journal.NewIntent(o, op, "", attempt, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.add(r)
}

func (s *seq) outcome(in journal.Record, class journal.ResultClass) {
	s.t.Helper()
	r, err := journal.NewOutcome(in, journal.Result{Class: class, Reason: string(class)}, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	s.add(r)
}

func (s *seq) note(o journal.ObjectRef, op string) {
	s.add(journal.Record{ID: o.UID + "/note/" + op, Type: journal.TypeNote, Operation: op, Object: o, Attempt: 1})
}

func (s *seq) add(r journal.Record) journal.Record {
	r.Sequence = uint64(len(s.recs) + 1)
	s.recs = append(s.recs, r)
	return r
}

func rules(vs []journal.Violation) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, v := range vs {
		out[v.Rule] = append(out[v.Rule], v.Sequences...)
	}
	return out
}

func TestVerifyIntentWhileStepPending(t *testing.T) {
	s := &seq{t: t}
	a, b := obj(), obj()
	// a: a second CreateRole decided while the first has no outcome.
	r1 := s.intent(a, "CreateRole", 1) // 1
	s.intent(a, "CreateRole", 2)       // 2: violation
	s.outcome(r1, journal.Succeeded)   // 3
	// b: a retry after a failure, and a repeat after a note, are fine;
	// another operation pending meanwhile is fine too.
	d1 := s.intent(b, "CreateDatabase", 1) // 4
	s.outcome(d1, journal.Failed)          // 5
	s.intent(b, "CreateDatabase", 2)       // 6 pending
	s.note(b, "Revalidate")                // 7 new epoch
	s.intent(b, "CreateDatabase", 3)       // 8
	s.intent(b, "EnsureExtensions", 1)     // 9
	// Two steps of one operation (the record's step field) are distinct.
	for _, step := range []string{"pg_trgm", "citext"} { // 10, 11
		r, err := journal.NewIntent(b, "InstallExtension", step, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.add(r)
	}
	got := rules(journal.Verify(s.recs, nil))
	if want := []uint64{1, 2}; len(got) != 1 || len(got[journal.RuleIntentWhilePending]) != 2 ||
		got[journal.RuleIntentWhilePending][0] != want[0] || got[journal.RuleIntentWhilePending][1] != want[1] {
		t.Fatalf("violations %v, want only %s at %v", got, journal.RuleIntentWhilePending, want)
	}
}

func TestRepeatedSteps(t *testing.T) {
	s := &seq{t: t}
	a := obj()
	c1 := s.intent(a, "CheckExtensions", 1) // 1
	s.outcome(c1, journal.Succeeded)        // 2
	c2 := s.intent(a, "CheckExtensions", 2) // 3: repeated after success
	s.outcome(c2, journal.Succeeded)        // 4
	s.note(a, "Revalidate")                 // 5
	c3 := s.intent(a, "CheckExtensions", 3) // 6: new epoch, fine
	s.outcome(c3, journal.Succeeded)        // 7
	w1 := s.intent(a, "WriteCredential", 1) // 8
	s.outcome(w1, journal.Failed)           // 9
	s.intent(a, "WriteCredential", 2)       // 10: retry after failure, fine
	b := a
	b.Generation = 2
	s.intent(b, "CheckExtensions", 1) // 11: new generation, fine
	got := journal.RepeatedSteps(s.recs)
	if len(got) != 1 || got[0].Rule != journal.RuleStepRepeated || got[0].Sequences[0] != 1 || got[0].Sequences[1] != 3 {
		t.Fatalf("got %+v, want one %s at [1 3]", got, journal.RuleStepRepeated)
	}
	if v := journal.Verify(s.recs, nil); len(v) != 0 {
		t.Fatalf("Verify flags a legitimate stream: %+v", v)
	}
}

// TestSummariesTakeTimesNotStreamOrder: an object's first and last times
// are its records' earliest and latest times, not those of its first and
// last stored records. A signed record stored again later (a replay of a
// kept copy) moved an object's last time back, which `ayatori-journal`
// shows and orders objects of one name by.
func TestSummariesTakeTimesNotStreamOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	current := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "a", Name: "app", UID: "7d3c0e52-1c1a-4b8e-9a53-0000000000a1", Generation: 1}
	older := current
	older.UID = "7d3c0e52-1c1a-4b8e-9a53-0000000000a0"
	s := &seq{t: t}
	at := func(r journal.Record, d time.Duration) journal.Record {
		r.Time = t0.Add(d)
		return s.add(r)
	}
	rec := func(o journal.ObjectRef, op string) journal.Record {
		r, err := journal.NewIntent(o, op, "", 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	at(rec(older, "ClaimOwnership"), 0)
	first := at(rec(current, "ClaimOwnership"), 2*time.Hour)
	next := current
	next.Generation = 2
	at(rec(next, "CreateRole"), 3*time.Hour)
	first.Sequence = 0
	at(first, 2*time.Hour) // stored again
	got := journal.Summaries(s.recs)
	if len(got) != 2 || got[0].Object.UID != current.UID || !got[0].LastTime.Equal(t0.Add(3*time.Hour)) || !got[0].FirstTime.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("summaries: %+v; want the current object first, last time +3h, first time +2h", got)
	}
	if got[0].Object.Generation != 2 {
		t.Errorf("summary object at generation %d, want 2 (the latest record's; a copy stored later is older)", got[0].Object.Generation)
	}
}
