package journal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"k8s.io/utils/clock"
)

// Defaults of the journal stream (docs/journal.md "Stream").
const (
	DefaultStreamName    = "AYATORI_JOURNAL"
	DefaultSubjectPrefix = "ayatori.journal"
	DefaultMaxAge        = 30 * 24 * time.Hour
	// DefaultDuplicateWindow is JetStream's Nats-Msg-Id de-duplication
	// window. Idempotency never depends on it (Append reads first).
	DefaultDuplicateWindow = 2 * time.Minute
	// StreamConfigVersion is stored in the stream metadata; bump it when
	// the stream settings this code expects change.
	StreamConfigVersion = "1"
	metadataConfigKey   = "ayatori.ddupan.top/journal-config-version"
	metadataSchemaKey   = "ayatori.ddupan.top/journal-schema-version"
)

// Config configures a Store.
type Config struct {
	// StreamName defaults to DefaultStreamName.
	StreamName string
	// SubjectPrefix defaults to DefaultSubjectPrefix. Subjects are
	// <prefix>.<domain>.<uid>.<type>.
	SubjectPrefix string
	// MaxAge is how long records are kept (default 30 days), so they
	// outlive the CR for forensics.
	MaxAge time.Duration
	// DuplicateWindow is the server-side Nats-Msg-Id window (default 2m).
	DuplicateWindow time.Duration
	// Replicas of the stream (default 1).
	Replicas int
	// Actor is written into every record this store appends (which
	// manager/executor instance); defaults to "unknown".
	Actor string
	// Clock stamps record times (default: the real clock).
	Clock clock.PassiveClock
	// Metrics receives append/delivery latencies (optional).
	Metrics *Metrics
	// Signer signs every record and checkpoint this store appends (the
	// manager's journal signing key; nil for read-only tools).
	Signer *SigningKey
	// Trust are the public keys whose records this store takes: with it,
	// Read, ReadView, WatchOutcomes and the executors' Consume drop (and
	// count) every record without a valid proof, Consume answers an
	// untrusted intent with a Failed/UntrustedIntent outcome and never runs
	// it, and Scan and Follow deliver such a record with an error wrapping
	// ErrUntrusted. Defaults to the Signer's own public key; Consume
	// refuses to run without it.
	Trust *TrustedKeys
	// ViewCache is how many objects' Views ReadView keeps to continue
	// (0: 10,000; negative: none, every ReadView starts from the
	// checkpoint).
	ViewCache int
	// ViewCacheBytes bounds the estimated memory of those Views, in bytes
	// (0: DefaultViewCacheBytes, 64 MiB). A View larger than a quarter of
	// it is not kept.
	ViewCacheBytes int
}

func (c *Config) defaults() {
	if c.StreamName == "" {
		c.StreamName = DefaultStreamName
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Actor == "" {
		c.Actor = "unknown"
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Trust == nil && c.Signer != nil {
		c.Trust = NewTrustedKeys(c.Signer.Public())
	}
}

// Store appends and reads journal records on one JetStream stream.
// It is safe for concurrent use.
type Store struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	// checkpoints: the checkpoint stream exists (Open creates it;
	// OpenExisting finds it or reads without checkpoints).
	checkpoints bool
	// checkpointStream is the checkpoint stream's handle once looked up
	// (DropCheckpoint), under mu.
	checkpointStream jetstream.Stream
	// readOnly: opened with OpenExisting (the read-only tools): reads use
	// direct gets only.
	readOnly bool

	mu sync.Mutex
	// uids caches what this process knows of each UID's records. An entry
	// (its ids map and lastSeq) is read and written only by the holder of
	// that UID's lock (lockUID); the map itself only under mu. It is
	// dropped wholesale when it grows past uidCacheLimit: a holder keeps
	// using the entry it has, and the next holder rebuilds one.
	uids map[string]*uidState
	// uidLocks serialises appends and reads of the cache per UID inside
	// this process, so two goroutines never race on one UID's expected
	// sequence or cached IDs. An entry lives exactly as long as some
	// goroutine holds or waits for it (reference counted, see lockUID), so
	// the map never needs a reset and one UID never has two locks.
	uidLocks map[string]*uidMutex
	// views are the Views this process read or wrote, by UID (see
	// viewEntry), under mu; each entry is replaced, never changed.
	views map[string]*viewEntry
	// viewBytes is the sum of the cached Views' bytes (s.mu).
	viewBytes int
	// inflight holds the intent IDs this process's executor is processing
	// (see takeIntent), under mu.
	inflight map[string]chan struct{}
	// outcomeSignals wake the intents waiting here for another intent of
	// the same UID (Record.After): closed when this process records an
	// outcome of the UID (see awaitDependency), under mu.
	outcomeSignals map[string]chan struct{}
	// newerHeld are the stream sequences of the intents of a newer schema
	// version this process's executor handed back for a newer executor,
	// with until when each counts (see holdNewer), under mu.
	newerHeld map[uint64]time.Time
	// verified are the journal messages that passed verification;
	// verifiedCheckpoints the checkpoint stream's.
	verified, verifiedCheckpoints verifiedCache
}

// uidMutex is one UID's lock and the number of goroutines holding or
// waiting for it (guarded by Store.mu).
type uidMutex struct {
	sync.Mutex
	refs int
}

// uidCacheLimit bounds the per-process cache of UID states (Store.uids);
// a variable so tests can lower it.
var uidCacheLimit = 100_000

// uidState caches what this process knows of one UID's records.
type uidState struct {
	lastSeq uint64
	ids     map[string]uint64 // record ID -> sequence
	// failed holds the results of the outcomes that did not succeed, by
	// outcome record ID (a dependent intent's consumer reads them).
	failed map[string]Result
}

// note adds a record of the UID at seq.
func (st *uidState) note(r *Record, seq uint64) {
	st.ids[r.ID] = seq
	if r.Type == TypeOutcome && r.Result != nil && r.Result.Class != Succeeded {
		if st.failed == nil {
			st.failed = map[string]Result{}
		}
		st.failed[r.ID] = *r.Result
	}
}

// ErrConflict is returned by Append when the UID's journal moved past the
// sequence the caller decided on (Nats-Expected-Last-Subject-Sequence
// mismatch). The caller must re-read the UID's records and decide again.
var ErrConflict = errors.New("journal: conflict: the object's journal changed since it was read")

// StreamConfig returns the JetStream stream configuration for cfg: file
// storage, retention by age, direct get, and the de-duplication window.
// The server must run with sync_interval: always (or replicas) so that an
// acknowledged record survives a host crash.
func StreamConfig(cfg Config) jetstream.StreamConfig {
	cfg.defaults()
	return jetstream.StreamConfig{
		Name:        cfg.StreamName,
		Description: "Ayatori operation journal: intents, outcomes and notes per object UID",
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.DuplicateWindow,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
		DenyDelete:  true,
		Metadata: map[string]string{
			metadataConfigKey: StreamConfigVersion,
			metadataSchemaKey: strconv.Itoa(SchemaVersion),
		},
	}
}

// Open creates or updates the journal stream (idempotent) and returns a
// Store. A StreamName or SubjectPrefix that is not plain subject tokens
// (see ValidateStreamName, ValidateSubjectPrefix) is an error wrapping
// ErrInvalidSubjectToken, before any request.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	stream, err := createOrUpdateStream(ctx, js, StreamConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("journal: create or update stream %s: %w", cfg.StreamName, err)
	}
	if _, err := createOrUpdateStream(ctx, js, CheckpointStreamConfig(cfg)); err != nil {
		return nil, fmt.Errorf("journal: create or update stream %s: %w", CheckpointStreamName(cfg.StreamName), err)
	}
	return &Store{cfg: cfg, nc: nc, js: js, stream: stream, checkpoints: true, uids: map[string]*uidState{}, uidLocks: map[string]*uidMutex{},
		views: map[string]*viewEntry{}}, nil
}

