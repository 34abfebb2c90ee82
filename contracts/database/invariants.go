package database

import (
	"encoding/json"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// RuleSecondPasswordWrite: at most one password-creating WriteCredential
// per Tenant UID (a Succeeded outcome with payload {"created": true}).
const RuleSecondPasswordWrite = "second-password-creating-write"

// Invariants are the rules `ayatori-journal verify` checks for every
// object of this domain, besides the journal's own.
var Invariants = []journal.Invariant{{
	Rule:        RuleSecondPasswordWrite,
	Description: "at most one password-creating credential write per Tenant UID",
	New: func() journal.InvariantCheck {
		var writes []uint64
		return func(r journal.Record) []journal.Violation {
			if r.Type != journal.TypeOutcome || r.Operation != OpWriteCredential || r.Result.Class != journal.Succeeded {
				return nil
			}
			var p CredentialOutcome
			if json.Unmarshal(r.Payload, &p) != nil || !p.Created {
				return nil
			}
			writes = append(writes, r.Sequence)
			if len(writes) < 2 {
				return nil
			}
			return []journal.Violation{{Rule: RuleSecondPasswordWrite, Sequences: append([]uint64(nil), writes...),
				Detail: "more than one password-creating credential write for this Tenant"}}
		}
	},
}}

func init() {
	for _, inv := range Invariants {
		journal.RegisterInvariant(Domain, inv)
	}
}
