package postgresql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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
