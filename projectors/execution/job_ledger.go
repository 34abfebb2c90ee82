package execution

import (
	"time"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// observed is one outcome of the Job's journal with its observation.
type observed struct {
	rec journal.Record
	// obs is the outcome's Observation (zero when it carried none).
	obs execution.Observation
	// ambiguous: the outcome does not tell what the backend did (class
	// ResultUnknown, or Failed without a decidable observation, e.g.
	// RetriesExhausted when the backend could not be reached).
	ambiguous bool
}

// ledger is what a Job's journal says, read in stream order. Times are the
// records' local observation times (journaled.Observations): decisions
// compare them with the projector's own clock only.
type ledger struct {
	// ensures and cancels are the intents of each operation, in order.
	ensures, cancels, deletes []journal.Record
	// pending are intents without an outcome.
	pending []journal.Record
	// outcomes are every outcome of the four operations, in order.
	outcomes []observed
	// existed: some outcome reported an execution (a state other than
	// NotFound): the Job's execution exists or existed.
	existed bool
	// refs and adapter are the latest references an outcome reported.
	refs    []execution.Reference
	adapter string
	// terminal is the first outcome that proved the execution ended.
	terminal *observed
	// runningSince is when this process first observed the execution
	// running (zero: never); startTime is the backend's start time as
	// first reported (nil: none).
	runningSince time.Time
	startTime    *time.Time
	// failing is the latest outcome that reported a failure which will
	// not heal by itself (Observation.Failing).
	failing *observed
	// backendLost: an administrator's confirmation was journaled.
	backendLost bool
	// deadlineFrom is the local observation time of the DeadlineStarted
	// note (zero: none).
	deadlineFrom time.Time
	// finished: the Finished note was journaled.
	finished bool
	// ensuredWith is the adapter the last Ensure intent named ("": none):
	// the backend that may hold an execution even when no outcome named
	// it (an Ensure whose outcome is lost or unknown).
	ensuredWith string
}

// readLedger folds recs (one Job UID, stream order). An outcome counts
// only as the answer to an earlier intent of recs: an executor's answer to
// a record it could not read or attribute (Failed/UndecodableIntent,
// Failed/UntrustedIntent, keyed by that record's stream sequence) carries
// what its publisher chose (an operation, a step) and says nothing of the
// Job's execution.
func readLedger(recs []journal.Record) *ledger {
	l := &ledger{}
	done := map[string]bool{}
	intents := map[string]bool{}
	for _, r := range recs {
		switch r.Type {
		case journal.TypeIntent:
			intents[r.ID] = true
		case journal.TypeOutcome:
			if intents[r.CausationID] {
				done[r.CausationID] = true
			}
		}
	}
	for _, r := range recs {
		switch r.Type {
		case journal.TypeNote:
			switch r.Operation {
			case execution.NoteBackendLostConfirmed:
				l.backendLost = true
			case execution.NoteFinished:
				l.finished = true
			case execution.NoteDeadlineStarted:
				if l.deadlineFrom.IsZero() {
					l.deadlineFrom = r.Time
				}
			}
		case journal.TypeIntent:
			switch r.Operation {
			case execution.OpEnsure:
				l.ensures = append(l.ensures, r)
				var in execution.EnsureIntent
				if r.DecodePayload(&in) == nil && in.Adapter != "" {
					l.ensuredWith = in.Adapter
				}
			case execution.OpCancel:
				l.cancels = append(l.cancels, r)
			case execution.OpDelete:
				l.deletes = append(l.deletes, r)
			}
			if !done[r.ID] {
				l.pending = append(l.pending, r)
			}
		case journal.TypeOutcome:
			if !done[r.CausationID] {
				continue // answers no intent of this Job (see above)
			}
			o := observed{rec: r}
			decoded := len(r.Payload) > 0 && r.DecodePayload(&o.obs) == nil && o.obs.State != ""
			switch {
			case r.Result == nil || r.Result.Class == journal.ResultUnknown:
				o.ambiguous = true
			case r.Result.Class == journal.Failed && !decoded:
				o.ambiguous = true
			}
			if !decoded {
				o.obs = execution.Observation{}
			}
			l.outcomes = append(l.outcomes, o)
			if o.ambiguous || !decoded {
				continue
			}
			if o.obs.State != execution.StateNotFound {
				l.existed = true
			}
			if len(o.obs.References) > 0 {
				l.refs, l.adapter = o.obs.References, o.obs.Adapter
			}
			if o.obs.StartTime != nil && l.startTime == nil {
				t := *o.obs.StartTime
				l.startTime = &t
			}
			if o.obs.State == execution.StateRunning && l.runningSince.IsZero() {
				l.runningSince = r.Time
			}
			if o.obs.Failing {
				f := o
				l.failing = &f
			}
			if o.obs.Terminal && l.terminal == nil {
				t := o
				l.terminal = &t
			}
		}
	}
	return l
}

// last returns the latest outcome (nil: none).
func (l *ledger) last() *observed {
	if len(l.outcomes) == 0 {
		return nil
	}
	return &l.outcomes[len(l.outcomes)-1]
}

// lastOf returns the latest outcome of operation op (nil: none).
func (l *ledger) lastOf(op string) *observed {
	for i := len(l.outcomes) - 1; i >= 0; i-- {
		if l.outcomes[i].rec.Operation == op {
			return &l.outcomes[i]
		}
	}
	return nil
}

// firstCancel is the payload of the first Cancel intent (zero when none).
func (l *ledger) firstCancel() execution.ExecutionIntent {
	var in execution.ExecutionIntent
	if len(l.cancels) > 0 {
		_ = l.cancels[0].DecodePayload(&in)
	}
	return in
}

// firstCancelReason is the reason of the first Cancel intent ("" when none).
func (l *ledger) firstCancelReason() execution.StopReason { return l.firstCancel().Reason }

// stopped reports whether the latest decidable outcome after the first
// Cancel proves the execution will not continue.
func (l *ledger) stoppedAfterCancel() (*observed, bool) {
	if len(l.cancels) == 0 {
		return nil, false
	}
	first := l.cancels[0].Sequence
	for i := len(l.outcomes) - 1; i >= 0; i-- {
		o := &l.outcomes[i]
		if o.rec.Sequence < first {
			break
		}
		if o.ambiguous {
			return nil, false
		}
		if o.obs.State == "" {
			continue
		}
		return o, o.obs.State.Stopped()
	}
	return nil, false
}

// sameStateRun counts the trailing outcomes that report the latest
// outcome's state (1 for a fresh state): the observe back-off grows with
// it and resets when the state changes.
func (l *ledger) sameStateRun() int {
	n := 0
	last := l.last()
	if last == nil {
		return 0
	}
	for i := len(l.outcomes) - 1; i >= 0; i-- {
		o := l.outcomes[i]
		if o.ambiguous != last.ambiguous || o.obs.State != last.obs.State {
			break
		}
		n++
	}
	return n
}