// createOrUpdateStream is js.CreateOrUpdateStream (idempotent), asked again
// when the JetStream API did not answer within the client's request
// timeout (a busy or just-elected server) while ctx is still live: up to 5
// attempts, 0.5 s apart.
func createOrUpdateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	for attempt := 1; ; attempt++ {
		st, err := js.CreateOrUpdateStream(ctx, cfg)
		if err == nil || attempt == 5 || ctx.Err() != nil ||
			!(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// OpenExisting binds to an existing journal stream without changing it (for
// read-only tools). Config errors as for Open.
func OpenExisting(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	stream, err := js.Stream(ctx, cfg.StreamName)
	if err != nil {
		return nil, fmt.Errorf("journal: stream %s: %w", cfg.StreamName, err)
	}
	checkpoints := true
	if _, err := js.Stream(ctx, CheckpointStreamName(cfg.StreamName)); errors.Is(err, jetstream.ErrStreamNotFound) {
		checkpoints = false
	} else if err != nil {
		return nil, fmt.Errorf("journal: stream %s: %w", CheckpointStreamName(cfg.StreamName), err)
	}
	return &Store{cfg: cfg, nc: nc, js: js, stream: stream, checkpoints: checkpoints, readOnly: true, uids: map[string]*uidState{}, uidLocks: map[string]*uidMutex{}}, nil
}

// Config returns the effective configuration.
func (s *Store) Config() Config { return s.cfg }

// JetStream returns the underlying JetStream context.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Subject returns the subject of a record: <prefix>.<domain>.<uid>.<type>.
func (s *Store) Subject(obj ObjectRef, typ RecordType) (string, error) {
	d, err := Domain(obj.Group)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s.%s.%s.%s", s.cfg.SubjectPrefix, d, obj.UID, typ), nil
}

// uidFilter matches every record of one UID, in any domain and of any type.
func (s *Store) uidFilter(uid string) string {
	return fmt.Sprintf("%s.*.%s.*", s.cfg.SubjectPrefix, uid)
}

// AppendOption tunes one Append.
type AppendOption func(*appendOptions)

type appendOptions struct {
	expected   *uint64
	maxRetries int
}

// ExpectLastSequence makes Append fail with ErrConflict unless the UID's
// last record is still at seq (0: the UID has no records). Projectors pass
// the sequence of the records they decided on.
func ExpectLastSequence(seq uint64) AppendOption {
	return func(o *appendOptions) { o.expected = &seq }
}

// AppendResult reports what Append did.
type AppendResult struct {
	// Sequence of the record in the stream (the existing one on Duplicate).
	Sequence uint64
	// Duplicate is true when a record with the same ID already existed
	// before this call and nothing was written. A record stored by this
	// call's own earlier attempt (a publish that went unanswered, then
	// found stored) is reported as written: Duplicate false.
	Duplicate bool
}

// Append writes rec and returns after the server acknowledged it (the
// server fsyncs before acking when run with sync_interval: always).
//
// Guarantees (docs/journal.md "Guarantees"):
//   - idempotent by record ID: the ID is sent as Nats-Msg-Id, and Append
//     first reads the UID's records, so a record whose ID exists is never
//     written twice, however long after the server's dedupe window;
//   - per-UID optimistic concurrency: the publish carries the UID's last
//     sequence (Nats-Expected-Last-Subject-Sequence over the UID's
//     subjects); with ExpectLastSequence a moved journal yields ErrConflict,
//     without it Append re-reads and retries a few times;
//   - a publish in flight to a leader that dies or stalls is sent again:
//     each attempt waits 2 s, then 4 s, then 8 s, and the next one reads
//     the UID first (a stored record answers Duplicate), until ctx's
//     deadline or for 20 s without one (docs/journal.md, limitation 3).
//
// Append fills in SchemaVersion, Actor and Time when they are zero and
// validates the record first; an invalid record returns ErrInvalidRecord
// and nothing is written.
func (s *Store) Append(ctx context.Context, rec *Record, opts ...AppendOption) (AppendResult, error) {
	res, err := s.append(ctx, rec, opts...)
	if err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrInvalidRecord) && ctx.Err() == nil {
		s.cfg.Metrics.countAppendError()
	}
	return res, err
}

func (s *Store) append(ctx context.Context, rec *Record, opts ...AppendOption) (AppendResult, error) {
	o := appendOptions{maxRetries: 5}
	for _, opt := range opts {
		opt(&o)
	}
	if rec.SchemaVersion == 0 {
		rec.SchemaVersion = SchemaVersion
	}
	if rec.Actor == "" {
		rec.Actor = s.cfg.Actor
	}
	if rec.Time.IsZero() {
		rec.Time = s.cfg.Clock.Now().UTC()
	}
	rec.Sequence = 0
	if err := rec.Validate(); err != nil {
		return AppendResult{}, err
	}
	subject, err := s.Subject(rec.Object, rec.Type)
	if err != nil {
		return AppendResult{}, err
	}
	if s.cfg.Signer != nil {
		if err := rec.Sign(s.cfg.Signer); err != nil {
			return AppendResult{}, err
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return AppendResult{}, fmt.Errorf("journal: encode record: %w", err)
	}
	msgID := messageID(rec)
	unlock := s.lockUID(rec.Object.UID)
	defer unlock()

	start := time.Now()
	budget := requestBudget(ctx)
	conflicts, unansweredRetries := 0, 0
	// sent: an attempt of this call went out and was not answered, so
	// the record found stored from now on is most likely this call's.
	sent := false
	for attempt := 0; ; attempt++ {
		// The read-first check needs no round trip when this process's
		// cache of the UID is current: the cache holds every ID up to its
		// last sequence, and the publish below carries that sequence as
		// the expected one, so a record stored after it (by anyone) makes
		// the server refuse the publish and the loop reads first.
		st := s.cached(rec.Object.UID)
		if st == nil || attempt > 0 || (o.expected != nil && *o.expected != st.lastSeq) {
			var err error
			if st, err = s.refresh(ctx, rec.Object.UID); err != nil {
				return AppendResult{}, err
			}
		}
		if seq, ok := st.ids[rec.ID]; ok {
			return AppendResult{Sequence: seq, Duplicate: !sent}, nil
		}
		expected := st.lastSeq
		if o.expected != nil {
			if *o.expected != st.lastSeq {
				return AppendResult{}, fmt.Errorf("%w (expected last sequence %d, now %d)", ErrConflict, *o.expected, st.lastSeq)
			}
			expected = *o.expected
		}
		msg := nats.NewMsg(subject)
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
		if s.cfg.Signer != nil {
			msg.Header.Set(MessageProofHeader, s.cfg.Signer.messageProof(subject, data))
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", s.uidFilter(rec.Object.UID))
		actx, cancel := context.WithTimeout(ctx, attemptTimeout(unansweredRetries+1))
		s.cfg.Metrics.countRequest("publish")
		ack, err := s.js.PublishMsg(actx, msg)
		cancel()
		if err != nil {
			if (unanswered(ctx, err) || inProcess(err)) && time.Since(start) < budget {
				// Unanswered: the stream leader died or handed over with
				// the publish in flight, or there is no leader yet. Or
				// an earlier attempt of this record (one that timed out
				// on a slow leader) is still in process there. The next
				// attempt reads first (from the leader), so a record
				// that was stored is answered as Duplicate; the same
				// Nats-Msg-Id and expected sequence keep a second copy
				// out in any case.
				unansweredRetries++
				sent = true
				if err := sleepCtx(ctx, retryBackoff(unansweredRetries)); err != nil {
					return AppendResult{}, fmt.Errorf("journal: append %s: %w", rec.ID, err)
				}
				continue
			}
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
				s.forget(rec.Object.UID)
				if o.expected != nil {
					// The journal moved: the record may be among what moved
					// it (an earlier attempt whose ack was lost).
					st, rerr := s.refresh(ctx, rec.Object.UID)
					if rerr != nil {
						return AppendResult{}, rerr
					}
					if seq, ok := st.ids[rec.ID]; ok {
						return AppendResult{Sequence: seq, Duplicate: !sent}, nil
					}
				}
				conflicts++
				if o.expected != nil || conflicts > o.maxRetries {
					return AppendResult{}, fmt.Errorf("%w (expected last sequence %d)", ErrConflict, expected)
				}
				continue
			}
			return AppendResult{}, fmt.Errorf("journal: append %s: %w", rec.ID, err)
		}
		if ack.Duplicate {
			// The server saw this Nats-Msg-Id inside its window: the record
			// exists. Re-read to learn its sequence.
			s.forget(rec.Object.UID)
			st, err := s.refresh(ctx, rec.Object.UID)
			if err != nil {
				return AppendResult{}, err
			}
			seq, ok := st.ids[rec.ID]
			if !ok {
				seq = ack.Sequence // the stored copy's, as the server's dedupe holds it
			}
			return AppendResult{Sequence: seq, Duplicate: !sent}, nil
		}
		st.lastSeq = ack.Sequence
		st.note(rec, ack.Sequence)
		s.extendView(rec.Object.UID, subject, expected, data, ack.Sequence)
		s.cfg.Metrics.observeAppend(time.Since(start))
		return AppendResult{Sequence: ack.Sequence}, nil
	}
}

// requestAttemptTimeout bounds the first attempt of a request to a leader
// (a publish, a message get, a consumer create). A leader that died or
// handed over leadership with the request in flight never answers it;
// waiting out a client timeout (5 s for a publish) made every election
// cost at least that (docs/journal.md, known limitation 3). An fsynced R3
// publish on a saturated 2-core machine answers well inside it.
const requestAttemptTimeout = 2 * time.Second

// attemptTimeout bounds the n-th (1-based) attempt: requestAttemptTimeout
// doubled per attempt, at most 8 s, so a leader that is alive but slower
// than 2 s is still waited for.
func attemptTimeout(n int) time.Duration {
	return min(requestAttemptTimeout<<min(n-1, 2), 8*time.Second)
}

// requestBudget is how long unanswered requests are retried: until ctx's
// deadline, or 20 s without one (an election took up to 16 s on a loaded
// machine in TestR3ClusterFaults).
func requestBudget(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return 20 * time.Second
}

// unanswered reports whether err means a request got no answer in its
// attempt (timeout, no responders, no stream response), or the answer a
// leader election gives (JetStream system temporarily unavailable, from
// the meta group; the expected last sequence per subject temporarily
// unavailable, from a new stream leader), while the caller's ctx is still
// live.
func unanswered(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsErrCodeClusterNotAvailable, jsErrCodeExpectedLastSeqPerSubjectNotReady:
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// inProcess reports whether a publish was refused because a message with
// its Nats-Msg-Id (10158) or one on its expected-last-sequence subject
// (10164, replicated streams) is still being replicated: typically an
// earlier attempt of the same record that timed out on a slow leader. It
// is neither stored nor refused for good: read again and retry.
func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jsErrCodeDuplicateMessageInProcess || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// JetStream error codes (nats-server errors.json) nats.go names no
// constant for.
const (
	jsErrCodeDuplicateMessageInProcess         jetstream.ErrorCode = 10158 // JSStreamDuplicateMessageConflict, 409
	jsErrCodeClusterNotAvailable               jetstream.ErrorCode = 10008 // JSClusterNotAvailErr, 503
	jsErrCodeExpectedLastSeqPerSubjectNotReady jetstream.ErrorCode = 10163 // JSStreamExpectedLastSeqPerSubjectNotReady, 503
)

// untilAnswered sends a request to a leader (req, given a context bounded
// by attemptTimeout) again while it goes unanswered, until ctx's
// deadline or requestBudget; it returns req's last error (nil: answered).
// Only for requests that are safe to repeat.
func untilAnswered(ctx context.Context, req func(context.Context) error) error {
	start, budget := time.Now(), requestBudget(ctx)
	for retries := 1; ; retries++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout(retries))
		err := req(actx)
		cancel()
		if err == nil || !unanswered(ctx, err) || time.Since(start) >= budget {
			return err
		}
		if err := sleepCtx(ctx, retryBackoff(retries)); err != nil {
			return err
		}
	}
}

// retryBackoff is the pause before the n-th (1-based) retry of an
// unanswered request: 100 ms × n, at most 1 s.
func retryBackoff(n int) time.Duration {
	return min(time.Duration(n)*100*time.Millisecond, time.Second)
}

// sleepCtx sleeps d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// messageID is the Nats-Msg-Id of a record: its ID, and for a signed record
// the start of its signature. The server's window then de-duplicates a
// retried publish of the same bytes (Ed25519 signatures are deterministic),
// while a record someone else published under the same ID, which this
// store does not trust, can never make the server drop ours. Idempotency by
// ID is Append's read-first check over the trusted records.
func messageID(rec *Record) string {
	if rec.Proof == nil || len(rec.Proof.Signature) < 8 {
		return rec.ID
	}
	return rec.ID + "~" + hex.EncodeToString(rec.Proof.Signature[:8])
}

// lockUID locks uid's lock and returns the function that unlocks it. The
// lock is created on first use and removed when its last holder or waiter
// unlocks, so the map holds only the UIDs in use right now: it is never
// reset, and a UID never has two locks at once (a reset while a goroutine
// held the old lock let a second goroutine into the same UID: a concurrent
// write of its cached state).
func (s *Store) lockUID(uid string) (unlock func()) {
	unlock, _ = s.takeUID(uid, true)
	return unlock
}

// tryLockUID is lockUID without waiting: ok false (and no unlock) when
// another goroutine holds uid's lock.
func (s *Store) tryLockUID(uid string) (unlock func(), ok bool) { return s.takeUID(uid, false) }

func (s *Store) takeUID(uid string, wait bool) (unlock func(), ok bool) {
	s.mu.Lock()
	l, found := s.uidLocks[uid]
	if !found {
		l = &uidMutex{}
		s.uidLocks[uid] = l
	}
	l.refs++
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(s.uidLocks, uid)
		}
		s.mu.Unlock()
	}
	if wait {
		l.Lock()
	} else if !l.TryLock() {
		release()
		return nil, false
	}
	return func() {
		l.Unlock()
		release()
	}, true
}

