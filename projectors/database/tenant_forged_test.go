package database_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestForgedIntentsNotExecuted replays the attack on the journal on the
// real stack. A client without credentials is refused by NATS. A client
// holding the manager's own NATS credentials (a leaked one) publishes, for
// a Ready Tenant with deletionPolicy Retain, copies of its own intents
// turned into DropDatabase, DropRole, DestroyCredential and
// DeleteExternalSecret, and VerifyLogin intents whose endpoint is a
// listener of the attacker's; then, as if it also held the manager's
// signing key, the same signed. Nothing is executed: the database, the role,
// the KV record and the ExternalSecret are there, the Tenant stays Ready, the
// listener gets no connection; every forged intent has one
// Failed/UntrustedIntent outcome, and `ayatori-journal verify` reports them.
func TestForgedIntentsNotExecuted(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	const namespace, name = "forged", "forgedvictim"
	newTenant(t, s, namespace, name, nil)
	ten := waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 2*time.Minute)
	uid := string(ten.UID)
	_, kvVersion := kvPassword(t, s, namespace, name)

	// Where a forged VerifyLogin would send the Tenant's password.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	// No credentials: no connection.
	if nc, err := nats.Connect(s.NATSURL, nats.RootCAs(s.NATSAuth.CAFile), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("NATS admitted a client without credentials")
	}
	// The manager's NATS credentials.
	nc, err := s.ConnectNATS(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store, err := journal.OpenExisting(ctx, nc, journal.Config{Trust: integration.JournalTrust(t)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.Read(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]journal.Record{}
	for _, r := range recs {
		if r.Type == journal.TypeIntent {
			last[r.Operation] = r
		}
	}
	for _, op := range []string{dbcontract.OpCreateDatabase, dbcontract.OpWriteCredential, dbcontract.OpEnsureExternalSecret, dbcontract.OpVerifyLogin} {
		if _, ok := last[op]; !ok {
			t.Fatalf("the Tenant's journal has no %s intent", op)
		}
	}
	stolen := s.JournalKeys.Key
	attempt := 90
	forge := func(from, op string, key *journal.SigningKey, edit func(*journal.Record)) uint64 {
		t.Helper()
		r := last[from]
		attempt++
		r.Operation, r.Attempt, r.Sequence, r.Proof = op, attempt, 0, nil
		r.ID = journal.IntentID(uid, r.Object.Generation, op, "", attempt)
		r.Time, r.Actor = time.Now().UTC(), "attacker"
		if edit != nil {
			edit(&r)
		}
		if key != nil {
			if err := r.Sign(key); err != nil {
				t.Fatal(err)
			}
		}
		data, _ := json.Marshal(r)
		m := nats.NewMsg("ayatori.journal.database." + uid + ".intent")
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, r.ID)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	toListener := func(sslMode string) func(*journal.Record) {
		return func(r *journal.Record) {
			var in dbcontract.TenantIntent
			_ = r.DecodePayload(&in)
			in.Endpoint.Host, in.Endpoint.HostAddr, in.Endpoint.Port, in.Endpoint.SSLMode = "127.0.0.1", "127.0.0.1", port, sslMode
			_ = r.SetPayload(in)
		}
	}
	var forged []uint64
	for _, key := range []*journal.SigningKey{nil, stolen} {
		forged = append(forged,
			forge(dbcontract.OpCreateDatabase, dbcontract.OpDropDatabase, key, nil),
			forge(dbcontract.OpCreateDatabase, dbcontract.OpDropRole, key, nil),
			forge(dbcontract.OpWriteCredential, dbcontract.OpDestroyCredential, key, nil),
			forge(dbcontract.OpEnsureExternalSecret, dbcontract.OpDeleteExternalSecret, key, nil),
			forge(dbcontract.OpVerifyLogin, dbcontract.OpVerifyLogin, key, toListener("disable")),
			forge(dbcontract.OpVerifyLogin, dbcontract.OpVerifyLogin, key, toListener("require")))
	}

	// One Failed/UntrustedIntent outcome each.
	deadline := time.Now().Add(time.Minute)
	var refused []journal.Record
	for time.Now().Before(deadline) {
		refused = refused[:0]
		recs, err := store.Read(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Type == journal.TypeOutcome && r.Result.Reason == journal.ReasonUntrustedIntent {
				refused = append(refused, r)
			}
		}
		if len(refused) >= len(forged) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(refused) != len(forged) {
		t.Fatalf("%d UntrustedIntent outcomes for %d forged intents", len(refused), len(forged))
	}
	for _, r := range refused {
		t.Logf("%s: %s", r.Operation, r.Result.Message)
		if r.Result.Class != journal.Failed {
			t.Errorf("%s: %s", r.ID, r.Result)
		}
	}
	// Nothing happened.
	time.Sleep(2 * time.Second)
	if n := dialled.Load(); n != 0 {
		t.Fatalf("the executor connected %d times to the forged endpoint", n)
	}
	db, role := superQuery[bool](t, s, "postgres", "SELECT EXISTS(SELECT FROM pg_database WHERE datname = $1)", name),
		superQuery[bool](t, s, "postgres", "SELECT EXISTS(SELECT FROM pg_roles WHERE rolname = $1)", name)
	if !db || !role {
		t.Fatalf("database exists %v, role exists %v", db, role)
	}
	if _, v := kvPassword(t, s, namespace, name); v != kvVersion {
		t.Fatalf("KV record version %d, was %d", v, kvVersion)
	}
	if _, ok := getES(t, s, namespace, ten.Spec.InstanceRef+"-"+name+"-postgresql"); !ok {
		t.Fatal("the ExternalSecret is gone")
	}
	waitTenant(t, s, namespace, name, metav1.ConditionTrue, "Ready", 10*time.Second)
	if log, err := os.ReadFile(s.ManagerLog); err != nil || !strings.Contains(string(log), "refused an intent the manager did not write") {
		t.Errorf("the manager did not log the refusals (%v)", err)
	}
	// The forensics reader reports every forged record.
	out, err := exec.CommandContext(ctx, s.JournalBin, append(s.JournalReaderArgs(), "verify", uid)...).CombinedOutput()
	if code := exitCodeOf(err); code != 1 || strings.Count(string(out), "untrusted-intent-refused") != len(forged) ||
		strings.Count(string(out), "untrusted-record") != len(forged)/2 {
		t.Fatalf("verify exit %d:\n%s", code, out)
	}
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
