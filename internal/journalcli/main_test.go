package journalcli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	clocktesting "k8s.io/utils/clock/testing"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	instanceUID = "7d3c0e52-1c1a-4b8e-9a53-000000000001"
	tenantUID   = "7d3c0e52-1c1a-4b8e-9a53-000000000002"
	otherUID    = "7d3c0e52-1c1a-4b8e-9a53-000000000003"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := NewRootCommand(&out, &errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err != nil {
		errb.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), ExitCode(err)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs from the output (run with -update to accept):\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

// populate records a small incident into a real stream: an Instance that
// became Ready, a Tenant whose CreateRole failed once and whose
// CreateDatabase is still pending, and a second Tenant.
func populate(t *testing.T, n *integration.NATS) {
	t.Helper()
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	ctx := context.Background()
	manager, err := journal.Open(ctx, nc, journal.Config{Actor: "ayatori-manager-0", Clock: clk, Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	executor, err := journal.Open(ctx, nc, journal.Config{Actor: "ayatori-manager-0/executor", Clock: clk, Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	inst := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLInstance", Name: "shared", UID: instanceUID, Generation: 1}
	ten := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "netbox", Name: "netbox", UID: tenantUID, Generation: 1}
	other := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "wiki", Name: "wiki", UID: otherUID, Generation: 2}
	step := func(d time.Duration) { clk.SetTime(clk.Now().Add(d)) }
	// Payloads are written as raw JSON: the recorded stream keeps the shape
	// of the records the first build wrote.
	do := func(o journal.ObjectRef, op string, attempt int, res *journal.Result, payload json.RawMessage) {
		t.Helper()
		in, err := journal.NewIntent(o, op, "", attempt, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := manager.Append(ctx, &in); err != nil {
			t.Fatal(err)
		}
		step(120 * time.Millisecond)
		if res == nil {
			return
		}
		out, err := journal.NewOutcome(in, *res, nil)
		if err != nil {
			t.Fatal(err)
		}
		out.Payload = payload
		if _, err := executor.Append(ctx, &out); err != nil {
			t.Fatal(err)
		}
		step(30 * time.Millisecond)
	}
	ok := &journal.Result{Class: journal.Succeeded}
	do(inst, "ObserveInstance", 1, ok, nil)
	do(inst, "BootstrapRegistry", 1, ok, nil)
	step(2 * time.Second)
	do(ten, "ClaimOwnership", 1, ok, nil)
	do(ten, "WriteCredential", 1, ok, json.RawMessage(`{"created":true}`))
	do(ten, "CreateRole", 1, &journal.Result{Class: journal.Failed, Reason: "DependencyUnavailable", Message: "PostgreSQL connection refused"}, nil)
	step(5 * time.Second)
	do(ten, "CreateRole", 2, ok, nil)
	do(other, "ClaimOwnership", 1, &journal.Result{Class: journal.Failed, Reason: "Conflict", Message: "database wiki is owned by another Tenant"}, nil)
	do(ten, "CreateDatabase", 1, nil, nil)
}

func TestGolden(t *testing.T) {
	n := integration.StartNATS(t)
	populate(t, n)
	fixture := filepath.Join("testdata", "fixture.ndjson")
	exported, stderr, code := run(t, append(liveArgs(n), "export")...)
	if code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	golden(t, "fixture.ndjson", exported)

	cases := []struct {
		name   string
		args   []string
		code   int
		golden string
	}{
		{"timeline", []string{"timeline", "--uid", tenantUID}, 0, "timeline.txt"},
		{"timeline by name json", []string{"timeline", "--kind", "PostgreSQLTenant", "-n", "netbox", "--name", "netbox", "-o", "json"}, 0, "timeline.json"},
		{"replay", []string{"replay", "--uid", tenantUID}, 0, "replay.txt"},
		{"replay json", []string{"replay", "--uid", instanceUID, "-o", "json"}, 0, "replay.json"},
		{"verify stream", []string{"verify"}, 0, "verify.txt"},
		{"verify one object json", []string{"verify", "--uid", tenantUID, "-o", "json"}, 0, "verify-uid.json"},
		{"list", []string{"list"}, 0, "list.txt"},
		{"list filtered", []string{"list", "--kind", "PostgreSQLTenant", "--result", "pending"}, 0, "list-pending.txt"},
		{"list json", []string{"list", "--result", "Failed", "-o", "json"}, 0, "list-failed.json"},
		{"export one object", []string{"export", "--uid", instanceUID}, 0, "export-instance.ndjson"},
		{"unknown object", []string{"timeline", "--kind", "PostgreSQLTenant", "-n", "x", "--name", "y"}, 3, ""},
		{"bad output", []string{"list", "-o", "yaml"}, 2, ""},
		{"negative timeout", []string{"list", "--timeout", "-1s"}, 2, ""},
		{"result is case-insensitive", []string{"list", "--result", "failed", "-o", "json"}, 0, "list-failed.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live, lerr, lcode := run(t, append(liveArgs(n), tc.args...)...)
			file, ferr, fcode := run(t, append(offline(fixture), tc.args...)...)
			if lcode != tc.code || fcode != tc.code {
				t.Fatalf("exit codes live=%d file=%d, want %d\n%s%s", lcode, fcode, tc.code, lerr, ferr)
			}
			if live != file {
				t.Fatalf("live and --from-file output differ:\n%s\n---\n%s", live, file)
			}
			if tc.golden != "" {
				golden(t, tc.golden, live)
			}
		})
	}
}

// TestVerifyCatchesEachViolation runs verify on a fixture that breaks every
// invariant once (the journal's own, the database and the execution
// domains'), with an undecodable message in the live stream too.
func TestVerifyCatchesEachViolation(t *testing.T) {
	n := integration.StartNATS(t)
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	s, err := journal.Open(ctx, nc, journal.Config{Actor: "forger", Clock: clk, Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	ten := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "a", Name: "a", UID: tenantUID, Generation: 1}
	job := journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ci", Name: "build", UID: otherUID, Generation: 1}
	app := func(r journal.Record) {
		t.Helper()
		clk.SetTime(clk.Now().Add(time.Second))
		if _, err := s.Append(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	mustIntent := func(o journal.ObjectRef, op string, attempt int) journal.Record {
		r, err := journal.NewIntent(o, op, "", attempt, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mustOutcome := func(in journal.Record, res journal.Result, payload string) journal.Record {
		r, err := journal.NewOutcome(in, res, nil)
		if err != nil {
			t.Fatal(err)
		}
		if payload != "" {
			r.Payload = json.RawMessage(payload)
		}
		return r
	}
	// Two password-creating writes for one Tenant.
	w1, w2 := mustIntent(ten, "WriteCredential", 1), mustIntent(ten, "WriteCredential", 2)
	app(w1)
	app(mustOutcome(w1, journal.Result{Class: journal.Succeeded}, `{"created":true}`))
	app(w2)
	app(mustOutcome(w2, journal.Result{Class: journal.Succeeded}, `{"created":true}`))
	// An outcome without intent.
	ghost := mustIntent(ten, "CreateRole", 1)
	app(mustOutcome(ghost, journal.Result{Class: journal.Succeeded}, ""))
	// One intent, two different results (a forged second outcome ID).
	cd := mustIntent(ten, "CreateDatabase", 1)
	app(cd)
	app(mustOutcome(cd, journal.Result{Class: journal.Succeeded}, ""))
	forged := mustOutcome(cd, journal.Result{Class: journal.Failed, Reason: "Conflict"}, "")
	forged.ID += "-forged"
	app(forged)
	// An Ensure after a terminal Job outcome.
	e1, e2 := mustIntent(job, "Ensure", 1), mustIntent(job, "Ensure", 2)
	app(e1)
	app(mustOutcome(e1, journal.Result{Class: journal.Succeeded}, `{"terminal":true}`))
	app(e2)
	// An Ensure after a Cancel (the Cancel's outcome is not terminal yet).
	jobObj := func(name, uid string) journal.ObjectRef {
		return journal.ObjectRef{Group: "execution.ayatori.ddupan.top", Kind: "Job", Namespace: "ci", Name: name, UID: uid, Generation: 1}
	}
	cj := jobObj("cancelled", "7d3c0e52-1c1a-4b8e-9a53-000000000004")
	ce1, cc, ce2 := mustIntent(cj, execution.OpEnsure, 1), mustIntent(cj, execution.OpCancel, 1), mustIntent(cj, execution.OpEnsure, 2)
	app(ce1)
	app(mustOutcome(ce1, journal.Result{Class: journal.Succeeded}, `{"terminal":false,"state":"Pending","created":true,"references":[{"type":"Job","id":"n-4"}]}`))
	app(cc)
	app(mustOutcome(cc, journal.Result{Class: journal.Succeeded}, `{"terminal":false,"state":"Stopping","references":[{"type":"Job","id":"n-4"}]}`))
	app(ce2)
	// A second created execution (another backend Job) for one Job UID.
	dj := jobObj("twice", "7d3c0e52-1c1a-4b8e-9a53-000000000005")
	de1, de2 := mustIntent(dj, execution.OpEnsure, 1), mustIntent(dj, execution.OpEnsure, 2)
	app(de1)
	app(mustOutcome(de1, journal.Result{Class: journal.Succeeded}, `{"terminal":false,"state":"Pending","created":true,"references":[{"type":"Job","id":"n-5"}]}`))
	app(de2)
	app(mustOutcome(de2, journal.Result{Class: journal.Succeeded}, `{"terminal":false,"state":"Pending","created":true,"references":[{"type":"Job","id":"n-5b"}]}`))
	// A TTL delete of a Job whose Finished note is not in the journal.
	tj := jobObj("early", "7d3c0e52-1c1a-4b8e-9a53-000000000006")
	te := mustIntent(tj, execution.OpEnsure, 1)
	app(te)
	app(mustOutcome(te, journal.Result{Class: journal.Succeeded}, `{"terminal":false,"state":"Running","created":true,"references":[{"type":"Job","id":"n-6"}]}`))
	app(journal.Record{ID: tj.UID + "/g1/note/TTLExpired/1", Type: journal.TypeNote, Operation: execution.NoteTTLExpired, Object: tj, Attempt: 1,
		Payload: json.RawMessage(`{"ttlSecondsAfterFinished":60}`)})
	// An undecodable message.
	m := nats.NewMsg("ayatori.journal.database." + tenantUID + ".note")
	m.Data = []byte("garbage")
	js, _ := jetstream.New(nc)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	// A forged intent (no proof) published with the manager's NATS
	// credentials, and the refusal an executor would answer it with.
	forgery, _ := journal.NewIntent(ten, "DropDatabase", "", 9, nil)
	forgery.Time, forgery.Actor = clk.Now(), "attacker"
	fm := nats.NewMsg("ayatori.journal.database." + tenantUID + ".intent")
	fm.Data, _ = json.Marshal(forgery)
	ack, err := js.PublishMsg(ctx, fm)
	if err != nil {
		t.Fatal(err)
	}
	refused := journal.Record{ID: journal.UntrustedIntentID(tenantUID, ack.Sequence) + "/outcome", Type: journal.TypeOutcome, Operation: "DropDatabase",
		Object: ten, Attempt: 9, CausationID: journal.UntrustedIntentID(tenantUID, ack.Sequence),
		Result: &journal.Result{Class: journal.Failed, Reason: journal.ReasonUntrustedIntent, Message: "not executed: the record has no proof"}}
	app(refused)

	out, _, code := run(t, append(liveArgs(n), "verify")...)
	if code != 1 {
		t.Fatalf("verify exit code %d, want 1\n%s", code, out)
	}
	golden(t, "verify-violations.txt", out)
	for _, rule := range []string{dbcontract.RuleSecondPasswordWrite, journal.RuleOutcomeWithoutIntent, journal.RuleConflictingOutcomes,
		execution.RuleEnsureAfterTerminal, execution.RuleEnsureAfterCancel, execution.RuleSecondExecution, execution.RuleTTLBeforeFinished,
		journal.RuleUndecodableRecord, "untrusted-record", journal.RuleUntrustedIntentRefused} {
		if !strings.Contains(out, rule) {
			t.Errorf("verify did not report %s", rule)
		}
	}
	// The same from an exported file.
	exported, _, _ := run(t, append(liveArgs(n), "export")...)
	path := filepath.Join(t.TempDir(), "violations.ndjson")
	if err := os.WriteFile(path, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	fileOut, _, fcode := run(t, append(offline(path), "verify")...)
	if fcode != 1 || fileOut != out {
		t.Fatalf("offline verify differs (exit %d):\n%s", fcode, fileOut)
	}
}

// TestForensicsIdentity: ayatori-journal says clearly when it has no
// credentials, when the server refuses them, and when the identity it
// connects as may not read (the manager's NKey with the reader's inbox).
func TestForensicsIdentity(t *testing.T) {
	n := integration.StartNATS(t)
	populate(t, n)
	base := []string{"--server", n.URL, "--tlsca", n.Auth.CAFile, "--timeout", "5s"}
	_, errOut, code := run(t, append(base, "verify")...)
	if code != 2 || !strings.Contains(errOut, "--nkey") || !strings.Contains(errOut, "no anonymous client") {
		t.Errorf("no credentials: exit %d, stderr %q", code, errOut)
	}
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	unknown := filepath.Join(t.TempDir(), "unknown.nk")
	if err := os.WriteFile(unknown, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(t, append(base, "--nkey", unknown, "verify")...)
	if code != 2 || !strings.Contains(errOut, "refused these credentials") {
		t.Errorf("unknown NKey: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = run(t, append(base, "--nkey", n.Auth.ManagerSeedFile, "verify")...)
	if code != 2 || !strings.Contains(errOut, "refused the request for this identity") {
		t.Errorf("the manager's NKey: exit %d, stderr %q", code, errOut)
	}
	if strings.Contains(errOut, string(seed)) {
		t.Error("a seed was printed")
	}
	// The read-only identity: every read verb.
	for _, args := range [][]string{{"verify"}, {"list"}, {"export"}, {"timeline", tenantUID}, {"replay", tenantUID}} {
		if out, errOut, code := run(t, append(liveArgs(n), args...)...); code != 0 || out == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// A file that export did not write is refused with exit status 2, not
// read as a journal with undecodable records.
func TestForeignFileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "foreign.ndjson")
	if err := os.WriteFile(path, []byte("{\"foo\": 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "--from-file", path, "verify")
	if code != 2 || !strings.Contains(errOut, "not an exported record") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = run(t, "--from-file", filepath.Join(t.TempDir(), "missing"), "list")
	if code != 2 {
		t.Fatalf("missing file: exit %d, stderr %q", code, errOut)
	}
}

// testSigner is the fixed journal signing key of the golden tests
// (testdata/test-signing-key.pem, made for these tests only): Ed25519
// signatures are deterministic, so the recorded streams, proofs included,
// are the same on every run.
func testSigner(t *testing.T) *journal.SigningKey {
	t.Helper()
	k, err := journal.LoadSigningKey(filepath.Join("testdata", "test-signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// trustedKeysFile holds testSigner's public key.
const trustedKeysFile = "testdata/test-trusted-keys.pem"

// liveArgs are the global flags that read n's journal as the read-only
// identity, checking proofs with the golden tests' key.
func liveArgs(n *integration.NATS) []string {
	return append(append([]string{"--server", n.URL}, n.Auth.ReaderArgs()...), "--trusted-keys", trustedKeysFile)
}

// offline reads an exported file, checking proofs with the same key.
func offline(path string) []string {
	return []string{"--trusted-keys", trustedKeysFile, "--from-file", path}
}
