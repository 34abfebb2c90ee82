package execution

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// What `ayatori-journal` shows of a Job's records (timeline, replay) and
// how replay --kubeconfig compares a live Job with its journal. Pure
// functions of journal records and the live object: no client, no SDK.

// Describe summarises the payload of one record of this domain for a
// timeline row: an outcome's Observation (state, created, exit code,
// reason), a note's payload (Finished: the result; TTLExpired: the TTL;
// DeadlineStarted: the deadline), an Ensure intent's image, a Cancel
// intent's failure. "" when there is nothing to show.
func Describe(r journal.Record) string {
	if len(r.Payload) == 0 {
		return ""
	}
	switch r.Type {
	case journal.TypeOutcome:
		var o Observation
		if json.Unmarshal(r.Payload, &o) != nil || o.State == "" {
			return ""
		}
		return DescribeObservation(o)
	case journal.TypeNote:
		switch r.Operation {
		case NoteFinished:
			var n FinishedNote
			if json.Unmarshal(r.Payload, &n) == nil {
				return DescribeFinished(n)
			}
		case NoteTTLExpired:
			var n TTLNote
			if json.Unmarshal(r.Payload, &n) == nil {
				return fmt.Sprintf("ttl=%ds", n.TTLSecondsAfterFinished)
			}
		case NoteDeadlineStarted:
			var n DeadlineNote
			if json.Unmarshal(r.Payload, &n) == nil {
				return fmt.Sprintf("deadline=%ds", n.ActiveDeadlineSeconds)
			}
		case NoteBackendLostConfirmed:
			var n BackendLostNote
			if json.Unmarshal(r.Payload, &n) == nil && n.Annotation != "" {
				return "confirmed by annotation " + n.Annotation
			}
		}
	case journal.TypeIntent:
		switch r.Operation {
		case OpEnsure:
			var in EnsureIntent
			if json.Unmarshal(r.Payload, &in) == nil && in.Image != "" {
				return "image=" + in.Image
			}
		case OpCancel:
			var in ExecutionIntent
			if json.Unmarshal(r.Payload, &in) == nil && in.FailingReason != "" {
				return "failing=" + in.FailingReason
			}
		}
	}
	return ""
}

// DescribeObservation renders "state=Failed exit=3 reason=ProcessFailed".
func DescribeObservation(o Observation) string {
	parts := []string{"state=" + string(o.State)}
	if o.Created {
		parts = append(parts, "created")
	}
	if o.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit=%d", *o.ExitCode))
	}
	if o.Reason != "" {
		parts = append(parts, "reason="+o.Reason)
	}
	if o.Failing {
		parts = append(parts, "failing")
	}
	return strings.Join(parts, " ")
}

// DescribeFinished renders "result=Failed reason=ProcessFailed exit=3".
func DescribeFinished(n FinishedNote) string {
	s := "result=Failed"
	if n.Succeeded {
		s = "result=Succeeded"
	}
	if n.Reason != "" {
		s += " reason=" + n.Reason
	}
	if n.ExitCode != nil {
		s += fmt.Sprintf(" exit=%d", *n.ExitCode)
	}
	return s
}

// Account is what one Job's journal says about its execution and its end.
type Account struct {
	// Finished is the Finished note (the terminal result the projector
	// decided), FinishedSeq its sequence.
	Finished    *FinishedNote `json:"finished,omitempty"`
	FinishedSeq uint64        `json:"finishedSeq,omitempty"`
	// LastObservation is the Observation of the last outcome carrying one.
	LastObservation    *Observation `json:"lastObservation,omitempty"`
	LastObservationSeq uint64       `json:"lastObservationSeq,omitempty"`
	// References are the backend references the outcomes reported (the
	// latest ID per type, in the order the types first appeared).
	References []Reference `json:"references,omitempty"`
	// TTL is the TTLExpired note (the TTL controller's delete), TTLSeq its
	// sequence.
	TTL    *TTLNote `json:"ttlExpired,omitempty"`
	TTLSeq uint64   `json:"ttlExpiredSeq,omitempty"`
	// DeleteSeq is the sequence of the last Delete intent (the backend
	// resources of a deleted Job), DeleteDone whether its outcome reported
	// nothing left (NotFound).
	DeleteSeq  uint64 `json:"deleteSeq,omitempty"`
	DeleteDone bool   `json:"deleteDone,omitempty"`
	// EnsureSeq is the sequence of the first Ensure intent (0: no
	// execution was ever asked for, e.g. cancelled before it; deleting such
	// a Job needs no Delete).
	EnsureSeq uint64 `json:"ensureSeq,omitempty"`
}

