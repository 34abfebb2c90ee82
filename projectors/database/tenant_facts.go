package database

import (
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// passwordIssued reports whether the journal shows that the Tenant's
// password already exists somewhere it matters: a WriteCredential generated
// it, or a CreateRole was decided (the role may hold it, even if the
// outcome was never written) that has run or may still run: a CreateRole
// of a chain that was skipped, or will be because a step before it did
// not succeed (wontRun), never held a password. The WriteCredential intent then forbids
// generating a new one (specification §6, §8.3: PostgreSQL present and the
// OpenBao record absent is a Conflict, never a second password).
func passwordIssued(st *journal.State) bool {
	if st == nil {
		return false
	}
	for _, r := range st.Intents {
		if r.Operation == dbcontract.OpCreateRole && !wontRun(st, r) {
			return true
		}
	}
	for _, o := range st.Outcomes {
		if o.Operation != dbcontract.OpWriteCredential || o.Result == nil || o.Result.Class != journal.Succeeded {
			continue
		}
		var out dbcontract.CredentialOutcome
		if o.DecodePayload(&out) == nil && out.Created {
			return true
		}
	}
	return false
}

// lastCredential returns the payload of the latest WriteCredential intent
// and the KV version of the latest successful WriteCredential outcome.
func lastCredential(st *journal.State) (in *dbcontract.CredentialIntent, version int) {
	if st == nil {
		return nil, 0
	}
	var li, lo *journal.Record
	for _, r := range st.Intents {
		if r.Operation == dbcontract.OpWriteCredential && (li == nil || r.Sequence > li.Sequence) {
			r := r
			li = &r
		}
	}
	for _, o := range st.Outcomes {
		if o.Operation == dbcontract.OpWriteCredential && o.Result != nil && o.Result.Class == journal.Succeeded && (lo == nil || o.Sequence > lo.Sequence) {
			o := o
			lo = &o
		}
	}
	if li != nil {
		var p dbcontract.CredentialIntent
		if li.DecodePayload(&p) == nil {
			in = &p
		}
	}
	if lo != nil {
		var out dbcontract.CredentialOutcome
		if lo.DecodePayload(&out) == nil {
			version = out.Version
		}
	}
	return in, version
}

// credentialDrift names the connection fields of the last credential
// write that differ from want (the Instance endpoint or the Tenant's names
// changed since): the chain runs again so the KV record (a new version,
// same password) and the projected Secret follow.
func credentialDrift(st *journal.State, want dbcontract.CredentialIntent) []string {
	last, _ := lastCredential(st)
	if last == nil {
		return nil
	}
	have, exp := dbcontract.ConnectionFields(*last), dbcontract.ConnectionFields(want)
	var out []string
	for _, k := range []string{"username", "database", "host", "hostaddr", "port", "sslmode"} {
		if have[k] != exp[k] {
			out = append(out, k)
		}
	}
	return out
}

// maxKVSegment is dbcontract.MaxKVSegment.
const maxKVSegment = dbcontract.MaxKVSegment

// kvSegment is dbcontract.KVSegment.
func kvSegment(name string) string { return dbcontract.KVSegment(name) }

// wontRun reports whether intent in never ran and never will: it was
// skipped (Failed/DependencyFailed), or it has no outcome yet and the
// intent it is ordered after (journal.Record.After), or one before that,
// ended without success, so the consumer will skip it.
func wontRun(st *journal.State, in journal.Record) bool {
	for depth := 0; depth < 64; depth++ {
		if out, ok := st.OutcomeOf(in.ID); ok {
			return depth == 0 && out.Result.Class == journal.Failed && out.Result.Reason == journal.ReasonDependencyFailed ||
				depth > 0 && out.Result.Class != journal.Succeeded
		}
		if in.After == "" {
			return false
		}
		dep, ok := intentByID(st, in.After)
		if !ok {
			return true // not in the journal: the consumer skips it
		}
		in = dep
	}
	return false
}

// intentByID returns the intent with this ID.
func intentByID(st *journal.State, id string) (journal.Record, bool) {
	for _, r := range st.Intents {
		if r.ID == id {
			return r, true
		}
	}
	return journal.Record{}, false
}
