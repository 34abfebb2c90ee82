package database

import (
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Failure is the one failure type of the database domain: a reason (an
// API reason), a message that is safe to put in a Condition, an Event or
// the journal (never a driver's raw text, a DSN or a credential), and
// whether retrying may help. Cause keeps the underlying error for logs at
// debug level; it is never written anywhere.
type Failure struct {
	Reason  Reason
	Message string
	// Transient failures are worth retrying unchanged.
	Transient bool
	Cause     error
}

func (f *Failure) Error() string { return string(f.Reason) + ": " + f.Message }

// Unwrap returns the underlying error.
func (f *Failure) Unwrap() error { return f.Cause }

// JournalFailure is the failure as the executor skeleton records it
// (journal.Execute): a Transient one is redelivered, any other is a
// Failed outcome (docs/decisions/0007).
func (f *Failure) JournalFailure() *journal.Failure {
	return &journal.Failure{Reason: string(f.Reason), Message: f.Message, Transient: f.Transient, Cause: f.Cause}
}