// AccountOf folds one Job's records (stream order) into its Account.
func AccountOf(recs []journal.Record) Account {
	var a Account
	for _, r := range recs {
		switch r.Type {
		case journal.TypeNote:
			switch r.Operation {
			case NoteFinished:
				var n FinishedNote
				if json.Unmarshal(r.Payload, &n) == nil {
					a.Finished, a.FinishedSeq = &n, r.Sequence
				}
			case NoteTTLExpired:
				var n TTLNote
				if json.Unmarshal(r.Payload, &n) == nil {
					a.TTL, a.TTLSeq = &n, r.Sequence
				}
			}
		case journal.TypeIntent:
			switch {
			case r.Operation == OpDelete:
				a.DeleteSeq, a.DeleteDone = r.Sequence, false
			case r.Operation == OpEnsure && a.EnsureSeq == 0:
				a.EnsureSeq = r.Sequence
			}
		case journal.TypeOutcome:
			var o Observation
			if len(r.Payload) == 0 || json.Unmarshal(r.Payload, &o) != nil || o.State == "" {
				continue
			}
			a.LastObservation, a.LastObservationSeq = &o, r.Sequence
			for _, ref := range o.References {
				a.References = setReference(a.References, ref)
			}
			if r.Operation == OpDelete && r.Result != nil && r.Result.Class == journal.Succeeded && o.State == StateNotFound {
				a.DeleteDone = true
			}
		}
	}
	return a
}

func setReference(refs []Reference, ref Reference) []Reference {
	for i := range refs {
		if refs[i].Type == ref.Type {
			refs[i].ID = ref.ID
			return refs
		}
	}
	return append(refs, ref)
}

// LiveComparison is replay --kubeconfig's comparison of a live Job with
// its journal.
type LiveComparison struct {
	// Found: a Job with the journal's UID exists.
	Found bool `json:"found"`
	// OtherUID is the UID of a live Job with the same namespace/name that
	// is another object (the journal's was deleted and the name reused).
	OtherUID string `json:"otherUid,omitempty"`
	// Succeeded and SucceededReason are the live Succeeded condition.
	Succeeded       string `json:"succeeded,omitempty"`
	SucceededReason string `json:"succeededReason,omitempty"`
	// ExitCode is the live status.result.exitCode.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// References are the live status.execution.references.
	References []Reference `json:"references,omitempty"`
	// Deleting: the live Job has a deletionTimestamp.
	Deleting bool `json:"deleting,omitempty"`
	// Journal is what the journal says.
	Journal Account `json:"journal"`
	// Verdict explains a Job that is gone as the journal says it should
	// be ("deleted by TTL ...", "deleted ...").
	Verdict string `json:"verdict,omitempty"`
	// Mismatches are the disagreements between the live Job and the journal.
	Mismatches []string `json:"mismatches"`
}

