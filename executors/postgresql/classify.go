package postgresql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Reason is a stable failure reason, the same words as the Ready condition
// reasons of the database API.
type Reason string

// Reasons produced by Classify.
const (
	ReasonAuthenticationFailed   Reason = "AuthenticationFailed"
	ReasonInsufficientPrivileges Reason = "InsufficientPrivileges"
	ReasonDependencyUnavailable  Reason = "DependencyUnavailable"
	ReasonInvalidSpec            Reason = "InvalidSpec"
	ReasonConflict               Reason = "Conflict"
	ReasonProvisioningFailed     Reason = "ProvisioningFailed"
	// ReasonLoginRejected: the server refused the Tenant role's login before
	// checking its password (pg_hba.conf, or a role that may not log in).
	ReasonLoginRejected Reason = "LoginRejected"
	// ReasonDeletionBlocked: a Delete step waits for something outside
	// Ayatori (sessions it may not end, objects the role still owns).
	ReasonDeletionBlocked Reason = "DeletionBlocked"
)

// Classified is an error with a reason and a message that is safe to put
// in a Condition, an Event or the journal: it never contains the driver's
// raw text, a DSN or a credential.
type Classified struct {
	Reason  Reason
	Message string
	// Transient errors are retried by the journal consumer.
	Transient bool
	cause     error
}

func (c *Classified) Error() string { return string(c.Reason) + ": " + c.Message }

// Unwrap returns the underlying error (for logs at debug level only).
func (c *Classified) Unwrap() error { return c.cause }

// Classify maps an error from pgx, TLS or the network to a reason and a safe
// message (SQLSTATE classes per PostgreSQL Appendix A):
//   - 28000 invalid_authorization_specification, 28P01 invalid_password,
//     and TLS verification failures -> AuthenticationFailed;
//   - 42501 insufficient_privilege -> InsufficientPrivileges;
//   - 42710 duplicate_object, 42P04 duplicate_database -> Conflict (a
//     name taken concurrently: never adopted);
//   - class 08 (connection exception), 53 (insufficient resources),
//     57P01-57P03 (shutdown, cannot connect now), network errors and
//     timeouts -> DependencyUnavailable (transient);
//   - anything else -> ProvisioningFailed with the SQLSTATE only.
func Classify(err error) *Classified {
	if err == nil {
		return nil
	}
	var c *Classified
	if errors.As(err, &c) {
		return c
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		switch {
		case code == "28P01" || code == "28000":
			msg := "the server rejected the admin credentials (SQLSTATE " + code + ")"
			if strings.Contains(pgErr.Message, "no encryption") || strings.Contains(pgErr.Message, "pg_hba.conf") {
				msg = "the server has no pg_hba.conf entry for this connection (SQLSTATE " + code + "); check sslMode and the server's hostssl rules"
			}
			return &Classified{Reason: ReasonAuthenticationFailed, Message: msg, cause: err}
		case code == "42501":
			return &Classified{Reason: ReasonInsufficientPrivileges, Message: "permission denied (SQLSTATE 42501)", cause: err}
		case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"), code == "57P01", code == "57P02", code == "57P03":
			return &Classified{Reason: ReasonDependencyUnavailable, Message: "PostgreSQL is unavailable (SQLSTATE " + code + ")", Transient: true, cause: err}
		case code == "42710" || code == "42P04":
			return &Classified{Reason: ReasonConflict, Message: "the role or database was created concurrently by someone else (SQLSTATE " + code + "); nothing was changed", cause: err}
		case code == "3D000":
			return &Classified{Reason: ReasonInvalidSpec, Message: "the admin database does not exist (SQLSTATE 3D000)", cause: err}
		default:
			return &Classified{Reason: ReasonProvisioningFailed, Message: "PostgreSQL returned SQLSTATE " + code, Transient: true, cause: err}
		}
	}
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknownAuth):
		return &Classified{Reason: ReasonAuthenticationFailed, Message: "TLS: the server certificate is not signed by a trusted CA (--postgresql-ca-bundle-path)", cause: err}
	case errors.As(err, &hostErr):
		return &Classified{Reason: ReasonAuthenticationFailed, Message: "TLS: the server certificate does not match the endpoint host name", cause: err}
	case errors.As(err, &invalid):
		return &Classified{Reason: ReasonAuthenticationFailed, Message: "TLS: the server certificate is invalid (expired or not for server use)", cause: err}
	case errors.As(err, &verifyErr):
		return &Classified{Reason: ReasonAuthenticationFailed, Message: "TLS: the server certificate could not be verified", cause: err}
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return &Classified{Reason: ReasonAuthenticationFailed, Message: "TLS: the server does not accept TLS connections but sslMode requires TLS", cause: err}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return &Classified{Reason: ReasonDependencyUnavailable, Message: "PostgreSQL is unreachable (network error or timeout)", Transient: true, cause: err}
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return &Classified{Reason: ReasonDependencyUnavailable, Message: "could not connect to PostgreSQL", Transient: true, cause: err}
	}
	return &Classified{Reason: ReasonDependencyUnavailable, Message: "PostgreSQL operation failed", Transient: true, cause: err}
}
