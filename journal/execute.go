package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
)

// This file is the executor skeleton every backend shares: a backend
// package supplies its operations (Step) and its classify function
// (Backend.Classify); Execute turns each into a Handler that decodes and
// validates the payload, bounds the attempt by the step deadline, runs the
// operation, maps its one typed result to the outcome, and logs one line
// per attempt. The retry model it applies is docs/decisions/0007:
// a transient failure is redelivered by the consumer (within the delivery
// budget, or without limit for a Persistent operation); everything else
// ends the intent with exactly one outcome.

// Failure is the typed result of an attempt that did not succeed.
//
// Reason is the stable CamelCase reason of the outcome (an API condition
// reason of the domain); Message is safe for a Condition, an Event and the
// journal (never a driver's raw text, a DSN or a credential). Transient
// says whether the same intent, run again unchanged, may succeed: the
// consumer then redelivers it with back-off instead of recording an
// outcome, and records Failed with this Reason and Message once the
// budget is spent. Unknown makes the outcome ResultUnknown instead of
// Failed (the backend was reached and the effect can not be proven either
// way). Payload is the outcome payload (what the executor observed; nil:
// none). Cause is the underlying error, for errors.Is/As only: it is never
// logged, journaled or shown.
type Failure struct {
	Reason    string
	Message   string
	Transient bool
	Unknown   bool
	Payload   any
	Cause     error
}

func (f *Failure) Error() string {
	if f.Message == "" {
		return f.Reason
	}
	return f.Reason + ": " + f.Message
}

// Unwrap returns Cause.
func (f *Failure) Unwrap() error { return f.Cause }

// outcome is the outcome of a non-transient failure.
func (f *Failure) outcome() Outcome {
	class := Failed
	if f.Unknown {
		class = ResultUnknown
	}
	return Outcome{Result: Result{Class: class, Reason: f.Reason, Message: f.Message}, Payload: f.Payload}
}

// Failer is implemented by a domain's own failure type (for example
// contracts/database.Failure) to give the skeleton its journal form.
type Failer interface {
	error
	JournalFailure() *Failure
}

// AsFailure returns the Failure err is or carries (a *Failure, or a
// Failer in its chain), or nil.
func AsFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	var fr Failer
	if errors.As(err, &fr) {
		return fr.JournalFailure()
	}
	return nil
}

// DefaultDeadline bounds one attempt when neither the Backend nor the
// Step sets a deadline.
const DefaultDeadline = 30 * time.Second

// Backend describes one executor backend to the skeleton.
type Backend struct {
	// Name is the backend name: the dispatcher's route key and the
	// "backend" of every log line.
	Name string
	// Deadline bounds one attempt of every step (0: DefaultDeadline).
	Deadline time.Duration
	// Classify is the backend's classify.go: it maps an error the
	// operation returned (a driver, HTTP or API error) to a Failure. An
	// error that is or carries a Failure is not classified again. A nil
	// Classify, or a nil answer, makes the error transient with reason
	// ReasonRetriesExhausted.
	Classify func(err error) *Failure
	// Complete, when set, finishes every outcome the skeleton records for
	// an intent (for example stamps the backend's name into the domain's
	// outcome payload). It must not change the class.
	Complete func(intent Record, out Outcome) Outcome
	// Log receives one line per attempt (the zero Logger discards them).
	Log logr.Logger
}

// Step is one operation of a backend, with In its intent payload type.
type Step[In any] struct {
	// Run performs one attempt. A nil error records out (its class
	// defaults to Succeeded). An error is the attempt's failure: a Failure
	// (or a domain Failer) as decided, anything else through
	// Backend.Classify.
	Run func(ctx context.Context, intent Record, in In) (out Outcome, err error)
	// Validate, when set, checks the decoded payload before Run; a non-nil
	// error (a Failure, or anything else: ReasonUndecodableIntent) is the
	// attempt's failure and nothing runs.
	Validate func(intent Record, in In) error
	// Deadline overrides Backend.Deadline for this step.
	Deadline time.Duration
}

