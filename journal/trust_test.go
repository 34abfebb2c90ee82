package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// natsServer is a single server or a cluster of the harness.
type natsServer interface {
	ClientOptions(id journal.Identity, extra ...nats.Option) []nats.Option
}

// TestJournalIdentities: the shipped NATS configuration (deploy/nats) on a
// real server and on the three-node cluster admits no client without an
// identity, none with an NKey it does not know, and gives the read-only
// identity no way to write a record or change a stream or consumer, while
// the manager keeps every right it uses.
func TestJournalIdentities(t *testing.T) {
	single := integration.StartNATS(t)
	cluster := integration.StartNATSCluster(t, integration.NATSClusterOptions{})
	for _, tc := range []struct {
		name string
		url  string
		srv  natsServer
		cfg  journal.Config
	}{
		{"single server", single.URL, single, journal.Config{}},
		{"three-node cluster", cluster.URL(), cluster, journal.Config{Replicas: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := tc.cfg
			cfg.Signer = testKey(t)
			mgr, err := nats.Connect(tc.url, tc.srv.ClientOptions(journal.IdentityManager)...)
			if err != nil {
				t.Fatal(err)
			}
			defer mgr.Close()
			s, err := journal.Open(ctx, mgr, cfg)
			if err != nil {
				t.Fatalf("the manager identity opens the journal: %v", err)
			}
			o := obj()
			in := intent(t, o, "ObserveInstance", 1)
			if _, err := s.Append(ctx, in); err != nil {
				t.Fatalf("the manager appends: %v", err)
			}
			if _, err := s.DurableConsumer(ctx, testDomain, journal.ConsumerConfig{Durable: "ayatori-executor-database-v1"}); err != nil {
				t.Fatalf("the manager creates its consumer: %v", err)
			}
			before := streamMsgs(t, s)

			// No client without credentials, nor with an NKey the server
			// does not know, nor in plain text.
			if nc, err := nats.Connect(tc.url, nats.RootCAs(caFile(tc.srv)), nats.MaxReconnects(0)); err == nil {
				nc.Close()
				t.Error("a client without credentials was admitted")
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Logf("no credentials: %v", err)
			}
			stranger, _ := nkeys.CreateUser()
			seed, _ := stranger.Seed()
			if nc, err := nats.Connect(tc.url, nats.RootCAs(caFile(tc.srv)), nats.MaxReconnects(0), nkeyOption(t, seed)); err == nil {
				nc.Close()
				t.Error("a client with an unknown NKey was admitted")
			}
			// The manager's own NKey without the CA: the server's
			// certificate is not verified, so no connection.
			if nc, err := nats.Connect(tc.url, append(tc.srv.ClientOptions(journal.IdentityManager)[:2], nats.MaxReconnects(0))...); err == nil {
				nc.Close()
				t.Error("a client that does not verify the server's certificate connected")
			}

			// The read-only identity: every write and admin call refused.
			rd, err := nats.Connect(tc.url, tc.srv.ClientOptions(journal.IdentityReader, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			data, _ := json.Marshal(in)
			for _, subj := range []string{"ayatori.journal.database." + o.UID + ".intent", "ayatori.journal.database." + o.UID + ".outcome",
				"ayatori.journal_checkpoint." + o.UID} {
				if _, err := rd.Request(subj, data, 250*time.Millisecond); err == nil {
					t.Errorf("the reader published on %s and got an ack", subj)
				}
			}
			for _, subj := range []string{
				"$JS.API.STREAM.PURGE.AYATORI_JOURNAL", "$JS.API.STREAM.DELETE.AYATORI_JOURNAL", "$JS.API.STREAM.UPDATE.AYATORI_JOURNAL",
				"$JS.API.STREAM.CREATE.AYATORI_EVIL", "$JS.API.STREAM.MSG.DELETE.AYATORI_JOURNAL",
				"$JS.API.CONSUMER.DELETE.AYATORI_JOURNAL.ayatori-executor-database-v1",
				"$JS.API.CONSUMER.CREATE.AYATORI_JOURNAL", "$JS.API.CONSUMER.CREATE.AYATORI_JOURNAL.ayatori-executor-database-v1",
				"$JS.API.CONSUMER.DURABLE.CREATE.AYATORI_JOURNAL.ayatori-executor-database-v1",
				"$JS.API.CONSUMER.MSG.NEXT.AYATORI_JOURNAL.ayatori-executor-database-v1",
				"$JS.API.STREAM.PURGE.AYATORI_JOURNAL_CHECKPOINTS",
			} {
				if m, err := rd.Request(subj, []byte(`{"stream_name":"AYATORI_JOURNAL","config":{"durable_name":"ayatori-executor-database-v1","filter_subject":">"}}`), 250*time.Millisecond); err == nil {
					t.Errorf("the reader called %s and got an answer: %s", subj, m.Data)
				}
			}
			// A subscription to the manager's inbox or to the journal's
			// subjects gets nothing.
			for _, subj := range []string{journal.IdentityManager.InboxPrefix() + ".>", "ayatori.journal.>", "$JS.ACK.>"} {
				sub, err := rd.SubscribeSync(subj)
				if err != nil {
					continue
				}
				if _, err := s.Append(ctx, intent(t, o, "ObserveInstance", 2+int(before))); err != nil {
					t.Fatal(err)
				}
				if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
					t.Errorf("the reader subscribed to %s and received %s", subj, m.Subject)
				}
				_ = sub.Unsubscribe()
				before++
			}
			// The reader reads: stream info, direct gets, a whole UID.
			ro, err := journal.OpenExisting(ctx, rd, journal.Config{Trust: journal.NewTrustedKeys(testKey(t).Public())})
			if err != nil {
				t.Fatalf("the reader opens the journal: %v", err)
			}
			recs, err := ro.Read(ctx, o.UID)
			if err != nil || len(recs) != 1+3 {
				t.Fatalf("the reader reads %d records, %v; want 4", len(recs), err)
			}
			var scanned int
			if err := ro.Scan(ctx, journal.ScanOptions{}, func(_ journal.Record, err error) error {
				scanned++
				return err
			}); err != nil || scanned != 4 {
				t.Fatalf("the reader scans %d records, %v", scanned, err)
			}
			if got := streamMsgs(t, s); got != 4 {
				t.Fatalf("stream holds %d records, want 4 (nothing the reader wrote)", got)
			}
			if _, err := s.JetStream().Consumer(ctx, journal.DefaultStreamName, "ayatori-executor-database-v1"); err != nil {
				t.Fatalf("the executor consumer is gone: %v", err)
			}
		})
	}
}

func caFile(s natsServer) string {
	switch v := s.(type) {
	case *integration.NATS:
		return v.Auth.CAFile
	case *integration.NATSCluster:
		return v.Auth.CAFile
	}
	return ""
}

func nkeyOption(t *testing.T, seed []byte) nats.Option {
	t.Helper()
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) })
}

