package postgresql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// TestClassify: every driver code Classify maps, and the fallbacks. The
// message never carries the driver's text.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err       error
		reason    dbcontract.Reason
		transient bool
	}{
		{&pgconn.PgError{Code: "28P01", Message: "CANARY"}, dbcontract.ReasonAuthenticationFailed, false},
		{&pgconn.PgError{Code: "28000", Message: "no pg_hba.conf entry for host"}, dbcontract.ReasonAuthenticationFailed, false},
		{&pgconn.PgError{Code: "42501", Message: "CANARY"}, dbcontract.ReasonInsufficientPrivileges, false},
		{&pgconn.PgError{Code: "42710", Message: "CANARY"}, dbcontract.ReasonConflict, false},
		{&pgconn.PgError{Code: "42P04", Message: "CANARY"}, dbcontract.ReasonConflict, false},
		{&pgconn.PgError{Code: "08006", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "53300", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "57P01", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "57P02", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "57P03", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "08001", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "53100", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "57014", Message: "CANARY"}, dbcontract.ReasonProvisioningFailed, true},
		{&pgconn.PgError{Code: "55006", Message: "CANARY"}, dbcontract.ReasonProvisioningFailed, true},
		{&pgconn.PgError{Code: "2BP01", Message: "CANARY"}, dbcontract.ReasonProvisioningFailed, true},
		{&pgconn.PgError{Code: "3D000", Message: "CANARY"}, dbcontract.ReasonInvalidSpec, false},
		{&pgconn.PgError{Code: "XX000", Message: "CANARY"}, dbcontract.ReasonProvisioningFailed, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "42501", Message: "CANARY"}), dbcontract.ReasonInsufficientPrivileges, false},
		{x509.UnknownAuthorityError{}, dbcontract.ReasonAuthenticationFailed, false},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}, dbcontract.ReasonAuthenticationFailed, false},
		{x509.CertificateInvalidError{Cert: &x509.Certificate{}, Reason: x509.Expired}, dbcontract.ReasonAuthenticationFailed, false},
		{&tls.CertificateVerificationError{Err: errors.New("CANARY")}, dbcontract.ReasonAuthenticationFailed, false},
		{errors.New("server refused TLS connection"), dbcontract.ReasonAuthenticationFailed, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("CANARY")}, dbcontract.ReasonDependencyUnavailable, true},
		{net.ErrClosed, dbcontract.ReasonDependencyUnavailable, true},
		{context.DeadlineExceeded, dbcontract.ReasonDependencyUnavailable, true},
		{&dbcontract.Failure{Reason: dbcontract.ReasonDeletionBlocked, Message: "kept"}, dbcontract.ReasonDeletionBlocked, false},
		{errors.New("CANARY something else"), dbcontract.ReasonDependencyUnavailable, true},
	} {
		c := Classify(tc.err)
		if c.Reason != tc.reason || c.Transient != tc.transient {
			t.Errorf("%v: got %s transient=%v, want %s transient=%v", tc.err, c.Reason, c.Transient, tc.reason, tc.transient)
		}
		if len(c.Message) == 0 || (tc.reason != dbcontract.ReasonDeletionBlocked && strings.Contains(c.Message, "CANARY")) {
			t.Errorf("%v: message %q", tc.err, c.Message)
		}
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}

// TestClassifyAuthHint: SQLSTATE 28000/28P01 are AuthenticationFailed
// either way; the driver's text only selects the pg_hba.conf hint and is
// never copied.
func TestClassifyAuthHint(t *testing.T) {
	for _, tc := range []struct {
		err  *pgconn.PgError
		hint bool
	}{
		{&pgconn.PgError{Code: "28000", Message: "no pg_hba.conf entry for host \"CANARY\""}, true},
		{&pgconn.PgError{Code: "28000", Message: "no pg_hba.conf entry for host \"CANARY\", no encryption"}, true},
		{&pgconn.PgError{Code: "28000", Message: "role \"CANARY\" is not permitted to log in"}, false},
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed for user \"CANARY\""}, false},
	} {
		c := Classify(tc.err)
		if c.Reason != dbcontract.ReasonAuthenticationFailed || c.Transient {
			t.Errorf("%s: got %s transient=%v", tc.err.Message, c.Reason, c.Transient)
		}
		if got := strings.Contains(c.Message, "pg_hba.conf"); got != tc.hint || strings.Contains(c.Message, "CANARY") {
			t.Errorf("%s: message %q", tc.err.Message, c.Message)
		}
	}
}

// TestSQLStateHelpers: the named checks the operations use instead of
// reading SQLSTATEs themselves.
func TestSQLStateHelpers(t *testing.T) {
	wrap := func(code string) error {
		return fmt.Errorf("op: %w", &pgconn.PgError{Code: code, Detail: "owner of table CANARY\nprivileges for schema public"})
	}
	for _, tc := range []struct {
		err                          error
		code                         string
		insufficient, inUse, depends bool
	}{
		{wrap("42501"), "42501", true, false, false},
		{wrap("55006"), "55006", false, true, false},
		{wrap("2BP01"), "2BP01", false, false, true},
		{wrap("XX000"), "XX000", false, false, false},
		{errors.New("42501"), "", false, false, false},
		{nil, "", false, false, false},
	} {
		if got := sqlstate(tc.err); got != tc.code {
			t.Errorf("sqlstate(%v) = %q, want %q", tc.err, got, tc.code)
		}
		if got := isInsufficientPrivilege(tc.err); got != tc.insufficient {
			t.Errorf("isInsufficientPrivilege(%v) = %v", tc.err, got)
		}
		if got := isObjectInUse(tc.err); got != tc.inUse {
			t.Errorf("isObjectInUse(%v) = %v", tc.err, got)
		}
		detail, ok := dependentObjects(tc.err)
		if ok != tc.depends || (ok && detail == "") {
			t.Errorf("dependentObjects(%v) = %q, %v", tc.err, detail, ok)
		}
	}
}

// TestClassifyTenantLogin: 28P01 is a Conflict between OpenBao and
// PostgreSQL, 28000 is LoginRejected, anything else passes through to
// Classify unchanged. The driver's text never reaches the message.
func TestClassifyTenantLogin(t *testing.T) {
	other := fmt.Errorf("dial: %w", &pgconn.PgError{Code: "08006", Message: "CANARY"})
	for _, tc := range []struct {
		err    error
		reason dbcontract.Reason
	}{
		{&pgconn.PgError{Code: "28P01", Message: "CANARY"}, dbcontract.ReasonConflict},
		{fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28000", Message: "CANARY"}), dbcontract.ReasonLoginRejected},
	} {
		var f *dbcontract.Failure
		err := classifyTenantLogin(tc.err, "r1", "d1")
		if !errors.As(err, &f) || f.Reason != tc.reason || f.Transient {
			t.Fatalf("%v: got %v", tc.err, err)
		}
		if strings.Contains(f.Message, "CANARY") || !strings.Contains(f.Message, "r1") {
			t.Errorf("%v: message %q", tc.err, f.Message)
		}
	}
	if got := classifyTenantLogin(other, "r1", "d1"); got != other { //nolint:errorlint // the same error value, unchanged, is the point
		t.Errorf("08006 changed: %v", got)
	}
}
