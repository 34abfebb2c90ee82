package postgresql

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
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
		{&pgconn.PgError{Code: "57P03", Message: "CANARY"}, dbcontract.ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "3D000", Message: "CANARY"}, dbcontract.ReasonInvalidSpec, false},
		{&pgconn.PgError{Code: "XX000", Message: "CANARY"}, dbcontract.ReasonProvisioningFailed, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "42501", Message: "CANARY"}), dbcontract.ReasonInsufficientPrivileges, false},
		{x509.UnknownAuthorityError{}, dbcontract.ReasonAuthenticationFailed, false},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}, dbcontract.ReasonAuthenticationFailed, false},
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
