package execution

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

func TestExecutionChanges(t *testing.T) {
	key := types.NamespacedName{Namespace: "ci", Name: "build"}
	const uid = types.UID("job-uid")
	ref := execution.Reference{Type: "Job", ID: "native-uid"}
	forged := execution.Reference{Type: "Job", ID: "someone-elses-uid"}
	enqueued := func(t *testing.T, reqs int, want bool) {
		t.Helper()
		if (reqs > 0) != want {
			t.Fatalf("enqueued %d requests, want any: %t", reqs, want)
		}
	}

	t.Run("a change seen before the pass registers answers that pass once", func(t *testing.T) {
		c := newExecutionChanges()
		enqueued(t, len(c.changed(ref, "2")), false) // nobody to wake yet
		if !c.Changed(key, uid, ref, "1") {
			t.Fatal("change at revision 2 not reported to a pass that observed revision 1")
		}
		if c.Changed(key, uid, ref, "1") {
			t.Fatal("the same change reported twice")
		}
	})
	t.Run("the change the outcome already observed is none", func(t *testing.T) {
		c := newExecutionChanges()
		c.changed(ref, "2")
		if c.Changed(key, uid, ref, "2") {
			t.Fatal("reported the revision the outcome observed")
		}
		enqueued(t, len(c.changed(ref, "2")), false)
		if c.Changed(key, uid, ref, "2") {
			t.Fatal("reported the revision the outcome observed")
		}
	})
	t.Run("a change after registration wakes the Job, once", func(t *testing.T) {
		c := newExecutionChanges()
		c.Changed(key, uid, ref, "1")
		reqs := c.changed(ref, "3")
		if len(reqs) != 1 || reqs[0].NamespacedName != key {
			t.Fatalf("requests %v, want %s", reqs, key)
		}
		if !c.Changed(key, uid, ref, "1") || c.Changed(key, uid, ref, "1") {
			t.Fatal("want the change reported exactly once")
		}
	})
	t.Run("a lagging feed costs one Observe, never a loop", func(t *testing.T) {
		c := newExecutionChanges()
		c.changed(ref, "2") // the feed's latest; the executor already read 3
		if !c.Changed(key, uid, ref, "3") {
			t.Fatal("an unanswered change must be answered once")
		}
		for range 3 {
			if c.Changed(key, uid, ref, "3") {
				t.Fatal("the same lagging change answered again")
			}
		}
		enqueued(t, len(c.changed(ref, "3")), false) // the feed catches up
	})
	t.Run("gone wakes the Job", func(t *testing.T) {
		c := newExecutionChanges()
		c.Changed(key, uid, ref, "1")
		enqueued(t, len(c.changed(ref, "")), true)
		if !c.Changed(key, uid, ref, "1") {
			t.Fatal("gone not reported")
		}
	})
	t.Run("an object nobody registered wakes nothing and is not kept once gone", func(t *testing.T) {
		c := newExecutionChanges()
		c.Changed(key, uid, ref, "1")
		for _, rev := range []string{"7", "8", "9"} {
			enqueued(t, len(c.changed(forged, rev)), false)
		}
		if c.Changed(key, uid, ref, "1") {
			t.Fatal("another object's change reported for this Job")
		}
		enqueued(t, len(c.changed(forged, "")), false)
		if c.len() != 1 {
			t.Fatalf("%d executions known, want 1", c.len())
		}
	})
	t.Run("Forget and a new reference end the registration", func(t *testing.T) {
		c := newExecutionChanges()
		c.Changed(key, uid, ref, "1")
		other := execution.Reference{Type: "Job", ID: "recreated"}
		c.Changed(key, uid, other, "5")
		enqueued(t, len(c.changed(ref, "2")), false)
		c.Forget(uid)
		enqueued(t, len(c.changed(other, "6")), false)
		c.changed(ref, "")
		c.changed(other, "")
		if c.len() != 0 {
			t.Fatalf("%d executions known after Forget and gone, want 0", c.len())
		}
	})
}

