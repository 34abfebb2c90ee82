package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// Reasons of definite failures read from HTTP status codes.
const (
	// ReasonAPIKeyRejected: the lifecycle API or execd answered 401.
	ReasonAPIKeyRejected = executionv1alpha1.ReasonAPIKeyRejected
	// ReasonForbidden: 403.
	ReasonForbidden = "Forbidden"
	// ReasonInvalidSpec: 400 (or 422) for a request the executor built.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonUnexpectedResponse: a status code or a body the APIs do not
	// define for the operation.
	ReasonUnexpectedResponse = "UnexpectedResponse"
)

// classify reads an error of the OpenSandbox client: HTTP status codes
// (the only driver codes these APIs have), network errors and timeouts.
//
//	400, 422           definite: InvalidSpec (the request is wrong; retrying repeats it)
//	401                definite: APIKeyRejected (a rotated key is read again by the next attempt)
//	403                definite: Forbidden
//	404                definite: NotFound (callers that expect it handle it first)
//	408, 409, 425, 429 transient (state conflicts and throttling heal)
//	5xx                transient
//	other codes        definite: UnexpectedResponse
//	network errors, timeouts, a cut stream: transient
//	a create answer without a usable sandbox id: transient (found by UID)
//	an undecodable 2xx body: definite UnexpectedResponse
func classify(err error) *execution.Failure {
	var decided *execution.Failure
	if errors.As(err, &decided) {
		return decided
	}
	var h *httpError
	if errors.As(err, &h) {
		msg := fmt.Sprintf("OpenSandbox answered %s", h.Error())
		switch {
		case h.Status == http.StatusBadRequest || h.Status == http.StatusUnprocessableEntity:
			return &execution.Failure{Reason: ReasonInvalidSpec, Message: msg}
		case h.Status == http.StatusUnauthorized:
			return &execution.Failure{Reason: ReasonAPIKeyRejected, Message: msg + ": the API key (or the execd access token) was rejected"}
		case h.Status == http.StatusForbidden:
			return &execution.Failure{Reason: ReasonForbidden, Message: msg}
		case h.Status == http.StatusNotFound:
			return &execution.Failure{Reason: "NotFound", Message: msg}
		case h.Status == http.StatusRequestTimeout, h.Status == http.StatusConflict, h.Status == http.StatusTooEarly, h.Status == http.StatusTooManyRequests:
			return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: msg}
		case h.Status >= 500:
			return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: msg}
		}
		return &execution.Failure{Reason: ReasonUnexpectedResponse, Message: msg}
	}
	var d *decodeError
	if errors.As(err, &d) {
		return &execution.Failure{Reason: ReasonUnexpectedResponse, Message: d.Error()}
	}
	var ac *ambiguousCreate
	if errors.As(err, &ac) {
		return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: ac.Error()}
	}
	var a *ambiguousLaunch
	if errors.As(err, &a) {
		return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: "the command launch got no answer"}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) {
		return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: "OpenSandbox did not answer in time"}
	}
	return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: "OpenSandbox could not be reached"}
}
