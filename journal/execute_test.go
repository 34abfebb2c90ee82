package journal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// The executor skeleton's mapping, one attempt at a time (no server).

type testIntent struct {
	Name string `json:"name"`
}

func skeletonIntent(t *testing.T, payload any) Record {
	t.Helper()
	rec, err := NewIntent(ObjectRef{Group: "test.ayatori.ddupan.top", Kind: "Thing", Namespace: "ns", Name: "n", UID: "uid-1", Generation: 1}, "DoThing", "", 1, payload)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestExecuteMapsOneTypedResult(t *testing.T) {
	canary := errors.New("CANARY driver text")
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	b := &Backend{Name: "test", Log: log,
		Classify: func(err error) *Failure {
			if errors.Is(err, canary) {
				return &Failure{Reason: "BackendUnavailable", Message: "the backend did not answer", Transient: true}
			}
			return nil
		},
		Complete: func(_ Record, out Outcome) Outcome {
			out.Result.Message += " [completed]"
			return out
		}}
	var sawDeadline bool
	step := func(res func() (Outcome, error)) Handler {
		return Execute(b, Step[testIntent]{Deadline: time.Minute,
			Validate: func(_ Record, in testIntent) error {
				if in.Name == "" {
					return errors.New("no name")
				}
				return nil
			},
			Run: func(ctx context.Context, _ Record, _ testIntent) (Outcome, error) {
				d, ok := ctx.Deadline()
				sawDeadline = ok && time.Until(d) > 50*time.Second
				return res()
			}})
	}
	ctx := withDelivery(context.Background(), 3)
	good := skeletonIntent(t, testIntent{Name: "x"})

	out, err := step(func() (Outcome, error) { return Outcome{Payload: "observed"}, nil })(ctx, good)
	if err != nil || out.Result.Class != Succeeded || out.Payload != "observed" || out.Result.Message != " [completed]" || !sawDeadline {
		t.Fatalf("success: %+v %v deadline=%v", out, err, sawDeadline)
	}

	out, err = step(func() (Outcome, error) {
		return Outcome{}, &Failure{Reason: "Conflict", Message: "taken", Payload: "state"}
	})(ctx, good)
	if err != nil || out.Result.Class != Failed || out.Result.Reason != "Conflict" || out.Payload != "state" {
		t.Fatalf("definite failure: %+v %v", out, err)
	}

	out, err = step(func() (Outcome, error) { return Outcome{}, &Failure{Reason: "BackendLost", Unknown: true} })(ctx, good)
	if err != nil || out.Result.Class != ResultUnknown {
		t.Fatalf("unknown: %+v %v", out, err)
	}

	_, err = step(func() (Outcome, error) { return Outcome{}, canary })(ctx, good)
	if f := AsFailure(err); f == nil || !f.Transient || f.Reason != "BackendUnavailable" {
		t.Fatalf("transient: %v", err)
	}
	// The budget-spent outcome keeps the reason and the safe message,
	// never the driver's text.
	ex := exhausted(err, 5)
	if ex.Result.Class != Failed || ex.Result.Reason != "BackendUnavailable" || !strings.Contains(ex.Result.Message, "the backend did not answer") ||
		!strings.Contains(ex.Result.Message, "5 deliveries") || strings.Contains(ex.Result.Message, "CANARY") {
		t.Fatalf("exhausted: %+v", ex)
	}

	_, err = step(func() (Outcome, error) { return Outcome{}, errors.New("unclassified CANARY") })(ctx, good)
	if f := AsFailure(err); f == nil || !f.Transient {
		t.Fatalf("an unclassified error is transient: %v", err)
	}

	out, err = step(func() (Outcome, error) { t.Fatal("ran an invalid intent"); return Outcome{}, nil })(ctx, skeletonIntent(t, testIntent{}))
	if err != nil || out.Result.Reason != ReasonUndecodableIntent || !strings.Contains(out.Result.Message, "no name") {
		t.Fatalf("invalid payload: %+v %v", out, err)
	}
	bad := good
	bad.Payload = []byte(`"not an object"`)
	out, err = step(func() (Outcome, error) { t.Fatal("ran an undecodable intent"); return Outcome{}, nil })(ctx, bad)
	if err != nil || out.Result.Reason != ReasonUndecodableIntent {
		t.Fatalf("undecodable payload: %+v %v", out, err)
	}

	// One line per attempt, naming the delivery; no driver text.
	if len(lines) != 7 {
		t.Fatalf("%d log lines for 7 attempts: %q", len(lines), lines)
	}
	for _, l := range lines {
		if strings.Contains(l, "CANARY") || !strings.Contains(l, `"delivery"=3`) || !strings.Contains(l, `"backend"="test"`) {
			t.Errorf("log line: %s", l)
		}
	}
	if !strings.Contains(lines[3], "redelivered") {
		t.Errorf("a transient attempt's line says it is redelivered: %s", lines[3])
	}
}
