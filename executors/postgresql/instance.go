package postgresql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// SecretReader reads the admin Secret from the controller's own namespace.
// It returns ErrSecretNotFound when the Secret does not exist.
type SecretReader interface {
	ReadSecret(ctx context.Context, name string) (data map[string][]byte, resourceVersion string, err error)
}

// ErrSecretNotFound is returned by SecretReader for a missing Secret.
var ErrSecretNotFound = errors.New("secret not found")

// Executor executes the PostgreSQL operations of the database domain.
type Executor struct {
	Pools   *Pools
	Secrets SecretReader
	// Timeout bounds one operation (--reconcile-timeout).
	Timeout time.Duration
	// Passwords reads Tenant passwords from OpenBao (Tenant operations).
	Passwords PasswordSource
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger
}

// Backend is the PostgreSQL executor's description for the executor
// skeleton (journal.Execute).
func (e *Executor) backend() *journal.Backend {
	return &journal.Backend{Name: BackendName, Deadline: e.Timeout, Log: e.Log,
		Classify: func(err error) *journal.Failure { return Classify(err).JournalFailure() }}
}

// BackendName is the name this executor registers its handlers under.
const BackendName = "postgresql"

// Handlers returns the journal handlers of the Instance operations.
func (e *Executor) Handlers() map[string]journal.Handler {
	b := e.backend()
	return map[string]journal.Handler{
		dbcontract.OpObserveInstance: journal.Execute(b, journal.Step[dbcontract.InstanceIntent]{
			Run: e.instanceOp(func(rv string) any { return dbcontract.ObserveOutcome{SecretResourceVersion: rv} }, e.observeInstance)}),
		dbcontract.OpBootstrapRegistry: journal.Execute(b, journal.Step[dbcontract.InstanceIntent]{
			Run: e.instanceOp(func(rv string) any { return dbcontract.BootstrapOutcome{SecretResourceVersion: rv} }, e.bootstrapRegistry)}),
	}
}

// errCredentialsChanged: the observation used credentials that are no
// longer the effective ones; the redelivery observes with the new ones.
var errCredentialsChanged = &journal.Failure{Transient: true, Reason: "CredentialsChanged", Message: "the admin credentials changed during the operation"}

// failed is the failure c of an operation with the payload it observed
// (nil: none).
func failed(c *dbcontract.Failure, payload any) error {
	f := c.JournalFailure()
	f.Payload = payload
	return f
}

// readCredentials reads the effective admin credentials of an intent.
func (e *Executor) readCredentials(ctx context.Context, ref dbcontract.AdminCredentialRef) (Credentials, string, *dbcontract.Failure) {
	data, rv, err := e.Secrets.ReadSecret(ctx, ref.SecretName)
	if errors.Is(err, ErrSecretNotFound) {
		return Credentials{}, "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable,
			Message: fmt.Sprintf("admin credential Secret %q not found in the controller namespace", ref.SecretName)}
	}
	if err != nil {
		return Credentials{}, "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "could not read the admin credential Secret", Transient: true, Cause: err}
	}
	var missing []string
	for _, k := range []string{ref.UsernameKey, ref.PasswordKey} {
		if len(data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Credentials{}, rv, &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed,
			Message: fmt.Sprintf("admin credential Secret %q has no non-empty key(s) %s", ref.SecretName, strings.Join(missing, ", "))}
	}
	return Credentials{Username: string(data[ref.UsernameKey]), Password: string(data[ref.PasswordKey])}, rv, nil
}

// instanceOp is the prelude of the Instance operations: read the admin
// credentials (a failure carries emptyPayload(resourceVersion), so the
// projector sees which Secret version failed), then run op.
func (e *Executor) instanceOp(emptyPayload func(rv string) any, op func(ctx context.Context, in dbcontract.InstanceIntent, t Target, rv string) (journal.Outcome, error)) func(context.Context, journal.Record, dbcontract.InstanceIntent) (journal.Outcome, error) {
	return func(ctx context.Context, rec journal.Record, in dbcontract.InstanceIntent) (journal.Outcome, error) {
		creds, rv, c := e.readCredentials(ctx, in.AdminCredRef)
		if c != nil {
			return journal.Outcome{}, failed(c, emptyPayload(rv))
		}
		return op(ctx, in, Target{InstanceUID: rec.Object.UID, Endpoint: in.Endpoint, CredRef: in.AdminCredRef, Creds: creds}, rv)
	}
}

// observeInstance: connect with the admin credentials (pooled, per Instance),
// read server_version, check the admin role's privileges and the registry,
// prove the certificate also covers hostaddr (verify-full), then re-read the
// Secret and discard the result if the effective credentials changed.
func (e *Executor) observeInstance(ctx context.Context, in dbcontract.InstanceIntent, t Target, rv string) (journal.Outcome, error) {
	out := dbcontract.ObserveOutcome{SecretResourceVersion: rv}
	if err := e.observe(ctx, t, &out); err != nil {
		return journal.Outcome{}, failed(Classify(err), out)
	}
	// The observation is only valid for the credentials it used.
	again, _, c := e.readCredentials(ctx, in.AdminCredRef)
	if c == nil && again != t.Creds {
		return journal.Outcome{}, errCredentialsChanged
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: out}, nil
}

