package externalsecrets

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// This file is the only code of the package that reads Kubernetes API
// errors (apierrors: the StatusReason of a Status error). Messages carry
// the StatusReason at most (a fixed word such as Forbidden or Conflict),
// never the API server's message, which can name other objects.
//
// Every API failure is DependencyUnavailable. It is Transient
// (docs/decisions/0007: redelivered by the consumer, a Failed outcome only
// once the delivery budget is spent) when the same request may succeed
// unchanged: no answer (not a Status error: connection refused, a
// timeout), a server-side timeout, 5xx, 429, or an optimistic-lock
// conflict. ExternalSecrets not served at all (ESO's CRDs missing) is
// definite. A refusal (Forbidden, Unauthorized, Invalid, NotFound, other
// 4xx) is definite: a Failed outcome at once, and the projector decides a
// new attempt. A Failure the executor built itself (Conflict,
// CredentialProjectionFailed) is kept as it is.

// isNotFound: the object does not exist (StatusReasonNotFound).
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// ignoreNotFound is nil for a NotFound error and err otherwise (a delete
// of something already gone).
func ignoreNotFound(err error) error {
	if isNotFound(err) {
		return nil
	}
	return err
}

// readerFailure: the reader ServiceAccount of namespace ns could not be
// read, or is missing and could not be created (created); the Tenant names
// it (ESO can not log in to OpenBao for the namespace without it) and the
// StatusReason; transient as classify says.
func readerFailure(ns string, created bool, err error) *dbcontract.Failure {
	what := "could not be read"
	if created {
		what = "is missing and could not be created"
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Transient: classify(err).Transient,
		Message: "the ServiceAccount " + ns + "/" + dbcontract.ReaderServiceAccount + " (ESO's OpenBao login for this namespace) " + what + ": " + string(apierrors.ReasonForError(err))}
}

// classify maps an error of a step to the domain's Failure.
func classify(err error) *dbcontract.Failure {
	var kept *dbcontract.Failure
	if errors.As(err, &kept) {
		return kept
	}
	if apimeta.IsNoMatchError(err) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "the API server does not serve ExternalSecrets: install External Secrets Operator's CRDs"}
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "the Kubernetes API did not answer", Transient: true}
	}
	reason := apierrors.ReasonForError(err)
	f := &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "the Kubernetes API request failed: " + string(reason)}
	switch reason {
	case metav1.StatusReasonConflict, metav1.StatusReasonServerTimeout, metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests,
		metav1.StatusReasonServiceUnavailable, metav1.StatusReasonInternalError:
		f.Transient = true
	default:
		f.Transient = st.Status().Code >= http.StatusInternalServerError || st.Status().Code == http.StatusTooManyRequests
	}
	return f
}