// CompareLive compares the live Job (nil: NotFound) with the records of
// the Job with UID uid. A Job that is gone is no mismatch when its journal
// says why (a TTLExpired note, or a Finished note and a Delete); a live
// Job whose Succeeded condition, reason, exit code or execution
// references disagree with its Finished note and its outcomes is.
func CompareLive(live *unstructured.Unstructured, uid string, recs []journal.Record) LiveComparison {
	a := AccountOf(recs)
	c := LiveComparison{Journal: a, Mismatches: []string{}}
	mismatch := func(format string, args ...any) { c.Mismatches = append(c.Mismatches, fmt.Sprintf(format, args...)) }
	if live != nil && string(live.GetUID()) != uid {
		c.OtherUID = string(live.GetUID())
		live = nil
	}
	if live == nil {
		switch {
		case a.TTL != nil && a.Finished != nil:
			c.Verdict = fmt.Sprintf("deleted by TTL (TTLExpired #%d, ttlSecondsAfterFinished=%d) after it finished (Finished #%d: %s)",
				a.TTLSeq, a.TTL.TTLSecondsAfterFinished, a.FinishedSeq, DescribeFinished(*a.Finished))
		case a.TTL != nil:
			c.Verdict = fmt.Sprintf("deleted by TTL (TTLExpired #%d)", a.TTLSeq)
			mismatch("the TTL controller deleted the Job (TTLExpired #%d) but the journal has no Finished note: its result is unknown", a.TTLSeq)
		case a.Finished != nil && a.DeleteSeq != 0:
			c.Verdict = fmt.Sprintf("deleted after it finished (Finished #%d: %s; Delete #%d)", a.FinishedSeq, DescribeFinished(*a.Finished), a.DeleteSeq)
		case a.Finished != nil && a.EnsureSeq == 0:
			// No execution was ever asked for: the projector releases the
			// finalizer without a Delete.
			c.Verdict = fmt.Sprintf("deleted after it finished without an execution (Finished #%d: %s; nothing to clean up)", a.FinishedSeq, DescribeFinished(*a.Finished))
		case a.Finished != nil:
			mismatch("the Job no longer exists but the journal has no Delete of its execution after its Finished note (#%d): it went without the projector (a finalizer removed by hand?); the journal is the only record", a.FinishedSeq)
		default:
			mismatch("the Job no longer exists but the journal has no Finished note and no Delete: it went without the projector (a finalizer removed by hand?); the journal is the only record")
		}
		return c
	}
	c.Found = true
	c.Deleting = live.GetDeletionTimestamp() != nil
	conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, ci := range conds {
		if m, ok := ci.(map[string]any); ok && m["type"] == executionv1alpha1.JobConditionSucceeded {
			c.Succeeded, _ = m["status"].(string)
			c.SucceededReason, _ = m["reason"].(string)
		}
	}
	if v, ok, _ := unstructured.NestedFieldNoCopy(live.Object, "status", "result", "exitCode"); ok {
		if n, ok := toInt32(v); ok {
			c.ExitCode = &n
		}
	}
	refs, _, _ := unstructured.NestedSlice(live.Object, "status", "execution", "references")
	for _, ri := range refs {
		if m, ok := ri.(map[string]any); ok {
			t, _ := m["type"].(string)
			id, _ := m["id"].(string)
			c.References = append(c.References, Reference{Type: t, ID: id})
		}
	}
	terminal := c.Succeeded == "True" || c.Succeeded == "False"
	switch {
	case a.Finished != nil:
		want := "False"
		if a.Finished.Succeeded {
			want = "True"
		}
		switch {
		case !terminal:
			mismatch("the journal's Finished note (#%d: %s) is not in the live status (Succeeded=%s/%s): the terminal status was not written (is a leader running?), or this read raced with it",
				a.FinishedSeq, DescribeFinished(*a.Finished), dashed(c.Succeeded), dashed(c.SucceededReason))
		case c.Succeeded != want:
			mismatch("live Succeeded=%s but the journal's Finished note (#%d) says Succeeded=%s (%s)", c.Succeeded, a.FinishedSeq, want, DescribeFinished(*a.Finished))
		case c.SucceededReason != a.Finished.Reason:
			mismatch("live Succeeded reason %s but the journal's Finished note (#%d) says %s", dashed(c.SucceededReason), a.FinishedSeq, dashed(a.Finished.Reason))
		}
		if terminal && !sameExit(c.ExitCode, a.Finished.ExitCode) {
			mismatch("live result.exitCode %s but the journal's Finished note (#%d) says %s", exitText(c.ExitCode), a.FinishedSeq, exitText(a.Finished.ExitCode))
		}
	case terminal:
		mismatch("live Succeeded=%s/%s is terminal but the journal has no Finished note for this Job", c.Succeeded, dashed(c.SucceededReason))
	case a.LastObservation != nil && a.LastObservation.State.Stopped() && a.LastObservation.State != StateNotFound:
		mismatch("the journal's last observation (#%d: %s) is terminal but live Succeeded=%s/%s: the projector has not decided the end (is a leader running?), or this read raced with it",
			a.LastObservationSeq, DescribeObservation(*a.LastObservation), dashed(c.Succeeded), dashed(c.SucceededReason))
	}
	for _, ref := range c.References {
		j := ""
		for _, jr := range a.References {
			if jr.Type == ref.Type {
				j = jr.ID
			}
		}
		switch {
		case j == "":
			mismatch("live status.execution.references has %s %s, which no outcome in the journal reported", ref.Type, ref.ID)
		case j != ref.ID:
			mismatch("live status.execution.references has %s %s but the journal's outcomes report %s %s: another execution", ref.Type, ref.ID, ref.Type, j)
		}
	}
	if a.TTL != nil && !c.Deleting {
		mismatch("the journal has a TTLExpired note (#%d) but the live Job is not being deleted: the TTL controller's delete did not happen, or this read raced with it", a.TTLSeq)
	}
	return c
}

