package kubernetes

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
)

// This file is the only code of the package that reads Kubernetes API
// errors (apierrors: the StatusReason and HTTP code of a Status error).
// Messages carry the StatusReason at most (a fixed word such as Forbidden),
// never the API server's message, which can name other objects or echo a
// rejected field value.
//
// Two kinds of error:
//
//   - transient: the request may have taken effect or may succeed when
//     repeated (timeouts, 5xx, 429, optimistic-lock conflicts, connection
//     errors, anything that is not a Status error). The handler returns the
//     error: the journal redelivers the intent with back-off, and the
//     redelivery finds a native Job an ambiguous create left behind by its
//     name. After the last delivery the journal records RetriesExhausted
//     with the reason BackendUnavailable (transientError.Reason).
//   - definite: the API server refused the request and will refuse it again
//     (Forbidden, Unauthorized, Invalid, BadRequest, NotFound of something
//     the request needed, other 4xx). The handler records a Failed outcome
//     with a stable reason.

// Reasons of Failed outcomes built from API errors.
const (
	// ReasonForbidden: the executor's RBAC does not allow the request.
	ReasonForbidden = "Forbidden"
	// ReasonUnauthorized: the API server did not accept the executor's
	// credentials.
	ReasonUnauthorized = "Unauthorized"
	// ReasonInvalidSpec: the API server rejected the native Job as invalid.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonNotFound: something the request needed is missing (for
	// example the namespace of a create).
	ReasonNotFound = "NotFound"
	// ReasonAPIRejected: another definite refusal (a 4xx the executor does
	// not tell apart).
	ReasonAPIRejected = "APIRejected"
)

// failure is a classified API error.
type failure struct {
	// Transient: the handler returns the error (redelivery).
	Transient bool
	// Reason and Message of the Failed outcome (definite failures).
	Reason  string
	Message string
}

// transientError is returned by a handler for a transient failure: its
// Reason names the RetriesExhausted outcome's reason; its text never
// reaches the journal.
type transientError struct{ err error }

func (t *transientError) Error() string { return "transient Kubernetes API failure: " + t.err.Error() }
func (t *transientError) Unwrap() error { return t.err }

// Reason is the reason of the outcome the journal records after the last
// delivery.
func (t *transientError) Reason() string { return executionv1alpha1.ReasonBackendUnavailable }

// isNotFound: the object does not exist (StatusReasonNotFound).
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// isAlreadyExists: a create found an object of that name.
func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// isConflict: an optimistic lock or a delete precondition failed.
func isConflict(err error) bool { return apierrors.IsConflict(err) }

// classify maps an API error to a transient or a definite failure.
func classify(err error) failure {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		// Connection refused or reset, DNS, TLS, context deadline: nothing
		// proves the request was not executed.
		return failure{Transient: true}
	}
	reason := apierrors.ReasonForError(err)
	msg := func(what string) string { return "the Kubernetes API refused the request: " + what }
	switch reason {
	case metav1.StatusReasonForbidden:
		return failure{Reason: ReasonForbidden, Message: msg("Forbidden (check the executor's RBAC)")}
	case metav1.StatusReasonUnauthorized:
		return failure{Reason: ReasonUnauthorized, Message: msg("Unauthorized (check the executor's credentials)")}
	case metav1.StatusReasonInvalid, metav1.StatusReasonBadRequest, metav1.StatusReasonRequestEntityTooLarge:
		return failure{Reason: ReasonInvalidSpec, Message: msg(string(reason))}
	case metav1.StatusReasonNotFound:
		return failure{Reason: ReasonNotFound, Message: msg("NotFound")}
	case metav1.StatusReasonConflict, metav1.StatusReasonAlreadyExists, metav1.StatusReasonGone, metav1.StatusReasonExpired,
		metav1.StatusReasonServerTimeout, metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests,
		metav1.StatusReasonServiceUnavailable, metav1.StatusReasonInternalError:
		return failure{Transient: true}
	}
	code := st.Status().Code
	if code == 0 || code >= http.StatusInternalServerError || code == http.StatusTooManyRequests {
		return failure{Transient: true}
	}
	return failure{Reason: ReasonAPIRejected, Message: msg(http.StatusText(int(code)))}
}
