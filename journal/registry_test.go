package journal

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

type refPayload struct {
	SecretName string `json:"secretName" journal:"ref"`
	Path       string `json:"path"`
	Nested     struct {
		PasswordKey string `json:"passwordKey" journal:"ref"`
	} `json:"nested"`
}

type untaggedPayload struct {
	SecretName string `json:"secretName"`
}

type hiddenByJSONName struct {
	Value string `json:"password"`
}

type nestedSecret struct {
	Items []struct {
		Token string `json:"token"`
	} `json:"items"`
}

type openPayload struct {
	Any any `json:"any"`
}

type otherPayload struct {
	N int `json:"n"`
}

// The secret guard: a field whose Go or JSON name mentions a secret is
// refused unless tagged `journal:"ref"`, at any depth; open kinds are refused.
func TestPayloadSecretGuard(t *testing.T) {
	if err := CheckPayloadType(typeOf(refPayload{})); err != nil {
		t.Errorf("tagged reference fields refused: %v", err)
	}
	for _, sample := range []any{untaggedPayload{}, hiddenByJSONName{}, nestedSecret{}, openPayload{}} {
		if err := CheckPayloadType(typeOf(sample)); err == nil {
			t.Errorf("%T accepted", sample)
		}
	}
	mustPanic(t, "register untagged", func() { RegisterPayload("guardtest", "Write", TypeIntent, untaggedPayload{}) })
	// An unregistered payload must be a safe shape too: the record refuses it.
	r := Record{Type: TypeIntent, Operation: "Write", Object: ObjectRef{Group: "guardtest.example", Kind: "K", Name: "n", UID: "u"}}
	if err := r.SetPayload(untaggedPayload{SecretName: "x"}); err == nil {
		t.Error("SetPayload accepted a payload with a secret field")
	}
}

// Payloads are keyed by (domain, operation, type): the same operation
// name in two domains has two types; a second registration of one key panics.
func TestPayloadKeyedByDomain(t *testing.T) {
	RegisterPayload("keyed-a", "Apply", TypeIntent, refPayload{})
	RegisterPayload("keyed-b", "Apply", TypeIntent, otherPayload{})
	mustPanic(t, "same key twice", func() { RegisterPayload("keyed-a", "Apply", TypeIntent, refPayload{}) })
	mustPanic(t, "bad domain", func() { RegisterPayload("Keyed.A", "Apply", TypeIntent, refPayload{}) })
	a := Record{Type: TypeIntent, Operation: "Apply", Object: ObjectRef{Group: "keyed-a.example"}}
	b := Record{Type: TypeIntent, Operation: "Apply", Object: ObjectRef{Group: "keyed-b.example"}}
	if err := a.SetPayload(refPayload{}); err != nil {
		t.Errorf("domain a: %v", err)
	}
	if err := b.SetPayload(otherPayload{}); err != nil {
		t.Errorf("domain b: %v", err)
	}
	if err := a.SetPayload(otherPayload{}); err == nil {
		t.Error("domain a accepted domain b's payload type")
	}
	found := 0
	for _, p := range RegisteredPayloads() {
		if strings.HasPrefix(p, "keyed-a/Apply/intent ->") || strings.HasPrefix(p, "keyed-b/Apply/intent ->") {
			found++
		}
	}
	if found != 2 {
		t.Errorf("RegisteredPayloads lists %d of the 2 registrations: %v", found, RegisteredPayloads())
	}
}

func handlerNamed(name string, got *string) Handler {
	return func(context.Context, Record) (Outcome, error) {
		*got = name
		return Outcome{Result: Result{Class: Succeeded}}, nil
	}
}

func TestDispatcher(t *testing.T) {
	if _, err := NewDispatcher("not a token"); err == nil {
		t.Error("NewDispatcher accepted an invalid domain")
	}
	var got string
	d, _ := NewDispatcher("alpha")
	if err := d.Handle("one", "Apply", handlerNamed("one", &got)); err != nil {
		t.Fatal(err)
	}
	if err := d.Handle("one", "Apply", handlerNamed("one", &got)); err == nil {
		t.Error("the same (domain, operation) registered twice")
	}
	if err := d.Handle("two", "Apply", handlerNamed("two", &got)); err == nil {
		t.Error("a second backend took an operation without a route")
	}
	if err := d.Route("Apply", func(Record) string { return "one" }); err == nil {
		t.Error("a route declared after a handler")
	}
	// The same operation name in another domain is another dispatcher.
	other, _ := NewDispatcher("beta")
	if err := other.Handle("three", "Apply", handlerNamed("three", &got)); err != nil {
		t.Errorf("same operation in another domain: %v", err)
	}
	// Several backends for one operation: the route names the owner.
	if err := d.Route("Run", func(r Record) string { return r.Object.Kind }); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"fast", "slow"} {
		if err := d.Handle(b, "Run", handlerNamed(b, &got)); err != nil {
			t.Fatal(err)
		}
	}
	if ops := d.Operations(); strings.Join(ops, ",") != "Apply,Run" {
		t.Errorf("Operations() = %v", ops)
	}
	rec := func(group, kind, op string) Record {
		return Record{Operation: op, Object: ObjectRef{Group: group, Kind: kind, Name: "n", UID: "u"}}
	}
	cases := []struct {
		rec  Record
		want string // handler that ran; "" none
	}{
		{rec("alpha.example", "x", "Apply"), "one"},
		{rec("alpha.example", "fast", "Run"), "fast"},
		{rec("alpha.example", "slow", "Run"), "slow"},
		{rec("alpha.example", "none", "Run"), ""},
		{rec("alpha.example", "x", "Other"), ""},
		{rec("beta.example", "x", "Apply"), ""}, // another domain's intent
	}
	for _, c := range cases {
		got = ""
		h, why := d.handler(c.rec)
		if h == nil {
			if c.want != "" {
				t.Errorf("%s %s: no handler (%s), want %s", c.rec.Object.Group, c.rec.Operation, why, c.want)
			} else if why == "" {
				t.Errorf("%s %s: no handler and no reason", c.rec.Object.Group, c.rec.Operation)
			}
			continue
		}
		_, _ = h(context.Background(), c.rec)
		if got != c.want {
			t.Errorf("%s %s/%s ran %q, want %q", c.rec.Object.Group, c.rec.Operation, c.rec.Object.Kind, got, c.want)
		}
	}
}

