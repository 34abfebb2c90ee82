package openbao

import (
	"context"
	"errors"
	"time"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Executor executes the OpenBao operations of the database domain.
type Executor struct {
	Store   *Store
	Timeout time.Duration
}

// Handlers returns the journal handlers of this executor.
func (e *Executor) Handlers() map[string]journal.Handler {
	return map[string]journal.Handler{dbcontract.OpWriteCredential: e.write, dbcontract.OpDestroyCredential: e.destroy}
}

func ownerOf(rec journal.Record, in dbcontract.CredentialIntent) Owner {
	return Owner{InstanceUID: in.InstanceUID, TenantUID: rec.Object.UID, Namespace: rec.Object.Namespace, Name: rec.Object.Name}
}

func (e *Executor) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	t := e.Timeout
	if t <= 0 {
		t = 30 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

func failedOutcome(err error) journal.Outcome {
	var f *dbcontract.Failure
	if !errors.As(err, &f) {
		f = classify(err, "operation")
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: string(f.Reason), Message: f.Message}}
}

func (e *Executor) write(ctx context.Context, rec journal.Record) (journal.Outcome, error) {
	var in dbcontract.CredentialIntent
	if err := rec.DecodePayload(&in); err != nil || in.Path == "" || in.Mount == "" {
		return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: string(dbcontract.ReasonInvalidSpec), Message: "undecodable WriteCredential payload"}}, nil
	}
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	out, err := e.Store.Write(ctx, in, ownerOf(rec, in))
	if err != nil {
		return failedOutcome(err), nil
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: out}, nil
}

func (e *Executor) destroy(ctx context.Context, rec journal.Record) (journal.Outcome, error) {
	var in dbcontract.CredentialIntent
	if err := rec.DecodePayload(&in); err != nil || in.Path == "" || in.Mount == "" {
		return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: string(dbcontract.ReasonInvalidSpec), Message: "undecodable DestroyCredential payload"}}, nil
	}
	ctx, cancel := e.ctx(ctx)
	defer cancel()
	skipped, err := e.Store.Destroy(ctx, in.Mount, in.Path, ownerOf(rec, in))
	if err != nil {
		return failedOutcome(err), nil
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded, Message: skipped}, Payload: dbcontract.DestroyOutcome{Skipped: skipped}}, nil
}