// TestUntrustedIntentNotExecuted: with the manager's own NATS credentials
// (a leaked credential), an intent without a proof, one signed by a key the
// manager does not trust, one altered after signing, and a signed intent
// of one object copied onto another object's subject are never handed to
// a handler: each gets one Failed/UntrustedIntent outcome (idempotent
// across redeliveries), readers with trusted keys do not see the forged
// records, verify reports them, and a genuine intent with the same ID as a
// forged one still runs.
func TestUntrustedIntentNotExecuted(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Actor: "manager"})
	ctx := context.Background()
	var ran atomic.Int32
	runConsumer(t, s, journal.ConsumerConfig{Durable: "exec-trust", AckWait: 2 * time.Second}, map[string]journal.Handler{
		"DropDatabase": func(context.Context, journal.Record) (journal.Outcome, error) {
			ran.Add(1)
			return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
		},
	})
	publish := func(subject string, r journal.Record) uint64 {
		t.Helper()
		data, _ := json.Marshal(r)
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, r.ID)
		ack, err := s.JetStream().PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	subject := func(o journal.ObjectRef) string { return "ayatori.journal.database." + o.UID + ".intent" }
	stranger, _ := journal.NewSigningKey()

	victim, other := obj(), obj()
	unsigned := *intent(t, victim, "DropDatabase", 1)
	unsigned.Time, unsigned.Actor = time.Now().UTC(), "attacker"
	byStranger := *intent(t, victim, "DropDatabase", 2)
	byStranger.Time = time.Now().UTC()
	if err := byStranger.Sign(stranger); err != nil {
		t.Fatal(err)
	}
	altered := *intent(t, victim, "DropDatabase", 3)
	altered.Time = time.Now().UTC()
	if err := altered.Sign(testKey(t)); err != nil {
		t.Fatal(err)
	}
	altered.Operation = "DropDatabase"
	altered.Object.Name = "another-name"
	// A genuine intent of another object, copied onto the victim's subject.
	genuine := *intent(t, other, "DropDatabase", 1)
	genuine.Time = time.Now().UTC()
	if err := genuine.Sign(testKey(t)); err != nil {
		t.Fatal(err)
	}
	seqs := []uint64{publish(subject(victim), unsigned), publish(subject(victim), byStranger), publish(subject(victim), altered), publish(subject(victim), genuine)}

	// Each gets one Failed/UntrustedIntent outcome; no handler ran.
	deadline := time.Now().Add(20 * time.Second)
	var refusals []journal.Record
	for time.Now().Before(deadline) {
		refusals = refusals[:0]
		recs, err := s.Read(ctx, victim.UID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Type == journal.TypeOutcome && r.Result.Reason == journal.ReasonUntrustedIntent {
				refusals = append(refusals, r)
			}
		}
		if len(refusals) == len(seqs) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(refusals) != len(seqs) {
		t.Fatalf("%d UntrustedIntent outcomes, want %d", len(refusals), len(seqs))
	}
	want := map[string]bool{}
	for _, seq := range seqs {
		want[journal.UntrustedIntentID(victim.UID, seq)] = true
	}
	for i, r := range refusals {
		if !want[r.CausationID] || r.Result.Class != journal.Failed {
			t.Errorf("refusal %d: %+v", i, r)
		}
		delete(want, r.CausationID)
		t.Logf("refusal: %s", r.Result.Message)
	}
	time.Sleep(3 * time.Second) // past AckWait: a redelivery would show
	if got := ran.Load(); got != 0 {
		t.Fatalf("the handler ran %d times for untrusted intents", got)
	}
	// The manager's own reads do not see the forged records.
	recs, _ := s.Read(ctx, victim.UID)
	for _, r := range recs {
		if r.Type == journal.TypeIntent {
			t.Errorf("a trusted read returned the forged intent %s", r.ID)
		}
	}
	if len(recs) != len(seqs) {
		t.Errorf("trusted read: %d records, want the %d refusals only", len(recs), len(seqs))
	}
	// Verify (over everything, as the forensics tool reads it) flags them.
	var all []journal.Record
	_ = s.Scan(ctx, journal.ScanOptions{UID: victim.UID}, func(r journal.Record, err error) error {
		if err == nil {
			all = append(all, r)
		}
		return nil
	})
	refused := 0
	for _, v := range journal.Verify(all, nil) {
		if v.Rule == journal.RuleUntrustedIntentRefused {
			refused++
		}
	}
	if refused != len(seqs) {
		t.Errorf("verify reports %d refusals, want %d", refused, len(seqs))
	}

	// The genuine intent with the same ID as the unsigned forgery runs:
	// the forged record neither answers it nor makes the server drop it.
	real := intent(t, victim, "DropDatabase", 1)
	if res, err := s.Append(ctx, real); err != nil || res.Duplicate {
		t.Fatalf("append of the real intent: %+v %v", res, err)
	}
	waitOutcome(t, s, victim.UID, real.ID, journal.Succeeded)
	if got := ran.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1 (the genuine intent)", got)
	}
}