// cached returns this process's state of uid without reading the server
// (nil: none). The caller holds uid's lock (lockUID).
func (s *Store) cached(uid string) *uidState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uids[uid]
}

func (s *Store) forget(uid string) {
	s.mu.Lock()
	delete(s.uids, uid)
	s.mu.Unlock()
}

// refresh brings the cached state of uid up to date with the server: one
// direct "last message of the UID's subjects" lookup, and a read of the
// records after the cached sequence only when the journal moved. The
// caller holds uid's lock (lockUID).
func (s *Store) refresh(ctx context.Context, uid string) (*uidState, error) {
	last, err := s.lastSeq(ctx, uid)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	st, ok := s.uids[uid]
	if !ok {
		if len(s.uids) >= uidCacheLimit {
			s.uids = map[string]*uidState{}
		}
		st = &uidState{ids: map[string]uint64{}}
		s.uids[uid] = st
	}
	s.mu.Unlock()
	if last < st.lastSeq {
		// Retention removed the UID's newest records (all of them, when
		// last is 0): the server checks the expected sequence against what
		// it holds now. The IDs seen stay known.
		st.lastSeq = last
	}
	if last == st.lastSeq {
		return st, nil
	}
	recs, err := s.readFrom(ctx, uid, st.lastSeq+1, last, false)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		st.note(&r, r.Sequence)
		if r.Sequence > st.lastSeq {
			st.lastSeq = r.Sequence
		}
	}
	if st.lastSeq < last {
		st.lastSeq = last
	}
	return st, nil
}

