package journalcli

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// forgedUID is the UID a keyless publisher makes up for a record that
// names the real Tenant netbox/netbox.
const forgedUID = "7d3c0e52-1c1a-4b8e-9a53-0000000000ff"

// TestForgedRecordsMisleadNoRead: with --trusted-keys, records published
// with NATS credentials but without the signing key (one of a newer schema
// version on a real object's subject, one naming a real object's kind and
// name under another UID, later than its records) stop no read, decide no
// name, and show in no followed timeline: each is reported by verify as an
// untrusted record, live and from an export. The manager's own newer record
// (a valid message proof) still stops a read.
func TestForgedRecordsMisleadNoRead(t *testing.T) {
	n := integration.StartNATS(t)
	populate(t, n)
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	publish := func(subject string, r journal.Record, proof bool) uint64 {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data, _ = json.Marshal(r)
		if proof {
			m.Header.Set(journal.MessageProofHeader, testMessageProof(t, subject, m.Data))
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	ten := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "netbox", Name: "netbox", UID: tenantUID, Generation: 1}
	newer, _ := journal.NewIntent(ten, "DropDatabase", "", 1, nil)
	newer.SchemaVersion, newer.Time, newer.Actor = journal.SchemaVersion+1, time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC), "attacker"
	newerSeq := publish("ayatori.journal.database."+tenantUID+".intent", newer, false)
	impostor := ten
	impostor.UID = forgedUID
	byName, _ := journal.NewIntent(impostor, "ClaimOwnership", "", 1, nil)
	byName.Time, byName.Actor = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), "attacker"
	byNameSeq := publish("ayatori.journal.database."+forgedUID+".intent", byName, false)
	// A record the manager signed, its stored bytes copied onto the same
	// UID's subject of another type and of another domain: its proof
	// verifies, but it is not where the manager put it.
	stream, err := js.Stream(ctx, journal.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := stream.GetLastMsgForSubject(ctx, "ayatori.journal.database."+tenantUID+".outcome")
	if err != nil {
		t.Fatal(err)
	}
	var copies []uint64
	for _, subject := range []string{"ayatori.journal.database." + tenantUID + ".note", "ayatori.journal.execution." + tenantUID + ".outcome"} {
		ack, err := js.Publish(ctx, subject, signed.Data)
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, ack.Sequence)
	}
	// A forged intent on another UID's subject, which an executor refused
	// (its refusal names the subject's UID, not the one the record
	// claims), and a forger's own "refusal" of the impostor intent.
	s, err := journal.Open(ctx, nc, journal.Config{Actor: "ayatori-manager-0", Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	const subjectUID = "7d3c0e52-1c1a-4b8e-9a53-0000000000fe"
	misplacedSeq := publish("ayatori.journal.database."+subjectUID+".intent", byName, false)
	// The refusal names the object the forged intent claims (the real
	// Tenant's kind and name), on the subject's UID, as an executor's does.
	claimed := byName.Object
	claimed.UID = subjectUID
	refusal, err := journal.NewOutcome(journal.Record{ID: journal.UntrustedIntentID(subjectUID, misplacedSeq), Operation: "ClaimOwnership", Object: claimed, Attempt: 1},
		journal.Result{Class: journal.Failed, Reason: journal.ReasonUntrustedIntent, Message: "not executed"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, &refusal); err != nil {
		t.Fatal(err)
	}
	fakeRefusal, _ := journal.NewOutcome(journal.Record{ID: journal.UntrustedIntentID(forgedUID, byNameSeq), Operation: "ClaimOwnership", Object: impostor, Attempt: 1},
		journal.Result{Class: journal.Failed, Reason: journal.ReasonUntrustedIntent, Message: "not executed"}, nil)
	fakeRefusal.Actor = "attacker"
	publish("ayatori.journal.database."+forgedUID+".outcome", fakeRefusal, false)

	// Bytes no reader can decode on the real Tenant's intent subject, and
	// an executor's answer to them (Unknown/unknown on the Tenant's UID,
	// later than its records): the Tenant keeps its name.
	garbage, err := js.Publish(ctx, "ayatori.journal.database."+tenantUID+".intent", []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	undecodable, err := journal.NewOutcome(journal.Record{ID: journal.UndecodableIntentID(tenantUID, garbage.Sequence), Operation: "Unknown", Attempt: 1,
		Object: journal.ObjectRef{Group: "database", Kind: "Unknown", Name: "unknown", UID: tenantUID}},
		journal.Result{Class: journal.Failed, Reason: journal.ReasonUndecodableIntent, Message: "could not be decoded"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	answered, err := s.Append(ctx, &undecodable)
	if err != nil {
		t.Fatal(err)
	}
	followFrom := answered.Sequence

	out, errOut, code := run(t, append(liveArgs(n), "verify")...)
	if code != 1 {
		t.Fatalf("verify: exit %d, want 1 (violations)\n%s%s", code, out, errOut)
	}
	// untrustedRow is verify's untrusted-record line for seq ("": none).
	untrustedRow := func(out string, seq uint64) string {
		for line := range strings.SplitSeq(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "untrusted-record" && f[1] == strconv.FormatUint(seq, 10) {
				return line
			}
		}
		return ""
	}
	untrustedRows := func(out string) []string {
		var rows []string
		for _, seq := range append([]uint64{newerSeq, byNameSeq, misplacedSeq}, copies...) {
			if untrustedRow(out, seq) == "" {
				rows = append(rows, strconv.FormatUint(seq, 10))
			}
		}
		return rows
	}
	if missing := untrustedRows(out); len(missing) > 0 || !strings.Contains(out, "schema version 2") {
		t.Errorf("verify does not report sequences %v as untrusted records, or the newer one's schema version:\n%s", missing, out)
	}
	refusedRow := func(out string, seq uint64) bool {
		return strings.Contains(untrustedRow(out, seq), "refused by an executor")
	}
	if !refusedRow(out, misplacedSeq) || refusedRow(out, byNameSeq) {
		t.Errorf("verify: the executor's refusal of #%d is not shown, or the forger's of #%d is:\n%s", misplacedSeq, byNameSeq, out)
	}
	exported, errOut, code := run(t, append(liveArgs(n), "export")...)
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	path := filepath.Join(t.TempDir(), "journal.ndjson")
	if err := os.WriteFile(path, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	if fileOut, errOut, fcode := run(t, append(offline(path), "verify")...); fcode != 1 || len(untrustedRows(fileOut)) > 0 {
		t.Errorf("offline verify: exit %d, want 1 with the same untrusted records:\n%s%s", fcode, fileOut, errOut)
	}
	for _, args := range [][]string{{"timeline", tenantUID}, {"timeline", "--kind", "PostgreSQLTenant", "netbox/netbox"}, {"replay", "--kind", "PostgreSQLTenant", "netbox/netbox"}, {"list"}} {
		out, errOut, code := run(t, append(liveArgs(n), args...)...)
		if code != 0 || strings.Contains(out+errOut, forgedUID) || strings.Contains(out+errOut, subjectUID) || strings.Contains(out, "attacker") {
			t.Errorf("%v: exit %d, or a forged record shown:\n%s%s", args, code, out, errOut)
		}
		if args[0] == "list" && (!strings.Contains(out, tenantUID) || strings.Contains(out, "Unknown")) {
			t.Errorf("list does not show the Tenant by its name:\n%s", out)
		}
		if args[0] == "timeline" && (!strings.Contains(out, "CreateDatabase") || strings.Count(out, "WriteCredential") != 1) {
			t.Errorf("%v does not show the real Tenant, or shows a copied record:\n%s", args, out)
		}
	}

	// The forged UID has no trusted records: nothing to show.
	for _, verb := range []string{"timeline", "replay"} {
		if out, errOut, code := run(t, append(liveArgs(n), verb, forgedUID)...); code != 3 || !strings.Contains(errOut, "no trusted records") {
			t.Errorf("%s of the forged UID: exit %d, want 3:\n%s%s", verb, code, out, errOut)
		}
	}

	// A followed timeline gets the manager's records, the others as
	// untrusted, and the manager's own newer record as newer (timeline
	// stops there).
	g := Source{Server: n.URL, NKey: n.Auth.ReaderSeedFile, TLSCA: n.Auth.CAFile, TrustedKeys: trustedKeysFile}.options()
	src, err := g.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer src.close()
	type delivery struct {
		r   journal.Record
		err error
	}
	fctx, cancel := context.WithCancel(ctx)
	got := make(chan delivery, 8)
	followed := make(chan error, 1)
	go func() {
		followed <- src.follow(fctx, tenantUID, followFrom, func(r journal.Record, err error) { got <- delivery{r, err} })
	}()
	forgedNote := journal.Record{ID: tenantUID + "/g1/note/Forged/1", Type: journal.TypeNote, Operation: "Forged", Object: ten, Attempt: 1, SchemaVersion: journal.SchemaVersion, Actor: "attacker", Time: time.Now().UTC()}
	publish("ayatori.journal.database."+tenantUID+".note", forgedNote, false)
	publish("ayatori.journal.database."+tenantUID+".intent", newer, false)
	real, _ := journal.NewIntent(ten, "CreateDatabase", "", 2, nil)
	if _, err := s.Append(ctx, &real); err != nil {
		t.Fatal(err)
	}
	genuine, _ := journal.NewIntent(ten, "DropDatabase", "", 3, nil)
	genuine.SchemaVersion, genuine.Time = journal.SchemaVersion+1, time.Now().UTC()
	publish("ayatori.journal.database."+tenantUID+".intent", genuine, true)
	for i, want := range []string{"untrusted", "untrusted", "", "newer"} {
		select {
		case d := <-got:
			class := ""
			switch {
			case errors.Is(d.err, journal.ErrUntrusted) && !errors.Is(d.err, journal.ErrNewerSchema):
				class = "untrusted"
			case errors.Is(d.err, journal.ErrNewerSchema) && !errors.Is(d.err, journal.ErrUntrusted):
				class = "newer"
			case d.err != nil:
				class = d.err.Error()
			}
			if class != want || want == "" && d.r.ID != real.ID {
				t.Errorf("follow: delivery %d is %s (%q, %v), want %q", i, d.r.ID, class, d.err, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("follow: delivery %d missing", i)
		}
	}
	cancel()
	<-followed

	// The manager's own newer record stops a read: this build can not tell
	// what it says.
	for _, args := range [][]string{{"verify"}, {"timeline", tenantUID}} {
		if _, errOut, code := run(t, append(liveArgs(n), args...)...); code != 2 || !strings.Contains(errOut, "schema version 2") {
			t.Errorf("%v past the manager's newer record: exit %d, stderr %q; want 2 naming the schema version", args, code, errOut)
		}
	}
}

// testMessageProof is the journal.MessageProofHeader value the manager,
// signing with testSigner's key, writes for data on subject (the format
// journal.MessageProofHeader documents).
func testMessageProof(t *testing.T, subject string, data []byte) string {
	t.Helper()
	k := testSigner(t)
	block, _ := pem.Decode(k.MarshalPrivatePEM())
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sig := ed25519.Sign(priv.(ed25519.PrivateKey), append([]byte("ayatori-journal-message-v1\n"+subject+"\n"), data...))
	return k.ID() + ":" + base64.RawURLEncoding.EncodeToString(sig)
}
