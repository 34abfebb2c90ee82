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
}

// viewCacheLimit bounds the number of cached Views (Store.views); past
// it the cache is dropped wholesale, as the UID cache is. A View holds a
// checkpoint's records and at most about CheckpointEvery records after
// it. A variable so tests can lower it.
var viewCacheLimit = 10_000

// viewMaxAge is how long an entry is used after it was read from the
// server, at most half the journal's MaxAge: a record retention removes
// is then gone from the cache too, well before a fresh read could differ
// from it by more than the records a checkpoint keeps anyway.
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
		delete(s.views, uid)
		return nil
	}
	return e
}

// keepView stores v as uid's entry unless the entry there already reaches
// further (two reads of one UID racing: both are complete through their
// own Last).
func (s *Store) keepView(v View, filled time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.views == nil {
		return // read-only stores keep none
	}
	if old := s.views[v.UID]; old != nil && old.v.Last > v.Last {
		return
	}
	if _, ok := s.views[v.UID]; !ok && len(s.views) >= viewCacheLimit {
		s.views = map[string]*viewEntry{}
	}
	v.Records = slices.Clip(v.Records)
	s.views[v.UID] = &viewEntry{v: v, filled: filled}
}

// forgetView drops uid's entry (its checkpoint was dropped or replaced by
// another writer's).
func (s *Store) forgetView(uid string) {
	s.mu.Lock()
	delete(s.views, uid)
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
		s.forgetView(uid)
		return
	}
	v := e.v
	if s.admitStored(subject, data, &r) == nil {
		v.Records = append(slices.Clip(v.Records), r)
		v.Tail++
	}
	v.Last = seq
	s.keepView(v, e.filled)
}

// checkpointWritten makes uid's entry the View a fresh read returns after
// this process stored cp at checkpoint-stream sequence cpSeq over the
// View read (whose checkpoint was at readSeq): cp's records, then the
// entry's records after cp.Through. An entry that does not continue that
// View is dropped.
func (s *Store) checkpointWritten(cp *Checkpoint, readSeq, cpSeq uint64) {
	s.mu.Lock()
	e := s.views[cp.UID]
	s.mu.Unlock()
	if e == nil {
		return
	}
	if e.v.checkpointSeq != readSeq || e.v.Last < cp.Through {
		s.forgetView(cp.UID)
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
	s.mu.Lock()
	if s.views[cp.UID] == e {
		s.views[cp.UID] = &viewEntry{v: v, filled: e.filled}
	}
	s.mu.Unlock()
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
		s.forgetView(uid)
		return View{}, false, nil
	}
	v = e.v
	v.cached = true
	v.Records = slices.Clone(e.v.Records)
	if last > e.v.Last {
		tail, err := s.readAfterCached(ctx, uid, e.v.Last, last)
		if err != nil {
			return View{}, false, err
		}
		v.Records = append(v.Records, tail...)
		v.Tail += len(tail)
		v.Last = last
		s.keepView(v, e.filled)
		s.advanceUID(uid, e.v.Last, last, tail)
		v.Records = slices.Clone(v.Records)
	}
	return v, true, nil
}

// readAfterCached reads the UID's records after sequence after up to last
// (both known at the leader): one message get per record for the first
// tailGets, a consumer for the rest. Undecodable records are skipped and
// records without a valid proof dropped, as readFrom does.
func (s *Store) readAfterCached(ctx context.Context, uid string, after, last uint64) ([]Record, error) {
	filter := s.uidFilter(uid)
	var out []Record
	for i := 0; after < last; i++ {
		if i == tailGets {
			rest, err := s.readFrom(ctx, uid, after+1, last, true)
			return append(out, rest...), err
		}
		m, err := s.leaderGet(ctx, s.cfg.StreamName, "next record of "+filter+" after "+strconv.FormatUint(after, 10),
			msgGetRequest{NextBySubject: filter, Seq: after + 1})
		if err != nil {
			return nil, err
		}
		if m == nil || m.seq > last {
			break // retention removed them meanwhile
		}
		after = m.seq
		r, err := DecodeRecord(m.data, m.seq)
		if err != nil {
			if errors.Is(err, ErrNewerSchema) {
				return nil, err
			}
			continue
		}
		if s.admitStored(m.subject, m.data, &r) != nil {
			s.cfg.Metrics.countUntrusted("read")
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// advanceUID brings the UID state Append checks against (Store.uids) from
// prev to last with the records read between them (every stored record of
// the UID in (prev, last], the untrusted ones left out as refresh does),
// when that state ends at prev: the append that follows the read then
// needs no read of its own.
func (s *Store) advanceUID(uid string, prev, last uint64, recs []Record) {
	unlock := s.lockUID(uid)
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
