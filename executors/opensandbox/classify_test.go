package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

func TestClassifyByStatusCode(t *testing.T) {
	for _, tc := range []struct {
		status    int
		transient bool
		reason    string
	}{
		{400, false, ReasonInvalidSpec},
		{401, false, ReasonAPIKeyRejected},
		{403, false, ReasonForbidden},
		{404, false, "NotFound"},
		{408, true, "BackendUnavailable"},
		{409, true, "BackendUnavailable"},
		{422, false, ReasonInvalidSpec},
		{429, true, "BackendUnavailable"},
		{500, true, "BackendUnavailable"},
		{502, true, "BackendUnavailable"},
		{503, true, "BackendUnavailable"},
		{302, false, ReasonUnexpectedResponse},
		{418, false, ReasonUnexpectedResponse},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			f := classify(fmt.Errorf("wrapped: %w", &httpError{Op: "create sandbox", Status: tc.status, Code: "X"}))
			if f.Transient != tc.transient || f.Reason != tc.reason {
				t.Fatalf("got %+v", f)
			}
		})
	}
	if f := classify(context.DeadlineExceeded); !f.Transient {
		t.Fatalf("timeout: %+v", f)
	}
	if f := classify(&ambiguousLaunch{err: errors.New("cut")}); !f.Transient {
		t.Fatalf("cut stream: %+v", f)
	}
	if f := classify(&decodeError{op: "x", err: errors.New("bad")}); f.Transient || f.Reason != ReasonUnexpectedResponse {
		t.Fatalf("undecodable: %+v", f)
	}
}

func TestRegistryOf(t *testing.T) {
	for image, want := range map[string]string{
		"python:3.11":                         "docker.io",
		"library/python:3.11":                 "docker.io",
		"ghcr.io/org/app:v1":                  "ghcr.io",
		"registry.example:5000/app@sha256:ab": "registry.example:5000",
		"localhost/app":                       "localhost",
		"LOCALHOST:5000/app":                  "localhost:5000",
	} {
		if got := registryOf(image); got != want {
			t.Errorf("registryOf(%q) = %q, want %q", image, got, want)
		}
	}
	for key, want := range map[string]string{
		"https://index.docker.io/v1/": "docker.io",
		"docker.io":                   "docker.io",
		"ghcr.io":                     "ghcr.io",
		"https://GHCR.io/v2/":         "ghcr.io",
		"registry.example:5000":       "registry.example:5000",
	} {
		if got := normalizeRegistry(key); got != want {
			t.Errorf("normalizeRegistry(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestResourceLimitsMapping(t *testing.T) {
	r := execution.Resources{RequestsCPU: "500m", RequestsMemory: "256Mi", LimitsCPU: "1", LimitsMemory: "512Mi"}
	got, err := resourceLimits(r, executionv1alpha1.OpenSandboxRequestMappingAdmissionOnly)
	if err != nil || got["cpu"] != "1" || got["memory"] != "512Mi" || len(got) != 2 {
		t.Fatalf("AdmissionOnly: %v %v", got, err)
	}
	if _, err := resourceLimits(r, executionv1alpha1.OpenSandboxRequestMappingNative); err == nil {
		t.Fatal("Native with requests below limits must be refused, never silently dropped")
	} else if rf := (*execution.Failure)(nil); !errors.As(err, &rf) || rf.Reason != ReasonRequestMappingUnsupported {
		t.Fatalf("Native: %v", err)
	}
	eq := execution.Resources{RequestsCPU: "1000m", LimitsCPU: "1", RequestsMemory: "512Mi", LimitsMemory: "512Mi"}
	if got, err := resourceLimits(eq, executionv1alpha1.OpenSandboxRequestMappingNative); err != nil || got["cpu"] != "1" {
		t.Fatalf("Native with requests equal to limits: %v %v", got, err)
	}
	if _, err := resourceLimits(execution.Resources{RequestsCPU: "1"}, executionv1alpha1.OpenSandboxRequestMappingNative); err == nil {
		t.Fatal("Native with a request and no limit must be refused")
	}
}
