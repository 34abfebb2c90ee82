package journal

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// viewEntry is a View of one UID this process read (ReadView) or extended
// by its own writes (Append, WriteCheckpoint), complete through v.Last:
// it holds exactly what a fresh ReadView returned then. A UID's records up
// to a sequence never change (the stream only appends, and retention only
// removes the oldest, which makes the UID's last sequence fall below
// v.Last or leaves what a checkpoint kept), so the next ReadView of the
// UID asks the stream leader for the UID's last sequence, as every read
// does, and reads only the records after v.Last. The consistency of a
// read is unchanged: the last sequence still comes from the leader, and
// so does every record after the cached ones.
type viewEntry struct {
	v View
	// filled is when the entry was first read from the server (this
	// process's monotonic clock), for viewMaxAge.
	filled time.Time
	// bytes is the entry's estimated memory (viewFootprint), counted in
	// Store.viewBytes while it is cached.
	bytes int
}

// DefaultViewCache is the number of cached Views (Store.views) when
// Config.ViewCache is 0; past the limit, or past the byte bound
// (DefaultViewCacheBytes), expired entries and then others are evicted
// (makeRoomLocked). A View holds a checkpoint's records and at most about
// CheckpointEvery records after it.
const DefaultViewCache = 10_000

// DefaultViewCacheBytes bounds the estimated memory of the cached Views
// (viewFootprint) when Config.ViewCacheBytes is 0: 64 MiB. A settled
// Tenant's View (its checkpoint's records and a short tail) is some tens of
// KiB, so the count alone let 10,000 of them grow past the manager's memory
// limit.
const DefaultViewCacheBytes = 64 << 20

func (s *Store) viewCacheBytes() int {
	if s.cfg.ViewCacheBytes > 0 {
		return s.cfg.ViewCacheBytes
	}
	return DefaultViewCacheBytes
}

// viewFootprint estimates the heap a View's records hold, in bytes: each
// record's strings, payload and proof, and a fixed 512 bytes for the
// record itself and the slices and maps around it.
func viewFootprint(recs []Record) int {
	n := 0
	for i := range recs {
		r := &recs[i]
		n += 512 + len(r.ID) + len(r.Type) + len(r.Operation) + len(r.Step) + len(r.After) + len(r.CausationID) + len(r.Actor) + len(r.Payload) +
			len(r.Object.Group) + len(r.Object.Kind) + len(r.Object.Namespace) + len(r.Object.Name) + len(r.Object.UID)
		if r.Result != nil {
			n += len(r.Result.Class) + len(r.Result.Reason) + len(r.Result.Message)
		}
		if r.Proof != nil {
			n += len(r.Proof.KeyID) + len(r.Proof.Signature)
		}
	}
	return n
}

func (s *Store) viewCacheLimit() int {
	switch n := s.cfg.ViewCache; {
	case n == 0:
		return DefaultViewCache
	case n < 0:
		return 0
	default:
		return n
	}
}

// viewMaxAge is how long an entry is used after it was read from the
// server: 10 minutes, at most half the journal's MaxAge. Retention that
// removes the UID's newest record the entry holds is seen at once (the
// leader's last sequence falls below the entry's). A record after the
// checkpoint that retention removes while newer ones stay (an object
// neither at rest nor CheckpointEvery records past its checkpoint for
// MaxAge) stays in the entry until it expires: for at most viewMaxAge the
// pass decides as a fresh read did just before the removal. No clock of
// another host is compared.
func (s *Store) viewMaxAge() time.Duration {
	return min(10*time.Minute, s.cfg.MaxAge/2)
}

// tailGets is how many records after a cached View a read fetches with
// one message get each (the leader's "next record of the UID after");
// the rest, when more were appended, it reads through a consumer.
const tailGets = 4

// cachedView returns the entry of uid (nil: none, or too old).
func (s *Store) cachedView(uid string) *viewEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.views[uid]
	if e != nil && time.Since(e.filled) > s.viewMaxAge() {
		s.dropViewLocked(uid)
		return nil
	}
	return e
}

