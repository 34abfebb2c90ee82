package execution

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// RBAC of the TTL controller.
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobs,verbs=get;list;watch;delete

// EventTTLExpired is the reason of the Event the TTL controller emits
// before it deletes a finished Job.
const EventTTLExpired = "TTLExpired"

// TTLReconciler deletes finished Jobs after spec.ttlSecondsAfterFinished
// (docs/execution/decisions/0005-ephemeral-job-retention.md), modelled on
// Kubernetes' ttlafterfinished controller: informer events and a delaying
// queue (RequeueAfter), no periodic scan.
//
// Eligible: a Succeeded condition that is True or False, a completionTime,
// a TTL, no deletionTimestamp. Never a non-terminal Job (ResultUnknown,
// Cancelling, ...), never one without a TTL.
//
// Clock: the TTL counts on this controller's own clock from when it first
// saw the Job finished (at most a watch delay after completionTime), so no
// decision compares two hosts' clocks. After a restart or on a new leader
// the informer's initial list starts the count again: a Job is deleted
// late, never early.
//
// At expiry it reads the Job again from the API server (not the cache) and
// re-checks UID, terminal state and the current TTL (a TTL extended near
// expiry is honoured), journals a TTLExpired note (one per UID: the note's
// ID derives from the UID), emits an Event, then deletes with a UID
// precondition (a Job recreated under the same name is never deleted). The
// Job's finalizer does the backend cleanup, as for a manual delete.
type TTLReconciler struct {
	Client client.Client
	// APIReader reads the Job at expiry, bypassing the cache.
	APIReader client.Reader
	Journal   *journal.Store
	Recorder  events.EventRecorder
	// Clock is "now" (tests inject a fake one).
	Clock clock.PassiveClock
	// Workers is how many Jobs are reconciled at once (default
	// DefaultTTLWorkers). An expired Job costs a fresh read, a journal
	// append, an Event and a delete.
	Workers int

	mu   sync.Mutex
	seen map[types.UID]time.Time
}

// DefaultTTLWorkers is TTLReconciler.Workers' default. With 2, the TTL
// controller was the bottleneck of 1,000 Jobs finishing at 10-14 Jobs/s
// (each expiry waits for a fresh read and a delete on a busy API server):
// TTL deletion lag p99 26-27 s against 4-7 s with 8 (issue 28).
const DefaultTTLWorkers = 8

// SetupWithManager registers the controller.
func (r *TTLReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Workers <= 0 {
		r.Workers = DefaultTTLWorkers
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("jobttl").
		For(&executionv1alpha1.Job{}, builder.WithPredicates(TTLRelevant())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Complete(r)
}

// TTLRelevant filters the Job updates the TTL controller reconciles: only
// those where the Job is finished before or after the update (a running
// Job's status writes cannot make it eligible; the write that finishes it
// does). Creates (the informer's initial list included), deletes and
// generic events all pass.
func TTLRelevant() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*executionv1alpha1.Job)
		n, ok2 := e.ObjectNew.(*executionv1alpha1.Job)
		return !ok1 || !ok2 || IsTerminal(&o.Status) || IsTerminal(&n.Status)
	}}
}

// TTLDue says whether a Job is eligible for TTL deletion and, if so, how
// long until it expires (≤ 0: expired), counting ttl from finishedSeen on
// the caller's clock (now).
func TTLDue(j *executionv1alpha1.Job, finishedSeen, now time.Time) (eligible bool, left time.Duration) {
	if !j.DeletionTimestamp.IsZero() || !IsTerminal(&j.Status) || j.Status.CompletionTime == nil || j.Spec.TTLSecondsAfterFinished == nil {
		return false, 0
	}
	if *j.Spec.TTLSecondsAfterFinished < 0 {
		return false, 0
	}
	// An int32 of seconds always fits a time.Duration.
	return true, finishedSeen.Add(time.Duration(*j.Spec.TTLSecondsAfterFinished) * time.Second).Sub(now)
}

// maxTTLTracked bounds the finished Jobs whose first sight is remembered.
var maxTTLTracked = 200_000

