package openbao

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"

	bao "github.com/openbao/openbao/api/v2"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

func respErr(code int) error {
	return fmt.Errorf("op: %w", &bao.ResponseError{HTTPMethod: "GET", URL: "https://bao/v1/CANARY", StatusCode: code, Errors: []string{"CANARY body"}})
}

// TestClassify: every HTTP status and error kind classify, loginFailure,
// notFound and isForbidden map. Messages carry the status, never the
// response body or URL; no answer, 5xx, 429 and unknown errors are
// Transient, refusals are not (see classify.go).
func TestClassify(t *testing.T) {
	kept := &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: "kept"}
	for _, tc := range []struct {
		err                   error
		reason                dbcontract.Reason
		msg, login            string
		notFound, isForbidden bool
		transient             bool
	}{
		{respErr(403), dbcontract.ReasonDependencyUnavailable, "OpenBao denied x (HTTP 403): check the controller policy", "login was refused (auth/m, role r, HTTP 403)", false, true, false},
		{respErr(401), dbcontract.ReasonDependencyUnavailable, "OpenBao denied x (HTTP 401): check the controller policy", "login was refused (auth/m, role r, HTTP 401)", false, false, false},
		{respErr(400), dbcontract.ReasonDependencyUnavailable, "OpenBao x failed (HTTP 400)", "login was refused (auth/m, role r, HTTP 400)", false, false, false},
		{respErr(404), dbcontract.ReasonDependencyUnavailable, "OpenBao x failed (HTTP 404)", "login failed (auth/m, role r, HTTP 404)", true, false, false},
		{respErr(500), dbcontract.ReasonDependencyUnavailable, "OpenBao x failed (HTTP 500)", "login failed (auth/m, role r, HTTP 500)", false, false, true},
		{respErr(429), dbcontract.ReasonDependencyUnavailable, "OpenBao x failed (HTTP 429)", "login failed (auth/m, role r, HTTP 429)", false, false, true},
		{respErr(503), dbcontract.ReasonDependencyUnavailable, "OpenBao x failed (HTTP 503)", "login failed (auth/m, role r, HTTP 503)", false, false, true},
		{bao.ErrSecretNotFound, dbcontract.ReasonDependencyUnavailable, "OpenBao x failed", "login failed (auth/m, role r)", true, false, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("CANARY")}, dbcontract.ReasonDependencyUnavailable, "OpenBao is unreachable (x)", "login failed (auth/m, role r): OpenBao is unreachable", false, false, true},
		{errors.New("CANARY"), dbcontract.ReasonDependencyUnavailable, "OpenBao x failed", "login failed (auth/m, role r)", false, false, true},
		{&url.Error{Op: "Get", URL: "https://CANARY", Err: x509.UnknownAuthorityError{}}, dbcontract.ReasonDependencyUnavailable, "OpenBao's TLS certificate was not accepted (x): check the address and the CA", "OpenBao's TLS certificate was not accepted", false, false, false},
		{&url.Error{Op: "Get", URL: "https://CANARY", Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "CANARY"}}, dbcontract.ReasonDependencyUnavailable, "OpenBao's TLS certificate was not accepted (x): check the address and the CA", "OpenBao's TLS certificate was not accepted", false, false, false},
		{fmt.Errorf("w: %w", kept), dbcontract.ReasonConflict, "kept", "login failed (auth/m, role r)", false, false, true},
	} {
		f := classify(tc.err, "x")
		if f.Reason != tc.reason || f.Message != tc.msg || f.Transient != (tc.transient && tc.reason == dbcontract.ReasonDependencyUnavailable) {
			t.Errorf("classify(%v) = %s %q transient=%v, want %s %q", tc.err, f.Reason, f.Message, f.Transient, tc.reason, tc.msg)
		}
		l := loginFailure(tc.err, "m", "r")
		if l.Reason != dbcontract.ReasonDependencyUnavailable || !strings.Contains(l.Message, tc.login) || strings.Contains(l.Message, "CANARY") || l.Transient != tc.transient {
			t.Errorf("loginFailure(%v) = %s %q, want %q", tc.err, l.Reason, l.Message, tc.login)
		}
		if got := notFound(tc.err); got != tc.notFound {
			t.Errorf("notFound(%v) = %v", tc.err, got)
		}
		if got := isForbidden(tc.err); got != tc.isForbidden {
			t.Errorf("isForbidden(%v) = %v", tc.err, got)
		}
	}
	if notFound(nil) || isForbidden(nil) {
		t.Error("nil classified as an error")
	}
}
