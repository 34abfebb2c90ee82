package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespacedKeyReference selects one key of a namespaced Secret.
type NamespacedKeyReference struct {
	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key within the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// OpenSandboxRequestMapping says how a Job's requests reach OpenSandbox.
type OpenSandboxRequestMapping string

const (
	// OpenSandboxRequestMappingAdmissionOnly: requests only admit; limits
	// become the sandbox's resourceLimits.
	OpenSandboxRequestMappingAdmissionOnly OpenSandboxRequestMapping = "AdmissionOnly"
	// OpenSandboxRequestMappingNative: the backend honours requests and limits.
	OpenSandboxRequestMappingNative OpenSandboxRequestMapping = "Native"
)

// OpenSandboxExecutionParametersSpec configures the OpenSandbox adapter.
// +kubebuilder:validation:XValidation:rule="self.allowInsecureHTTP || self.endpoint.startsWith('https://')",message="endpoint must use HTTPS unless allowInsecureHTTP is true"
// +kubebuilder:validation:XValidation:rule="self.endpoint.startsWith('https://') || self.endpoint.startsWith('http://')",message="endpoint must be an http(s) URL"
// +kubebuilder:validation:XValidation:rule="isURL(self.endpoint) && size(url(self.endpoint).getHostname()) > 0",message="endpoint must be an absolute URL with a host"
// +kubebuilder:validation:XValidation:rule="!self.endpoint.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@')",message="endpoint must not contain credentials (use apiKeySecretRef)"
// +kubebuilder:validation:XValidation:rule="!self.endpoint.contains('?') && !self.endpoint.contains('#')",message="endpoint must not contain a query or fragment"
type OpenSandboxExecutionParametersSpec struct {
	// Endpoint is the OpenSandbox API base URL, without credentials.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint"`
	// APIKeySecretRef selects the Secret key holding the API key.
	APIKeySecretRef NamespacedKeyReference `json:"apiKeySecretRef"`
	// PoolRef selects an OpenSandbox pool or profile (Jobs can not override it).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PoolRef string `json:"poolRef,omitempty"`
	// RequestMapping: AdmissionOnly (default) or Native.
	// +kubebuilder:validation:Enum=AdmissionOnly;Native
	// +kubebuilder:default=AdmissionOnly
	// +optional
	RequestMapping OpenSandboxRequestMapping `json:"requestMapping,omitempty"`
	// AllowSecretEnv lets the adapter read Secret env references and send
	// their values to OpenSandbox.
	// +optional
	AllowSecretEnv bool `json:"allowSecretEnv,omitempty"`
	// AllowImageAuth lets the adapter send registry credentials to OpenSandbox.
	// +optional
	AllowImageAuth bool `json:"allowImageAuth,omitempty"`
	// AllowInsecureHTTP is intended for isolated development environments only.
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`
	// ExecdHosts are the hosts a sandbox's execd endpoint may be on besides
	// the endpoint's own (host names or IP addresses, without a port). The
	// adapter sends commands (and the task's environment) only to those.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9.:-]+$`
	ExecdHosts []string `json:"execdHosts,omitempty"`
}

// OpenSandboxExecutionParameters is the OpenSandbox adapter's
// administrator API, referenced by a JobClass's parametersRef.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=ayatori
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenSandboxExecutionParameters struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitzero"`
	Spec              OpenSandboxExecutionParametersSpec `json:"spec"`
}

// OpenSandboxExecutionParametersList is a list of OpenSandboxExecutionParameters.
// +kubebuilder:object:root=true
type OpenSandboxExecutionParametersList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []OpenSandboxExecutionParameters `json:"items"`
}

func init() {
	SchemeBuilder.Register(&OpenSandboxExecutionParameters{}, &OpenSandboxExecutionParametersList{})
}
