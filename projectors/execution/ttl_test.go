package execution_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	exprojector "git.ddupan.top/panxiao81/ayatori/projectors/execution"
)

// ttlEnv runs the TTL controller's Reconcile by hand against a real
// apiserver and JetStream, with a fake clock.
type ttlEnv struct {
	t     *testing.T
	c     client.Client
	store *journal.Store
	clock *clocktesting.FakeClock
	ns    string
}

func startTTLEnv(t *testing.T) *ttlEnv {
	skipShort(t)
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	n := integration.StartNATS(t)
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	store, err := journal.Open(context.Background(), nc, journal.Config{Actor: "ttl-test", Signer: integration.JournalSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := &ttlEnv{t: t, c: cp.Client, store: store, clock: clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)), ns: "ttl"}
	if err := e.c.Create(context.Background(), namespaceObj(e.ns)); err != nil {
		t.Fatal(err)
	}
	return e
}

// reconciler is a TTL controller reading through cache (a stale view
// when given) and the API server.
func (e *ttlEnv) reconciler(cache client.Client) *exprojector.TTLReconciler {
	if cache == nil {
		cache = e.c
	}
	return &exprojector.TTLReconciler{Client: cache, APIReader: e.c, Journal: e.store, Clock: e.clock}
}

// finished creates a Job and writes a terminal status (succeeded, reason)
// with ttl (nil: none).
func (e *ttlEnv) finished(name string, ttl *int32, status metav1.ConditionStatus, reason string) *executionv1alpha1.Job {
	e.t.Helper()
	j := newJob(e.ns, name, "ayatori.test/succeed")
	j.Spec.TTLSecondsAfterFinished = ttl
	ctx := context.Background()
	if err := e.c.Create(ctx, j); err != nil {
		e.t.Fatal(err)
	}
	now := metav1.NewTime(e.clock.Now())
	j.Status.Conditions = []metav1.Condition{{Type: executionv1alpha1.JobConditionSucceeded, Status: status, Reason: reason, Message: reason, LastTransitionTime: now}}
	if status != metav1.ConditionUnknown {
		j.Status.CompletionTime = &now
	}
	if err := e.c.Status().Update(ctx, j); err != nil {
		e.t.Fatal(err)
	}
	// The projector journals the result before the terminal status.
	if status != metav1.ConditionUnknown {
		note := journal.Record{ID: string(j.UID) + "/note/Finished", Type: journal.TypeNote, Operation: execution.NoteFinished, Attempt: 1,
			Object: journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: j.Namespace, Name: j.Name, UID: string(j.UID), Generation: j.Generation}}
		if err := note.SetPayload(execution.FinishedNote{Succeeded: status == metav1.ConditionTrue, Reason: reason}); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.store.Append(ctx, &note); err != nil {
			e.t.Fatal(err)
		}
	}
	return j
}

func (e *ttlEnv) reconcile(r *exprojector.TTLReconciler, j *executionv1alpha1.Job) reconcile.Result {
	e.t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(j)})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func (e *ttlEnv) exists(j *executionv1alpha1.Job) bool {
	cur := &executionv1alpha1.Job{}
	err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur)
	return err == nil && cur.UID == j.UID
}

// ttlNotes counts the TTLExpired notes of uid.
func (e *ttlEnv) ttlNotes(uid types.UID) int {
	e.t.Helper()
	recs, err := e.store.Read(context.Background(), string(uid))
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Type == journal.TypeNote && r.Operation == execution.NoteTTLExpired {
			n++
		}
	}
	return n
}

func ttl(s int32) *int32 { return &s }

