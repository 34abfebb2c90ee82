package database

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Every operation has its intent payload registered under this domain.
func TestPayloadsRegistered(t *testing.T) {
	reg := strings.Join(journal.RegisteredPayloads(), "\n")
	ops := append(append(append([]string(nil), PostgreSQLOperations...), OpenBaoOperations...), ExternalSecretsOperations...)
	for _, op := range ops {
		if !strings.Contains(reg, Domain+"/"+op+"/intent -> ") {
			t.Errorf("no intent payload registered for %s/%s", Domain, op)
		}
	}
	if !strings.Contains(reg, Domain+"/"+NoteDeletionStarted+"/note -> ") {
		t.Errorf("no payload registered for the %s note", NoteDeletionStarted)
	}
}

func TestSecondPasswordWrite(t *testing.T) {
	tenant := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "a", Name: "a", UID: "u1", Generation: 1}
	job := journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "a", Name: "a", UID: "u2", Generation: 1}
	build := func(obj journal.ObjectRef, payloads ...string) []journal.Record {
		var recs []journal.Record
		for i, p := range payloads {
			in, err := journal.NewIntent(obj, OpWriteCredential, "", i+1, nil)
			if err != nil {
				t.Fatal(err)
			}
			in.Sequence = uint64(len(recs) + 1)
			recs = append(recs, in)
			out, _ := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, nil)
			out.Payload = json.RawMessage(p)
			out.Sequence = uint64(len(recs) + 1)
			recs = append(recs, out)
		}
		return recs
	}
	created, reused := `{"path":"p","version":1,"created":true}`, `{"path":"p","version":1,"created":false}`
	cases := []struct {
		recs []journal.Record
		want string // sequences of the violation; "" none
	}{
		{build(tenant, created), ""},
		{build(tenant, created, reused, reused), ""},
		{build(tenant, created, created), "[2 4]"},
		{build(tenant, created, reused, created, created), "[2 6 8]"},
		{build(tenant, `{"created":true}`, `{"created":true}`), "[2 4]"}, // records of the first build
		{build(job, created, created), ""},                               // another domain
	}
	for i, c := range cases {
		var got []string
		for _, v := range journal.Verify(c.recs, nil) {
			if v.Rule == RuleSecondPasswordWrite {
				got = append(got, fmt.Sprint(v.Sequences))
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("case %d: violations %v, want %q", i, got, c.want)
		}
	}
}