// observe fills out; an error is the observation's failure (Classify).
func (e *Executor) observe(ctx context.Context, t Target, out *dbcontract.ObserveOutcome) error {
	pool, err := e.Pools.Get(t)
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// verify-full: consumers may connect by hostaddr only, so the
	// certificate must also carry hostaddr as an IP SAN.
	if t.Endpoint.SSLMode == "verify-full" && t.Endpoint.HostAddr != "" {
		c, err := e.Pools.Connect(ctx, t, true)
		if err != nil {
			cl := Classify(err)
			if cl.Reason == dbcontract.ReasonAuthenticationFailed && strings.HasPrefix(cl.Message, "TLS:") {
				cl = &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: "TLS: the server certificate does not cover hostaddr " + t.Endpoint.HostAddr + " as an IP SAN"}
			}
			return cl
		}
		_ = c.Close(ctx)
	}
	if err := conn.QueryRow(ctx, sqlServerVersion).Scan(&out.ServerVersion); err != nil {
		return err
	}
	var super, createRole, createDB, dbCreate bool
	var dbName string
	if err := conn.QueryRow(ctx, sqlAdminAttributes).Scan(&super, &createRole, &createDB, &dbName, &dbCreate); err != nil {
		return err
	}
	st, v, err := observeRegistry(ctx, conn)
	if err != nil {
		var c *dbcontract.Failure
		if errors.As(err, &c) && c.Reason == dbcontract.ReasonInsufficientPrivileges && !super {
			// Report the role attributes too, so one fix covers everything.
			if !createRole {
				out.MissingPrivileges = append(out.MissingPrivileges, "CREATEROLE")
			}
			if !createDB {
				out.MissingPrivileges = append(out.MissingPrivileges, "CREATEDB")
			}
			out.MissingPrivileges = append(out.MissingPrivileges, strings.TrimPrefix(c.Message, "the admin role lacks: "))
			return &dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges, Message: "the admin role lacks: " + strings.Join(out.MissingPrivileges, "; ")}
		}
		return err
	}
	out.Registry, out.RegistryVersion = st, v
	if !super {
		if !createRole {
			out.MissingPrivileges = append(out.MissingPrivileges, "CREATEROLE")
		}
		if !createDB {
			out.MissingPrivileges = append(out.MissingPrivileges, "CREATEDB")
		}
		switch st {
		case dbcontract.RegistryAbsent:
			if !dbCreate {
				out.MissingPrivileges = append(out.MissingPrivileges, fmt.Sprintf("CREATE on database %s (to create the registry schema)", dbName))
			}
		default:
			var usage, create bool
			if err := conn.QueryRow(ctx, sqlRegistrySchemaPrivileges, dbcontract.RegistrySchema).Scan(&usage, &create); err != nil {
				return err
			}
			if !usage || (st == dbcontract.RegistryNeedsMigration && !create) {
				out.MissingPrivileges = append(out.MissingPrivileges, "USAGE and CREATE on schema "+dbcontract.RegistrySchema)
			}
			if st == dbcontract.RegistryUsable {
				var dml bool
				if err := conn.QueryRow(ctx, sqlRegistryTablePrivileges, dbcontract.RegistrySchema+".tenant_ownership").Scan(&dml); err != nil {
					return err
				}
				if !dml {
					out.MissingPrivileges = append(out.MissingPrivileges, "SELECT, INSERT, UPDATE, DELETE on "+dbcontract.RegistrySchema+".tenant_ownership")
				}
			}
		}
	}
	if len(out.MissingPrivileges) > 0 {
		return &dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges,
			Message: "the admin role lacks: " + strings.Join(out.MissingPrivileges, "; ")}
	}
	return nil
}

// bootstrapRegistry applies the registry migrations. An error after a
// migration started is ResultUnknown: the projector observes before retrying.
func (e *Executor) bootstrapRegistry(ctx context.Context, in dbcontract.InstanceIntent, t Target, rv string) (journal.Outcome, error) {
	pool, err := e.Pools.Get(t)
	if err != nil {
		return journal.Outcome{}, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return journal.Outcome{}, err
	}
	defer conn.Release()
	v, applied, err := bootstrapRegistry(ctx, conn.Conn())
	payload := dbcontract.BootstrapOutcome{RegistryVersion: v, MigrationsApplied: applied, SecretResourceVersion: rv}
	if err != nil {
		cl := Classify(err)
		if errors.Is(err, errMigrationStarted) && cl.Reason != dbcontract.ReasonInsufficientPrivileges {
			return journal.Outcome{}, &journal.Failure{Unknown: true, Reason: string(cl.Reason), Message: "the registry migration was interrupted: " + cl.Message, Payload: payload, Cause: err}
		}
		return journal.Outcome{}, failed(cl, payload)
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: payload}, nil
}
