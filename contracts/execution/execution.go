// Package execution is the contract of the execution domain
// (execution.ayatori.ddupan.top): the operations the Job projector appends
// and the execution adapters (executors/kubernetes, executors/opensandbox)
// execute, their payloads, the observation an adapter reports, the
// derived backend names and the domain's journal invariants. It imports no
// backend SDK; projectors and executors both import it.
//
// Adapter contract (docs/execution/job-api.md "Adapter contract"):
//
//	Ensure   idempotently establish the one execution identified by the Job
//	         UID: find it by the UID before creating anything
//	Observe  report not found, pending, running, stopping, succeeded,
//	         failed or cancelled (ResultUnknown when it can not tell)
//	Cancel   request a stop; repeatable
//	Delete   remove the backend's resources; repeatable
//
// Every outcome of these operations carries an Observation.
package execution

import (
	"time"
)

// FinishedNote is the payload of a NoteFinished note.
type FinishedNote struct {
	// Succeeded is the Succeeded condition's status (true: success).
	Succeeded bool `json:"succeeded"`
	// Reason is the Succeeded condition's reason.
	Reason string `json:"reason"`
	// ExitCode of the main process, when known.
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// TTLNote is the payload of a NoteTTLExpired note.
type TTLNote struct {
	// TTLSecondsAfterFinished is the TTL in force at the delete.
	TTLSecondsAfterFinished int32 `json:"ttlSecondsAfterFinished"`
}

// DeadlineNote is the payload of a NoteDeadlineStarted note.
type DeadlineNote struct {
	// ActiveDeadlineSeconds is the Job's deadline in seconds.
	ActiveDeadlineSeconds int64 `json:"activeDeadlineSeconds"`
}

// Resources are a Job's effective CPU and memory as Kubernetes quantity
// strings ("" = unset): what the adapter must honour, never less.
type Resources struct {
	RequestsCPU    string `json:"requestsCpu,omitempty"`
	RequestsMemory string `json:"requestsMemory,omitempty"`
	LimitsCPU      string `json:"limitsCpu,omitempty"`
	LimitsMemory   string `json:"limitsMemory,omitempty"`
}

// EnsureIntent is the payload of an Ensure intent: what the projector
// resolved when it accepted the Job. The task itself (argv, literal env
// values) is not copied into the journal: the executor reads it from the
// Job (immutable after creation) and checks it against TaskDigest, so a
// literal value never reaches the journal. Env references stay references.
type EnsureIntent struct {
	// Adapter runs the execution (AdapterKubernetes, AdapterOpenSandbox).
	Adapter string `json:"adapter"`
	// JobClass and JobClassUID are the class the Job was accepted with.
	JobClass    string `json:"jobClass"`
	JobClassUID string `json:"jobClassUid"`
	// ParametersKind, ParametersName and ParametersUID pin the class's
	// parameters object: the executor refuses (ParametersChanged) when the
	// object now has another UID.
	ParametersKind string `json:"parametersKind"`
	ParametersName string `json:"parametersName"`
	ParametersUID  string `json:"parametersUid"`
	// Image is the task's image (for forensics; the executor uses the
	// Job's, which the digest covers).
	Image string `json:"image"`
	// TaskDigest is TaskDigest(job.spec.task): "sha256:<hex>".
	TaskDigest string `json:"taskDigest"`
	// Resources are the effective resources (status.effectiveResources).
	Resources Resources `json:"resources"`
	// References are the execution's references the journal already
	// holds (from the outcome of the Ensure that created it): an adapter
	// that finds a backend object under the Job's name takes it as the
	// Job's execution only when it is the one referenced here, or, when
	// none is recorded yet (a crash between the create and its outcome),
	// when it carries the adapter's creation proof. Anything else is a
	// Conflict, never adopted.
	References []Reference `json:"references,omitempty"`
}

// ExecutionIntent is the payload of Observe, Cancel and Delete intents.
type ExecutionIntent struct {
	// Adapter runs the execution.
	Adapter string `json:"adapter"`
	// References are the execution's references known to the projector
	// (empty when none was reported yet: the adapter finds it by UID).
	References []Reference `json:"references,omitempty"`
	// ParametersName and ParametersUID are the class parameters the Job
	// was accepted with (status.resolvedJobClass.parametersRef): an adapter
	// whose backend is configured by them (OpenSandbox: endpoint, API key)
	// reaches the execution through that object only while it keeps this
	// UID. Empty in intents of older projectors (the adapter then reads
	// the Job's status).
	ParametersName string `json:"parametersName,omitempty"`
	ParametersUID  string `json:"parametersUid,omitempty"`
	// Reason of a Cancel.
	Reason StopReason `json:"reason,omitempty"`
	// FailingReason and FailingMessage are, for a Cancel with Reason
	// StopFailing, the failure the backend reported (Observation.Reason and
	// Message): the terminal reason once the stop is confirmed, kept in the
	// intent so no compaction of older Observes can lose it.
	FailingReason  string `json:"failingReason,omitempty"`
	FailingMessage string `json:"failingMessage,omitempty"`
}

// BackendLostNote is the payload of a NoteBackendLostConfirmed note.
type BackendLostNote struct {
	// Annotation is the annotation the confirmation came from.
	Annotation string `json:"annotation"`
	// ConfirmedBy is who confirmed (annotation confirmed-by, checked at
	// admission to be the requester's user name; empty without the
	// admission policy).
	ConfirmedBy string `json:"confirmedBy,omitempty"`
}

// Reference is one adapter-defined reference to a backend resource
// (status.execution.references): never an endpoint or a credential.
type Reference struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// State is what an adapter observed of a Job's execution.
type State string

// States an Observation reports.
const (
	// StateNotFound: no execution exists for the Job UID.
	StateNotFound State = "NotFound"
	// StatePending: the execution exists; its main process has not started.
	StatePending State = "Pending"
	// StateRunning: the main process runs.
	StateRunning State = "Running"
	// StateStopping: a stop was requested and the execution has not
	// stopped yet.
	StateStopping State = "Stopping"
	// StateSucceeded: the main process exited 0 (terminal).
	StateSucceeded State = "Succeeded"
	// StateFailed: the execution ended without success and will not
	// continue (terminal): Reason says how (ProcessFailed with ExitCode,
	// Evicted, BackendFailed, ...).
	StateFailed State = "Failed"
	// StateCancelled: the execution stopped on request before it ended
	// (terminal).
	StateCancelled State = "Cancelled"
)

// Stopped reports whether s proves the execution will not continue.
func (s State) Stopped() bool {
	switch s {
	case StateNotFound, StateSucceeded, StateFailed, StateCancelled:
		return true
	}
	return false
}

// Observation is the payload of every outcome of the domain's operations
// (for Succeeded outcomes; Failed and ResultUnknown outcomes may carry one
// too). Times are the backend's (display only; decisions use the
// projector's own clock).
type Observation struct {
	// Terminal: the Job's execution ended (Succeeded, Failed or Cancelled)
	// and will not continue. Read by the journal invariant.
	Terminal bool `json:"terminal"`
	// State is the execution's state.
	State State `json:"state"`
	// Adapter that observed it.
	Adapter string `json:"adapter,omitempty"`
	// References identify the execution (stable for one Job UID).
	References []Reference `json:"references,omitempty"`
	// Revision is the backend's revision of the execution's object as this
	// observation read it (opaque, compared only for equality; the
	// Kubernetes adapter reports the native Job's resourceVersion). With
	// the adapter's Changes it tells a later change from the state already
	// observed. "" when unknown.
	Revision string `json:"revision,omitempty"`
	// Created: this outcome's Ensure created the execution (at most one per
	// Job UID).
	Created bool `json:"created,omitempty"`
	// StartTime is when the backend started the main process.
	StartTime *time.Time `json:"startTime,omitempty"`
	// FinishTime is when the backend saw the execution end.
	FinishTime *time.Time `json:"finishTime,omitempty"`
	// ExitCode of the main process, when known.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Failing: the backend reports a failure that will not heal by itself
	// (Reason), but the execution has not stopped: the projector stops it.
	Failing bool `json:"failing,omitempty"`
	// Reason is a stable API reason (Completed, ProcessFailed, Evicted,
	// ImagePullFailed, ...; for a Failed Ensure outcome the Scheduled
	// reason, e.g. ServiceAccountNotFound).
	Reason string `json:"reason,omitempty"`
	// Message is a human explanation, safe for a Condition (never a
	// secret, a log or a raw driver error).
	Message string `json:"message,omitempty"`
}