// lastSeq returns the sequence of the UID's last record (0: none), as the
// stream leader holds it (see lastOf).
func (s *Store) lastSeq(ctx context.Context, uid string) (uint64, error) {
	m, err := s.last(ctx, uid)
	if err != nil || m == nil {
		return 0, err
	}
	return m.seq, nil
}

func (s *Store) last(ctx context.Context, uid string) (*storedMsg, error) {
	if err := ValidateUID(uid); err != nil {
		return nil, fmt.Errorf("journal: uid %w", err)
	}
	return s.lastOf(ctx, s.cfg.StreamName, s.uidFilter(uid))
}

// msgGetRequest is the body of JetStream's message get
// ($JS.API.STREAM.MSG.GET.<stream>), which only the stream leader answers.
type msgGetRequest struct {
	Seq           uint64     `json:"seq,omitempty"`
	LastBySubject string     `json:"last_by_subj,omitempty"`
	NextBySubject string     `json:"next_by_subj,omitempty"`
	StartTime     *time.Time `json:"start_time,omitempty"`
}

// msgGetResponse is its answer.
type msgGetResponse struct {
	Message *struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Header  []byte `json:"hdrs"`
		Data    []byte `json:"data"`
	} `json:"message"`
	Error *jetstream.APIError `json:"error"`
}