// TestUndecodableIntentAnswersOnlyItself: an intent message the executor
// can not read is answered by its stream sequence, never by the ID its
// publisher chose. A client that can publish on the journal's subjects but
// holds no signing key publishes, before the manager appends an intent,
// (a) bytes that are no JSON, (b) a decodable record that is no intent and
// (c) a record of a newer schema version, each with a Nats-Msg-Id header
// naming a real intent's ID. Each gets one Failed outcome keyed by its own
// sequence (the newer one only after it was handed back for a newer
// executor DeliveryLimit times, or at once past the number of them an
// executor holds), and the real intent appended after them
// still runs: keyed by the header, the executor signed a Failed outcome
// for the real intent, which then never ran.
func TestUndecodableIntentAnswersOnlyItself(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Actor: "manager"})
	ctx := context.Background()
	victim, other := obj(), obj()
	genuine := intent(t, victim, "DropDatabase", 1)
	otherReal := intent(t, other, "DropDatabase", 1)
	// publish sends data on o's intent subject; asManager adds the
	// message proof a newer manager sends (no record proof this build
	// could check).
	publish := func(o journal.ObjectRef, data []byte, msgID string, asManager ...bool) uint64 {
		t.Helper()
		m := nats.NewMsg("ayatori.journal.database." + o.UID + ".intent")
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		if len(asManager) > 0 && asManager[0] {
			m.Header.Set(journal.MessageProofHeader, testKey(t).MessageProof(m.Subject, data))
		}
		ack, err := s.JetStream().PublishMsg(ctx, m)
		if err != nil || ack.Duplicate {
			t.Fatalf("publish: %+v %v", ack, err)
		}
		return ack.Sequence
	}
	garbage := publish(victim, []byte("{not json"), genuine.ID)
	forgedOutcome, err := journal.NewOutcome(*genuine, journal.Result{Class: journal.Failed, Reason: "Forged"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	forgedOutcome.Time = time.Now().UTC()
	data, _ := json.Marshal(forgedOutcome)
	notIntent := publish(victim, data, forgedOutcome.ID)
	newer := *otherReal
	newer.Time, newer.SchemaVersion = time.Now().UTC(), journal.SchemaVersion+1
	data, _ = json.Marshal(newer)
	newerSeq := publish(other, data, otherReal.ID, true)
	// A second one past the limit of newer intents an executor holds.
	defer journal.SetNewerHeldLimit(1)()
	third := obj()
	newer2 := *intent(t, third, "DropDatabase", 1)
	newer2.Time, newer2.SchemaVersion = time.Now().UTC(), journal.SchemaVersion+1
	data, _ = json.Marshal(newer2)
	newer2Seq := publish(third, data, newer2.ID, true)
	// One without a message proof is nobody's: refused at once, never held.
	fourth := obj()
	forgedNewer := *intent(t, fourth, "DropDatabase", 1)
	forgedNewer.Time, forgedNewer.SchemaVersion = time.Now().UTC(), journal.SchemaVersion+1
	forgedNewer.Operation, forgedNewer.Object.Name = "not an operation", "" // need not be valid in a newer version
	data, _ = json.Marshal(forgedNewer)
	forgedNewerSeq := publish(fourth, data, forgedNewer.ID)

	var ran atomic.Int32
	const limit = 3
	runConsumer(t, s, journal.ConsumerConfig{Durable: "exec-undecodable", AckWait: 2 * time.Second, MaxDeliver: 2, DeliveryLimit: limit,
		BackOff: []time.Duration{100 * time.Millisecond}}, map[string]journal.Handler{
		"DropDatabase": func(context.Context, journal.Record) (journal.Outcome, error) {
			ran.Add(1)
			return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
		},
	})
	scan := func(uid string) ([]journal.Record, []uint64) {
		t.Helper()
		var recs []journal.Record
		var bad []uint64
		if err := s.Scan(ctx, journal.ScanOptions{UID: uid}, func(r journal.Record, err error) error {
			switch {
			case err == nil:
				recs = append(recs, r)
			case !errors.Is(err, journal.ErrUntrusted):
				bad = append(bad, r.Sequence)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return recs, bad
	}
	want := map[string]string{
		journal.UndecodableIntentID(victim.UID, garbage):      journal.ReasonUndecodableIntent,
		journal.UntrustedIntentID(victim.UID, notIntent):      journal.ReasonUntrustedIntent,
		journal.UndecodableIntentID(other.UID, newerSeq):      journal.ReasonUndecodableIntent,
		journal.UndecodableIntentID(third.UID, newer2Seq):     journal.ReasonUndecodableIntent,
		journal.UntrustedIntentID(fourth.UID, forgedNewerSeq): journal.ReasonUntrustedIntent,
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]journal.Record{}
		for _, uid := range []string{victim.UID, other.UID, third.UID, fourth.UID} {
			recs, _ := scan(uid)
			for _, r := range recs {
				if r.Type == journal.TypeOutcome {
					if _, dup := got[r.CausationID]; dup {
						t.Fatalf("two outcomes of %s", r.CausationID)
					}
					got[r.CausationID] = r
				}
			}
		}
		if len(got) >= len(want) || time.Now().After(deadline) {
			for id, r := range got {
				if want[id] == "" || r.Result.Class != journal.Failed || r.Result.Reason != want[id] {
					t.Fatalf("outcome %s: %s/%s (%q); want only %v", id, r.Result.Class, r.Result.Reason, r.Result.Message, want)
				}
				t.Logf("%s: %s", id, r.Result.Message)
			}
			if len(got) != len(want) {
				t.Fatalf("outcomes %d, want %d: %v", len(got), len(want), want)
			}
			// One newer intent was handed back for a newer executor until
			// its DeliveryLimit, the other answered at once.
			held := []string{got[journal.UndecodableIntentID(other.UID, newerSeq)].Result.Message, got[journal.UndecodableIntentID(third.UID, newer2Seq)].Result.Message}
			if strings.Contains(held[0], "not handed back") {
				held[0], held[1] = held[1], held[0]
			}
			if !strings.Contains(held[0], fmt.Sprintf("delivered %d times", limit)) || !strings.Contains(held[1], "not handed back") {
				t.Errorf("the newer-schema intents' outcomes say %q, want one delivered %d times first (handed back for a newer executor) and one not handed back", held, limit)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The real intent, appended after the forgeries, runs once.
	if res, err := s.Append(ctx, genuine); err != nil || res.Duplicate {
		t.Fatalf("append of the real intent: %+v %v", res, err)
	}
	waitOutcome(t, s, victim.UID, genuine.ID, journal.Succeeded)
	if got := ran.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1 (the real intent)", got)
	}

	// Verify reports each unreadable record once, says it was answered,
	// and takes no answer for an outcome without an intent.
	var all []journal.Record
	var undecodable []uint64
	for _, uid := range []string{victim.UID, other.UID, third.UID} {
		recs, bad := scan(uid)
		all, undecodable = append(all, recs...), append(undecodable, bad...)
	}
	answered := 0
	for _, v := range journal.Verify(all, undecodable) {
		switch v.Rule {
		case journal.RuleOutcomeWithoutIntent:
			t.Errorf("verify: %s %v: %s", v.Rule, v.Sequences, v.Detail)
		case journal.RuleUndecodableRecord:
			if strings.Contains(v.Detail, "answered") {
				answered++
			}
		}
	}
	if answered != 3 {
		t.Errorf("verify: %d undecodable records reported as answered, want 3", answered)
	}
}

// TestKeyRotation: a store signing with a new key while trusting the old
// one reads the old key's records, and the forensics reader verifies both;
// once the old key is no longer trusted its records are untrusted.
func TestKeyRotation(t *testing.T) {
	n := integration.StartNATS(t)
	ctx := context.Background()
	oldKey, _ := journal.NewSigningKey()
	newKey, _ := journal.NewSigningKey()
	o := obj()
	before := open(t, n, journal.Config{Signer: oldKey})
	in := intent(t, o, "ObserveInstance", 1)
	if _, err := before.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	after := open(t, n, journal.Config{Signer: newKey, Trust: journal.NewTrustedKeys(oldKey.Public(), newKey.Public())})
	if _, err := after.Append(ctx, outcome(t, in, journal.Succeeded)); err != nil {
		t.Fatal(err)
	}
	recs, err := after.Read(ctx, o.UID)
	if err != nil || len(recs) != 2 {
		t.Fatalf("during the rotation: %d records, %v", len(recs), err)
	}
	if recs[0].Proof.KeyID != oldKey.ID() || recs[1].Proof.KeyID != newKey.ID() {
		t.Fatalf("proofs: %s, %s", recs[0].Proof.KeyID, recs[1].Proof.KeyID)
	}
	// A key not among the trusted ones can not be the signer.
	if _, err := journal.Open(ctx, connect(t, n), journal.Config{Signer: newKey, Trust: journal.NewTrustedKeys(oldKey.Public())}); err == nil {
		t.Fatal("Open accepted a signing key that is not trusted")
	}
	// Old key retired: its record is untrusted for a reader that dropped it.
	retired := open(t, n, journal.Config{Signer: newKey})
	recs, _ = retired.Read(ctx, o.UID)
	if len(recs) != 1 || recs[0].Proof.KeyID != newKey.ID() {
		t.Fatalf("after retiring the old key: %d records", len(recs))
	}
	var untrusted int
	_ = retired.Scan(ctx, journal.ScanOptions{UID: o.UID}, func(_ journal.Record, err error) error {
		if errors.Is(err, journal.ErrUntrusted) {
			untrusted++
		}
		return nil
	})
	if untrusted != 1 {
		t.Fatalf("scan flags %d untrusted records, want 1", untrusted)
	}
}

// TestCanonicalEncodingRoundTrips: a record's proof verifies after the
// record went through the stream's JSON (the signed bytes are re-derived
// from the decoded record), for payloads and strings JSON escapes.
func TestCanonicalEncodingRoundTrips(t *testing.T) {
	k := testKey(t)
	trust := journal.NewTrustedKeys(k.Public())
	for i, payload := range []any{nil, map[string]string{"a": "<b>&\u2028", "n": "1.5e300"}, map[string][]float64{"z": {1, 2.5e300}}, map[string]string{"bad": "\xff\xfe"}} {
		r, err := journal.NewIntent(obj(), "RoundTrip", fmt.Sprintf("s%d", i), 1, payload)
		if err != nil {
			t.Fatal(err)
		}
		r.Time = time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
		r.Actor = "a\u00e9\"quoted\""
		if err := r.Sign(k); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(r)
		back, err := journal.DecodeRecord(data, 42)
		if err != nil {
			t.Fatal(err)
		}
		if err := trust.Verify(&back); err != nil {
			t.Errorf("payload %d: %v", i, err)
		}
		back.Attempt = 2
		if err := trust.Verify(&back); !errors.Is(err, journal.ErrUntrusted) {
			t.Errorf("payload %d: a changed record verified: %v", i, err)
		}
	}
}

// TestFollowAsReader: the read-only identity follows one object's new
// records (direct gets, no consumer), in order, with an untrusted one
// delivered with its error.
func TestFollowAsReader(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := obj()
	first := intent(t, o, "ObserveInstance", 1)
	if _, err := s.Append(ctx, first); err != nil {
		t.Fatal(err)
	}
	rd, err := n.Connect(journal.IdentityReader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ro, err := journal.OpenExisting(ctx, rd, journal.Config{Trust: journal.NewTrustedKeys(testKey(t).Public())})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		rec journal.Record
		err error
	}
	ch := make(chan got, 10)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ro.Follow(fctx, o.UID, 1, func(r journal.Record, err error) { ch <- got{r, err} }) }()
	second := intent(t, o, "ObserveInstance", 2)
	if _, err := s.Append(ctx, second); err != nil {
		t.Fatal(err)
	}
	forged := *intent(t, o, "ObserveInstance", 3)
	forged.Time = time.Now().UTC()
	data, _ := json.Marshal(forged)
	if _, err := s.JetStream().Publish(ctx, "ayatori.journal.database."+o.UID+".intent", data); err != nil {
		t.Fatal(err)
	}
	third := intent(t, o, "ObserveInstance", 4)
	if _, err := s.Append(ctx, third); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{second.ID, forged.ID, third.ID} {
		select {
		case g := <-ch:
			if g.rec.ID != want || (i == 1) != errors.Is(g.err, journal.ErrUntrusted) {
				t.Fatalf("record %d: %s %v, want %s", i, g.rec.ID, g.err, want)
			}
		case <-ctx.Done():
			t.Fatalf("record %d not delivered", i)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestForgedNewerRecordDoesNotStallReads: a reader stops at a record of a
// schema version newer than it reads only when the manager wrote it (a
// valid message proof): so an older replica never decides past a newer
// manager's record. One without a message proof, on the journal or as a
// checkpoint, is skipped as untrusted: it stopped every read of its object
// (until retention removed it), with nothing but NATS credentials.
func TestForgedNewerRecordDoesNotStallReads(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Actor: "manager"})
	ctx := context.Background()
	o := obj()
	in := intent(t, o, "ObserveInstance", 1)
	if _, err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	newerOn := func(subject string, v any, asManager bool) {
		t.Helper()
		data, _ := json.Marshal(v)
		publishRaw(t, s, subject, data, asManager)
	}
	forged := *intent(t, o, "DropDatabase", 1)
	forged.Time, forged.SchemaVersion = time.Now().UTC(), journal.SchemaVersion+1
	newerOn("ayatori.journal.database."+o.UID+".intent", forged, false)
	newerOn("ayatori.journal_checkpoint."+o.UID, map[string]any{"schemaVersion": journal.SchemaVersion + 1, "uid": o.UID, "through": 1}, false)
	fresh := open(t, n, journal.Config{Actor: "manager"}) // no cached state
	for name, st := range map[string]*journal.Store{"writer": s, "fresh": fresh} {
		recs, err := st.Read(ctx, o.UID)
		if err != nil || len(recs) != 1 || recs[0].ID != in.ID {
			t.Fatalf("%s: Read past a forged newer record: %d records, %v", name, len(recs), err)
		}
		v, err := st.ReadView(ctx, o.UID)
		if err != nil || len(v.Records) != 1 {
			t.Fatalf("%s: ReadView past a forged newer record and checkpoint: %+v, %v", name, v, err)
		}
	}
	// One more after the Views were kept: the cached read skips it too.
	later := *intent(t, o, "DropDatabase", 3)
	later.Time, later.SchemaVersion = time.Now().UTC(), journal.SchemaVersion+1
	newerOn("ayatori.journal.database."+o.UID+".intent", later, false)
	for name, st := range map[string]*journal.Store{"writer": s, "fresh": fresh} {
		if v, err := st.ReadView(ctx, o.UID); err != nil || len(v.Records) != 1 {
			t.Fatalf("%s: cached ReadView past a forged newer record: %+v, %v", name, v, err)
		}
	}
	// The manager's own newer record (a newer replica's) stops them.
	genuine := *intent(t, o, "DropDatabase", 2)
	genuine.Time, genuine.SchemaVersion = time.Now().UTC(), journal.SchemaVersion+1
	newerOn("ayatori.journal.database."+o.UID+".intent", genuine, true)
	// Its bytes and message proof copied onto another object's subject
	// prove nothing there: the proof binds the subject.
	copied := obj()
	data, _ := json.Marshal(genuine)
	cm := nats.NewMsg("ayatori.journal.database." + copied.UID + ".intent")
	cm.Data = data
	cm.Header.Set(journal.MessageProofHeader, testKey(t).MessageProof("ayatori.journal.database."+o.UID+".intent", data))
	if _, err := s.JetStream().PublishMsg(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if recs, err := fresh.Read(ctx, copied.UID); err != nil || len(recs) != 0 {
		t.Fatalf("Read of a copied newer record: %d records, %v; want it skipped", len(recs), err)
	}
	for name, st := range map[string]*journal.Store{"writer": s, "fresh": fresh} {
		if _, err := st.Read(ctx, o.UID); !errors.Is(err, journal.ErrNewerSchema) {
			t.Errorf("%s: Read of a newer manager's record: %v, want ErrNewerSchema", name, err)
		}
		if _, err := st.ReadView(ctx, o.UID); !errors.Is(err, journal.ErrNewerSchema) {
			t.Errorf("%s: ReadView of a newer manager's record: %v, want ErrNewerSchema", name, err)
		}
	}
	// Scan (the forensics read) passes the forged newer records as
	// untrusted and the manager's as newer.
	var untrusted, newer int
	err := fresh.Scan(ctx, journal.ScanOptions{UID: o.UID}, func(r journal.Record, err error) error {
		switch {
		case errors.Is(err, journal.ErrNewerSchema) && !errors.Is(err, journal.ErrUntrusted):
			newer++
		case errors.Is(err, journal.ErrUntrusted) && !errors.Is(err, journal.ErrNewerSchema):
			untrusted++
		case err != nil:
			t.Errorf("Scan: sequence %d: %v", r.Sequence, err)
		}
		return nil
	})
	if err != nil || untrusted != 2 || newer != 1 {
		t.Errorf("Scan: %d untrusted, %d newer (want 2, 1): %v", untrusted, newer, err)
	}
	other := obj()
	newerOn("ayatori.journal_checkpoint."+other.UID, map[string]any{"schemaVersion": journal.SchemaVersion + 1, "uid": other.UID, "through": 1}, true)
	if _, err := fresh.ReadView(ctx, other.UID); !errors.Is(err, journal.ErrNewerSchema) {
		t.Errorf("ReadView under a newer manager's checkpoint: %v, want ErrNewerSchema", err)
	}
}

// TestDirectReadsTakeNoServerHeaderFromThePublisher: the read-only tools
// read with direct gets, whose replies carry a message's stored headers
// first and the server's own (Nats-Sequence, Nats-Subject) after them. A
// publisher without a signing key stores a message with its own Status,
// Nats-Sequence and Nats-Subject headers: taken as the server's, it ended
// the read early and hid every record after it from `ayatori-journal`
// (verify, export, timeline), or moved a record onto another subject.
func TestDirectReadsTakeNoServerHeaderFromThePublisher(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Actor: "manager"})
	ctx := context.Background()
	o, other := obj(), obj()
	before := intent(t, o, "Step", 1)
	if _, err := s.Append(ctx, before); err != nil {
		t.Fatal(err)
	}
	for _, h := range []map[string]string{
		{"Status": "404"},
		{"Status": "204", "Nats-Num-Pending": "0"},
		{jetstream.SequenceHeader: "999999"},
		{jetstream.SubjectHeader: "ayatori.journal.database." + other.UID + ".intent"},
	} {
		m := nats.NewMsg("ayatori.journal.database." + o.UID + ".intent")
		m.Data = []byte(`{"forged":true}`)
		for k, v := range h {
			m.Header.Set(k, v)
		}
		if _, err := s.JetStream().PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	after := intent(t, o, "Step", 2)
	if _, err := s.Append(ctx, after); err != nil {
		t.Fatal(err)
	}
	ro, err := journal.OpenExisting(ctx, connect(t, n), journal.Config{Trust: s.Config().Trust})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ro.Read(ctx, o.UID)
	if err != nil || len(recs) != 2 || recs[0].ID != before.ID || recs[1].ID != after.ID {
		t.Fatalf("read-only Read: %d records, %v; want the two real ones", len(recs), err)
	}
	var seqs []uint64
	if err := ro.Scan(ctx, journal.ScanOptions{}, func(r journal.Record, err error) error {
		seqs = append(seqs, r.Sequence)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5 6]" {
		t.Fatalf("read-only Scan saw sequences %v, want [1 2 3 4 5 6]", seqs)
	}
	if recs, err := ro.Read(ctx, other.UID); err != nil || len(recs) != 0 {
		t.Fatalf("read-only Read of the other object: %d records, %v", len(recs), err)
	}
}

// publishRaw publishes data on subject through s's connection, as whoever
// holds NATS credentials can: with the manager's message proof (the test
// key) when asManager, else with none.
func publishRaw(t *testing.T, s *journal.Store, subject string, data []byte, asManager bool) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	if asManager {
		m.Header.Set(journal.MessageProofHeader, testKey(t).MessageProof(subject, data))
	}
	if _, err := s.JetStream().PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestUnreadableCheckpointDoesNotStallReads: a checkpoint the manager can
// not have written for this object (bytes that are not a checkpoint, or a
// checkpoint naming another UID, even with the manager's message proof for
// its own subject) is ignored like any untrusted checkpoint: the read takes
// the whole journal and the next checkpoint written replaces it. Before,
// either one stopped every fresh read of the object (ErrInvalidRecord), its
// deletion included, with nothing but NATS credentials.
func TestUnreadableCheckpointDoesNotStallReads(t *testing.T) {
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Actor: "manager"})
	ctx := context.Background()
	for name, forged := range map[string]func(uid string) ([]byte, bool){
		"not a checkpoint": func(string) ([]byte, bool) { return []byte("not json"), false },
		"another object's, signed for this subject": func(string) ([]byte, bool) {
			data, _ := json.Marshal(map[string]any{"schemaVersion": journal.SchemaVersion, "uid": obj().UID, "through": 1})
			return data, true
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := obj()
			in := intent(t, o, "ObserveInstance", 1)
			if _, err := s.Append(ctx, in); err != nil {
				t.Fatal(err)
			}
			data, proof := forged(o.UID)
			publishRaw(t, s, "ayatori.journal_checkpoint."+o.UID, data, proof)
			fresh := open(t, n, journal.Config{Actor: "manager"}) // no cached View
			v, err := fresh.ReadView(ctx, o.UID)
			if err != nil || len(v.Records) != 1 || v.Records[0].ID != in.ID || v.Through != 0 {
				t.Fatalf("ReadView under a %s checkpoint: %+v, %v; want the journal's one record", name, v, err)
			}
			if err := fresh.WriteCheckpoint(ctx, v); err != nil {
				t.Fatalf("WriteCheckpoint over it: %v", err)
			}
			again := open(t, n, journal.Config{Actor: "manager"})
			if v, err := again.ReadView(ctx, o.UID); err != nil || v.Through != v.Last || len(v.Records) != 1 {
				t.Fatalf("ReadView after the checkpoint replaced it: %+v, %v", v, err)
			}
		})
	}
	// A checkpoint this build can not decode that the manager wrote (its
	// message proof) still stops the read: a newer manager's, whose field
	// changed shape, with ErrNewerSchema; one of this version (a bug) with
	// ErrInvalidRecord. Without the proof the same bytes are ignored.
	for _, c := range []struct {
		name  string
		data  string
		proof bool
		want  error
	}{
		{"a newer manager's", `{"schemaVersion":` + fmt.Sprint(journal.SchemaVersion+1) + `,"through":"next"}`, true, journal.ErrNewerSchema},
		{"the manager's, unreadable", `{"schemaVersion":` + fmt.Sprint(journal.SchemaVersion) + `,"through":"next"}`, true, journal.ErrInvalidRecord},
		{"a keyless newer one", `{"schemaVersion":` + fmt.Sprint(journal.SchemaVersion+1) + `,"through":"next"}`, false, nil},
	} {
		o := obj()
		if _, err := s.Append(ctx, intent(t, o, "ObserveInstance", 1)); err != nil {
			t.Fatal(err)
		}
		publishRaw(t, s, "ayatori.journal_checkpoint."+o.UID, []byte(c.data), c.proof)
		fresh := open(t, n, journal.Config{Actor: "manager"})
		v, err := fresh.ReadView(ctx, o.UID)
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s checkpoint: %v, want %v", c.name, err, c.want)
		}
		if c.want == nil && (err != nil || len(v.Records) != 1) {
			t.Errorf("%s checkpoint: %+v, %v; want it ignored", c.name, v, err)
		}
	}
}
