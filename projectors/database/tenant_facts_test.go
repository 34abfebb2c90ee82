package database

import (
	"testing"

	baoexec "git.ddupan.top/panxiao81/ayatori/executors/openbao"
	pgexec "git.ddupan.top/panxiao81/ayatori/executors/postgresql"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The WriteCredential intent may generate a password only while the
// journal shows none was issued: not after a generating write, and not
// once a CreateRole was decided (even without an outcome).
func TestPasswordIssued(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		want  bool
	}{
		{name: "fresh", want: false},
		{name: "claimed only", steps: []step{ok(pgexec.OpCheckExtensions), ok(pgexec.OpClaimOwnership)}, want: false},
		{name: "write failed", steps: []step{ok(pgexec.OpClaimOwnership), {op: baoexec.OpWriteCredential, class: journal.Failed, reason: "DependencyUnavailable"}}, want: false},
		{name: "write reused an existing record", steps: []step{ok(pgexec.OpClaimOwnership),
			{op: baoexec.OpWriteCredential, class: journal.Succeeded, payload: baoexec.CredentialOutcome{Path: "p", Version: 1}}}, want: false},
		{name: "write generated", steps: []step{ok(pgexec.OpClaimOwnership),
			{op: baoexec.OpWriteCredential, class: journal.Succeeded, payload: baoexec.CredentialOutcome{Path: "p", Version: 1, Created: true}}}, want: true},
		{name: "create role pending", steps: []step{ok(pgexec.OpClaimOwnership), ok(baoexec.OpWriteCredential), {op: pgexec.OpCreateRole}}, want: true},
	}
	for _, c := range cases {
		st, _ := tenantHistory(c.steps...)
		if got := passwordIssued(st); got != c.want {
			t.Errorf("%s: passwordIssued = %v, want %v", c.name, got, c.want)
		}
	}
}
