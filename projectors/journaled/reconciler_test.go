package journaled_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// podKind is a test kind: a Pod whose "decision" is a status phase; the
// plan is whatever the test sets.
type podKind struct {
	plan     func(h journaled.History) (journaled.Plan[corev1.PodPhase], error)
	c        client.Client
	projects []corev1.PodPhase
	planned  int
	// onProject, when set, runs at the start of each Project.
	onProject func()
}

const testFinalizer = "example.ayatori.ddupan.top/test"

func (k *podKind) New() *corev1.Pod                 { return &corev1.Pod{} }
func (k *podKind) Finalizer() string                { return testFinalizer }
func (k *podKind) StatusPhase(p *corev1.Pod) string { return string(p.Status.Phase) }
func (k *podKind) Plan(_ context.Context, _ *corev1.Pod, h journaled.History) (journaled.Plan[corev1.PodPhase], error) {
	k.planned++
	return k.plan(h)
}
func (k *podKind) Project(ctx context.Context, p *corev1.Pod, d corev1.PodPhase) error {
	if k.onProject != nil {
		k.onProject()
	}
	k.projects = append(k.projects, d)
	before := p.DeepCopy()
	p.Status.Phase = d
	return journaled.PatchStatus(ctx, k.c, p, before)
}

type recorder struct{ reasons []string }

func (r *recorder) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...interface{}) {
	r.reasons = append(r.reasons, reason)
}

var _ events.EventRecorder = (*recorder)(nil)

func openJournal(t *testing.T) *journal.Store {
	t.Helper()
	n, err := integration.NewNATS(integration.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return openJournalOn(t, n)
}

// openJournalOn opens a store on n as the manager, reconnecting forever
// (a test may stop and start n).
func openJournalOn(t *testing.T, n *integration.NATS) *journal.Store {
	return integration.OpenJournal(t, n, "test")
}

func ref(p *corev1.Pod) journal.ObjectRef {
	return journal.ObjectRef{Group: "example.ayatori.ddupan.top", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Generation: 1}
}

// skeletonFixture is a journal on an embedded JetStream, the pod ns/p
// with uid in a fake API server, its podKind and the Deps of a pass over
// it (no Recorder) with req naming the pod.
func skeletonFixture(t *testing.T, uid string) (*journal.Store, *corev1.Pod, client.Client, *podKind, journaled.Deps, reconcile.Request) {
	t.Helper()
	store := openJournal(t)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID(uid)}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).WithStatusSubresource(pod).Build()
	deps := journaled.Deps{Client: c, APIReader: c, Journal: store, OwnWrites: &journaled.OwnWrites{}}
	return store, pod, c, &podKind{c: c}, deps, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "p"}}
}

