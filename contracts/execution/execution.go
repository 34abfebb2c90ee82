// Package execution is the contract of the execution domain
// (execution.ayatori.ddupan.top). Today it holds what the journal checks
// for Jobs: the Ensure operation, the terminal marker of outcome payloads
// and the invariant "no Ensure after a terminal outcome". Operations,
// payload types and reasons of the domain go here, like
// contracts/database, and it imports no backend SDK.
package execution

import (
	"encoding/json"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Domain is the journal domain of this contract (subject token).
const Domain = "execution"

// OpEnsure makes a Job's execution exist on its backend.
const OpEnsure = "Ensure"

// TerminalOutcome is the part of an execution outcome payload the
// invariant reads: Terminal is true once a Job reached a terminal state.
type TerminalOutcome struct {
	Terminal bool `json:"terminal"`
}

// RuleEnsureAfterTerminal: no Ensure intent after a terminal Job outcome.
const RuleEnsureAfterTerminal = "ensure-after-terminal-job-outcome"

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
				var term TerminalOutcome
				if terminalSeq == 0 && json.Unmarshal(r.Payload, &term) == nil && term.Terminal {
					terminalSeq = r.Sequence
				}
			}
			return nil
		}
	},
}}

func init() {
	for _, inv := range Invariants {
		journal.RegisterInvariant(Domain, inv)
	}
}
