package journal

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CheckpointKeep is how many of the latest intents (with their outcomes)
// of each step key a checkpoint keeps, besides the latest intent whose
// outcome succeeded. It bounds what a decision may count in its history
// (retry back-off, grace periods) after compaction: counts up to
// CheckpointKeep survive.
const CheckpointKeep = 8

// Checkpoint is the compacted history of one object UID through a journal
// sequence (docs/journal.md "Retention and checkpoints"). It is kept in a stream of its
// own without age limit (one message per UID), so a decision never
// depends on journal records that retention may remove, and a pass reads
// the checkpoint plus the records after it: its cost does not grow with
// the object's age.
type Checkpoint struct {
	SchemaVersion int    `json:"schemaVersion"`
	UID           string `json:"uid"`
	// Through is the journal stream sequence of the last record folded in.
	Through uint64 `json:"through"`
	// Records are the kept records in stream order, each with its
	// journal sequence (Record.Sequence is stored here, unlike in the
	// journal itself).
	Records []Record `json:"records"`
	// Proof is the checkpoint's own proof of origin (over everything
	// above), so a checkpoint can neither be forged nor hide records.
	Proof *Proof `json:"proof,omitempty"`
}

func (c *Checkpoint) canonical() ([]byte, error) {
	cp := *c
	cp.Proof = nil
	return json.Marshal(&cp)
}

// keepSucceeded holds the (domain, operation) pairs registered with
// KeepSucceeded.
var (
	keepSucceededMu sync.RWMutex
	keepSucceeded   = map[[2]string]bool{}
)

// KeepSucceeded registers an operation of domain whose every successful
// intent and outcome checkpoints keep, because the domain reads a fact
// accumulated over all of them (for example every object the operation
// ever created). Call it from the domain contract's init.
func KeepSucceeded(domain, operation string) {
	keepSucceededMu.Lock()
	defer keepSucceededMu.Unlock()
	keepSucceeded[[2]string{domain, operation}] = true
}

func keepsAllSucceeded(r Record) bool {
	d, err := Domain(r.Object.Group)
	if err != nil {
		return false
	}
	keepSucceededMu.RLock()
	defer keepSucceededMu.RUnlock()
	return keepSucceeded[[2]string{d, r.Operation}]
}

