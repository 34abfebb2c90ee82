package localprocess

import (
	"errors"
	"io/fs"
	"os/exec"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// This file is the only code of the package that reads what its drivers
// report: Kubernetes API errors of the Management reads, and the errors of
// the file system and of starting a process. Messages name a class of
// error, never a path, an argument or the API server's text.

// ReasonLocalFailure: the execution directory could not be read or
// written for a reason a retry will not cure (permissions, a full disk).
const ReasonLocalFailure = "LocalFailure"

// isNotFound: the API object does not exist.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// classify maps an error of an operation to the domain's failure: API
// errors other than a definite refusal and unknown errors are transient
// (the redelivery reads again); file system permission errors are
// definite.
func classify(err error) *execution.Failure {
	var f *execution.Failure
	if errors.As(err, &f) {
		return f
	}
	switch {
	case errors.Is(err, fs.ErrPermission):
		return &execution.Failure{Reason: ReasonLocalFailure, Message: "the execution directory is not accessible (permission denied)"}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &execution.Failure{Reason: ReasonLocalFailure, Message: "no space left for the execution directory"}
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return &execution.Failure{Reason: ReasonLocalFailure, Message: "the Kubernetes API refused to read the Job: " + string(apierrors.ReasonForError(err))}
	}
	return &execution.Failure{Transient: true, Reason: executionv1alpha1.ReasonBackendUnavailable, Message: "the local backend or the Kubernetes API did not answer; retried"}
}

// startError names why a process could not be started.
func startError(err error) string {
	var ee *exec.Error
	switch {
	case errors.As(err, &ee) && errors.Is(ee.Err, exec.ErrNotFound):
		return "executable not found"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file or directory"
	}
	return "start failed"
}
