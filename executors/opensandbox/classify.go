package opensandbox

import (
	"context"

	"errors"
	"fmt"
	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"net"
	"net/http"
)

// failure is how the executor treats an error of the OpenSandbox APIs.
type failure struct {
	// Transient: retry (the journal redelivers the intent).
	Transient bool
	// Reason is the stable reason of a definite failure.
	Reason string
	// Message is safe for a Condition: the operation and the status code,
	// never a response body.
	Message string
}

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
func classify(err error) failure {
	var h *httpError
	if errors.As(err, &h) {
		msg := fmt.Sprintf("OpenSandbox answered %s", h.Error())
		switch {
		case h.Status == http.StatusBadRequest || h.Status == http.StatusUnprocessableEntity:
			return failure{Reason: ReasonInvalidSpec, Message: msg}
		case h.Status == http.StatusUnauthorized:
			return failure{Reason: ReasonAPIKeyRejected, Message: msg + ": the API key (or the execd access token) was rejected"}
		case h.Status == http.StatusForbidden:
			return failure{Reason: ReasonForbidden, Message: msg}
		case h.Status == http.StatusNotFound:
			return failure{Reason: "NotFound", Message: msg}
		case h.Status == http.StatusRequestTimeout, h.Status == http.StatusConflict, h.Status == http.StatusTooEarly, h.Status == http.StatusTooManyRequests:
			return failure{Transient: true, Reason: "BackendUnavailable", Message: msg}
		case h.Status >= 500:
			return failure{Transient: true, Reason: "BackendUnavailable", Message: msg}
		}
		return failure{Reason: ReasonUnexpectedResponse, Message: msg}
	}
	var d *decodeError
	if errors.As(err, &d) {
		return failure{Reason: ReasonUnexpectedResponse, Message: d.Error()}
	}
	var ac *ambiguousCreate
	if errors.As(err, &ac) {
		return failure{Transient: true, Reason: "BackendUnavailable", Message: ac.Error()}
	}
	var a *ambiguousLaunch
	if errors.As(err, &a) {
		return failure{Transient: true, Reason: "BackendUnavailable", Message: "the command launch got no answer"}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) {
		return failure{Transient: true, Reason: "BackendUnavailable", Message: "OpenSandbox did not answer in time"}
	}
	return failure{Transient: true, Reason: "BackendUnavailable", Message: "OpenSandbox could not be reached"}
}