// Undecodable is the failure of an intent whose payload can not be
// decoded into, or validated as, its operation's payload type.
func Undecodable(intent Record, why string) *Failure {
	msg := fmt.Sprintf("the %s payload can not be decoded or is incomplete", intent.Operation)
	if why != "" {
		msg += ": " + why
	}
	return &Failure{Reason: ReasonUndecodableIntent, Message: msg}
}

// Execute returns the Handler running step s of backend b (see the file
// comment). The handler returns an error only for a transient failure;
// that error is the Failure, so the consumer's budget-spent outcome
// carries its reason and message.
func Execute[In any](b *Backend, s Step[In]) Handler {
	deadline := s.Deadline
	if deadline <= 0 {
		deadline = b.Deadline
	}
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	return func(ctx context.Context, intent Record) (Outcome, error) {
		started := time.Now()
		out, err := attempt(ctx, b, intent, s, deadline)
		b.log(ctx, intent, out, err, time.Since(started))
		if err != nil {
			return Outcome{}, err
		}
		if b.Complete != nil {
			out = b.Complete(intent, out)
		}
		return out, nil
	}
}

// attempt decodes, validates and runs one attempt of s, and maps its
// result: a transient failure is returned as its *Failure, every other
// result as the outcome to record.
func attempt[In any](ctx context.Context, b *Backend, intent Record, s Step[In], deadline time.Duration) (Outcome, error) {
	var in In
	if err := intent.DecodePayload(&in); err != nil {
		return Undecodable(intent, "").outcome(), nil
	}
	if s.Validate != nil {
		if err := s.Validate(intent, in); err != nil {
			f := AsFailure(err)
			if f == nil {
				f = Undecodable(intent, err.Error())
			}
			return b.settle(f)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	out, err := s.Run(ctx, intent, in)
	if err == nil {
		if out.Result.Class == "" {
			out.Result.Class = Succeeded
		}
		return out, nil
	}
	return b.settle(b.classify(err))
}

// classify is the Failure of an operation's error.
func (b *Backend) classify(err error) *Failure {
	if f := AsFailure(err); f != nil {
		return f
	}
	if b.Classify != nil {
		if f := b.Classify(err); f != nil {
			if f.Cause == nil {
				f.Cause = err
			}
			return f
		}
	}
	return &Failure{Reason: ReasonRetriesExhausted, Message: "the operation failed and was not classified", Transient: true, Cause: err}
}

// settle: a transient failure is the handler's error (redelivery), any
// other is the outcome.
func (b *Backend) settle(f *Failure) (Outcome, error) {
	if f.Transient {
		return Outcome{}, f
	}
	return f.outcome(), nil
}

// log writes the attempt's one line: what ran, which delivery it was, how
// it ended and how long it took. Only the safe reason and message of a
// failure are logged, never its cause.
func (b *Backend) log(ctx context.Context, intent Record, out Outcome, err error, took time.Duration) {
	kv := []any{"backend", b.Name, "operation", intent.Operation, "intent", intent.ID, "uid", intent.Object.UID,
		"delivery", DeliveryOf(ctx), "duration", took.Round(time.Millisecond).String()}
	if err != nil {
		f := AsFailure(err)
		b.Log.Info("attempt failed transiently; the intent is redelivered", append(kv, "reason", f.Reason, "message", f.Message)...)
		return
	}
	b.Log.Info("attempt finished", append(kv, "result", string(out.Result.Class), "reason", out.Result.Reason)...)
}

type deliveryKey struct{}

// withDelivery records in ctx which delivery of the intent a handler runs.
func withDelivery(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, deliveryKey{}, n)
}

// DeliveryOf returns which delivery of its intent a handler's ctx runs
// (1 for the first; 0 outside Consume).
func DeliveryOf(ctx context.Context) int {
	n, _ := ctx.Value(deliveryKey{}).(int)
	return n
}
