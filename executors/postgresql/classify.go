package postgresql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

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
//
// This file is the only code of the package that reads driver codes
// (SQLSTATE, pgconn error types, TLS/x509 error types) or driver text. The
// operations ask the named helpers below (sqlstate, isInsufficientPrivilege,
// isObjectInUse, dependentObjects, classifyTenantLogin) instead.
//
// Two branches read driver text because the driver offers nothing typed:
// SQLSTATE 28000 is the same for "no pg_hba.conf entry" (including the
// "no encryption" variant) and for a role that may not log in, so only the
// message tells the two apart (and only picks the safer hint: the reason is
// the same); "server refused TLS connection" is errors.New in pgconn
// (pgconn.go, v5.12) with no exported sentinel or type. The text is matched,
// never copied into a message.
//
// The transient rule (the same in every executor of the database domain,
// see docs/architecture.md): Transient says whether retrying the same
// intent unchanged may help. Only the handler preludes act on it: a
// transient failure to read the admin credential Secret is returned as an
// error, so the journal consumer redelivers the intent with back-off.
// Every failure of the operation itself becomes a Failed outcome whatever
// its Transient flag, and the projector decides whether and when to append
// a new attempt (its own back-off), so the journal records each failure.
func Classify(err error) *dbcontract.Failure {
	if err == nil {
		return nil
	}
	var c *dbcontract.Failure
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
			return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: msg, Cause: err}
		case code == "42501":
			return &dbcontract.Failure{Reason: dbcontract.ReasonInsufficientPrivileges, Message: "permission denied (SQLSTATE 42501)", Cause: err}
		case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"), code == "57P01", code == "57P02", code == "57P03":
			return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "PostgreSQL is unavailable (SQLSTATE " + code + ")", Transient: true, Cause: err}
		case code == "42710" || code == "42P04":
			return &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: "the role or database was created concurrently by someone else (SQLSTATE " + code + "); nothing was changed", Cause: err}
		case code == "3D000":
			return &dbcontract.Failure{Reason: dbcontract.ReasonInvalidSpec, Message: "the admin database does not exist (SQLSTATE 3D000)", Cause: err}
		default:
			return &dbcontract.Failure{Reason: dbcontract.ReasonProvisioningFailed, Message: "PostgreSQL returned SQLSTATE " + code, Transient: true, Cause: err}
		}
	}
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknownAuth):
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: "TLS: the server certificate is not signed by a trusted CA (--postgresql-ca-bundle-path)", Cause: err}
	case errors.As(err, &hostErr):
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: "TLS: the server certificate does not match the endpoint host name", Cause: err}
	case errors.As(err, &invalid):
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: "TLS: the server certificate is invalid (expired or not for server use)", Cause: err}
	case errors.As(err, &verifyErr):
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: "TLS: the server certificate could not be verified", Cause: err}
	}
	if msg := err.Error(); strings.Contains(msg, "require_auth check failed") {
		method := "another method"
		if _, rest, ok := strings.Cut(msg, "server requested "); ok {
			method, _, _ = strings.Cut(rest, " authentication")
		}
		if strings.Contains(msg, "did not complete authentication") {
			method = "no authentication"
		}
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed,
			Message: "the server asked for " + method + "; Ayatori authenticates only with SCRAM-SHA-256: no password was sent (set the role's pg_hba.conf method to scram-sha-256)", Cause: err}
	} else if strings.Contains(msg, "channel binding") {
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed,
			Message: "the server did not authenticate with SCRAM-SHA-256 and channel binding over TLS (it asked for another method, such as a cleartext or md5 password): no password was sent (set the role's pg_hba.conf method to scram-sha-256)", Cause: err}
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return &dbcontract.Failure{Reason: dbcontract.ReasonAuthenticationFailed, Message: "TLS: the server does not accept TLS connections but sslMode requires TLS", Cause: err}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "PostgreSQL is unreachable (network error or timeout)", Transient: true, Cause: err}
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "could not connect to PostgreSQL", Transient: true, Cause: err}
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "PostgreSQL operation failed", Transient: true, Cause: err}
}

// sqlstate returns the SQLSTATE of a PostgreSQL error in err's chain, or "".
func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// isInsufficientPrivilege: SQLSTATE 42501 insufficient_privilege (for
// pg_terminate_backend on a session the admin role may not end, and the
// login probe that proves a Tenant role cannot create a role).
func isInsufficientPrivilege(err error) bool { return sqlstate(err) == "42501" }

// isObjectInUse: SQLSTATE 55006 object_in_use (DROP DATABASE while
// sessions are connected).
func isObjectInUse(err error) bool { return sqlstate(err) == "55006" }

// dependentObjects: SQLSTATE 2BP01 dependent_objects_still_exist (DROP ROLE
// while the role owns objects or holds privileges). It returns the DETAIL
// (one dependent object or privilege per line, names only) and true.
func dependentObjects(err error) (detail string, ok bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "2BP01" {
		return pgErr.Detail, true
	}
	return "", false
}

// classifyTenantLogin maps a failed login of the Tenant role: a wrong
// password (28P01) is a Conflict between OpenBao and PostgreSQL; 28000 is
// pg_hba.conf or a role that may not log in (LoginRejected). Anything else
// is returned unchanged (Classify handles it later).
func classifyTenantLogin(err error, role, database string) error {
	switch sqlstate(err) {
	case "28P01":
		return conflict("the Tenant role %s cannot log in with the password stored in OpenBao (SQLSTATE 28P01)", role)
	case "28000":
		return &dbcontract.Failure{Reason: dbcontract.ReasonLoginRejected, Cause: err, Message: fmt.Sprintf(
			"the server rejected the login of role %s to database %s before checking its password (SQLSTATE 28000: no matching pg_hba.conf entry for this address/TLS, or the role may not log in); check pg_hba.conf and the role's LOGIN attribute", role, database)}
	}
	return err
}