func TestSkeleton(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded JetStream")
	}
	ctx := context.Background()
	store, pod, c, k, deps, req := skeletonFixture(t, "0b5f0ae2-8c7e-4f57-9b4e-2a3c4d5e6f70")
	rec := &recorder{}
	own := deps.OwnWrites
	deps.Recorder = rec
	get := func() *corev1.Pod {
		p := &corev1.Pod{}
		if err := c.Get(ctx, req.NamespacedName, p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// An intent is appended (and announced) before the status is written;
	// the finalizer is added first.
	k.plan = func(h journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		if len(h.Records) != 0 {
			t.Fatalf("history has %d records, want 0", len(h.Records))
		}
		in, err := journal.NewIntent(ref(pod), "Ensure", "", journaled.NextAttempt(h.State, "Ensure", 1), nil)
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodPending, Record: &in, RequeueAfter: time.Minute}, err
	}
	res, err := journaled.Reconcile(ctx, req, deps, k)
	if err != nil || res.RequeueAfter != time.Minute {
		t.Fatalf("pass 1: %v %+v", err, res)
	}
	p := get()
	if len(p.Finalizers) != 1 || p.Finalizers[0] != testFinalizer || p.Status.Phase != corev1.PodPending {
		t.Fatalf("after pass 1: finalizers %v phase %q", p.Finalizers, p.Status.Phase)
	}
	if len(rec.reasons) != 1 || rec.reasons[0] != journaled.EventIntentAppended {
		t.Fatalf("events %v", rec.reasons)
	}
	// The pass's last write (the status) is recorded as its own: its watch
	// event starts no pass.
	if !own.IsOwn(pod, p) {
		t.Fatalf("the status write at resourceVersion %s is not recorded as the pass's own", p.ResourceVersion)
	}
	recs, _ := store.Read(ctx, string(pod.UID))
	if len(recs) != 1 || recs[0].ID != journal.IntentID(string(pod.UID), 1, "Ensure", "", 1) {
		t.Fatalf("journal %+v", recs)
	}

	// A record appended by someone else between the read and the append
	// (another replica): the conflict makes the pass start over, nothing
	// of this pass is written or projected.
	note := journal.Record{ID: string(pod.UID) + "/note/x", Type: journal.TypeNote, Operation: "X", Object: ref(pod), Attempt: 1}
	k.plan = func(h journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		if _, err := store.Append(ctx, &note); err != nil {
			t.Fatal(err)
		}
		in, err := journal.NewIntent(ref(pod), "Ensure", "", 2, nil)
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodFailed, Record: &in}, err
	}
	projects := len(k.projects)
	res, err = journaled.Reconcile(ctx, req, deps, k)
	if err != nil || res.RequeueAfter == 0 || len(k.projects) != projects {
		t.Fatalf("conflicting pass: %v %+v, projected %d times", err, res, len(k.projects)-projects)
	}
	if recs, _ := store.Read(ctx, string(pod.UID)); len(recs) != 2 {
		t.Fatalf("journal has %d records after a conflicting pass, want 2 (intent, note)", len(recs))
	}

	// An empty status is confirmed against the API reader: a status the
	// cache has not seen yet repeats the pass without acting.
	k.plan = func(journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodUnknown, StatusLost: true}, nil
	}
	projects = len(k.projects)
	res, err = journaled.Reconcile(ctx, req, deps, k)
	if err != nil || res.RequeueAfter == 0 || len(k.projects) != projects {
		t.Fatalf("status-lost pass: %v %+v", err, res)
	}

	// A Plan error aborts the pass with nothing written.
	boom := errors.New("boom")
	k.plan = func(journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		return journaled.Plan[corev1.PodPhase]{}, boom
	}
	if _, err := journaled.Reconcile(ctx, req, deps, k); !errors.Is(err, boom) {
		t.Fatalf("plan error: %v", err)
	}

	// Deletion: RemoveFinalizer runs OnRelease, removes the finalizer and
	// writes no status.
	if err := c.Delete(ctx, get()); err != nil {
		t.Fatal(err)
	}
	released := false
	k.plan = func(journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodSucceeded, RemoveFinalizer: true, OnRelease: func() { released = true }}, nil
	}
	projects = len(k.projects)
	if _, err := journaled.Reconcile(ctx, req, deps, k); err != nil || !released || len(k.projects) != projects {
		t.Fatalf("release pass: %v released=%v", err, released)
	}
	if err := c.Get(ctx, req.NamespacedName, &corev1.Pod{}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	// Gone: the next pass is a no-op.
	planned := k.planned
	if res, err := journaled.Reconcile(ctx, req, deps, k); err != nil || res != (reconcile.Result{}) || k.planned != planned {
		t.Fatalf("pass on a gone object: %v %+v", err, res)
	}
}

// StatusFirst writes the status before the record is appended (and only
// then); a note alone with nothing pending and no pass right after it is
// folded into the checkpoint in its own pass.
func TestStatusFirstAndNoteCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded JetStream")
	}
	ctx := context.Background()
	store, pod, _, k, deps, req := skeletonFixture(t, "5c7e1f0a-2b3c-4d5e-8f70-0a1b2c3d4e5f")
	uid := string(pod.UID)

	var seen []int
	k.onProject = func() {
		recs, err := store.Read(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, len(recs))
	}
	k.plan = func(h journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		in, err := journal.NewIntent(ref(pod), "Ensure", "", journaled.NextAttempt(h.State, "Ensure", 1), nil)
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodPending, Record: &in, StatusFirst: true, RequeueAfter: time.Minute}, err
	}
	if _, err := journaled.Reconcile(ctx, req, deps, k); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != 0 {
		t.Fatalf("StatusFirst: status written %d times with %v records in the journal, want once before the intent", len(seen), seen)
	}
	if recs, _ := store.Read(ctx, uid); len(recs) != 1 {
		t.Fatalf("journal has %d records, want the intent", len(recs))
	}
	out, err := journal.NewOutcome(mustRead(t, store, uid)[0], journal.Result{Class: journal.Succeeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, &out); err != nil {
		t.Fatal(err)
	}
	k.onProject = nil

	// A note with a pass right after it: no checkpoint yet (the next pass
	// is at rest and writes it).
	noteAt := func(op string) *journal.Record {
		return &journal.Record{ID: uid + "/note/" + op, Type: journal.TypeNote, Operation: op, Object: ref(pod), Attempt: 1}
	}
	k.plan = func(journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodRunning, Record: noteAt("A"), Requeue: true}, nil
	}
	if _, err := journaled.Reconcile(ctx, req, deps, k); err != nil {
		t.Fatal(err)
	}
	if v, err := store.ReadView(ctx, uid); err != nil || v.Through != 0 || v.Tail != 3 {
		t.Fatalf("after a note with a requeue: through %d tail %d (%v), want no checkpoint", v.Through, v.Tail, err)
	}
	// A note alone, nothing pending, nothing after it: the checkpoint
	// holds every record, the note included.
	k.plan = func(journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodSucceeded, Record: noteAt("B")}, nil
	}
	if _, err := journaled.Reconcile(ctx, req, deps, k); err != nil {
		t.Fatal(err)
	}
	v, err := store.ReadView(ctx, uid)
	if err != nil || v.Tail != 0 || v.Through != v.Last || len(v.Records) == 0 || v.Records[len(v.Records)-1].Operation != "B" {
		t.Fatalf("after a note at rest: through %d last %d tail %d records %d (%v), want a checkpoint through the note", v.Through, v.Last, v.Tail, len(v.Records), err)
	}
	if st := journal.Fold(v.Records); len(st.Pending()) != 0 {
		t.Fatalf("the checkpoint lost the outcome: pending %+v", st.Pending())
	}
}