// staleCache serves Gets from a snapshot taken earlier (an informer that
// has not seen the latest update), everything else from the server.
type staleCache struct {
	client.Client
	snapshot *executionv1alpha1.Job
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if j, ok := obj.(*executionv1alpha1.Job); ok && key == client.ObjectKeyFromObject(s.snapshot) {
		s.snapshot.DeepCopyInto(j)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func TestTTLController(t *testing.T) {
	e := startTTLEnv(t)

	t.Run("M17_EachTerminalStateDeletedAtExpiryNotBefore", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			status metav1.ConditionStatus
			reason string
		}{
			{"succeeded", metav1.ConditionTrue, executionv1alpha1.ReasonCompleted},
			{"failed", metav1.ConditionFalse, executionv1alpha1.ReasonProcessFailed},
			{"cancelled", metav1.ConditionFalse, executionv1alpha1.ReasonCancelled},
		} {
			r := e.reconciler(nil)
			j := e.finished("m17-"+c.name, ttl(60), c.status, c.reason)
			if res := e.reconcile(r, j); res.RequeueAfter != 60*time.Second {
				t.Fatalf("%s: RequeueAfter %v, want 60s", c.name, res.RequeueAfter)
			}
			e.clock.Step(59 * time.Second)
			if res := e.reconcile(r, j); res.RequeueAfter != time.Second || !e.exists(j) {
				t.Fatalf("%s: deleted or wrong delay (%v) one second before expiry", c.name, res.RequeueAfter)
			}
			e.clock.Step(time.Second)
			e.reconcile(r, j)
			if e.exists(j) {
				t.Fatalf("%s: not deleted at expiry", c.name)
			}
			if n := e.ttlNotes(j.UID); n != 1 {
				t.Fatalf("%s: %d TTLExpired notes", c.name, n)
			}
		}
	})

	t.Run("M17_TTLZeroAtOnce_NoTTLNever", func(t *testing.T) {
		r := e.reconciler(nil)
		now := e.finished("zero", ttl(0), metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
		e.reconcile(r, now)
		if e.exists(now) {
			t.Fatal("TTL 0 not deleted at once")
		}
		never := e.finished("never", nil, metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
		e.clock.Step(1000 * time.Hour)
		if res := e.reconcile(r, never); res.RequeueAfter != 0 || !e.exists(never) {
			t.Fatal("a Job without TTL must never be deleted nor requeued")
		}
	})

	t.Run("ResultUnknownNeverDeleted", func(t *testing.T) {
		r := e.reconciler(nil)
		j := e.finished("unknown", ttl(0), metav1.ConditionUnknown, executionv1alpha1.ReasonResultUnknown)
		for range 3 {
			e.clock.Step(time.Hour)
			if res := e.reconcile(r, j); res.RequeueAfter != 0 || !e.exists(j) {
				t.Fatal("a ResultUnknown Job is never eligible")
			}
		}
	})

	t.Run("M18_RestartWhileWaitingDeletesOnce", func(t *testing.T) {
		j := e.finished("restart", ttl(60), metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
		e.reconcile(e.reconciler(nil), j)
		e.clock.Step(30 * time.Second)
		// A new process (restart or new leader): the count starts again
		// from its first sight of the finished Job — late, never early.
		r := e.reconciler(nil)
		if res := e.reconcile(r, j); res.RequeueAfter != 60*time.Second {
			t.Fatalf("after restart RequeueAfter %v, want 60s", res.RequeueAfter)
		}
		e.clock.Step(60 * time.Second)
		e.reconcile(r, j)
		e.reconcile(r, j) // a duplicate event after the delete
		if e.exists(j) || e.ttlNotes(j.UID) != 1 {
			t.Fatalf("want deleted once (exists %v, notes %d)", e.exists(j), e.ttlNotes(j.UID))
		}
	})

	t.Run("M19_TTLExtendedNearExpiryIsRechecked", func(t *testing.T) {
		j := e.finished("extend", ttl(10), metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
		stale := j.DeepCopy()
		r := e.reconciler(staleCache{Client: e.c, snapshot: stale})
		e.reconcile(r, j)
		e.clock.Step(9 * time.Second)
		cur := &executionv1alpha1.Job{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.TTLSecondsAfterFinished = ttl(3600)
		if err := e.c.Update(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
		e.clock.Step(time.Second)
		// The cache still says 10s: expired by it; the final GET sees 3600s.
		res := e.reconcile(r, j)
		if !e.exists(j) || res.RequeueAfter != 3590*time.Second {
			t.Fatalf("extended TTL not honoured: exists %v, RequeueAfter %v", e.exists(j), res.RequeueAfter)
		}
	})

	t.Run("M20_SameNameNewUIDNotDeleted", func(t *testing.T) {
		old := e.finished("again", ttl(5), metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
		stale := old.DeepCopy()
		r := e.reconciler(staleCache{Client: e.c, snapshot: stale})
		e.reconcile(r, old)
		if err := e.c.Delete(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		recreated := e.finished("again", nil, metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
		e.clock.Step(10 * time.Second)
		e.reconcile(r, old) // the cache still holds the old UID, expired
		if !e.exists(recreated) {
			t.Fatal("the recreated Job (new UID) was deleted by the old one's TTL")
		}
	})
}

func namespaceObj(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// extendAfterGet is an API reader whose Get of the Job is followed, before
// the caller acts on it, by a user's update that extends the TTL (the
// window between the final GET and the DELETE: the journal append and the
// Event are in it).
type extendAfterGet struct {
	client.Client
	to int32
}

func (x extendAfterGet) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := x.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if _, ok := obj.(*executionv1alpha1.Job); !ok {
		return nil
	}
	cur := &executionv1alpha1.Job{}
	if err := x.Client.Get(ctx, key, cur); err != nil {
		return err
	}
	cur.Spec.TTLSecondsAfterFinished = ttl(x.to)
	return x.Client.Update(ctx, cur)
}

// A TTL extended after the final GET but before the DELETE is honoured:
// the delete is conditional on the object the decision was made on, not
// only on its UID.
func TestTTLExtendedBetweenGetAndDeleteIsHonoured(t *testing.T) {
	e := startTTLEnv(t)
	j := e.finished("extend-race", ttl(10), metav1.ConditionTrue, executionv1alpha1.ReasonCompleted)
	r := &exprojector.TTLReconciler{Client: e.c, APIReader: extendAfterGet{Client: e.c, to: 3600}, Journal: e.store, Clock: e.clock}
	e.reconcile(r, j)
	e.clock.Step(10 * time.Second)
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(j)})
	if err != nil {
		t.Fatal(err)
	}
	cur := &executionv1alpha1.Job{}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur); err != nil {
		t.Fatal(err)
	}
	if !cur.DeletionTimestamp.IsZero() {
		t.Fatalf("the Job was deleted although its TTL was extended to %ds before the delete", *cur.Spec.TTLSecondsAfterFinished)
	}
	if res.RequeueAfter == 0 {
		t.Fatal("the Job whose delete was refused must be looked at again")
	}
	// The next pass reads the extended TTL and waits for it.
	r.APIReader = e.c
	if res := e.reconcile(r, j); res.RequeueAfter != 3590*time.Second || !e.exists(j) {
		t.Fatalf("extended TTL not honoured on the next pass: exists %v, RequeueAfter %v", e.exists(j), res.RequeueAfter)
	}
}

// The TTL controller reconciles a Job's updates only around its end: a
// running Job's status writes never wake it.
func TestTTLRelevant(t *testing.T) {
	job := func(status metav1.ConditionStatus) *executionv1alpha1.Job {
		return &executionv1alpha1.Job{Status: executionv1alpha1.JobStatus{Conditions: []metav1.Condition{{Type: executionv1alpha1.JobConditionSucceeded, Status: status}}}}
	}
	p := exprojector.TTLRelevant()
	for _, tc := range []struct {
		name     string
		old, new *executionv1alpha1.Job
		want     bool
	}{
		{"running to running", job(metav1.ConditionUnknown), job(metav1.ConditionUnknown), false},
		{"no status yet", &executionv1alpha1.Job{}, job(metav1.ConditionUnknown), false},
		{"running to succeeded", job(metav1.ConditionUnknown), job(metav1.ConditionTrue), true},
		{"running to failed", job(metav1.ConditionUnknown), job(metav1.ConditionFalse), true},
		{"finished, then deleted or its TTL changed", job(metav1.ConditionTrue), job(metav1.ConditionTrue), true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: job(metav1.ConditionTrue)}) || !p.Delete(event.DeleteEvent{Object: job(metav1.ConditionUnknown)}) {
		t.Error("creates and deletes must pass")
	}
}
