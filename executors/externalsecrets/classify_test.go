package externalsecrets

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// TestClassify: every API error kind the executor tells apart. Messages
// carry the StatusReason only, never the API server's message; no answer,
// timeouts, 5xx, 429 and conflicts are Transient (see classify.go).
func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "external-secrets.io", Resource: "externalsecrets"}
	kept := &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: "kept"}
	for _, tc := range []struct {
		err       error
		reason    dbcontract.Reason
		msg       string
		notFound  bool
		transient bool
	}{
		{apierrors.NewNotFound(gr, "CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: NotFound", true, false},
		{fmt.Errorf("get: %w", apierrors.NewNotFound(gr, "CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: NotFound", true, false},
		{apierrors.NewForbidden(gr, "CANARY", errors.New("CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Forbidden", false, false},
		{apierrors.NewUnauthorized("CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Unauthorized", false, false},
		{apierrors.NewConflict(gr, "CANARY", errors.New("CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Conflict", false, true},
		{apierrors.NewAlreadyExists(gr, "CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: AlreadyExists", false, false},
		{apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "ExternalSecret"}, "CANARY", nil), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Invalid", false, false},
		{apierrors.NewServerTimeout(gr, "get", 1), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: ServerTimeout", false, true},
		{apierrors.NewTimeoutError("CANARY", 1), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: Timeout", false, true},
		{apierrors.NewTooManyRequests("CANARY", 1), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: TooManyRequests", false, true},
		{apierrors.NewServiceUnavailable("CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: ServiceUnavailable", false, true},
		{apierrors.NewInternalError(errors.New("CANARY")), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API request failed: InternalError", false, true},
		{errors.New("CANARY"), dbcontract.ReasonDependencyUnavailable, "the Kubernetes API did not answer", false, true},
		{&apimeta.NoKindMatchError{GroupKind: schema.GroupKind{Group: gr.Group, Kind: "ExternalSecret"}}, dbcontract.ReasonDependencyUnavailable, "the API server does not serve ExternalSecrets: install External Secrets Operator's CRDs", false, false},
		{fmt.Errorf("w: %w", kept), dbcontract.ReasonConflict, "kept", false, false},
	} {
		f := classify(tc.err)
		if f.Reason != tc.reason || f.Message != tc.msg || f.Transient != tc.transient || (f != kept && strings.Contains(f.Message, "CANARY")) {
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
