package execution

// Domain is the journal domain of this contract (subject token).
const Domain = "execution"

// Operations of the domain (all on a Job, keyed by its UID).
const (
	// OpEnsure creates the Job's backend execution unless one exists for
	// its UID (payload EnsureIntent). Never appended after a Cancel or a
	// terminal outcome.
	OpEnsure = "Ensure"
	// OpObserve reads the execution's state (payload ExecutionIntent).
	OpObserve = "Observe"
	// OpCancel requests the execution to stop (payload ExecutionIntent with
	// the stop's Reason). Repeatable.
	OpCancel = "Cancel"
	// OpDelete removes the execution's backend resources once it stopped
	// (payload ExecutionIntent). Its Observation is NotFound once nothing
	// of the Job's is left, Stopping while the deletion is in progress
	// (the projector asks again).
	OpDelete = "Delete"
)

// Journal notes of the Job projector.
const (
	// NoteBackendLostConfirmed records an administrator's confirmation
	// (annotation execution.ayatori.ddupan.top/confirm-backend-lost) that
	// the execution of a Job in ResultUnknown is lost (payload
	// BackendLostNote).
	NoteBackendLostConfirmed = "BackendLostConfirmed"
	// NoteDeadlineStarted marks when the projector first observed the
	// execution of a Job with activeDeadlineSeconds running (payload
	// DeadlineNote): the deadline counts from this note's local observation
	// time. A checkpoint keeps the latest note of every operation, so the
	// start survives any compaction of Observes.
	NoteDeadlineStarted = "DeadlineStarted"
	// NoteFinished records the Job's terminal result as the projector
	// decided it, before it writes the terminal status (payload
	// FinishedNote): the journal names every Job's end, also one that
	// never had an execution (cancelled before any Ensure).
	NoteFinished = "Finished"
	// NoteTTLExpired records the TTL controller's decision to delete a
	// finished Job, before the delete (payload TTLNote).
	NoteTTLExpired = "TTLExpired"
)

// Operations every adapter executes.
var Operations = []string{OpEnsure, OpObserve, OpCancel, OpDelete}

// Adapters (status.execution.adapter) and the controller names of the
// JobClasses they own.
const (
	// AdapterKubernetes runs Jobs as batch/v1 Jobs (executors/kubernetes).
	AdapterKubernetes = "kubernetes"
	// AdapterOpenSandbox runs Jobs as commands in OpenSandbox sandboxes
	// (executors/opensandbox).
	AdapterOpenSandbox = "opensandbox"
)
