package openbao

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"

	bao "github.com/openbao/openbao/api/v2"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// This file is the only code of the package that reads OpenBao client
// errors (HTTP status codes, bao.ResponseError, bao.ErrSecretNotFound,
// net.Error). Messages carry the HTTP status at most, never a response
// body (it can echo request data such as the login JWT).
//
// Every OpenBao failure is DependencyUnavailable (or a Failure the store
// built itself, such as Conflict). It is Transient (docs/decisions/0007:
// redelivered by the consumer, a Failed outcome only once the delivery
// budget is spent) when the same request may succeed unchanged: no answer
// (a network error, a timeout), HTTP 5xx or 429, or an error of no known
// kind. A refusal (401, 403, any other 4xx) and a TLS certificate the
// client does not accept are definite: a Failed outcome at once, and the
// projector decides a new attempt.

// notFound: the KV path does not exist (the client's ErrSecretNotFound or
// HTTP 404).
func notFound(err error) bool {
	var re *bao.ResponseError
	return errors.Is(err, bao.ErrSecretNotFound) || (errors.As(err, &re) && re.StatusCode == http.StatusNotFound)
}

// isForbidden: HTTP 403, which the client answers with one new login
// (the token may have expired).
func isForbidden(err error) bool {
	var re *bao.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusForbidden
}

// classify maps client errors to reasons without any response body.
func classify(err error, what string) *dbcontract.Failure {
	var f *dbcontract.Failure
	if errors.As(err, &f) {
		return f
	}
	var re *bao.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusForbidden, http.StatusUnauthorized:
			return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("OpenBao denied %s (HTTP %d): check the controller policy", what, re.StatusCode)}
		default:
			return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("OpenBao %s failed (HTTP %d)", what, re.StatusCode), Transient: retryable(re.StatusCode)}
		}
	}
	if tlsRefused(err) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "OpenBao's TLS certificate was not accepted (" + what + "): check the address and the CA"}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "OpenBao is unreachable (" + what + ")", Transient: true}
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "OpenBao " + what + " failed", Transient: true}
}

// tlsRefused: the TLS handshake refused OpenBao's certificate (unknown
// authority, wrong name, invalid) or the server spoke no TLS: a
// configuration error no redelivery cures.
func tlsRefused(err error) bool {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	return errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &cv) || errors.As(err, &rh)
}

// retryable: an HTTP status the same request may not get again (5xx, 429).
func retryable(code int) bool {
	return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
}

// loginFailure says that the Kubernetes auth login failed, for which role,
// with the HTTP status (never the response body, which can echo the JWT).
func loginFailure(err error, mount, role string) *dbcontract.Failure {
	var re *bao.ResponseError
	switch {
	case errors.As(err, &re) && (re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusBadRequest):
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login was refused (auth/%s, role %s, HTTP %d): "+
			"check that the role binds the controller's ServiceAccount name and namespace and accepts the token's audience", mount, role, re.StatusCode)}
	case errors.As(err, &re):
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s, HTTP %d)", mount, role, re.StatusCode), Transient: retryable(re.StatusCode)}
	}
	if tlsRefused(err) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s): OpenBao's TLS certificate was not accepted", mount, role)}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s): OpenBao is unreachable", mount, role), Transient: true}
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s)", mount, role), Transient: true}
}
