package execution

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
)

// ValidateStatus checks the status invariants every pass must keep
// (docs/execution/job-api.md "State invariants"): a terminal Succeeded has
// a completionTime and only a terminal one does; startTime needs
// Scheduled=True; completion is never before start; a non-terminal
// Succeeded is Unknown (never absent once the Job was looked at).
func ValidateStatus(st *executionv1alpha1.JobStatus) error {
	terminal := IsTerminal(st)
	if terminal && st.CompletionTime == nil {
		return errors.New("terminal job must have completionTime")
	}
	if st.CompletionTime != nil && !terminal {
		return errors.New("completionTime requires a terminal Succeeded condition")
	}
	if st.StartTime != nil && !meta.IsStatusConditionTrue(st.Conditions, executionv1alpha1.JobConditionScheduled) {
		return errors.New("startTime requires Scheduled=True")
	}
	if st.StartTime != nil && st.CompletionTime != nil && st.CompletionTime.Before(st.StartTime) {
		return errors.New("completionTime must not precede startTime")
	}
	if len(st.Conditions) > 0 && meta.FindStatusCondition(st.Conditions, executionv1alpha1.JobConditionSucceeded) == nil {
		return errors.New("a Job with conditions must have a Succeeded condition")
	}
	return nil
}