// finishedSeen returns when this process first saw uid finished (now, the
// first time).
func (r *TTLReconciler) finishedSeen(uid types.UID, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.UID]time.Time{}
	}
	at, ok := r.seen[uid]
	if !ok {
		if len(r.seen) >= maxTTLTracked {
			// Jobs deleted without this process seeing their deletion
			// stay in the map; past the bound it starts over (every Job
			// then counts from now again: later, never earlier).
			r.seen = map[types.UID]time.Time{}
		}
		at = now
		r.seen[uid] = at
	}
	return at
}

func (r *TTLReconciler) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.seen, uid)
	r.mu.Unlock()
}

// Reconcile handles one Job: forget it, wait for its expiry, or delete it.
func (r *TTLReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	j := &executionv1alpha1.Job{}
	if err := r.Client.Get(ctx, req.NamespacedName, j); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := r.Clock.Now()
	eligible, _ := TTLDue(j, now, now)
	if !eligible {
		if !j.DeletionTimestamp.IsZero() || !IsTerminal(&j.Status) {
			r.forget(j.UID)
		}
		return reconcile.Result{}, nil
	}
	seen := r.finishedSeen(j.UID, now)
	if _, left := TTLDue(j, seen, now); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	// Expired by the cache: read the Job again from the API server.
	fresh := &executionv1alpha1.Job{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, fresh); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if fresh.UID != j.UID {
		// Recreated under the same name: the new object has its own count.
		r.forget(j.UID)
		return reconcile.Result{RequeueAfter: journaled.RequeueSoon}, nil
	}
	eligible, left := TTLDue(fresh, seen, r.Clock.Now())
	switch {
	case !eligible:
		return reconcile.Result{}, nil
	case left > 0:
		// The TTL was extended meanwhile.
		return reconcile.Result{RequeueAfter: left}, nil
	}
	if err := r.journalExpiry(ctx, fresh); err != nil {
		return reconcile.Result{}, err
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(fresh, nil, corev1.EventTypeNormal, EventTTLExpired, "Delete",
			"ttlSecondsAfterFinished (%ds) passed since the Job finished; deleting it", *fresh.Spec.TTLSecondsAfterFinished)
	}
	// The delete is conditional on the object the decision was made on:
	// its UID (a Job recreated under the same name is another object) and
	// its resourceVersion (a TTL extended, or anything else changed, after
	// the GET above is decided again, on the next pass).
	uid, rv := fresh.UID, fresh.ResourceVersion
	if err := r.Client.Delete(ctx, fresh, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err):
			// Changed (or gone and recreated) since the GET: read it again.
			return reconcile.Result{RequeueAfter: journaled.RequeueSoon}, nil
		default:
			return reconcile.Result{}, fmt.Errorf("delete Job %s/%s: %w", fresh.Namespace, fresh.Name, err)
		}
	}
	r.forget(uid)
	ttlDeletions.Inc()
	ttlLag.Observe(max(r.Clock.Since(seen.Add(time.Duration(*fresh.Spec.TTLSecondsAfterFinished)*time.Second)).Seconds(), 0))
	ctrl.LoggerFrom(ctx).V(1).Info("finished Job deleted after its TTL", "ttlSecondsAfterFinished", *fresh.Spec.TTLSecondsAfterFinished)
	return reconcile.Result{}, nil
}

// journalExpiry appends the TTLExpired note: once per Job UID (the ID
// derives from the UID, and the journal drops a second append of an ID).
func (r *TTLReconciler) journalExpiry(ctx context.Context, j *executionv1alpha1.Job) error {
	note, err := journal.NewOnceNote(objectRef(j), execution.NoteTTLExpired, execution.TTLNote{TTLSecondsAfterFinished: *j.Spec.TTLSecondsAfterFinished})
	if err != nil {
		return err
	}
	if _, err := r.Journal.Append(ctx, &note); err != nil {
		return fmt.Errorf("journal the TTL expiry: %w", err)
	}
	return nil
}

// The TTL controller's metrics (docs/operations.md "Metrics"); no labels.
var (
	ttlDeletions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ayatori_job_ttl_deletions_total",
		Help: "Finished Jobs deleted by the TTL controller after ttlSecondsAfterFinished.",
	})
	ttlLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ayatori_job_ttl_deletion_lag_seconds",
		Help:    "Time from a finished Job's TTL expiry (as this process observed the finish, on its own clock) to its deletion.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14), // 50 ms .. ~7 min
	})
)

func init() { crmetrics.Registry.MustRegister(ttlDeletions, ttlLag) }