// Compact returns the records of one UID a checkpoint keeps, in stream
// order: for every step key the CheckpointKeep latest intents, the first
// and the latest intent with a Succeeded outcome, every intent without an
// outcome, and for operations registered with KeepSucceeded every
// successful intent (each with its outcome); plus the latest note of every
// operation. Orphan outcomes are dropped. Domain-free: what a decision
// needs from a step's history is its latest attempts, its first and latest
// success, and what a domain declared it accumulates.
func Compact(records []Record) []Record {
	st := Fold(records)
	keep := map[string]bool{}
	byKey := map[string][]Record{}
	for _, id := range st.intentOrder {
		in := st.Intents[id]
		byKey[StepKey(in)] = append(byKey[StepKey(in)], in)
	}
	for _, ins := range byKey {
		slices.SortFunc(ins, func(a, b Record) int { return cmpSeq(a.Sequence, b.Sequence) })
		for i, in := range ins {
			_, done := st.Outcomes[in.ID]
			if i >= len(ins)-CheckpointKeep || !done {
				keep[in.ID] = true
			}
		}
		var succeeded []string
		for _, in := range ins {
			if out, ok := st.Outcomes[in.ID]; ok && out.Result != nil && out.Result.Class == Succeeded {
				succeeded = append(succeeded, in.ID)
			}
		}
		if len(succeeded) > 0 {
			keep[succeeded[0]], keep[succeeded[len(succeeded)-1]] = true, true
			if keepsAllSucceeded(ins[0]) {
				for _, id := range succeeded {
					keep[id] = true
				}
			}
		}
	}
	lastNote := map[string]uint64{}
	for _, r := range records {
		if r.Type == TypeNote && r.Sequence >= lastNote[r.Operation] {
			lastNote[r.Operation] = r.Sequence
		}
	}
	var out []Record
	for _, r := range records {
		switch r.Type {
		case TypeIntent:
			if keep[r.ID] {
				out = append(out, r)
			}
		case TypeOutcome:
			if keep[r.CausationID] && st.Outcomes[r.CausationID].Sequence == r.Sequence {
				out = append(out, r)
			}
		case TypeNote:
			if lastNote[r.Operation] == r.Sequence {
				out = append(out, r)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Record) int { return cmpSeq(a.Sequence, b.Sequence) })
	return out
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CheckpointStreamName is the stream holding the checkpoints of journal
// stream name.
func CheckpointStreamName(name string) string { return name + "_CHECKPOINTS" }

// checkpointPrefix is the subject prefix of checkpoints; it does not
// overlap the journal's "<prefix>.>".
func checkpointPrefix(subjectPrefix string) string { return subjectPrefix + "_checkpoint" }

// CheckpointStreamConfig is the checkpoint stream of cfg: one message per
// UID subject (the latest checkpoint), no age limit, the journal's replicas.
func CheckpointStreamConfig(cfg Config) jetstream.StreamConfig {
	cfg.defaults()
	return jetstream.StreamConfig{
		Name:              CheckpointStreamName(cfg.StreamName),
		Description:       "Ayatori journal checkpoints: the compacted history of each live object UID",
		Subjects:          []string{checkpointPrefix(cfg.SubjectPrefix) + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: 1,
		Replicas:          cfg.Replicas,
		AllowDirect:       true,
		Metadata:          map[string]string{metadataConfigKey: StreamConfigVersion},
	}
}

func (s *Store) checkpointSubject(uid string) string {
	return checkpointPrefix(s.cfg.SubjectPrefix) + "." + uid
}

// View is what a projector reads of one UID: the latest checkpoint's
// records followed by every journal record after it, in stream order.
type View struct {
	UID     string
	Records []Record
	// Tail counts the records read after the checkpoint.
	Tail int
	// Through is the checkpoint's journal sequence (0: no checkpoint).
	Through uint64
	// Last is the sequence of the UID's last record in the journal stream
	// when it was read (0: none left, e.g. all aged out): pass it to
	// ExpectLastSequence. It can be lower than the records' sequences when
	// retention removed records the checkpoint still holds.
	Last uint64
	// checkpointSeq is the checkpoint's sequence in its own stream (0:
	// none), for the optimistic write of the next one.
	checkpointSeq uint64
	// cached: v continues a View this process read before, and does not
	// see a checkpoint another process wrote since.
	cached bool
}

// HasCheckpoint reports whether the UID may have a checkpoint message
// (one that DropCheckpoint would remove, trusted or not): it had one when
// v was read, or v was continued from this process's earlier read of the
// UID (ReadView), which does not look for a checkpoint another writer
// stored since.
func (v View) HasCheckpoint() bool { return v.checkpointSeq != 0 || v.cached }

// ReadView reads one UID from its checkpoint: the checkpoint (the last
// message of its subject, from the leader) and the journal records after
// it. Without a checkpoint (or without the checkpoint stream, for
// read-only tools) it is Read. Errors as Read.
//
// A store opened with Open keeps the View it returned (at most
// Config.ViewCache UIDs, each for at most 10 minutes or half of MaxAge) and
// continues it on the next ReadView of the UID: the UID's last sequence
// from the stream leader, as every read, then only the records after the
// kept View (one message get each for the first few, a consumer for
// more). Its records, Last and Tail are those a fresh read returns, with
// this store's own appends and checkpoints folded in; a checkpoint
// another process wrote since is not looked for (HasCheckpoint then says
// the UID may have one), and this store's next WriteCheckpoint, refused
// by the checkpoint's expected sequence, makes the next read a fresh one.
// It is meant for the one projector deciding for the UID; a reader that
// waits for another process's checkpoint uses a store of its own per read
// or OpenExisting (read-only stores keep nothing). The returned slice is
// the caller's; the records' Result, Payload and Proof are shared with
// the kept View and are read only.
func (s *Store) ReadView(ctx context.Context, uid string) (View, error) {
	if err := ValidateUID(uid); err != nil {
		return View{}, fmt.Errorf("journal: uid %w", err)
	}
	e := s.cachedView(uid)
	if e != nil {
		v, ok, err := s.readViewCached(ctx, e)
		if err != nil || ok {
			if ok {
				s.cfg.Metrics.countViewRead("cache")
			}
			return v, err
		}
		e = nil // dropped
	}
	s.cfg.Metrics.countViewRead("checkpoint")
	filled := time.Now()
	v := View{UID: uid}
	cp, seq, err := s.readCheckpoint(ctx, uid)
	if err != nil {
		return View{}, err
	}
	// The last sequence first: a record appended meanwhile is in the tail
	// and raises Last below.
	if v.Last, err = s.lastSeq(ctx, uid); err != nil {
		return View{}, err
	}
	start := uint64(1)
	v.checkpointSeq = seq
	if cp != nil {
		v.Through, start = cp.Through, cp.Through+1
		v.Records = append(v.Records, cp.Records...)
	}
	var tail []Record
	if start <= v.Last {
		// Records after the checkpoint exist (a record appended after the
		// last-sequence read is picked up by the next pass).
		if tail, err = s.readFrom(ctx, uid, start, v.Last, true); err != nil {
			return View{}, err
		}
	}
	v.Tail = len(tail)
	for _, r := range tail {
		v.Last = max(v.Last, r.Sequence)
	}
	v.Records = append(v.Records, tail...)
	s.swapView(uid, e, &viewEntry{v: v, filled: filled})
	v.Records = slices.Clone(v.Records)
	return v, nil
}

func (s *Store) readCheckpoint(ctx context.Context, uid string) (*Checkpoint, uint64, error) {
	if !s.checkpoints {
		return nil, 0, nil
	}
	m, err := s.lastOf(ctx, CheckpointStreamName(s.cfg.StreamName), s.checkpointSubject(uid))
	if err != nil || m == nil {
		return nil, 0, err
	}
	seq := m.seq
	var cp Checkpoint
	if err := json.Unmarshal(m.data, &cp); err != nil {
		// Not a checkpoint this build reads. A newer manager's (a field
		// changed shape) stops the read, as a newer one that decodes does;
		// so do bytes the manager signed (its message proof) and this build
		// can not read: both are the manager's, and failing safe beats
		// deciding without them. Anything else the manager never wrote:
		// read the whole journal, as for any untrusted checkpoint (failing
		// here stopped every read of the object for good).
		var probe struct {
			SchemaVersion int `json:"schemaVersion"`
		}
		if json.Unmarshal(m.data, &probe) == nil && probe.SchemaVersion > SchemaVersion && s.newerIsOurs(*m) {
			return nil, 0, fmt.Errorf("%w: checkpoint of %s has schema version %d", ErrNewerSchema, uid, probe.SchemaVersion)
		}
		if s.cfg.Trust != nil && s.newerIsOurs(*m) {
			return nil, 0, fmt.Errorf("%w: checkpoint of %s, signed by the manager: %v", ErrInvalidRecord, uid, err)
		}
		s.cfg.Metrics.countUntrusted("checkpoint")
		return nil, seq, nil
	}
	if cp.SchemaVersion > SchemaVersion {
		if !s.newerIsOurs(*m) {
			// A newer checkpoint nobody can attribute: read the whole
			// journal, as for any untrusted checkpoint.
			s.cfg.Metrics.countUntrusted("checkpoint")
			return nil, seq, nil
		}
		return nil, 0, fmt.Errorf("%w: checkpoint of %s has schema version %d", ErrNewerSchema, uid, cp.SchemaVersion)
	}
	if cp.UID != uid {
		// Another object's checkpoint (whatever its proof) says nothing
		// about this one: untrusted here.
		s.cfg.Metrics.countUntrusted("checkpoint")
		return nil, seq, nil
	}
	if err := s.admitCheckpoint(seq, m.data, &cp); err != nil {
		// Not the manager's: read the whole journal instead (the next
		// checkpoint written replaces it). Its sequence still guards the
		// next write.
		s.cfg.Metrics.countUntrusted("checkpoint")
		return nil, seq, nil
	}
	return &cp, seq, nil
}

// admitCheckpoint checks a checkpoint's own proof and every record it
// keeps (no check without Config.Trust), once per stored checkpoint
// message (seq in its stream, data its bytes); the error wraps
// ErrUntrusted.
func (s *Store) admitCheckpoint(seq uint64, data []byte, cp *Checkpoint) (err error) {
	if s.cfg.Trust == nil {
		return nil
	}
	sum := sha256.Sum256(data)
	if s.verifiedCheckpoints.has(seq, sum) {
		return nil
	}
	defer func() {
		if err == nil {
			s.verifiedCheckpoints.add(seq, sum)
		}
	}()
	b, cerr := cp.canonical()
	if cerr != nil {
		return fmt.Errorf("%w: %v", ErrUntrusted, cerr)
	}
	if err := s.cfg.Trust.verify(checkpointContext, cp.Proof, b); err != nil {
		return err
	}
	for i := range cp.Records {
		if err := s.admit("", &cp.Records[i]); err != nil {
			return err
		}
	}
	return nil
}

// WriteCheckpoint stores the compaction of v (through its last record) as
// the UID's checkpoint, unless it would not advance the current one. The
// write is optimistic on the checkpoint subject: when another writer got
// there first, nothing is written and no error returned (both checkpoints
// are valid). Payloads are copied as they were journaled (they passed the
// secret-field guard when appended).
func (s *Store) WriteCheckpoint(ctx context.Context, v View) error {
	if !s.checkpoints {
		return errors.New("journal: the checkpoint stream was not opened (journal.Open creates it)")
	}
	if err := ValidateUID(v.UID); err != nil {
		return fmt.Errorf("journal: uid %w", err)
	}
	kept := Compact(v.Records)
	cp := Checkpoint{SchemaVersion: SchemaVersion, UID: v.UID, Through: v.Through}
	for _, r := range v.Records {
		cp.Through = max(cp.Through, r.Sequence)
	}
	if cp.Through == v.Through {
		return nil
	}
	cp.Records = kept
	if s.cfg.Signer != nil {
		b, err := cp.canonical()
		if err != nil {
			return fmt.Errorf("journal: encode checkpoint: %w", err)
		}
		cp.Proof = s.cfg.Signer.sign(checkpointContext, b)
	}
	data, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("journal: encode checkpoint: %w", err)
	}
	msg := nats.NewMsg(s.checkpointSubject(v.UID))
	msg.Data = data
	if s.cfg.Signer != nil {
		msg.Header.Set(MessageProofHeader, s.cfg.Signer.messageProof(msg.Subject, data))
	}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(v.checkpointSeq, 10))
	// An unanswered publish (its leader died or handed over with it in
	// flight) is sent again, as Append does; if the first one was stored,
	// the expected sequence refuses the second, which is success.
	var ack *jetstream.PubAck
	err = untilAnswered(ctx, func(actx context.Context) (err error) {
		s.cfg.Metrics.countRequest("publish")
		ack, err = s.js.PublishMsg(actx, msg)
		return err
	})
	if err == nil {
		s.checkpointWritten(&cp, data, v.checkpointSeq, ack.Sequence)
		return nil
	}
	// This process no longer knows which checkpoint is the UID's: its
	// next read starts from the checkpoint again.
	s.forgetView(v.UID)
	var apiErr *jetstream.APIError
	// Another checkpoint was written after the one read (by another
	// replica, or an earlier attempt of this one: 10164 while that is
	// still being replicated): it stands; the next pass reads it.
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return nil
	}
	return fmt.Errorf("journal: write checkpoint of %s: %w", v.UID, err)
}

// DropCheckpoint removes the UID's checkpoint (the object is gone; its
// journal records stay for forensics until retention removes them).
func (s *Store) DropCheckpoint(ctx context.Context, uid string) error {
	if err := ValidateUID(uid); err != nil {
		return fmt.Errorf("journal: uid %w", err)
	}
	s.forgetView(uid)
	s.mu.Lock()
	st := s.checkpointStream
	s.mu.Unlock()
	if st == nil {
		// One stream lookup per process, not one per dropped checkpoint.
		var err error
		st, err = s.js.Stream(ctx, CheckpointStreamName(s.cfg.StreamName))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("journal: drop checkpoint of %s: %w", uid, err)
		}
		s.mu.Lock()
		s.checkpointStream = st
		s.mu.Unlock()
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(s.checkpointSubject(uid))); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s.mu.Lock()
			s.checkpointStream = nil
			s.mu.Unlock()
			return nil
		}
		return fmt.Errorf("journal: drop checkpoint of %s: %w", uid, err)
	}
	return nil
}
