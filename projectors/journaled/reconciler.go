package journaled

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// History is the journal of one object UID as a pass sees it: the records
// of its checkpoint and every record after it, in stream order, and their
// fold. With Deps.Observed set, a record's Time is the local time this
// process first observed it (Observations), not the appender's clock.
type History struct {
	Records []journal.Record
	State   *journal.State
}

// CheckpointEvery is how many journal records after the UID's checkpoint
// make a pass write a new one (a pass at rest — nothing to append, nothing
// pending — writes one whenever there is any): the records a pass reads
// stay bounded whatever the object's age.
var CheckpointEvery = 32

// Plan is what one pass does, decided by Kind.Plan without any write.
type Plan[D any] struct {
	// Status is the decision Kind.Project writes into status at the end of
	// the pass (not written when RemoveFinalizer is set).
	Status D
	// Record, when set, is appended before anything else happens (an
	// intent, or a note), with journal.ExpectLastSequence of the journal as
	// read (journal.View.Last): a concurrent append makes the pass start
	// over.
	Record *journal.Record
	// Chain are further intents appended right after Record, in order,
	// each ordered after the one before it (journal.Record.After), so the
	// executors run them one after another without a pass in between. A
	// pass that fails part-way leaves a prefix of the chain, which the
	// next pass reads like any other pending intents.
	Chain []*journal.Record
	// Requeue asks for another pass at once (after a note, whose effect
	// the next decision reads from the journal).
	Requeue bool
	// RequeueAfter > 0 asks for another pass after that delay.
	RequeueAfter time.Duration
	// RemoveFinalizer: the object's external resources are settled; the
	// finalizer goes and no status is written.
	RemoveFinalizer bool
	// OnRelease runs just before the finalizer is removed (an Event naming
	// what was left in place, for example).
	OnRelease func()
	// Quiet: the Record is routine (a periodic observation) and is not
	// announced with an IntentAppended Event.
	Quiet bool
	// StatusFirst: Status is written before Record is appended, not after.
	// For an intent the executor checks against the status this pass
	// writes (an Ensure against the class the same pass pins): the intent
	// is then never delivered before that status exists. A pass whose
	// append fails after the write leaves only the status, which the next
	// pass decides on like any other.
	StatusFirst bool
	// StatusLost: the decision rests on an empty status. The skeleton
	// re-reads the object from the API server (Deps.APIReader) and repeats
	// the pass when the status is only missing from the cache.
	StatusLost bool
}

// Kind is what one kind of object contributes to the skeleton.
type Kind[O client.Object, D any] interface {
	// New returns an empty object of the kind (a pointer).
	New() O
	// Finalizer is the finalizer the skeleton adds to every live object
	// and removes when a Plan says RemoveFinalizer.
	Finalizer() string
	// Plan gathers the facts of one pass (reads only) and decides with the
	// kind's pure decision function. An error aborts the pass (controller
	// back-off) with nothing written.
	Plan(ctx context.Context, obj O, h History) (Plan[D], error)
	// Project writes d into obj's status: at most one write, none when
	// nothing changed. A NotFound is not an error.
	Project(ctx context.Context, obj O, d D) error
	// StatusPhase reads obj's status phase ("" when it has none).
	StatusPhase(obj O) string
}

// JournalUnavailable is optionally implemented by a Kind that reports an
// unreadable journal in its status (the pass still fails and is retried).
type JournalUnavailable[O client.Object, D any] interface {
	JournalUnavailable(obj O) D
}

// Deps are the clients a pass uses.
type Deps struct {
	Client client.Client
	// APIReader reads from the API server, bypassing the cache, to confirm
	// a lost status (nil: trust the cache).
	APIReader client.Reader
	Journal   *journal.Store
	// Recorder emits IntentAppended Events (nil: none).
	Recorder events.EventRecorder
	// Observed stamps records with their local observation time (nil:
	// records keep the appender's time; tests only).
	Observed *Observations
	// OwnWrites records the resourceVersion of the finalizer and status
	// writes a pass makes (nil: none), for the kind's OwnWrites.Predicate.
	OwnWrites *OwnWrites
}

