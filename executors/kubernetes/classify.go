package kubernetes

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
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
//     name. After the last delivery the journal records Failed with the
//     reason BackendUnavailable.
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

// transient is the failure of a request that may have taken effect or
// may succeed when repeated.
func transient() *execution.Failure {
	return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: "the Kubernetes API did not answer or asked to retry"}
}

// isNotFound: the object does not exist (StatusReasonNotFound).
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// isAlreadyExists: a create found an object of that name.
func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// isConflict: an optimistic lock or a delete precondition failed.
func isConflict(err error) bool { return apierrors.IsConflict(err) }

// classify maps an API error to a transient or a definite failure.
func classify(err error) *execution.Failure {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		// Connection refused or reset, DNS, TLS, context deadline: nothing
		// proves the request was not executed.
		return transient()
	}
	reason := apierrors.ReasonForError(err)
	msg := func(what string) string { return "the Kubernetes API refused the request: " + what }
	switch reason {
	case metav1.StatusReasonForbidden:
		return &execution.Failure{Reason: ReasonForbidden, Message: msg("Forbidden (check the executor's RBAC)")}
	case metav1.StatusReasonUnauthorized:
		return &execution.Failure{Reason: ReasonUnauthorized, Message: msg("Unauthorized (check the executor's credentials)")}
	case metav1.StatusReasonInvalid, metav1.StatusReasonBadRequest, metav1.StatusReasonRequestEntityTooLarge:
		return &execution.Failure{Reason: ReasonInvalidSpec, Message: msg(string(reason))}
	case metav1.StatusReasonNotFound:
		return &execution.Failure{Reason: ReasonNotFound, Message: msg("NotFound")}
	case metav1.StatusReasonConflict, metav1.StatusReasonAlreadyExists, metav1.StatusReasonGone, metav1.StatusReasonExpired,
		metav1.StatusReasonServerTimeout, metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests,
		metav1.StatusReasonServiceUnavailable, metav1.StatusReasonInternalError:
		return transient()
	}
	code := st.Status().Code
	if code == 0 || code >= http.StatusInternalServerError || code == http.StatusTooManyRequests {
		return transient()
	}
	return &execution.Failure{Reason: ReasonAPIRejected, Message: msg(http.StatusText(int(code)))}
}
