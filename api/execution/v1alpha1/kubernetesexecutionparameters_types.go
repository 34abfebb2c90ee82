package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubernetesSchedulingParameters place the pods of native Jobs.
type KubernetesSchedulingParameters struct {
	// NodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations of the pods.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// KubernetesExecutionParametersSpec configures the Kubernetes adapter for
// the Jobs of a class: each Job runs as a batch/v1 Job in the Job's own
// namespace.
type KubernetesExecutionParametersSpec struct {
	// ServiceAccountName is the ServiceAccount every allowed namespace
	// provides for the pods; a missing one keeps the Job unscheduled (never
	// the default ServiceAccount).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName"`
	// RuntimeClassName of the pods (empty: the cluster's default runtime).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// Scheduling places the pods.
	// +optional
	Scheduling KubernetesSchedulingParameters `json:"scheduling,omitempty"`
	// PodSecurityContext of the pods.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`
	// ImagePullPolicy of the task container.
	// +kubebuilder:validation:Enum=Always;Never;IfNotPresent
	// +kubebuilder:default=IfNotPresent
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
}

// KubernetesExecutionParameters is the Kubernetes adapter's administrator
// API, referenced by a JobClass's parametersRef.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=ayatori
// +kubebuilder:printcolumn:name="ServiceAccount",type=string,JSONPath=`.spec.serviceAccountName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KubernetesExecutionParameters struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitzero"`
	Spec              KubernetesExecutionParametersSpec `json:"spec"`
}

// KubernetesExecutionParametersList is a list of KubernetesExecutionParameters.
// +kubebuilder:object:root=true
type KubernetesExecutionParametersList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []KubernetesExecutionParameters `json:"items"`
}

func init() {
	SchemeBuilder.Register(&KubernetesExecutionParameters{}, &KubernetesExecutionParametersList{})
}