func mustRead(t *testing.T, s *journal.Store, uid string) []journal.Record {
	t.Helper()
	recs, err := s.Read(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {7, time.Minute}, {1000, time.Minute}} {
		if got := journaled.Backoff(time.Second, time.Minute, c.failures); got != c.want {
			t.Errorf("Backoff(1s, 1m, %d) = %v, want %v", c.failures, got, c.want)
		}
	}
	if got := journaled.Backoff(time.Hour, time.Minute, 1); got != time.Minute {
		t.Errorf("base above the cap: %v", got)
	}
}

func TestNextAttempt(t *testing.T) {
	obj := journal.ObjectRef{Group: "example.ayatori.ddupan.top", Kind: "X", Name: "x", UID: "u", Generation: 2}
	st := journal.NewState()
	for i, op := range []string{"A", "B", "A"} {
		in, err := journal.NewIntent(obj, op, "", i+1, nil)
		if err != nil {
			t.Fatal(err)
		}
		in.Sequence = uint64(10 - i)
		st.Apply(in)
	}
	// The highest attempt (3), not the count (2): what retention or a
	// checkpoint left can never yield an attempt that exists.
	if got := journaled.NextAttempt(st, "A", 2); got != 4 {
		t.Errorf("NextAttempt(A, gen 2) = %d, want 4", got)
	}
	if got := journaled.NextAttempt(st, "A", 1); got != 1 {
		t.Errorf("NextAttempt(A, gen 1) = %d, want 1", got)
	}
	in := journaled.IntentsOf(st, "A", 2)
	if len(in) != 2 || in[0].Sequence > in[1].Sequence {
		t.Errorf("IntentsOf not in stream order: %+v", in)
	}
}

// A lone note at rest is checkpointed with the note even when the tail
// is long (no checkpoint without it first), and a note that was there
// already asks for a pass right after, which checkpoints it.
func TestNoteCheckpointLongTailAndDuplicate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded JetStream")
	}
	defer func(n int) { journaled.CheckpointEvery = n }(journaled.CheckpointEvery)
	journaled.CheckpointEvery = 2
	ctx := context.Background()
	store, pod, _, k, deps, req := skeletonFixture(t, "7d1e2f3a-4b5c-4d6e-8f70-1a2b3c4d5e6f")
	uid := string(pod.UID)
	in, err := journal.NewIntent(ref(pod), "Ensure", "", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, &in); err != nil {
		t.Fatal(err)
	}
	out, err := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, &out); err != nil {
		t.Fatal(err)
	}
	note := func() *journal.Record {
		return &journal.Record{ID: uid + "/note/Done", Type: journal.TypeNote, Operation: "Done", Object: ref(pod), Attempt: 1}
	}
	k.plan = func(journaled.History) (journaled.Plan[corev1.PodPhase], error) {
		return journaled.Plan[corev1.PodPhase]{Status: corev1.PodSucceeded, Record: note()}, nil
	}
	res, err := journaled.Reconcile(ctx, req, deps, k)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("note pass: %v %+v", err, res)
	}
	v, err := store.ReadView(ctx, uid)
	if err != nil || v.Tail != 0 || v.Through != v.Last {
		t.Fatalf("long tail: through %d last %d tail %d (%v), want a checkpoint through the note", v.Through, v.Last, v.Tail, err)
	}
	// The same note again (found in the journal, not appended): a pass
	// follows at once.
	if res, err := journaled.Reconcile(ctx, req, deps, k); err != nil || res.RequeueAfter != journaled.RequeueSoon {
		t.Fatalf("duplicate note pass: %v %+v, want a pass right after", err, res)
	}
}
