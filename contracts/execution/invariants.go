package execution

import (
	"encoding/json"
	"fmt"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Rules `ayatori-journal verify` checks for every Job UID.
const (
	// RuleEnsureAfterTerminal: no Ensure intent after a terminal outcome.
	RuleEnsureAfterTerminal = "ensure-after-terminal-job-outcome"
	// RuleEnsureAfterCancel: no Ensure intent after a Cancel intent.
	RuleEnsureAfterCancel = "ensure-after-cancel"
	// RuleTTLBeforeFinished: the TTL controller's delete (a TTLExpired
	// note) comes only after the Job's Finished note.
	RuleTTLBeforeFinished = "ttl-delete-before-terminal"
	// RuleSecondExecution: at most one execution per Job UID — at most one
	// outcome reports Created, and every outcome names the same backend
	// resource for a reference type.
	RuleSecondExecution = "second-execution-for-job"
)

// Invariants are the rules `ayatori-journal verify` checks for every
// object of this domain, besides the journal's own.
var Invariants = []journal.Invariant{{
	Rule:        RuleEnsureAfterTerminal,
	Description: "no Ensure intent after a terminal Job outcome",
	New: func() journal.InvariantCheck {
		var terminalSeq uint64
		return func(r journal.Record) []journal.Violation {
			switch r.Type {
			case journal.TypeIntent:
				if terminalSeq != 0 && r.Operation == OpEnsure {
					return []journal.Violation{{Rule: RuleEnsureAfterTerminal, Sequences: []uint64{terminalSeq, r.Sequence},
						Detail: "Ensure intent after the Job reached a terminal outcome"}}
				}
			case journal.TypeOutcome:
				var o Observation
				if terminalSeq == 0 && json.Unmarshal(r.Payload, &o) == nil && o.Terminal {
					terminalSeq = r.Sequence
				}
			case journal.TypeNote:
				if terminalSeq == 0 && r.Operation == NoteFinished {
					terminalSeq = r.Sequence
				}
			}
			return nil
		}
	},
}, {
	Rule:        RuleTTLBeforeFinished,
	Description: "a TTL delete only after the Job's terminal result",
	New: func() journal.InvariantCheck {
		// Retention removes a UID's oldest records first: the Finished
		// note goes before the TTLExpired note written one TTL later. A
		// TTLExpired note that is the UID's first retained record says
		// nothing; one after earlier records of the Job (which retention
		// kept, so it kept the Finished note after them too) without a
		// Finished note is a violation.
		finished, earlier := false, false
		return func(r journal.Record) []journal.Violation {
			defer func() { earlier = true }()
			if r.Type != journal.TypeNote {
				return nil
			}
			switch r.Operation {
			case NoteFinished:
				finished = true
			case NoteTTLExpired:
				if !finished && earlier {
					return []journal.Violation{{Rule: RuleTTLBeforeFinished, Sequences: []uint64{r.Sequence},
						Detail: "TTL delete of a Job whose terminal result is not in the journal"}}
				}
			}
			return nil
		}
	},
}, {
	Rule:        RuleEnsureAfterCancel,
	Description: "no Ensure intent after a Cancel intent",
	New: func() journal.InvariantCheck {
		var cancelSeq uint64
		return func(r journal.Record) []journal.Violation {
			if r.Type != journal.TypeIntent {
				return nil
			}
			switch r.Operation {
			case OpCancel:
				if cancelSeq == 0 {
					cancelSeq = r.Sequence
				}
			case OpEnsure:
				if cancelSeq != 0 {
					return []journal.Violation{{Rule: RuleEnsureAfterCancel, Sequences: []uint64{cancelSeq, r.Sequence},
						Detail: "Ensure intent after a Cancel intent"}}
				}
			}
			return nil
		}
	},
}, {
	Rule:        RuleSecondExecution,
	Description: "at most one created execution per Job UID",
	New: func() journal.InvariantCheck {
		var created []uint64
		first := map[string]struct {
			id  string
			seq uint64
		}{}
		return func(r journal.Record) []journal.Violation {
			if r.Type != journal.TypeOutcome {
				return nil
			}
			var o Observation
			if json.Unmarshal(r.Payload, &o) != nil {
				return nil
			}
			var out []journal.Violation
			if o.Created {
				created = append(created, r.Sequence)
				if len(created) > 1 {
					out = append(out, journal.Violation{Rule: RuleSecondExecution, Sequences: append([]uint64(nil), created...),
						Detail: "more than one Ensure created an execution for this Job"})
				}
			}
			for _, ref := range o.References {
				prev, ok := first[ref.Type]
				if !ok {
					first[ref.Type] = struct {
						id  string
						seq uint64
					}{ref.ID, r.Sequence}
					continue
				}
				if prev.id != ref.ID {
					out = append(out, journal.Violation{Rule: RuleSecondExecution, Sequences: []uint64{prev.seq, r.Sequence},
						Detail: fmt.Sprintf("two different %s executions reported for this Job", ref.Type)})
				}
			}
			return out
		}
	},
}}
