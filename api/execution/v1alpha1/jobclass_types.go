package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a JobClass (docs/execution/jobclass-api.md "Status").
const (
	// JobClassConditionAccepted: the controller owns controllerName, the
	// parameters reference points to a supported, valid object and the
	// resource policy is consistent.
	JobClassConditionAccepted = "Accepted"
	// JobClassConditionReady: the class can take new executions now.
	JobClassConditionReady = "Ready"
)

// Annotations selecting a default JobClass.
const (
	// AnnotationDefaultJobClass on a Namespace names the JobClass its Jobs
	// use when they name none.
	AnnotationDefaultJobClass = "execution.ayatori.ddupan.top/default-job-class"
	// AnnotationIsDefaultJobClass: "true" on exactly one JobClass makes it
	// the cluster default; two or more make defaulting ambiguous (never
	// "newest wins").
	AnnotationIsDefaultJobClass = "execution.ayatori.ddupan.top/is-default-job-class"
)

// JobClassFinalizer protects a JobClass (and, on parameters objects,
// ParametersFinalizer) while a non-terminal Job references it by UID.
const JobClassFinalizer = "execution.ayatori.ddupan.top/jobclass-protection"

// ParametersFinalizer protects a parameters object while a JobClass
// references it.
const ParametersFinalizer = "execution.ayatori.ddupan.top/parameters-protection"

// Controller names of the adapters Ayatori ships.
const (
	ControllerKubernetes  = "execution.ayatori.ddupan.top/kubernetes"
	ControllerOpenSandbox = "execution.ayatori.ddupan.top/opensandbox"
)

// ExecutionResourcePolicy is a class's CPU and memory policy: defaults
// fill what a Job leaves unset; the result must lie within minimum and
// maximum. Within each of defaults, minimum and maximum a request may not
// exceed its limit (the ExecutionResourceRequirements rules); the other
// contradictions (minimum above maximum, defaults outside them) are
// reported by the controller as Accepted=False/InvalidResourcePolicy.
type ExecutionResourcePolicy struct {
	// Defaults fill the Job's unset requests and limits.
	// +optional
	Defaults ExecutionResourceRequirements `json:"defaults,omitempty"`
	// Minimum the effective requests and limits must reach.
	// +optional
	Minimum ExecutionResourceRequirements `json:"minimum,omitempty"`
	// Maximum the effective requests and limits may not exceed.
	// +optional
	Maximum ExecutionResourceRequirements `json:"maximum,omitempty"`
}

// JobClassSpec selects the adapter (controllerName + parametersRef), who
// may use the class, and its resource policy.
// +kubebuilder:validation:XValidation:rule="self.controllerName == oldSelf.controllerName",message="controllerName is immutable"
// +kubebuilder:validation:XValidation:rule="self.parametersRef == oldSelf.parametersRef",message="parametersRef is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.parametersRef.uid)",message="parametersRef.uid is set by the controller in Job status, not in a JobClass"
type JobClassSpec struct {
	// ControllerName is the domain-prefixed controller that owns the class,
	// e.g. execution.ayatori.ddupan.top/kubernetes. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9][-A-Za-z0-9_./]*$`
	ControllerName string `json:"controllerName"`
	// ParametersRef names the cluster-scoped parameters object of the
	// adapter. Immutable.
	ParametersRef ParametersReference `json:"parametersRef"`
	// AllowedNamespaces selects the namespaces whose Jobs may use the
	// class (unset: every namespace).
	// +optional
	AllowedNamespaces *metav1.LabelSelector `json:"allowedNamespaces,omitempty"`
	// Resources is the class's CPU and memory policy.
	// +optional
	Resources ExecutionResourcePolicy `json:"resources,omitempty"`
}

// JobClassStatus is the controller's view of the class.
type JobClassStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// JobClass is an execution service level offered by platform
// administrators: which adapter runs the Jobs that name it, with which
// parameters, for which namespaces, within which resources.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=jobclass,categories=ayatori
// +kubebuilder:printcolumn:name="Controller",type=string,JSONPath=`.spec.controllerName`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=='Accepted')].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=='Ready')].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type JobClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitzero"`
	Spec              JobClassSpec `json:"spec"`
	// +optional
	Status JobClassStatus `json:"status,omitzero"`
}

// JobClassList is a list of JobClasses.
// +kubebuilder:object:root=true
type JobClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []JobClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&JobClass{}, &JobClassList{})
}
