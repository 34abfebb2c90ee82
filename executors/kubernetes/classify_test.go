package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
)

// TestClassify: every API error kind the executor tells apart. Messages
// never carry the API server's message (CANARY).
func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	gk := schema.GroupKind{Group: "batch", Kind: "Job"}
	canary := errors.New("CANARY")
	for _, tc := range []struct {
		name      string
		err       error
		transient bool
		reason    string
	}{
		{"Forbidden", apierrors.NewForbidden(gr, "CANARY", canary), false, ReasonForbidden},
		{"wrapped Forbidden", fmt.Errorf("create: %w", apierrors.NewForbidden(gr, "CANARY", canary)), false, ReasonForbidden},
		{"Unauthorized", apierrors.NewUnauthorized("CANARY"), false, ReasonUnauthorized},
		{"Invalid", apierrors.NewInvalid(gk, "CANARY", nil), false, ReasonInvalidSpec},
		{"BadRequest", apierrors.NewBadRequest("CANARY"), false, ReasonInvalidSpec},
		{"RequestEntityTooLarge", apierrors.NewRequestEntityTooLargeError("CANARY"), false, ReasonInvalidSpec},
		{"NotFound", apierrors.NewNotFound(gr, "CANARY"), false, ReasonNotFound},
		{"MethodNotSupported", apierrors.NewMethodNotSupported(gr, "CANARY"), false, ReasonAPIRejected},
		{"other 4xx", apierrors.NewGenericServerResponse(http.StatusTeapot, "CANARY", gr, "CANARY", "CANARY", 0, false), false, ReasonAPIRejected},
		{"Conflict", apierrors.NewConflict(gr, "CANARY", canary), true, ""},
		{"AlreadyExists", apierrors.NewAlreadyExists(gr, "CANARY"), true, ""},
		{"Gone", apierrors.NewGone("CANARY"), true, ""},
		{"Expired", apierrors.NewResourceExpired("CANARY"), true, ""},
		{"ServerTimeout", apierrors.NewServerTimeout(gr, "create", 1), true, ""},
		{"Timeout", apierrors.NewTimeoutError("CANARY", 1), true, ""},
		{"TooManyRequests", apierrors.NewTooManyRequests("CANARY", 1), true, ""},
		{"ServiceUnavailable", apierrors.NewServiceUnavailable("CANARY"), true, ""},
		{"InternalError", apierrors.NewInternalError(canary), true, ""},
		{"other 5xx", apierrors.NewGenericServerResponse(http.StatusBadGateway, "create", gr, "CANARY", "CANARY", 0, false), true, ""},
		{"connection", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), true, ""},
		{"deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), true, ""},
	} {
		f := classify(tc.err)
		if f.Transient != tc.transient || f.Reason != tc.reason || strings.Contains(f.Message, "CANARY") || (!f.Transient && f.Message == "") {
			t.Errorf("%s: classify = %+v, want transient=%v reason %q", tc.name, f, tc.transient, tc.reason)
		}
	}
	te := &transientError{err: canary}
	if te.Reason() != executionv1alpha1.ReasonBackendUnavailable || !errors.Is(te, canary) {
		t.Errorf("transientError: %q", te.Reason())
	}
	if !isNotFound(apierrors.NewNotFound(gr, "x")) || !isAlreadyExists(apierrors.NewAlreadyExists(gr, "x")) || !isConflict(apierrors.NewConflict(gr, "x", canary)) {
		t.Error("predicates")
	}
}
