package externalsecrets

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// TestClassify: every API error kind the executor tells apart. Messages
// carry the StatusReason only, never the API server's message; nothing is
// Transient (see classify.go).
func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "external-secrets.io", Resource: "externalsecrets"}
	kept := &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: "kept"}
	for _, tc := range []struct {
		err      error
		reason   dbcontract.Reason
		msg      string
		notFound bool
	}{
		{apierrors.NewNotFound(gr, "CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: NotFound", true},
		{fmt.Errorf("get: %w", apierrors.NewNotFound(gr, "CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: NotFound", true},
		{apierrors.NewForbidden(gr, "CANARY", errors.New("CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Forbidden", false},
		{apierrors.NewUnauthorized("CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Unauthorized", false},
		{apierrors.NewConflict(gr, "CANARY", errors.New("CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Conflict", false},
		{apierrors.NewAlreadyExists(gr, "CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: AlreadyExists", false},
		{apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "ExternalSecret"}, "CANARY", nil), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Invalid", false},
		{apierrors.NewServerTimeout(gr, "get", 1), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: ServerTimeout", false},
		{apierrors.NewTimeoutError("CANARY", 1), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Timeout", false},
		{apierrors.NewTooManyRequests("CANARY", 1), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: TooManyRequests", false},
		{apierrors.NewServiceUnavailable("CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: ServiceUnavailable", false},
		{apierrors.NewInternalError(errors.New("CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: InternalError", false},
		{errors.New("CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: ", false},
		{fmt.Errorf("w: %w", kept), dbcontract.ReasonConflict, "kept", false},
	} {
		f := classify(tc.err)
		if f.Reason != tc.reason || f.Message != tc.msg || f.Transient || (f != kept && strings.Contains(f.Message, "CANARY")) {
			t.Errorf("classify(%v) = %s %q transient=%v, want %s %q", tc.err, f.Reason, f.Message, f.Transient, tc.reason, tc.msg)
		}
		if got := isNotFound(tc.err); got != tc.notFound {
			t.Errorf("isNotFound(%v) = %v", tc.err, got)
		}
		if got := ignoreNotFound(tc.err); (got == nil) != tc.notFound {
			t.Errorf("ignoreNotFound(%v) = %v", tc.err, got)
		}
	}
	if isNotFound(nil) || ignoreNotFound(nil) != nil {
		t.Error("nil")
	}
}
