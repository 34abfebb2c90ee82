package database

import (
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
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
		if r.Operation == dbcontract.OpCreateRole {
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
