package journaled

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Observations remembers, per record ID, when this process first saw a
// record, on the projector's own clock. Decisions compare times from that
// one clock only (back-off and re-check due times): a record's Time is
// stamped by whichever host appended it, and two hosts' clocks are never
// compared. After a restart (or on a new leader) every record counts as
// observed at its first pass there: due times move later, never earlier.
// Safe for concurrent use; memory is bounded by the records of the
// objects' current views.
type Observations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[string]map[string]time.Time // UID -> record ID -> first seen
}

// maxObservedUIDs bounds the UIDs remembered; beyond it the memory is
// reset (every record then counts as observed at the next pass).
var maxObservedUIDs = 200_000

// NewObservations uses c for "now" (the clock the kind's decisions use).
func NewObservations(c clock.PassiveClock) *Observations {
	return &Observations{clock: c, seen: map[string]map[string]time.Time{}}
}

// Stamp returns copies of recs whose Time is the local time the record was
// first observed, and forgets the UID's records that are no longer in
// recs. A nil Observations returns recs unchanged.
func (o *Observations) Stamp(uid string, recs []journal.Record) []journal.Record {
	if o == nil {
		return recs
	}
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	prev := o.seen[uid]
	if prev == nil && len(o.seen) >= maxObservedUIDs {
		o.seen = map[string]map[string]time.Time{}
	}
	next := make(map[string]time.Time, len(recs))
	out := make([]journal.Record, len(recs))
	for i, r := range recs {
		at, ok := prev[r.ID]
		if !ok {
			at = now
		}
		next[r.ID] = at
		r.Time = at
		out[i] = r
	}
	o.seen[uid] = next
	return out
}

// Forget drops what is remembered of a UID (the object is gone).
func (o *Observations) Forget(uid string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	delete(o.seen, uid)
	o.mu.Unlock()
}
