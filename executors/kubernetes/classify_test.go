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
		{"Conflict", apierrors.NewConflict(gr, "CANARY", canary), true, executionv1alpha1.ReasonBackendUnavailable},
		{"AlreadyExists", apierrors.NewAlreadyExists(gr, "CANARY"), true, executionv1alpha1.ReasonBackendUnavailable},
		{"Gone", apierrors.NewGone("CANARY"), //nolint:staticcheck // SA1019: a server may still answer StatusReasonGone
			true, executionv1alpha1.ReasonBackendUnavailable},
		{"Expired", apierrors.NewResourceExpired("CANARY"), true, executionv1alpha1.ReasonBackendUnavailable},
		{"ServerTimeout", apierrors.NewServerTimeout(gr, "create", 1), true, executionv1alpha1.ReasonBackendUnavailable},
		{"Timeout", apierrors.NewTimeoutError("CANARY", 1), true, executionv1alpha1.ReasonBackendUnavailable},
		{"TooManyRequests", apierrors.NewTooManyRequests("CANARY", 1), true, executionv1alpha1.ReasonBackendUnavailable},
		{"ServiceUnavailable", apierrors.NewServiceUnavailable("CANARY"), true, executionv1alpha1.ReasonBackendUnavailable},
		{"InternalError", apierrors.NewInternalError(canary), true, executionv1alpha1.ReasonBackendUnavailable},
		{"other 5xx", apierrors.NewGenericServerResponse(http.StatusBadGateway, "create", gr, "CANARY", "CANARY", 0, false), true, executionv1alpha1.ReasonBackendUnavailable},
		{"connection", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), true, executionv1alpha1.ReasonBackendUnavailable},
		{"deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), true, executionv1alpha1.ReasonBackendUnavailable},
	} {
		f := classify(tc.err)
		if f.Transient != tc.transient || f.Reason != tc.reason || strings.Contains(f.Message, "CANARY") || (!f.Transient && f.Message == "") {
			t.Errorf("%s: classify = %+v, want transient=%v reason %q", tc.name, f, tc.transient, tc.reason)
		}
	}
	if f := classify(canary); f.Reason != executionv1alpha1.ReasonBackendUnavailable || strings.Contains(f.Message, "CANARY") {
		t.Errorf("transient failure: %+v", f)
	}
	if !isNotFound(apierrors.NewNotFound(gr, "x")) || !isAlreadyExists(apierrors.NewAlreadyExists(gr, "x")) || !isConflict(apierrors.NewConflict(gr, "x", canary)) {
		t.Error("predicates")
	}
}
