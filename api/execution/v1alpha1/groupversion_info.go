// Package v1alpha1 contains the API types of the execution.ayatori.ddupan.top
// group, version v1alpha1: Job (namespaced), JobClass,
// KubernetesExecutionParameters and OpenSandboxExecutionParameters
// (cluster-scoped).
//
// Source of truth: docs/execution/job-api.md and docs/execution/jobclass-api.md
// (translated from the seed contracts job-v1alpha1.md and
// jobclass-v1alpha1.md). Field names, defaults, CEL rules and printer columns
// follow those contracts; the limits the contracts promise and the seed types
// lacked (reference lengths and formats, credential-free endpoints) are added
// here as schema markers.
//
// +kubebuilder:object:generate=true
// +groupName=execution.ayatori.ddupan.top
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "execution.ayatori.ddupan.top", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // SA1019: the kubebuilder layout; the api packages already depend on controller-runtime for it

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