// lastOf returns the last message of stream on subject (a filter; nil:
// none) as the stream leader holds it, which holds every acknowledged
// record: a message get, which only the leader answers. (A direct get is
// answered by any member of the stream's direct-get group: on a cluster a
// replica still catching up answers without the newest records, and a
// decision taken on that read could wait forever for an outcome it does
// not see; docs/journal.md, known limitation 2.) Without an answer within
// ctx's deadline (20 s of attempts when ctx has none: leaderGet) it is an
// error: a stream without a leader cannot be read consistently.
func (s *Store) lastOf(ctx context.Context, stream, subject string) (*storedMsg, error) {
	return s.leaderGet(ctx, stream, "last record of "+subject, msgGetRequest{LastBySubject: subject})
}

// firstSince returns the first message of stream on subject (a filter)
// stored at or after since, as the leader holds it (nil: none).
func (s *Store) firstSince(ctx context.Context, stream, subject string, since time.Time) (*storedMsg, error) {
	return s.leaderGet(ctx, stream, "first record of "+subject+" since "+since.UTC().Format(time.RFC3339Nano),
		msgGetRequest{NextBySubject: subject, StartTime: &since})
}

// leaderGet sends one message get to stream's leader; what names the
// record asked for in errors ("last record of <filter>", "first record of
// <filter> since <time>"). A "no message found" answer is (nil, nil).
//
// Each request waits attemptTimeout; an unanswered one (the leader
// died or handed over with it in flight, or there is no leader yet) or
// one answered with an election's error (10008 in the reply's body) is
// sent again until ctx's deadline, or for requestBudget without one.
func (s *Store) leaderGet(ctx context.Context, stream, what string, req msgGetRequest) (*storedMsg, error) {
	body, _ := json.Marshal(req)
	var resp msgGetResponse
	if err := untilAnswered(ctx, func(actx context.Context) error {
		s.cfg.Metrics.countRequest("message_get")
		m, err := s.nc.RequestWithContext(actx, "$JS.API.STREAM.MSG.GET."+stream, body)
		if err != nil {
			return err
		}
		resp = msgGetResponse{}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil && resp.Error.ErrorCode != jetstream.JSErrCodeMessageNotFound {
			// An election's answer (10008) is sent again like a
			// timeout (unanswered); any other error is final.
			return resp.Error
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", what, err)
	}
	switch {
	case resp.Error != nil:
		return nil, nil
	case resp.Message == nil:
		return nil, fmt.Errorf("journal: read %s: an answer without a message", what)
	}
	out := &storedMsg{subject: resp.Message.Subject, data: resp.Message.Data, seq: resp.Message.Seq}
	if len(resp.Message.Header) > 0 {
		// Unreadable headers leave hdr nil: a message proof then fails.
		out.hdr, _ = nats.DecodeHeadersMsg(resp.Message.Header)
	}
	return out, nil
}

// Read returns every record of one UID in stream order, up to the UID's
// last record as the stream leader held it when the read started (a
// per-subject lookup through a consumer filtered on the UID's subjects, not
// a stream scan). A read served by a replica behind the leader waits for
// it to catch up, up to ctx's deadline, and is an error rather than a
// journal without the newest records. Undecodable records are skipped (Scan and `ayatori-journal verify`
// report them); a record with a newer schema version is an ErrNewerSchema
// error, never skipped, when the manager wrote it (a valid
// MessageProofHeader; with Config.Trust, one without is skipped as
// untrusted). A uid that is not a UID (ValidateUID: wildcards,
// '.', white space, empty) is an error wrapping ErrInvalidSubjectToken.
func (s *Store) Read(ctx context.Context, uid string) ([]Record, error) {
	return s.readFrom(ctx, uid, 1, 0, true)
}

// ReadAfter returns the UID's records stored after sequence seq, in order
// (with Config.Trust, only those with a valid proof).
func (s *Store) ReadAfter(ctx context.Context, uid string, seq uint64) ([]Record, error) {
	return s.readFrom(ctx, uid, seq+1, 0, true)
}

// Latest returns the UID's last record, or nil when it has none (nor a
// trusted one: with Config.Trust an untrusted last record is an error
// wrapping ErrUntrusted). A uid that is not a UID is an error wrapping
// ErrInvalidSubjectToken.
func (s *Store) Latest(ctx context.Context, uid string) (*Record, error) {
	m, err := s.last(ctx, uid)
	if err != nil || m == nil {
		return nil, err
	}
	r, err := DecodeRecord(m.data, m.seq)
	if err != nil {
		return nil, err
	}
	if err := s.admitStored(m.subject, m.data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// admit checks a record read from subject against the trusted keys (no
// check without Config.Trust): it must carry a valid proof and be stored
// on its own subject, so a signed record copied onto another object's
// subject is not taken as that object's. subject "" skips the subject
// check (records kept inside a checkpoint). The error wraps ErrUntrusted.
func (s *Store) admit(subject string, r *Record) error {
	if s.cfg.Trust == nil {
		return nil
	}
	if subject != "" {
		want, err := s.Subject(r.Object, r.Type)
		if err != nil || subject != want {
			return fmt.Errorf("%w: the record names %s %s but was published on %s", ErrUntrusted, r.Object.UID, r.Type, shorten(subject))
		}
	}
	return s.cfg.Trust.Verify(r)
}

// admitStored is admit for a record read from the journal stream at r's
// sequence, with data its stored bytes: a stored message never changes, so
// a sequence whose bytes were verified once (same SHA-256) is not verified
// again (a projector pass reads the same records many times).
func (s *Store) admitStored(subject string, data []byte, r *Record) error {
	if s.cfg.Trust == nil {
		return nil
	}
	sum := sha256.Sum256(data)
	if s.verified.has(r.Sequence, sum) {
		return nil
	}
	if err := s.admit(subject, r); err != nil {
		return err
	}
	s.verified.add(r.Sequence, sum)
	return nil
}

// verifiedCache remembers which stored messages passed verification: by
// stream sequence, with the SHA-256 of their bytes. Bounded: dropped
// wholesale when it grows past verifiedLimit.
type verifiedCache struct {
	mu  sync.Mutex
	seq map[uint64][32]byte
}

// verifiedLimit bounds verifiedCache (about 48 bytes an entry).
var verifiedLimit = 200_000

func (c *verifiedCache) has(seq uint64, sum [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.seq[seq]
	return ok && got == sum
}

func (c *verifiedCache) add(seq uint64, sum [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq == nil || len(c.seq) >= verifiedLimit {
		c.seq = map[uint64][32]byte{}
	}
	c.seq[seq] = sum
}

// readFrom reads the UID's records from startSeq up to upTo (0: the UID's
// last sequence at the leader, looked up first; nothing to read needs no
// consumer).
func (s *Store) readFrom(ctx context.Context, uid string, startSeq, upTo uint64, strict bool) ([]Record, error) {
	if err := ValidateUID(uid); err != nil {
		return nil, fmt.Errorf("journal: uid %w", err)
	}
	if upTo == 0 {
		var err error
		if upTo, err = s.lastSeq(ctx, uid); err != nil {
			return nil, err
		}
	}
	if upTo < max(startSeq, 1) {
		return nil, nil
	}
	var out []Record
	err := s.eachMsgOf(ctx, s.stream, s.uidFilter(uid), startSeq, nil, upTo, func(m storedMsg) error {
		r, err := DecodeRecord(m.data, m.seq)
		if err != nil {
			if strict && errors.Is(err, ErrNewerSchema) {
				if s.newerIsOurs(m) {
					return err
				}
				s.cfg.Metrics.countUntrusted("read")
			}
			return nil
		}
		if s.admitStored(m.subject, m.data, &r) != nil {
			s.cfg.Metrics.countUntrusted("read")
			return nil
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// ScanOptions select the records Scan delivers.
type ScanOptions struct {
	// UID selects one object's records (empty: the whole stream, or Filter).
	UID string
	// Filter is a subject filter (ignored with UID); empty means the whole
	// stream.
	Filter string
	// Since starts at the first record stored at or after this time.
	Since *time.Time
	// StartSequence starts at this stream sequence (ignored with Since).
	StartSequence uint64
}

// Scan delivers every record selected by opts, in stream order, to fn,
// decoding each one; an undecodable record is passed as an error with its
// sequence, and (with Config.Trust) a record without a valid proof is
// passed with an error wrapping ErrUntrusted (fn decides whether to stop
// by returning an error). A record of a newer schema version is passed
// with an error wrapping ErrNewerSchema when the manager wrote it (a valid
// MessageProofHeader, or no Config.Trust) and, with Config.Trust, with
// one wrapping ErrUntrusted (not ErrNewerSchema) when it did not: a
// forged newer record is no reason to stop a read. It stops at the end of the stream as it was
// when the scan started (its last selected record at the stream leader;
// a replica behind it is waited for as in Read). A UID that is not a UID
// is an error wrapping ErrInvalidSubjectToken.
func (s *Store) Scan(ctx context.Context, opts ScanOptions, fn func(Record, error) error) error {
	filter := opts.Filter
	if opts.UID != "" {
		if err := ValidateUID(opts.UID); err != nil {
			return fmt.Errorf("journal: uid %w", err)
		}
		filter = s.uidFilter(opts.UID)
	}
	if filter == "" {
		filter = s.cfg.SubjectPrefix + ".>"
	}
	return s.eachMsgOf(ctx, s.stream, filter, opts.StartSequence, opts.Since, 0, func(m storedMsg) error {
		return fn(s.decodeStored(m))
	})
}

// decodeStored decodes m for a reader that reports every record (Scan,
// Follow): the record with a nil error, an undecodable one's error, an
// ErrNewerSchema error for a newer record the manager wrote (newerIsOurs)
// and, with Config.Trust, an error wrapping ErrUntrusted (and not
// ErrNewerSchema) for any record without a valid proof, newer or not.
func (s *Store) decodeStored(m storedMsg) (Record, error) {
	r, err := DecodeRecord(m.data, m.seq)
	switch {
	case err == nil:
		err = s.admitStored(m.subject, m.data, &r)
	case errors.Is(err, ErrNewerSchema) && !s.newerIsOurs(m):
		err = fmt.Errorf("%w: sequence %d: a record of schema version %d without a valid message proof", ErrUntrusted, m.seq, r.SchemaVersion)
	}
	return r, err
}

// ScanRaw delivers every stored message of the stream (data and headers),
// decodable or not; used by the secret canary scan.
func (s *Store) ScanRaw(ctx context.Context, fn func(data []byte, hdr nats.Header, seq uint64) error) error {
	return s.eachMsgOf(ctx, s.stream, s.cfg.SubjectPrefix+".>", 0, nil, 0, func(m storedMsg) error { return fn(m.data, m.hdr, m.seq) })
}

// newerIsOurs reports whether m, a record of a schema version newer than
// this build reads, is attributable to the manager: it carries a valid
// MessageProofHeader (always, without Config.Trust: nothing can be told
// then). A reader stops at such a record and skips any other as untrusted.
func (s *Store) newerIsOurs(m storedMsg) bool {
	if s.cfg.Trust == nil {
		return true
	}
	return s.cfg.Trust.verifyMessage(m.subject, m.data, m.hdr.Get(MessageProofHeader)) == nil
}

// storedMsg is one message read from a stream.
type storedMsg struct {
	subject string
	data    []byte
	hdr     nats.Header
	seq     uint64
}

// eachMsgOf delivers every message of stream matching filter from startSeq
// (or since) up to upTo to fn, in order; upTo 0 is the last message
// matching filter at the stream leader when the read starts (none: nothing
// is read). Every message up to upTo is delivered or the read fails: a
// replica behind the leader that serves the read is waited for (up to
// ctx's deadline and readFetchWait per fetch; a few short retries for
// direct gets), never taken as the end. A store opened with Open reads through one ephemeral pull consumer; one
// opened with OpenExisting, the read-only tools', with batched direct gets,
// which need no consumer, so the read-only NATS identity has no right to
// create one.
//
// The read ends at ctx's deadline whatever the server does: the consumer
// is created with ctx and every fetch waits at most until the deadline. (A
// nats.go ordered consumer is not used: its first fetch deletes the
// consumer just created and creates another, with its own 10-second
// timeouts retried until the server answers, so a read on a partitioned or
// frozen server outlived its deadline until the server came back, and
// every read cost the cluster's meta leader two consumer assignments.)
// Deliveries are checked instead: the consumer's delivery sequence must
// rise by one per message, or the read fails rather than skip a record.
func (s *Store) eachMsgOf(ctx context.Context, stream jetstream.Stream, filter string, startSeq uint64, since *time.Time, upTo uint64, fn func(storedMsg) error) error {
	name := stream.CachedInfo().Config.Name
	if since != nil {
		// The leader names the first message at or after since: a replica
		// behind it that has none is not taken as the end.
		m, err := s.firstSince(ctx, name, filter, *since)
		if err != nil || m == nil {
			return err
		}
		startSeq = m.seq
	}
	if upTo == 0 {
		m, err := s.lastOf(ctx, name, filter)
		if err != nil || m == nil {
			return err
		}
		upTo = m.seq
	}
	if upTo < startSeq {
		return nil
	}
	if s.readOnly {
		return s.eachMsgDirect(ctx, stream, filter, startSeq, upTo, fn)
	}
	// The consumer is deleted when the read ends; its inactivity threshold
	// cleans up after a crashed reader. It holds no state worth
	// replicating: one replica, in memory, no acks.
	cfg := jetstream.ConsumerConfig{Name: "read_" + nuid.Next(), FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: 30 * time.Second, Replicas: 1, MemoryStorage: true}
	if startSeq > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = startSeq
	}
	// The create goes to the meta leader; one that dies or hands over
	// with it in flight never answers, so it is sent again, as Append's
	// publish is, under a new name: the same name would be placed again
	// on the peer the first create chose, which may be the one that died.
	// A create that did happen unanswered leaves a consumer nobody reads,
	// deleted below with the rest (its inactivity threshold otherwise).
	var cons jetstream.Consumer
	var names []string
	defer func() {
		go func() {
			for _, name := range names {
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s.cfg.Metrics.countRequest("consumer_delete")
				_ = stream.DeleteConsumer(dctx, name)
				cancel()
			}
		}()
	}()
	if err := untilAnswered(ctx, func(actx context.Context) (err error) {
		if len(names) > 0 {
			cfg.Name = "read_" + nuid.Next()
		}
		names = append(names, cfg.Name)
		s.cfg.Metrics.countRequest("consumer_create")
		cons, err = stream.CreateConsumer(actx, cfg)
		return err
	}); err != nil {
		return fmt.Errorf("journal: read: create consumer: %w", err)
	}
	pending := cons.CachedInfo().NumPending
	var delivered uint64 // the consumer's last delivery sequence
	var reached uint64   // the stream sequence of the last message delivered
	// fetch asks for the pending messages (at least one) and delivers them
	// to fn, up to upTo. The messages exist already on the leader, so a
	// fetch of exactly the pending count returns as soon as they are
	// delivered; a consumer on a replica behind the leader counts fewer
	// and the next fetch waits for the rest. FetchContext: the pull
	// request expires before ctx does, and the client stops waiting when
	// ctx ends.
	fetch := func() (got int, err error) {
		fctx, cancel := context.WithTimeout(ctx, readFetchWait)
		defer cancel()
		s.cfg.Metrics.countRequest("fetch")
		batch, err := cons.Fetch(int(min(max(pending, 1), 1000)), jetstream.FetchContext(fctx))
		if err != nil {
			return 0, err
		}
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return got, err
			}
			if md.Sequence.Consumer != delivered+1 {
				return got, fmt.Errorf("a delivery was lost (delivery %d after %d)", md.Sequence.Consumer, delivered)
			}
			delivered = md.Sequence.Consumer
			if md.Sequence.Stream > upTo {
				// Stored after the read started: the next read gets it.
				reached = upTo
				return got, nil
			}
			reached = md.Sequence.Stream
			if err := fn(storedMsg{subject: m.Subject(), data: m.Data(), hdr: m.Headers(), seq: md.Sequence.Stream}); err != nil {
				return got, errStop{err}
			}
			pending = md.NumPending
			if reached == upTo {
				return got, nil
			}
		}
		if err := batch.Error(); err != nil && (got == 0 || !errors.Is(err, nats.ErrTimeout)) {
			return got, err
		}
		return got, nil
	}
	// On a cluster the pull request can reach the client's server before
	// the new consumer's interest does ("no responders"): retried briefly.
	noResponders := 0
	for reached < upTo {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("journal: read: delivered up to sequence %d of %d: %w", reached, upTo, err)
		}
		got, err := fetch()
		var stop errStop
		switch {
		case errors.As(err, &stop):
			return stop.err
		case got == 0 && errors.Is(err, nats.ErrNoResponders) && noResponders < 5:
			noResponders++
			time.Sleep(time.Duration(noResponders) * 20 * time.Millisecond)
			continue
		case got == 0 && (err == nil || errors.Is(err, nats.ErrTimeout)):
			return fmt.Errorf("journal: read: delivered up to sequence %d of %d, then nothing for %s: %w", reached, upTo, readFetchWait, ErrReplicaBehind)
		case err != nil:
			return fmt.Errorf("journal: read: %w", err)
		}
	}
	return nil
}

// ErrReplicaBehind: a read was served by a replica that did not reach the
// last record the stream leader held when the read started within the
// read's wait (a replica catching up; retention removing the record in
// between ends the same way). Reading again is safe.
var ErrReplicaBehind = errors.New("journal: the replica serving the read is behind the stream leader")

// errStop carries the error of a read's callback out of its fetch
// unwrapped.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// readFetchWait bounds one fetch of a read (less when the read's context
// ends sooner).
const readFetchWait = 5 * time.Second

// directBatch is how many messages one batched direct get asks for.
const directBatch = 500

// directBatchRequest is JetStream's batched direct get request body.
type directBatchRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj"`
	Batch   int    `json:"batch"`
}

// eachMsgDirect reads the messages of stream matching filter from startSeq
// up to upTo with batched direct gets and delivers them to fn in
// order. A direct get is answered by any member of the stream's direct-get
// group: one behind the leader ends its batch before upTo, and the rest is
// asked for again (directRetries times, 20 ms × attempt apart: another
// member answers, or the same one has caught up) before the read fails
// with ErrReplicaBehind.
func (s *Store) eachMsgDirect(ctx context.Context, stream jetstream.Stream, filter string, startSeq, upTo uint64, fn func(storedMsg) error) error {
	name := stream.CachedInfo().Config.Name
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("journal: read: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	next := max(startSeq, 1)
	short := 0
	for next <= upTo {
		body, _ := json.Marshal(directBatchRequest{Seq: next, NextFor: filter, Batch: directBatch})
		if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+name, inbox, body); err != nil {
			return fmt.Errorf("journal: read: %w", err)
		}
		last, complete, more, err := s.directBatchReply(ctx, sub, upTo, fn)
		switch {
		case err != nil || complete || last >= upTo:
			return err
		case last >= next:
			next = last + 1
			if more {
				continue
			}
		}
		// The member that answered had nothing more up to upTo: behind
		// the leader.
		if short++; short > directRetries {
			return fmt.Errorf("journal: read: direct gets delivered up to sequence %d of %d: %w", next-1, upTo, ErrReplicaBehind)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("journal: read: delivered up to sequence %d of %d: %w", next-1, upTo, ctx.Err())
		case <-time.After(time.Duration(short) * 20 * time.Millisecond):
		}
	}
	return nil
}

// directRetries bounds the direct gets that end short of a read's last
// sequence (about 2 s in all).
const directRetries = 12

// directBatchReply reads one batch of a direct get until its end-of-batch
// marker and delivers the messages up to upTo to fn. last: the last
// sequence delivered (0: none); complete: the member that answered holds a
// message after upTo, so it has every one up to it (a replica holds a
// prefix of the stream); more: it has more matching messages after last.
func (s *Store) directBatchReply(ctx context.Context, sub *nats.Subscription, upTo uint64, fn func(storedMsg) error) (last uint64, complete, more bool, err error) {
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	for {
		m, err := sub.NextMsgWithContext(rctx)
		if err != nil {
			return last, false, false, fmt.Errorf("journal: read: %w", err)
		}
		// A stored message's reply carries the headers its publisher
		// stored first and the server's own (Nats-Subject, Nats-Sequence)
		// after them: only the last value of each is the server's, and
		// only a reply without any Nats-Sequence is a status (the server
		// sends no stored headers with one). A publisher's "Status: 204"
		// or "Nats-Sequence" ended the read early and hid the records
		// after it from the read-only tools.
		seqs := m.Header.Values(jetstream.SequenceHeader)
		if len(seqs) == 0 {
			switch m.Header.Get("Status") {
			case "204": // end of batch
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return last, complete, pending > 0, nil
			case "404":
				return last, complete, false, nil
			default:
				return last, false, false, fmt.Errorf("journal: read: status %q %q", shorten(m.Header.Get("Status")), shorten(m.Header.Get("Description")))
			}
		}
		seq, _ := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
		if seq > upTo || complete {
			// Stored after the read started: the next read gets it. The
			// rest of this batch is drained and ignored.
			complete = true
			continue
		}
		last = seq
		subjects := m.Header.Values(jetstream.SubjectHeader)
		if len(subjects) == 0 {
			return last, false, false, fmt.Errorf("journal: read: a direct get reply at sequence %d without its subject", seq)
		}
		if err := fn(storedMsg{subject: subjects[len(subjects)-1], data: m.Data, hdr: m.Header, seq: seq}); err != nil {
			return last, true, false, drainBatch(rctx, sub, err)
		}
	}
}

// drainBatch reads the rest of a batch (up to its end-of-batch marker) so
// no reply of it is left in the subscription, and returns err.
func drainBatch(ctx context.Context, sub *nats.Subscription, err error) error {
	for {
		m, rerr := sub.NextMsgWithContext(ctx)
		if rerr != nil || (len(m.Header.Values(jetstream.SequenceHeader)) == 0 && m.Header.Get("Status") != "") {
			return err
		}
	}
}

// DecodeRecord decodes and validates one stored record.
func DecodeRecord(data []byte, seq uint64) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{Sequence: seq}, fmt.Errorf("%w at sequence %d: %v", ErrInvalidRecord, seq, err)
	}
	r.Sequence = seq
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("sequence %d: %w", seq, err)
	}
	return r, nil
}
