package database

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
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
		{name: "claimed only", steps: []step{ok(dbcontract.OpCheckExtensions), ok(dbcontract.OpClaimOwnership)}, want: false},
		{name: "write failed", steps: []step{ok(dbcontract.OpClaimOwnership), {op: dbcontract.OpWriteCredential, class: journal.Failed, reason: "DependencyUnavailable"}}, want: false},
		{name: "write reused an existing record", steps: []step{ok(dbcontract.OpClaimOwnership),
			{op: dbcontract.OpWriteCredential, class: journal.Succeeded, payload: dbcontract.CredentialOutcome{Path: "p", Version: 1}}}, want: false},
		{name: "write generated", steps: []step{ok(dbcontract.OpClaimOwnership),
			{op: dbcontract.OpWriteCredential, class: journal.Succeeded, payload: dbcontract.CredentialOutcome{Path: "p", Version: 1, Created: true}}}, want: true},
		{name: "create role pending", steps: []step{ok(dbcontract.OpClaimOwnership), ok(dbcontract.OpWriteCredential), {op: dbcontract.OpCreateRole}}, want: true},
	}
	for _, c := range cases {
		st, _ := tenantHistory(c.steps...)
		if got := passwordIssued(st); got != c.want {
			t.Errorf("%s: passwordIssued = %v, want %v", c.name, got, c.want)
		}
	}
}

// A changed Instance endpoint is drift against the last credential write;
// the same endpoint is not.
func TestCredentialDrift(t *testing.T) {
	in := dbcontract.CredentialIntent{Mount: "kv", Path: "p", Username: "app", Database: "app", Host: "db", HostAddr: "192.0.2.1", Port: 5432, SSLMode: "verify-full"}
	st, _ := tenantHistory(ok(dbcontract.OpClaimOwnership), step{op: dbcontract.OpWriteCredential, class: journal.Succeeded, payload: dbcontract.CredentialOutcome{Version: 3}})
	// tenantHistory writes intents without payload: add one with in.
	rec, _ := journal.NewIntent(journal.ObjectRef{UID: "t-1", Generation: 1}, dbcontract.OpWriteCredential, "", 9, in)
	rec.Sequence = 100
	st.Intents[rec.ID] = rec
	if got, v := lastCredential(st); got == nil || got.Host != "db" || v != 3 {
		t.Fatalf("lastCredential = %+v, %d", got, v)
	}
	if d := credentialDrift(st, in); len(d) != 0 {
		t.Fatalf("no change reported as drift: %v", d)
	}
	moved := in
	moved.HostAddr, moved.Port = "192.0.2.2", 6432
	if d := credentialDrift(st, moved); len(d) != 2 || d[0] != "hostaddr" || d[1] != "port" {
		t.Fatalf("drift = %v", d)
	}
	if d := credentialDrift(journal.NewState(), moved); d != nil {
		t.Fatalf("drift without a credential write: %v", d)
	}
}

// KV path segments stay within OpenBao's storage limit for every Tenant
// name the API accepts; short names are kept.
func TestKVSegment(t *testing.T) {
	if kvSegment("app") != "app" || kvSegment(strings.Repeat("a", 100)) != strings.Repeat("a", 100) {
		t.Fatal("a short name was changed")
	}
	a, b := kvSegment(strings.Repeat("m.", 116)+"235"), kvSegment(strings.Repeat("m.", 116)+"236")
	if len(a) > maxKVSegment || a == b || strings.HasSuffix(a, ".") || strings.Contains(a, ".-") {
		t.Fatalf("kvSegment: %q %q", a, b)
	}
	if got := len(kvSegment(strings.Repeat("x", 253))); got != maxKVSegment {
		t.Fatalf("253-character name: %d characters", got)
	}
}

// The longest names the API accepts pass validation except where a
// derived name cannot exist (an Event name over 253 characters).
func TestValidateTenantLongNames(t *testing.T) {
	r := &TenantReconciler{Config: TenantConfig{KVMount: "kv", BasePath: "postgresql-tenants", ConsumerAddress: "http://bao", StoreName: "s"}}
	tn := func(inst, name string) *databasev1alpha1.PostgreSQLTenant {
		return &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: strings.Repeat("n", 63), Name: name},
			Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: inst, Database: "db", LoginRole: "role"}}
	}
	for _, c := range []struct {
		inst, name string
		ok         bool
	}{
		{"shared", strings.Repeat("a", 64), true},
		{"shared", strings.Repeat("m.", 116) + "235", true},
		{strings.Repeat("i", 177), strings.Repeat("q", 64), true},
		{"x", strings.Repeat("a", 236), true},
		{"x", strings.Repeat("a", 237), false},
	} {
		x := tn(c.inst, c.name)
		errs := validateTenant(x, r.names(x))
		if (len(errs) == 0) != c.ok {
			t.Errorf("instanceRef %d, name %d characters: errors %v, want ok=%v", len(c.inst), len(c.name), errs, c.ok)
		}
	}
}

// TestPasswordIssuedChain: a CreateRole of a chain that was skipped, or
// will be because a step before it failed, never held a password; one
// that ran, failed for its own reason, or may still run did (or may).
func TestPasswordIssuedChain(t *testing.T) {
	obj := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: "app", UID: "t-1", Generation: 1}
	var recs []journal.Record
	add := func(r journal.Record) journal.Record {
		r.Sequence = uint64(len(recs) + 1)
		recs = append(recs, r)
		return r
	}
	intentAfter := func(op string, after *journal.Record) journal.Record {
		r, _ := journal.NewIntent(obj, op, "", 1, nil)
		if after != nil {
			r.After = after.ID
		}
		return add(r)
	}
	outcome := func(in journal.Record, class journal.ResultClass, reason string) {
		o, _ := journal.NewOutcome(in, journal.Result{Class: class, Reason: reason}, nil)
		add(o)
	}
	cred := intentAfter(dbcontract.OpWriteCredential, nil)
	role := intentAfter(dbcontract.OpCreateRole, &cred)
	check := func(want bool, what string) {
		t.Helper()
		if got := passwordIssued(journal.Fold(recs)); got != want {
			t.Errorf("%s: passwordIssued %v, want %v", what, got, want)
		}
	}
	check(true, "CreateRole pending, its dependency pending")
	outcome(cred, journal.Failed, "DependencyUnavailable")
	check(false, "CreateRole pending, its dependency failed")
	outcome(role, journal.Failed, journal.ReasonDependencyFailed)
	check(false, "CreateRole skipped")
	r2, _ := journal.NewIntent(obj, dbcontract.OpCreateRole, "", 2, nil)
	role2 := add(r2)
	check(true, "CreateRole decided again, pending")
	outcome(role2, journal.Failed, "DependencyUnavailable")
	check(true, "CreateRole failed for its own reason")
}