// Reconcile runs one pass over the object req names.
func Reconcile[O client.Object, D any](ctx context.Context, req reconcile.Request, deps Deps, k Kind[O, D]) (reconcile.Result, error) {
	obj := k.New()
	kind, domain := kindOf(obj)
	if err := deps.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			pendingIntents.set(kind, domain, req.NamespacedName, nil)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	timer := newPhaseTimer(obj)
	fin := k.Finalizer()
	if !controllerutil.ContainsFinalizer(obj, fin) {
		if !obj.GetDeletionTimestamp().IsZero() {
			return reconcile.Result{}, nil
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		controllerutil.AddFinalizer(obj, fin)
		if err := deps.Client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, err
		}
		deps.OwnWrites.Record(obj)
		timer.done("finalizer")
	}
	uid := string(obj.GetUID())
	view, err := deps.Journal.ReadView(ctx, uid)
	timer.done("read")
	if err != nil {
		if u, ok := any(k).(JournalUnavailable[O, D]); ok {
			_ = k.Project(ctx, obj, u.JournalUnavailable(obj))
		}
		return reconcile.Result{}, fmt.Errorf("read journal: %w", err)
	}
	recs := deps.Observed.Stamp(uid, view.Records)
	h := History{Records: recs, State: journal.Fold(recs)}
	pending := h.State.Pending()
	pendingIntents.set(kind, domain, req.NamespacedName, pending)
	p, err := k.Plan(ctx, obj, h)
	if err != nil {
		return reconcile.Result{}, err
	}
	timer.done("plan")
	if p.StatusLost && deps.APIReader != nil {
		// The cache may not have seen this projector's own last status
		// write yet: an empty status there is not proof of a lost one.
		live := k.New()
		if err := deps.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if k.StatusPhase(live) != "" {
			return reconcile.Result{RequeueAfter: RequeueSoon}, nil
		}
	}
	atRest := p.Record == nil && len(h.State.Pending()) == 0
	// A note alone, nothing pending, no pass right after it: the object
	// is at rest after the note, and its checkpoint is written with the
	// note, after the append (not before it, without the note).
	loneNote := p.Record != nil && p.Record.Type == journal.TypeNote && len(p.Chain) == 0 && len(h.State.Pending()) == 0 &&
		!p.Requeue && (p.RequeueAfter == 0 || p.RequeueAfter >= time.Second)
	checkpointed := false
	if !loneNote && ((atRest && view.Tail > 0) || view.Tail >= CheckpointEvery) {
		// Fold what was read into the checkpoint: when the object comes to
		// rest (nothing to append, nothing pending), or when the tail grew
		// long. A failed write only costs a longer read next time.
		if err := deps.Journal.WriteCheckpoint(ctx, view); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "journal checkpoint not written")
		}
		checkpointed = true
		timer.done("checkpoint")
	}
	project := func() error {
		rv := obj.GetResourceVersion()
		if err := k.Project(ctx, obj, p.Status); err != nil {
			return err
		}
		if obj.GetResourceVersion() != rv {
			deps.OwnWrites.Record(obj) // Project wrote the status
		}
		timer.done("status")
		return nil
	}
	if p.StatusFirst && p.Record != nil && !p.RemoveFinalizer {
		if err := project(); err != nil {
			return reconcile.Result{}, err
		}
	}
	if p.Record != nil {
		last := view.Last
		for i, rec := range append([]*journal.Record{p.Record}, p.Chain...) {
			// Every record carries the journal as this pass knows it: a
			// concurrent decision makes the pass start over (the first
			// record) or ends the chain there (a link; the next pass
			// decides the rest). Outcomes the executors appended since
			// the record before it do not count as a decision.
			res, err := appendLink(ctx, deps.Journal, rec, last, i > 0)
			if errors.Is(err, errChainCut) {
				break
			}
			if errors.Is(err, journal.ErrConflict) {
				// Another replica (or pass) appended first: decide again on
				// the fresh journal.
				return reconcile.Result{RequeueAfter: RequeueSoon}, nil
			}
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("append %s %s: %w", rec.Operation, rec.Type, err)
			}
			last = res.Sequence
			if i == 0 && loneNote {
				// The journal of the UID is exactly what was read and
				// the note (the append expected the last sequence read):
				// the checkpoint takes both, so no pass is needed after
				// the note just to write it. When it cannot be written
				// (the note was there already, or the write failed), a
				// pass right after does it.
				noted := *rec
				noted.Sequence = res.Sequence
				at := view
				at.Records = append(append(make([]journal.Record, 0, len(view.Records)+1), view.Records...), noted)
				at.Tail++
				switch {
				case res.Duplicate:
					p.Requeue = true
				default:
					if err := deps.Journal.WriteCheckpoint(ctx, at); err != nil {
						ctrl.LoggerFrom(ctx).Error(err, "journal checkpoint not written")
						p.Requeue = true
					} else {
						checkpointed = true
					}
					timer.done("checkpoint")
				}
			}
			if rec.Type == journal.TypeIntent {
				if !res.Duplicate {
					now := *rec
					now.Time = time.Now()
					pending = append(pending, now)
					pendingIntents.set(kind, domain, req.NamespacedName, pending)
					ctrl.LoggerFrom(ctx).V(1).Info("intent appended", "operation", rec.Operation, "attempt", rec.Attempt, "seq", res.Sequence)
				}
				if !p.Quiet {
					AnnounceIntent(deps.Recorder, obj, rec.Operation, rec.Attempt, res)
				}
			}
		}
		timer.done("append")
	}
	if p.RemoveFinalizer {
		if p.OnRelease != nil {
			p.OnRelease()
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		controllerutil.RemoveFinalizer(obj, fin)
		if err := deps.Client.Patch(ctx, obj, patch); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		// The object is gone for good: its checkpoint goes (the journal
		// records stay for forensics until retention removes them).
		deps.Observed.Forget(uid)
		deps.OwnWrites.Forget(obj)
		pendingIntents.set(kind, domain, req.NamespacedName, nil)
		// Only a checkpoint this pass read or wrote can exist: passes of
		// one object never run at once (one worker per key, projectors
		// on the leader only).
		if view.HasCheckpoint() || checkpointed {
			if err := deps.Journal.DropCheckpoint(ctx, uid); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "journal checkpoint not dropped")
			}
		}
		return reconcile.Result{}, nil
	}
	if !p.StatusFirst || p.Record == nil {
		if err := project(); err != nil {
			return reconcile.Result{}, err
		}
	}
	after := p.RequeueAfter
	if p.Requeue && (after == 0 || after > RequeueSoon) {
		after = RequeueSoon
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// RequeueSoon is the pause before a pass asked for "at once" (after a
// note, a lost journal race, a status the cache has not seen): short
// enough to be immediate for a user, long enough that a retry loop on a
// persistent conflict costs the API server little.
const RequeueSoon = 20 * time.Millisecond

// errChainCut: a link of a chain was not appended because something other
// than outcomes was appended since the record before it.
var errChainCut = errors.New("journaled: chain cut by a concurrent decision")

// appendLink appends rec expecting the UID's journal to end at last. For a
// link of a chain (link true), records appended since that are all
// outcomes (the executors work while the pass appends) are stepped over;
// anything else (an intent or a note: another decider) cuts the chain
// (errChainCut).
func appendLink(ctx context.Context, j *journal.Store, rec *journal.Record, last uint64, link bool) (journal.AppendResult, error) {
	for tries := 0; ; tries++ {
		res, err := j.Append(ctx, rec, journal.ExpectLastSequence(last))
		if !link || !errors.Is(err, journal.ErrConflict) {
			return res, err
		}
		if tries >= 16 {
			return journal.AppendResult{}, errChainCut
		}
		since, rerr := j.ReadAfter(ctx, rec.Object.UID, last)
		if rerr != nil {
			return journal.AppendResult{}, rerr
		}
		for _, r := range since {
			if r.ID == rec.ID {
				return journal.AppendResult{Sequence: r.Sequence, Duplicate: true}, nil
			}
			if r.Type != journal.TypeOutcome {
				return journal.AppendResult{}, errChainCut
			}
			last = r.Sequence
		}
	}
}
