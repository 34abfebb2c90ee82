package execution

// The Conditions' reasons of the execution API (Accepted, Scheduled,
// Succeeded; an adapter's Failed outcomes use them too) are
// api/execution/v1alpha1/reasons.go's; an adapter's own reasons live in its
// classify.go. This file holds the reasons the contract itself carries in
// payloads.

// StopReason says why a Cancel was decided; it becomes the terminal
// reason once the stop is confirmed (unless the execution ended first).
type StopReason string

// Stop reasons.
const (
	StopCancelled        StopReason = "Cancelled"
	StopDeadlineExceeded StopReason = "DeadlineExceeded"
	// StopDeleted: the Job is being deleted.
	StopDeleted StopReason = "Deleted"
	// StopFailing: the backend reported a failure that will not heal (for
	// example an image that can not be pulled); Observation.Reason says
	// which.
	StopFailing StopReason = "Failing"
)
