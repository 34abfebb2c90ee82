package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Condition types of a Job (docs/execution/job-api.md "Conditions").
const (
	// JobConditionAccepted: the spec, references, policy and JobClass are
	// resolved; the Job may be scheduled.
	JobConditionAccepted = "Accepted"
	// JobConditionScheduled: a backend execution exists and is observable.
	JobConditionScheduled = "Scheduled"
	// JobConditionSucceeded: the result. Unknown while not finished, True
	// on success, False on failure or cancellation (stable reasons).
	JobConditionSucceeded = "Succeeded"
)

// JobFinalizer is added before anything external can exist for a Job and
// removed once its backend execution is stopped and deleted.
const JobFinalizer = "execution.ayatori.ddupan.top/job-cleanup"

// AnnotationBackendLost is the administrator's confirmation that the
// backend execution of a Job in ResultUnknown is lost for good: its value
// must be the Job's UID (so a copied manifest never confirms another
// object). The projector journals the confirmation, then ends the Job with
// Succeeded=False/BackendLost.
const AnnotationBackendLost = "execution.ayatori.ddupan.top/confirm-backend-lost"

// AnnotationConfirmedBy names who set AnnotationBackendLost: the
// admission policy ayatori-confirm-backend-lost (deploy/admission) requires
// it to be the requester's user name, and the journal's
// BackendLostConfirmed note records it.
const AnnotationConfirmedBy = "execution.ayatori.ddupan.top/confirmed-by"

// JobDesiredState is what the Job's author wants of its execution.
type JobDesiredState string

const (
	// JobDesiredStateRunning (default): run the task to its end.
	JobDesiredStateRunning JobDesiredState = "Running"
	// JobDesiredStateCancelled: stop the execution (one-way).
	JobDesiredStateCancelled JobDesiredState = "Cancelled"
)

// TaskSpec is the process a Job runs: an OCI image, argv and environment.
// Immutable after creation.
type TaskSpec struct {
	// Image is the OCI image reference (a tag or a digest).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`
	// ImagePullSecrets are same-namespace kubernetes.io/dockerconfigjson
	// Secrets used to pull the image.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// Command replaces the image's entrypoint (argv, no implicit shell).
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Command []string `json:"command,omitempty"`
	// Args are passed to the entrypoint or command (argv, no implicit shell).
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`
	// WorkingDir is the process's working directory (empty: the image's).
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
	// Env are the process's environment variables, unique by name.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []EnvVar `json:"env,omitempty"`
}

// EnvVar is one environment variable: a literal value, or a reference to a
// key of a same-namespace Secret or ConfigMap. Referenced values are never
// copied into status, Events, logs or the journal.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="exactly one of value or valueFrom must be set"
type EnvVar struct {
	// Name of the variable (a C identifier).
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// Value is a literal value.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Value *string `json:"value,omitempty"`
	// ValueFrom references a key of a Secret or ConfigMap.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource selects one key of a same-namespace Secret or ConfigMap.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="exactly one key reference must be set"
type EnvVarSource struct {
	// SecretKeyRef selects a key of a Secret in the Job's namespace.
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`
	// ConfigMapKeyRef selects a key of a ConfigMap in the Job's namespace.
	// +optional
	ConfigMapKeyRef *corev1.ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`
}

// ResourceValues are CPU and memory quantities.
type ResourceValues struct {
	// CPU in cores (Kubernetes quantity, e.g. 100m, "2").
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory in bytes (Kubernetes quantity, e.g. 128Mi).
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// ExecutionResourceRequirements are the requests (admission and
// scheduling) and limits (execution ceiling) of a task. A request may not
// exceed its limit.
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || !has(self.requests.cpu) || !has(self.limits.cpu) || quantity(string(self.requests.cpu)).compareTo(quantity(string(self.limits.cpu))) <= 0",message="requests.cpu must not exceed limits.cpu"
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || !has(self.requests.memory) || !has(self.limits.memory) || quantity(string(self.requests.memory)).compareTo(quantity(string(self.limits.memory))) <= 0",message="requests.memory must not exceed limits.memory"
type ExecutionResourceRequirements struct {
	// Requests are what the task needs to be admitted and scheduled.
	// +optional
	Requests ResourceValues `json:"requests,omitempty"`
	// Limits are the most the task may use.
	// +optional
	Limits ResourceValues `json:"limits,omitempty"`
}

// JobSpec is the desired execution. Only desiredState (one-way to
// Cancelled) and ttlSecondsAfterFinished may change after creation.
// +kubebuilder:validation:XValidation:rule="self.task == oldSelf.task",message="task is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)",message="resources are immutable"
// +kubebuilder:validation:XValidation:rule="has(self.activeDeadlineSeconds) == has(oldSelf.activeDeadlineSeconds) && (!has(self.activeDeadlineSeconds) || self.activeDeadlineSeconds == oldSelf.activeDeadlineSeconds)",message="activeDeadlineSeconds is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.jobClassName) == has(oldSelf.jobClassName) && (!has(self.jobClassName) || self.jobClassName == oldSelf.jobClassName)",message="jobClassName is immutable"
// +kubebuilder:validation:XValidation:rule="oldSelf.desiredState == self.desiredState || (oldSelf.desiredState == 'Running' && self.desiredState == 'Cancelled')",message="desiredState may only transition from Running to Cancelled"
type JobSpec struct {
	// JobClassName names the cluster-scoped JobClass. Empty: the
	// namespace's default class (annotation
	// execution.ayatori.ddupan.top/default-job-class), else the single
	// JobClass annotated execution.ayatori.ddupan.top/is-default-job-class.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	JobClassName string `json:"jobClassName,omitempty"`
	// Task is the process to run.
	Task TaskSpec `json:"task"`
	// Resources are the task's CPU and memory; the class fills in its
	// defaults and checks its minimum and maximum.
	// +optional
	Resources ExecutionResourceRequirements `json:"resources,omitempty"`
	// ActiveDeadlineSeconds bounds the execution in seconds, counted from
	// its start (not queueing or provisioning); past it the execution is
	// stopped and the Job ends with Succeeded=False/DeadlineExceeded.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`
	// TTLSecondsAfterFinished: seconds after completionTime when the
	// finished Job may be deleted (0: at once). Mutable.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// DesiredState is Running (default) or Cancelled; Running → Cancelled
	// is the only allowed change.
	// +kubebuilder:validation:Enum=Running;Cancelled
	// +kubebuilder:default=Running
	// +optional
	DesiredState JobDesiredState `json:"desiredState,omitempty"`
}

