package postgresql

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestClassify: every driver code Classify maps, and the fallbacks. The
// message never carries the driver's text.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err       error
		reason    Reason
		transient bool
	}{
		{&pgconn.PgError{Code: "28P01", Message: "CANARY"}, ReasonAuthenticationFailed, false},
		{&pgconn.PgError{Code: "28000", Message: "no pg_hba.conf entry for host"}, ReasonAuthenticationFailed, false},
		{&pgconn.PgError{Code: "42501", Message: "CANARY"}, ReasonInsufficientPrivileges, false},
		{&pgconn.PgError{Code: "42710", Message: "CANARY"}, ReasonConflict, false},
		{&pgconn.PgError{Code: "42P04", Message: "CANARY"}, ReasonConflict, false},
		{&pgconn.PgError{Code: "08006", Message: "CANARY"}, ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "53300", Message: "CANARY"}, ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "57P01", Message: "CANARY"}, ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "57P03", Message: "CANARY"}, ReasonDependencyUnavailable, true},
		{&pgconn.PgError{Code: "3D000", Message: "CANARY"}, ReasonInvalidSpec, false},
		{&pgconn.PgError{Code: "XX000", Message: "CANARY"}, ReasonProvisioningFailed, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "42501", Message: "CANARY"}), ReasonInsufficientPrivileges, false},
		{x509.UnknownAuthorityError{}, ReasonAuthenticationFailed, false},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}, ReasonAuthenticationFailed, false},
		{context.DeadlineExceeded, ReasonDependencyUnavailable, true},
		{&Classified{Reason: ReasonDeletionBlocked, Message: "kept"}, ReasonDeletionBlocked, false},
		{errors.New("CANARY something else"), ReasonDependencyUnavailable, true},
	} {
		c := Classify(tc.err)
		if c.Reason != tc.reason || c.Transient != tc.transient {
			t.Errorf("%v: got %s transient=%v, want %s transient=%v", tc.err, c.Reason, c.Transient, tc.reason, tc.transient)
		}
		if len(c.Message) == 0 || (tc.reason != ReasonDeletionBlocked && strings.Contains(c.Message, "CANARY")) {
			t.Errorf("%v: message %q", tc.err, c.Message)
		}
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}