// A domain's invariant runs only on its objects, in stream order with the
// journal's rules; a repeated report of one violation replaces it.
func TestRegisteredInvariant(t *testing.T) {
	RegisterInvariant("invtest", Invariant{Rule: "at-most-one-apply", Description: "at most one Apply", New: func() InvariantCheck {
		var seqs []uint64
		return func(r Record) []Violation {
			if r.Type != TypeIntent || r.Operation != "Apply" {
				return nil
			}
			seqs = append(seqs, r.Sequence)
			if len(seqs) < 2 {
				return nil
			}
			return []Violation{{Rule: "at-most-one-apply", Sequences: append([]uint64(nil), seqs...), Detail: "Apply repeated"}}
		}
	}})
	mustPanic(t, "rule twice", func() {
		RegisterInvariant("invtest", Invariant{Rule: "at-most-one-apply", New: func() InvariantCheck { return nil }})
	})
	mustPanic(t, "no check", func() { RegisterInvariant("invtest", Invariant{Rule: "x"}) })
	var recs []Record
	add := func(group, uid string, attempt int) {
		r, err := NewIntent(ObjectRef{Group: group, Kind: "K", Name: "n", UID: uid}, "Apply", "", attempt, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Sequence = uint64(len(recs) + 1)
		recs = append(recs, r)
		o, _ := NewOutcome(r, Result{Class: Succeeded}, nil)
		o.Sequence = uint64(len(recs) + 1)
		recs = append(recs, o)
	}
	for i := 1; i <= 3; i++ {
		add("invtest.example", "u1", i) // 1, 3, 5
		add("other.example", "u2", i)   // not this domain
	}
	vs := Verify(recs, nil)
	if len(vs) != 1 || vs[0].Rule != "at-most-one-apply" || vs[0].UID != "u1" || vs[0].Object != "K/n" ||
		len(vs[0].Sequences) != 3 || vs[0].Sequences[2] != 9 {
		t.Fatalf("violations %+v, want one at-most-one-apply of u1 at [1 5 9]", vs)
	}
	if len(RegisteredInvariants()["invtest"]) != 1 {
		t.Errorf("RegisteredInvariants: %v", RegisteredInvariants())
	}
}

func typeOf(v any) reflect.Type { return reflect.TypeOf(v) }

// Limit: each backend runs at most its own number of intents at once; a
// saturated backend neither blocks another nor is exceeded, a wait ends
// with the context, and Capacity sums the limits.
func TestDispatcherLimit(t *testing.T) {
	d, _ := NewDispatcher("alpha")
	if err := d.Route("Run", func(r Record) string { return r.Object.Kind }); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	for _, b := range []string{"slow", "fast"} {
		if err := d.Handle(b, "Run", func(ctx context.Context, r Record) (Outcome, error) {
			mu.Lock()
			running[b]++
			peak[b] = max(peak[b], running[b])
			mu.Unlock()
			if b == "slow" {
				<-release
			}
			mu.Lock()
			running[b]--
			mu.Unlock()
			return Outcome{Result: Result{Class: Succeeded}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if c := d.Capacity(); c != 0 {
		t.Errorf("Capacity without limits = %d, want 0", c)
	}
	d.Limit("slow", 2)
	if c := d.Capacity(); c != 0 {
		t.Errorf("Capacity with one backend unbounded = %d, want 0", c)
	}
	d.Limit("fast", 3)
	if c := d.Capacity(); c != 5 {
		t.Errorf("Capacity = %d, want 5", c)
	}
	run := func(ctx context.Context, kind string) error {
		h, err := d.HandlerFor(Record{Operation: "Run", Object: ObjectRef{Group: "alpha.example", Kind: kind, Name: "n", UID: "u"}})
		if err != nil {
			return err
		}
		_, err = h(ctx, Record{})
		return err
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(context.Background(), "slow") }()
	}
	// The slow backend is saturated: the fast one still runs, ten in turn.
	for range 10 {
		if err := run(context.Background(), "fast"); err != nil {
			t.Fatal(err)
		}
	}
	// A wait for a slow slot ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	time.Sleep(50 * time.Millisecond) // the five are running or waiting
	if err := run(ctx, "slow"); err == nil || !strings.Contains(err.Error(), "slot") {
		t.Errorf("a wait past its context: %v, want a slot error", err)
	}
	mu.Lock()
	if running["slow"] != 2 {
		t.Errorf("slow running = %d while saturated, want 2", running["slow"])
	}
	mu.Unlock()
	close(release)
	wg.Wait()
	if peak["slow"] != 2 {
		t.Errorf("slow peak = %d, want its limit 2", peak["slow"])
	}
}