func toInt32(v any) (int32, bool) {
	switch n := v.(type) {
	case int64:
		return int32(n), true
	case int32:
		return n, true
	case int:
		return int32(n), true
	case float64:
		return int32(n), true
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 32)
		return int32(i), err == nil
	}
	return 0, false
}

func sameExit(a, b *int32) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func exitText(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Summary is one line on a Job's state as its records (stream order) tell
// it, for `ayatori-journal list`: the Finished note's result and how the
// Job went ("deleted by TTL", "deleted"), or while it runs the last
// observed state. "" when the records say nothing of it.
func Summary(recs []journal.Record) string {
	a := AccountOf(recs)
	// A Delete of the execution that is not done (the backend is
	// unreachable) holds the Job's finalizer: it is being deleted.
	pending := a.DeleteSeq != 0 && !a.DeleteDone
	switch {
	case a.Finished != nil && a.TTL != nil && pending:
		return DescribeFinished(*a.Finished) + ", being deleted by TTL (its execution's Delete is not done)"
	case a.Finished != nil && a.TTL != nil:
		return DescribeFinished(*a.Finished) + ", deleted by TTL"
	case a.Finished != nil && pending:
		return DescribeFinished(*a.Finished) + ", being deleted (its execution's Delete is not done)"
	case a.Finished != nil && a.DeleteSeq != 0:
		return DescribeFinished(*a.Finished) + ", deleted"
	case a.Finished != nil:
		return DescribeFinished(*a.Finished)
	case a.LastObservation != nil:
		return DescribeObservation(*a.LastObservation)
	}
	return ""
}

// Lines are the human account of the comparison, one line each
// (`ayatori-journal replay --live`).
func (c *LiveComparison) Lines() []string {
	var out []string
	a := c.Journal
	switch {
	case c.Found:
		exit := "-"
		if c.ExitCode != nil {
			exit = fmt.Sprint(*c.ExitCode)
		}
		line := fmt.Sprintf("succeeded=%s reason=%s exitCode=%s references=%s", dashed(c.Succeeded), dashed(c.SucceededReason), exit, referencesText(c.References))
		if c.Deleting {
			line += " deleting"
		}
		out = append(out, line)
	case c.OtherUID != "":
		out = append(out, fmt.Sprintf("not found: the Job of that name is another object (uid %s)", c.OtherUID))
	default:
		out = append(out, "not found")
	}
	var j []string
	if a.Finished != nil {
		j = append(j, fmt.Sprintf("Finished #%d %s", a.FinishedSeq, DescribeFinished(*a.Finished)))
	} else {
		j = append(j, "no Finished note")
	}
	if a.LastObservation != nil {
		j = append(j, fmt.Sprintf("last observation #%d %s", a.LastObservationSeq, DescribeObservation(*a.LastObservation)))
	}
	if len(a.References) > 0 {
		j = append(j, "references "+referencesText(a.References))
	}
	if a.TTL != nil {
		j = append(j, fmt.Sprintf("TTLExpired #%d ttl=%ds", a.TTLSeq, a.TTL.TTLSecondsAfterFinished))
	}
	if a.DeleteSeq != 0 {
		j = append(j, fmt.Sprintf("Delete #%d (done=%t)", a.DeleteSeq, a.DeleteDone))
	}
	out = append(out, "journal: "+strings.Join(j, "; "))
	if c.Verdict != "" {
		out = append(out, c.Verdict)
	}
	return out
}

func referencesText(refs []Reference) string {
	if len(refs) == 0 {
		return "-"
	}
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = r.Type + "/" + r.ID
	}
	return strings.Join(parts, ",")
}
