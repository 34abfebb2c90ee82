package openbao

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Executor executes the OpenBao operations of the database domain.
type Executor struct {
	Store *Store
	// Timeout bounds one operation (0: journal.DefaultDeadline).
	Timeout time.Duration
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger
}

// BackendName is the name this executor registers its handlers under.
const BackendName = "openbao"

// Handlers returns the journal handlers of this executor.
func (e *Executor) Handlers() map[string]journal.Handler {
	b := &journal.Backend{Name: BackendName, Deadline: e.Timeout, Log: e.Log,
		Classify: func(err error) *journal.Failure { return classify(err, "operation").JournalFailure() }}
	return map[string]journal.Handler{
		dbcontract.OpWriteCredential:   journal.Execute(b, journal.Step[dbcontract.CredentialIntent]{Run: e.write, Validate: validCredential}),
		dbcontract.OpDestroyCredential: journal.Execute(b, journal.Step[dbcontract.CredentialIntent]{Run: e.destroy, Validate: validCredential}),
	}
}

// validCredential refuses a payload without the KV mount and path.
func validCredential(_ journal.Record, in dbcontract.CredentialIntent) error {
	if in.Path == "" || in.Mount == "" {
		return errors.New("no KV mount or path")
	}
	return nil
}

func ownerOf(rec journal.Record, in dbcontract.CredentialIntent) Owner {
	return Owner{InstanceUID: in.InstanceUID, TenantUID: rec.Object.UID, Namespace: rec.Object.Namespace, Name: rec.Object.Name}
}

func (e *Executor) write(ctx context.Context, rec journal.Record, in dbcontract.CredentialIntent) (journal.Outcome, error) {
	out, err := e.Store.Write(ctx, in, ownerOf(rec, in))
	if err != nil {
		return journal.Outcome{}, err
	}
	return journal.Outcome{Payload: out}, nil
}

func (e *Executor) destroy(ctx context.Context, rec journal.Record, in dbcontract.CredentialIntent) (journal.Outcome, error) {
	skipped, err := e.Store.Destroy(ctx, in.Mount, in.Path, ownerOf(rec, in))
	if err != nil {
		return journal.Outcome{}, err
	}
	return journal.Outcome{Result: journal.Result{Message: skipped}, Payload: dbcontract.DestroyOutcome{Skipped: skipped}}, nil
}