// dropViewLocked removes uid's entry and its bytes (s.mu held).
func (s *Store) dropViewLocked(uid string) {
	if e, ok := s.views[uid]; ok {
		s.viewBytes -= e.bytes
		delete(s.views, uid)
	}
}

// makeRoomLocked evicts entries (s.mu held) so that one more of size
// bytes fits both bounds: the expired ones first, then others in the
// map's (random) order down to three quarters of each bound, so that an
// eviction is not needed again at the next entry.
func (s *Store) makeRoomLocked(bytes int) {
	limit, budget := s.viewCacheLimit(), s.viewCacheBytes()
	if len(s.views) < limit && s.viewBytes+bytes <= budget {
		return
	}
	maxAge := s.viewMaxAge()
	for uid, e := range s.views {
		if time.Since(e.filled) > maxAge {
			s.dropViewLocked(uid)
		}
	}
	for uid := range s.views {
		if len(s.views) <= limit*3/4 && s.viewBytes+bytes <= budget*3/4 {
			break
		}
		s.dropViewLocked(uid)
	}
}

// swapView replaces uid's entry prev (nil: none) with next (nil: none),
// sizing next (viewFootprint) unless its bytes are set.
// When the entry is no longer prev (another read, append or checkpoint of
// the UID got there first), neither is kept: the entry is dropped and the
// next read is a fresh one. So an entry only ever follows from the one
// before it, and a race costs a read, never a View that is not complete.
func (s *Store) swapView(uid string, prev, next *viewEntry) {
	if next != nil { // still private: sized outside the lock
		next.v.Records = slices.Clip(next.v.Records)
		if next.bytes == 0 {
			next.bytes = viewFootprint(next.v.Records)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.views == nil || s.viewCacheLimit() == 0 {
		return // read-only stores, and stores without a cache, keep none
	}
	cur := s.views[uid]
	switch {
	case cur != prev:
		s.dropViewLocked(uid)
	case next == nil:
		s.dropViewLocked(uid)
	default:
		s.dropViewLocked(uid)
		if next.bytes > s.viewCacheBytes()/4 {
			return // a View this large is read again instead
		}
		s.makeRoomLocked(next.bytes)
		s.views[uid] = next
		s.viewBytes += next.bytes
	}
}

// forgetView drops uid's entry (its checkpoint was dropped or replaced by
// another writer's).
func (s *Store) forgetView(uid string) {
	s.mu.Lock()
	s.dropViewLocked(uid)
	s.mu.Unlock()
}

// extendView adds the record this process appended (data, stored on
// subject at seq by a publish that expected the UID's last sequence to be
// expected) to uid's entry when the entry ends at expected: the server
// checked that nothing of the UID was stored in between, so the entry
// stays complete. A record a reader would not admit (a store that trusts
// keys it does not sign with) is not added; the entry still ends at seq.
func (s *Store) extendView(uid, subject string, expected uint64, data []byte, seq uint64) {
	s.mu.Lock()
	e := s.views[uid]
	s.mu.Unlock()
	if e == nil || e.v.Last != expected {
		return
	}
	r, err := DecodeRecord(data, seq)
	if err != nil {
		s.swapView(uid, e, nil)
		return
	}
	v, bytes := e.v, e.bytes
	if s.admitStored(subject, data, &r) == nil {
		v.Records = append(slices.Clip(v.Records), r)
		v.Tail++
		bytes += viewFootprint(v.Records[len(v.Records)-1:])
	}
	v.Last = seq
	s.swapView(uid, e, &viewEntry{v: v, filled: e.filled, bytes: bytes})
}

// checkpointWritten makes uid's entry the View a fresh read returns after
// this process stored cp (data, its bytes) at checkpoint-stream sequence
// cpSeq over the View read (whose checkpoint was at readSeq): cp's
// records, then the entry's records after cp.Through. An entry that does
// not continue that View, or a checkpoint a reader would not admit (a
// store that trusts keys it does not sign with), drops the entry.
func (s *Store) checkpointWritten(cp *Checkpoint, data []byte, readSeq, cpSeq uint64) {
	s.mu.Lock()
	e := s.views[cp.UID]
	s.mu.Unlock()
	if e == nil {
		return
	}
	if e.v.checkpointSeq != readSeq || e.v.Last < cp.Through || s.admitCheckpoint(cpSeq, data, cp) != nil {
		s.swapView(cp.UID, e, nil)
		return
	}
	v := e.v
	v.Records = slices.Clone(cp.Records)
	v.Tail = 0
	for _, r := range e.v.Records {
		if r.Sequence > cp.Through {
			v.Records = append(v.Records, r)
			v.Tail++
		}
	}
	v.Through, v.checkpointSeq = cp.Through, cpSeq
	s.swapView(cp.UID, e, &viewEntry{v: v, filled: e.filled})
}

// readViewCached is ReadView from uid's entry e: the UID's last sequence
// from the leader, and the records after the entry's. ok false: the entry
// cannot be continued (retention removed the UID's newest records it
// holds); the caller reads afresh.
func (s *Store) readViewCached(ctx context.Context, e *viewEntry) (v View, ok bool, err error) {
	uid := e.v.UID
	last, err := s.lastSeq(ctx, uid)
	if err != nil {
		return View{}, false, err
	}
	if last < e.v.Last {
		s.swapView(uid, e, nil)
		return View{}, false, nil
	}
	v = e.v
	v.cached = true
	v.Records = slices.Clone(e.v.Records)
	if last > e.v.Last {
		tail, complete, err := s.readAfterCached(ctx, uid, e.v.Last, last)
		if err != nil {
			return View{}, false, err
		}
		if !complete {
			s.swapView(uid, e, nil)
			return View{}, false, nil
		}
		v.Records = append(v.Records, tail...)
		v.Tail += len(tail)
		v.Last = last
		s.swapView(uid, e, &viewEntry{v: v, filled: e.filled})
		s.advanceUID(uid, e.v.Last, last, tail)
		v.Records = slices.Clone(v.Records)
	}
	return v, true, nil
}

// readAfterCached reads the UID's records after sequence after up to last
// (both known at the leader): one message get per record for the first
// tailGets, a consumer for the rest. Undecodable records are skipped and
// records without a valid proof dropped, as readFrom does. complete is
// false when the leader has no record of the UID at last any more
// (retention removed it meanwhile): the caller reads afresh.
func (s *Store) readAfterCached(ctx context.Context, uid string, after, last uint64) (recs []Record, complete bool, err error) {
	filter := s.uidFilter(uid)
	var out []Record
	for i := 0; after < last; i++ {
		if i == tailGets {
			rest, err := s.readFrom(ctx, uid, after+1, last, true)
			return append(out, rest...), err == nil, err
		}
		m, err := s.leaderGet(ctx, s.cfg.StreamName, "next record of "+filter+" after "+strconv.FormatUint(after, 10),
			msgGetRequest{NextBySubject: filter, Seq: after + 1})
		if err != nil {
			return nil, false, err
		}
		if m == nil || m.seq > last {
			return nil, false, nil
		}
		after = m.seq
		r, err := DecodeRecord(m.data, m.seq)
		if err != nil {
			if errors.Is(err, ErrNewerSchema) {
				if s.newerIsOurs(*m) {
					return nil, false, err
				}
				s.cfg.Metrics.countUntrusted("read")
			}
			continue
		}
		if s.admitStored(m.subject, m.data, &r) != nil {
			s.cfg.Metrics.countUntrusted("read")
			continue
		}
		out = append(out, r)
	}
	return out, true, nil
}

// advanceUID brings the UID state Append checks against (Store.uids) from
// prev to last with the records read between them (every stored record of
// the UID in (prev, last], the untrusted ones left out as refresh does),
// when that state ends at prev: the append that follows the read then
// needs no read of its own. It never waits: while anyone holds the UID's
// lock (an append, an executor's outcome or dependency check), the state
// is left as it is (the next append reads first if it has to).
func (s *Store) advanceUID(uid string, prev, last uint64, recs []Record) {
	unlock, ok := s.tryLockUID(uid)
	if !ok {
		return
	}
	defer unlock()
	st := s.cached(uid)
	if st == nil || st.lastSeq != prev {
		return
	}
	for i := range recs {
		st.note(&recs[i], recs[i].Sequence)
	}
	st.lastSeq = last
}