// ParametersReference names the cluster-scoped, adapter-owned parameters
// object of a JobClass (GatewayClass style). UID is set in Job status only
// (the object the Job was accepted with).
type ParametersReference struct {
	// Group of the parameters kind (a DNS subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Group string `json:"group"`
	// Kind of the parameters object (CamelCase).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`
	// Name of the parameters object (a DNS subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// UID of the parameters object the Job was accepted with.
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// ResolvedJobClassReference pins the JobClass (and its parameters) a Job
// was accepted with, by UID: a class recreated under the same name is never
// adopted.
type ResolvedJobClassReference struct {
	// Name of the JobClass.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID of the JobClass.
	UID types.UID `json:"uid"`
	// ControllerName of the JobClass.
	// +kubebuilder:validation:MaxLength=253
	ControllerName string `json:"controllerName"`
	// ParametersRef of the JobClass, with the parameters object's UID.
	ParametersRef ParametersReference `json:"parametersRef"`
}

// ExecutionReference is one opaque, adapter-defined reference to a backend
// resource of a Job's execution (never an endpoint or a credential).
type ExecutionReference struct {
	// Type of the backend resource (adapter-defined, e.g. Job).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Type string `json:"type"`
	// ID of the backend resource (adapter-defined, e.g. a UID).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ID string `json:"id"`
}

// ExecutionStatus is the minimal stable reference to a Job's backend
// execution, written only by the controller.
type ExecutionStatus struct {
	// Adapter is the adapter that runs the execution (e.g. kubernetes).
	// +kubebuilder:validation:MaxLength=63
	Adapter string `json:"adapter"`
	// References to the backend resources of the execution.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	References []ExecutionReference `json:"references,omitempty"`
}

// JobResult is the outcome of the task's main process.
type JobResult struct {
	// ExitCode of the main process, when the backend could determine it.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason is a short classification (the Succeeded condition's reason).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`
}

// JobStatus is observed state, written only by the controller. There is no
// phase: the state is derived from conditions, times and references.
type JobStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted, Scheduled, Succeeded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ResolvedJobClass is the class the Job was accepted with.
	// +optional
	ResolvedJobClass *ResolvedJobClassReference `json:"resolvedJobClass,omitempty"`
	// EffectiveResources are the resources after the class's defaults,
	// checked against its minimum and maximum.
	// +optional
	EffectiveResources ExecutionResourceRequirements `json:"effectiveResources,omitempty"`
	// Execution references the backend execution.
	// +optional
	Execution *ExecutionStatus `json:"execution,omitempty"`
	// StartTime is when the backend confirmed the task's main process
	// started. Set once.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the Job reached its terminal state. Set once.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Result of the main process.
	// +optional
	Result *JobResult `json:"result,omitempty"`
}

// Job is one finite machine execution with an exit result, run by the
// backend its JobClass names. One logical execution per UID.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ajob,categories=ayatori
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.status.resolvedJobClass.name`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=='Accepted')].status`
// +kubebuilder:printcolumn:name="Scheduled",type=string,JSONPath=`.status.conditions[?(@.type=='Scheduled')].status`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=='Succeeded')].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=='Succeeded')].reason`
// +kubebuilder:printcolumn:name="Exit",type=integer,JSONPath=`.status.result.exitCode`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Job struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitzero"`
	Spec              JobSpec `json:"spec"`
	// +optional
	Status JobStatus `json:"status,omitzero"`
}

// JobList is a list of Jobs.
// +kubebuilder:object:root=true
type JobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []Job `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Job{}, &JobList{})
}
