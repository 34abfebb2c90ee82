package localprocess

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// TestClassify: every error kind classify tells apart; messages name a
// class of error, never a path or the API server's text.
func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "execution.ayatori.ddupan.top", Resource: "jobs"}
	kept := &execution.Failure{Reason: ReasonTaskChanged, Message: "kept"}
	for _, tc := range []struct {
		err       error
		reason    string
		transient bool
	}{
		{fmt.Errorf("w: %w", kept), ReasonTaskChanged, false},
		{&fs.PathError{Op: "mkdir", Path: "/CANARY", Err: fs.ErrPermission}, ReasonLocalFailure, false},
		{&fs.PathError{Op: "mkdir", Path: "/CANARY", Err: syscall.ENOSPC}, ReasonLocalFailure, false},
		{&fs.PathError{Op: "mkdir", Path: "/CANARY", Err: syscall.EDQUOT}, ReasonLocalFailure, false},
		{apierrors.NewForbidden(gr, "CANARY", errors.New("CANARY")), ReasonLocalFailure, false},
		{apierrors.NewUnauthorized("CANARY"), ReasonLocalFailure, false},
		{apierrors.NewServiceUnavailable("CANARY"), executionv1alpha1.ReasonBackendUnavailable, true},
		{errors.New("CANARY"), executionv1alpha1.ReasonBackendUnavailable, true},
	} {
		f := classify(tc.err)
		if f.Reason != tc.reason || f.Transient != tc.transient || (f != kept && strings.Contains(f.Message, "CANARY")) {
			t.Errorf("classify(%v) = %s %q transient=%v, want %s transient=%v", tc.err, f.Reason, f.Message, f.Transient, tc.reason, tc.transient)
		}
	}
	if !isNotFound(apierrors.NewNotFound(gr, "j")) || isNotFound(errors.New("x")) {
		t.Error("isNotFound")
	}
	for err, want := range map[error]string{
		&exec.Error{Name: "/CANARY", Err: exec.ErrNotFound}:                    "executable not found",
		&fs.PathError{Op: "fork/exec", Path: "/CANARY", Err: fs.ErrPermission}: "permission denied",
		&fs.PathError{Op: "fork/exec", Path: "/CANARY", Err: fs.ErrNotExist}:   "no such file or directory",
		errors.New("CANARY"): "start failed",
	} {
		if got := startError(err); got != want {
			t.Errorf("startError(%v) = %q, want %q", err, got, want)
		}
	}
}
