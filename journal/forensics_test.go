package journal_test

import (
	"testing"

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
