// Package v1alpha1 contains the API types of the database.ayatori.ddupan.top
// group, version v1alpha1: PostgreSQLInstance (cluster-scoped) and
// PostgreSQLTenant (namespaced).
//
// Source of truth: docs/database/api-reference.md (translated from the seed
// contract api-reference.md). Field names, defaults, enums, status fields and
// printer columns follow that contract exactly.
//
// +kubebuilder:object:generate=true
// +groupName=database.ayatori.ddupan.top
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "database.ayatori.ddupan.top", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // SA1019: the kubebuilder layout; the api packages already depend on controller-runtime for it

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
