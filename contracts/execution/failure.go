package execution

import (
	"context"
	"errors"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Failure is the one failure type of the execution domain's executors: a
// stable reason (an API reason of the execution group, or one of the
// adapter's classify.go), a message safe for a Condition, the state of the
// execution when the executor knows it, and how the attempt ends:
//
//   - Transient: retrying the same intent may succeed (the backend did not
//     answer, or answered "later"); the consumer redelivers it
//     (docs/decisions/0007) and records Failed with this reason once the
//     budget is spent;
//   - Unknown: the backend was reached but can not prove the execution's
//     state: a ResultUnknown outcome;
//   - otherwise a Failed outcome.
//
// State (when set) and References become the outcome's Observation; for
// Ensure, StateNotFound says that nothing was created. Cause keeps the
// underlying error for errors.Is/As only; it is never written anywhere.
type Failure struct {
	Reason     string
	Message    string
	State      State
	References []Reference
	Transient  bool
	Unknown    bool
	Cause      error
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

// Unwrap returns Cause.
func (f *Failure) Unwrap() error { return f.Cause }

// JournalFailure is the failure as the executor skeleton records it: its
// Observation is the payload when the state is known or unknown.
func (f *Failure) JournalFailure() *journal.Failure {
	jf := &journal.Failure{Reason: f.Reason, Message: f.Message, Transient: f.Transient, Unknown: f.Unknown, Cause: f.Cause}
	if f.State != "" || f.Unknown || len(f.References) > 0 {
		jf.Payload = Observation{State: f.State, References: f.References, Reason: f.Reason, Message: f.Message}
	}
	return jf
}

// Refused is a Failed outcome the executor decided with the execution in
// state (StateNotFound for an Ensure that created nothing).
func Refused(reason, message string, state State) *Failure {
	return &Failure{Reason: reason, Message: message, State: state}
}

// NothingCreated marks err, an error of Ensure before it created
// anything, so that its Failed outcome says StateNotFound. A transient
// error stays transient (the redelivery checks again); nil stays nil.
func NothingCreated(err error) error {
	if err == nil {
		return nil
	}
	return &stateKnown{state: StateNotFound, err: err}
}

// stateKnown is an error of a step that left the execution in a known
// state; the adapter's classify decides the reason, Complete adds the
// state.
type stateKnown struct {
	state State
	err   error
}

func (s *stateKnown) Error() string { return s.err.Error() }
func (s *stateKnown) Unwrap() error { return s.err }

// StateOf returns the state an error of a step is known to have left the
// execution in ("" when unknown).
func StateOf(err error) State {
	var s *stateKnown
	if errors.As(err, &s) {
		return s.state
	}
	var f *Failure
	if errors.As(err, &f) {
		return f.State
	}
	return ""
}

// Classifier adapts an adapter's classify (driver error → Failure) to
// the executor skeleton, keeping the state an error is known to leave
// (NothingCreated) in the outcome's Observation.
func Classifier(classify func(error) *Failure) func(error) *journal.Failure {
	return func(err error) *journal.Failure {
		f := classify(err)
		if f == nil {
			return nil
		}
		if f.State == "" && !f.Transient {
			f.State = StateOf(err)
		}
		if f.Cause == nil {
			f.Cause = err
		}
		return f.JournalFailure()
	}
}

// Complete returns the Backend.Complete of adapter: every Observation
// payload names the adapter; a Succeeded outcome's message is
// "<State>: <Observation.Message>" (its reason stays empty, so an observed
// failure never reads as the operation's failure); a Failed Ensure whose
// payload could not be decoded carries StateNotFound (nothing was
// created).
func Complete(adapter string) func(journal.Record, journal.Outcome) journal.Outcome {
	return func(intent journal.Record, out journal.Outcome) journal.Outcome {
		obs, ok := out.Payload.(Observation)
		if !ok && intent.Operation == OpEnsure && out.Result.Class == journal.Failed && out.Result.Reason == journal.ReasonUndecodableIntent {
			obs, ok = Observation{State: StateNotFound, Reason: out.Result.Reason, Message: out.Result.Message}, true
		}
		if !ok {
			return out
		}
		obs.Adapter = adapter
		if out.Result.Class == journal.Succeeded {
			out.Result.Message = string(obs.State) + ": " + obs.Message
		}
		out.Payload = obs
		return out
	}
}

// Observed turns an adapter's step that observes the execution into a
// step of the executor skeleton: its Observation is the Succeeded
// outcome's payload, its error the attempt's failure.
func Observed[In any](fn func(ctx context.Context, rec journal.Record, in In) (Observation, error)) func(context.Context, journal.Record, In) (journal.Outcome, error) {
	return func(ctx context.Context, rec journal.Record, in In) (journal.Outcome, error) {
		obs, err := fn(ctx, rec, in)
		if err != nil {
			return journal.Outcome{}, err
		}
		return journal.Outcome{Payload: obs}, nil
	}
}
