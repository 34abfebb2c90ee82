package database

import (
	"git.ddupan.top/panxiao81/ayatori/journal"

	baoexec "git.ddupan.top/panxiao81/ayatori/executors/openbao"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
)

// passwordIssued reports whether the journal shows that the Tenant's
// password already exists somewhere it matters: a WriteCredential generated
// it, or a CreateRole was decided (the role may hold it, even if the
// outcome was never written). The WriteCredential intent then forbids
// generating a new one (specification §6, §8.3: PostgreSQL present and the
// OpenBao record absent is a Conflict, never a second password).
func passwordIssued(st *journal.State) bool {
	if st == nil {
		return false
	}
	for _, r := range st.Intents {
		if r.Operation == pgexec.OpCreateRole {
			return true
		}
	}
	for _, o := range st.Outcomes {
		if o.Operation != baoexec.OpWriteCredential || o.Result == nil || o.Result.Class != journal.Succeeded {
			continue
		}
		var out baoexec.CredentialOutcome
		if o.DecodePayload(&out) == nil && out.Created {
			return true
		}
	}
	return false
}
