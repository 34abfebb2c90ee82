package postgresql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
}

// Handlers returns the journal handlers of this executor.
func (e *Executor) Handlers() map[string]journal.Handler {
	return map[string]journal.Handler{
		dbcontract.OpObserveInstance:   e.instanceOp(func(rv string) any { return dbcontract.ObserveOutcome{SecretResourceVersion: rv} }, e.observeInstance),
		dbcontract.OpBootstrapRegistry: e.instanceOp(func(rv string) any { return dbcontract.BootstrapOutcome{SecretResourceVersion: rv} }, e.bootstrapRegistry),
	}
}

// errCredentialsChanged makes the journal redeliver the intent: the
// observation used credentials that are no longer the effective ones.
type errCredentialsChanged struct{}

func (errCredentialsChanged) Error() string  { return "admin credentials changed during the operation" }
func (errCredentialsChanged) Reason() string { return "CredentialsChanged" }

func failed(c *dbcontract.Failure, payload any) journal.Outcome {
	return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: string(c.Reason), Message: c.Message}, Payload: payload}
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

func (e *Executor) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	t := e.Timeout
	if t <= 0 {
		t = 30 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

// instanceOp is the prelude of the Instance operations: decode the
// dbcontract.InstanceIntent (undecodable: InvalidSpec), bound the operation by the
// executor timeout, read the admin credentials (transient errors are
// retried by redelivery; others fail with emptyPayload(resourceVersion) so
// the projector sees which Secret version failed), then run op.
func (e *Executor) instanceOp(emptyPayload func(rv string) any, op func(ctx context.Context, in dbcontract.InstanceIntent, t Target, rv string) (journal.Outcome, error)) journal.Handler {
	return func(ctx context.Context, rec journal.Record) (journal.Outcome, error) {
		var in dbcontract.InstanceIntent
		if err := rec.DecodePayload(&in); err != nil {
			return failed(&dbcontract.Failure{Reason: dbcontract.ReasonInvalidSpec, Message: "undecodable " + rec.Operation + " payload"}, nil), nil
		}
		ctx, cancel := e.withTimeout(ctx)
		defer cancel()
		creds, rv, c := e.readCredentials(ctx, in.AdminCredRef)
		if c != nil {
			if c.Transient {
				return journal.Outcome{}, c
			}
			return failed(c, emptyPayload(rv)), nil
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
	res, err := e.observe(ctx, t, &out)
	if err != nil {
		return failed(Classify(err), out), nil
	}
	if res != nil {
		return *res, nil
	}
	// The observation is only valid for the credentials it used.
	again, _, c := e.readCredentials(ctx, in.AdminCredRef)
	if c == nil && again != t.Creds {
		return journal.Outcome{}, errCredentialsChanged{}
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: out}, nil
}

func (e *Executor) observe(ctx context.Context, t Target, out *dbcontract.ObserveOutcome) (*journal.Outcome, error) {
	pool, err := e.Pools.Get(t)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
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
			return nil, cl
		}
		_ = c.Close(ctx)
	}
	if err := conn.QueryRow(ctx, sqlServerVersion).Scan(&out.ServerVersion); err != nil {
		return nil, err
	}
	var super, createRole, createDB, dbCreate bool
	var dbName string
	if err := conn.QueryRow(ctx, sqlAdminAttributes).Scan(&super, &createRole, &createDB, &dbName, &dbCreate); err != nil {
		return nil, err
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
			o := failed(&dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges, Message: "the admin role lacks: " + strings.Join(out.MissingPrivileges, "; ")}, *out)
			return &o, nil
		}
		return nil, err
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
				return nil, err
			}
			if !usage || (st == dbcontract.RegistryNeedsMigration && !create) {
				out.MissingPrivileges = append(out.MissingPrivileges, "USAGE and CREATE on schema "+dbcontract.RegistrySchema)
			}
			if st == dbcontract.RegistryUsable {
				var dml bool
				if err := conn.QueryRow(ctx, sqlRegistryTablePrivileges, dbcontract.RegistrySchema+".tenant_ownership").Scan(&dml); err != nil {
					return nil, err
				}
				if !dml {
					out.MissingPrivileges = append(out.MissingPrivileges, "SELECT, INSERT, UPDATE, DELETE on "+dbcontract.RegistrySchema+".tenant_ownership")
				}
			}
		}
	}
	if len(out.MissingPrivileges) > 0 {
		o := failed(&dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges,
			Message: "the admin role lacks: " + strings.Join(out.MissingPrivileges, "; ")}, *out)
		return &o, nil
	}
	return nil, nil
}

// bootstrapRegistry applies the registry migrations. An error after a
// migration started is ResultUnknown: the projector observes before retrying.
func (e *Executor) bootstrapRegistry(ctx context.Context, in dbcontract.InstanceIntent, t Target, rv string) (journal.Outcome, error) {
	pool, err := e.Pools.Get(t)
	if err != nil {
		return failed(Classify(err), nil), nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return failed(Classify(err), nil), nil
	}
	defer conn.Release()
	v, applied, err := bootstrapRegistry(ctx, conn.Conn())
	payload := dbcontract.BootstrapOutcome{RegistryVersion: v, MigrationsApplied: applied, SecretResourceVersion: rv}
	if err != nil {
		cl := Classify(err)
		if errors.Is(err, errMigrationStarted) && cl.Reason != dbcontract.ReasonInsufficientPrivileges {
			return journal.Outcome{Result: journal.Result{Class: journal.ResultUnknown, Reason: string(cl.Reason), Message: "the registry migration was interrupted: " + cl.Message}, Payload: payload}, nil
		}
		return failed(cl, payload), nil
	}
	return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: payload}, nil
}
