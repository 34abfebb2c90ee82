package externalsecrets

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// This file is the only code of the package that reads Kubernetes API
// errors (apierrors: the StatusReason of a Status error). Messages carry
// the StatusReason at most (a fixed word such as Forbidden or Conflict),
// never the API server's message, which can name other objects.
//
// Every API failure is DependencyUnavailable and not Transient: the
// handler turns every failure into a Failed outcome and the projector
// decides whether to append a new attempt (the transient rule of the
// database domain, see docs/architecture.md and
// executors/postgresql/classify.go). A Failure the executor built itself
// (Conflict, CredentialProjectionFailed) is kept as it is.

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
// StatusReason.
func readerFailure(ns string, created bool, err error) *dbcontract.Failure {
	what := "could not be read"
	if created {
		what = "is missing and could not be created"
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable,
		Message: "the ServiceAccount " + ns + "/" + dbcontract.ReaderServiceAccount + " (ESO's OpenBao login for this namespace) " + what + ": " + string(apierrors.ReasonForError(err))}
}

// classify maps an error of a step to the domain's Failure.
func classify(err error) *dbcontract.Failure {
	var f *dbcontract.Failure
	if errors.As(err, &f) {
		return f
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "the Kubernetes API request failed: " + string(apierrors.ReasonForError(err))}
}