// A Job waiting on its Observe back-off observes at once when the change
// feed reports a change, and only then.
func TestObserveAtOnceOnExecutionChange(t *testing.T) {
	s := newSim(t)
	var changed bool
	var asked []string
	s.facts.ExecutionChanged = func(ref execution.Reference, revision string) bool {
		asked = append(asked, ref.ID+"@"+revision)
		return changed
	}
	s.accept()
	o := obs(execution.StatePending)
	o.Revision = "1"
	s.ok(execution.OpEnsure, o)
	d := s.pass()
	if d.Intent != nil || d.RequeueAfter <= 0 {
		t.Fatalf("decided %+v without a change, want the back-off", d)
	}
	if len(asked) == 0 || asked[len(asked)-1] != "native-uid@1" {
		t.Fatalf("feed asked %v, want the latest outcome's reference and revision", asked)
	}
	changed = true
	if d := s.pass(); d.Intent == nil || d.Intent.Operation != execution.OpObserve {
		t.Fatalf("decided %+v after a change, want an Observe at once", d)
	}
	s.ok(execution.OpObserve, obs(execution.StateSucceeded))
	s.advance(time.Second)
	asked = nil
	for range 3 {
		if d := s.pass(); d.Intent != nil {
			t.Fatalf("decided %s after the result", d.Intent.Operation)
		}
	}
	if len(asked) != 0 {
		t.Fatalf("feed asked %v after the result", asked)
	}
	// An outcome without a revision (an older executor) is never matched.
	s2 := newSim(t)
	s2.facts.ExecutionChanged = func(execution.Reference, string) bool { t.Fatal("asked without a revision"); return true }
	s2.accept()
	s2.ok(execution.OpEnsure, obs(execution.StatePending))
	if d := s2.pass(); d.Intent != nil {
		t.Fatalf("decided %s", d.Intent.Operation)
	}
}

// With a change feed following the execution (the latest outcome carries
// a revision), the timed Observe waits FollowedObserveBase: the feed wakes
// the Job on its result. Without a feed, or without a revision, the pause
// starts at ObserveBase as before.
func TestFollowedObserveWaitsLonger(t *testing.T) {
	for _, c := range []struct {
		name     string
		feed     bool
		revision string
		want     time.Duration
	}{
		{"feed and revision", true, "1", 4 * time.Second},
		{"feed, revision, capped at ObserveMax", true, "1", 8 * time.Second},
		{"no feed", false, "1", time.Second},
		{"no revision", true, "", time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t)
			s.policy.FollowedObserveBase = 4 * time.Second
			if c.want == s.policy.ObserveMax {
				s.policy.FollowedObserveBase = 20 * time.Second
			}
			if c.feed {
				s.facts.ExecutionChanged = func(execution.Reference, string) bool { return false }
			}
			s.accept()
			o := obs(execution.StatePending)
			o.Revision = c.revision
			// pauseThenObserve: no intent until c.want has passed, then
			// an Observe.
			pauseThenObserve := func() {
				t.Helper()
				if d := s.pass(); d.Intent != nil || d.RequeueAfter != c.want {
					t.Fatalf("decided %v, requeue after %s; want no intent, %s", d.Intent, d.RequeueAfter, c.want)
				}
				s.advance(c.want)
				if d := s.pass(); d.Intent == nil || d.Intent.Operation != execution.OpObserve {
					t.Fatalf("decided %+v after %s, want an Observe", d, c.want)
				}
			}
			s.ok(execution.OpEnsure, o)
			pauseThenObserve()
			// A new state: the same first pause; the same state again: it
			// doubles, within ObserveMax.
			o2 := obs(execution.StateRunning)
			o2.Revision = c.revision
			s.ok(execution.OpObserve, o2)
			pauseThenObserve()
			s.ok(execution.OpObserve, o2)
			if d := s.pass(); d.RequeueAfter != min(2*c.want, s.policy.ObserveMax) {
				t.Fatalf("requeue after %s, want %s", d.RequeueAfter, min(2*c.want, s.policy.ObserveMax))
			}
		})
	}
}
