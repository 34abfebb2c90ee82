package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestIntentAfter: an intent ordered after another (Record.After) is
// executed only once that one has a Succeeded outcome, and is skipped
// (Failed/DependencyFailed, nothing executed) when it failed or is not an
// earlier intent of the object; a waiting intent holds no consumer slot.
func TestIntentAfter(t *testing.T) {
	ctx := context.Background()
	s, d := storeAndDispatcher(t)
	release := make(chan struct{})
	var roleDone, dbBeforeRole, dbRuns, extRuns atomic.Int32
	handle := func(op string, h journal.Handler) {
		t.Helper()
		if err := d.Handle("pg", op, h); err != nil {
			t.Fatal(err)
		}
	}
	ok := journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}
	handle("CreateRole", func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return journal.Outcome{}, ctx.Err()
		}
		roleDone.Add(1)
		return ok, nil
	})
	handle("CreateDatabase", func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		if roleDone.Load() == 0 {
			dbBeforeRole.Add(1)
		}
		dbRuns.Add(1)
		return ok, nil
	})
	handle("CheckExtensions", func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: "InvalidSpec", Message: "extension x is not available"}}, nil
	})
	handle("EnsureExtensions", func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
		extRuns.Add(1)
		return ok, nil
	})
	handle("VerifyLogin", func(ctx context.Context, r journal.Record) (journal.Outcome, error) { return ok, nil })

	appendAll := func(recs ...*journal.Record) {
		t.Helper()
		for _, r := range recs {
			if _, err := s.Append(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a: CreateRole (blocks) <- CreateDatabase, and <- VerifyLogin: with
	// two consumer slots, CreateRole holds one; the two waiting intents
	// must give theirs back for anything else to run.
	a := obj()
	role := intent(t, a, "CreateRole", 1)
	db := intent(t, a, "CreateDatabase", 1)
	db.After = role.ID
	verify := intent(t, a, "VerifyLogin", 1)
	verify.After = role.ID
	appendAll(role, db, verify)
	// b: CheckExtensions fails <- EnsureExtensions <- VerifyLogin (a chain
	// of skips: nothing after the failure runs).
	b := obj()
	check := intent(t, b, "CheckExtensions", 1)
	ext := intent(t, b, "EnsureExtensions", 1)
	ext.After = check.ID
	login := intent(t, b, "VerifyLogin", 1)
	login.After = ext.ID
	appendAll(check, ext, login)
	// c: ordered after an intent the journal does not hold.
	c := obj()
	orphan := intent(t, c, "EnsureExtensions", 1)
	orphan.After = journal.IntentID(c.UID, 1, "CreateDatabase", "", 1)
	appendAll(orphan)
	// e: an independent intent behind the waiting ones.
	e := obj()
	free := intent(t, e, "VerifyLogin", 1)
	appendAll(free)

	consumeUntilCleanup(t, s, journal.ConsumerConfig{Durable: "exec-after", AckWait: 30 * time.Second, MaxDeliver: 5, Concurrency: 2}, d)
	waitOutcomeWithin(t, s, e.UID, free.ID, journal.Succeeded, 15*time.Second)
	for _, sk := range []*journal.Record{ext, login, orphan} {
		o := waitOutcome(t, s, sk.Object.UID, sk.ID, journal.Failed)
		if o.Result.Reason != journal.ReasonDependencyFailed {
			t.Errorf("%s: outcome %s, want Failed/%s", sk.ID, o.Result.String(), journal.ReasonDependencyFailed)
		}
	}
	if n := extRuns.Load(); n != 0 {
		t.Errorf("EnsureExtensions ran %d times after its dependency failed or was missing", n)
	}
	time.Sleep(300 * time.Millisecond)
	if n := dbRuns.Load(); n != 0 {
		t.Fatalf("CreateDatabase ran %d times while CreateRole, which it is ordered after, was still running", n)
	}
	close(release)
	waitOutcome(t, s, a.UID, db.ID, journal.Succeeded)
	waitOutcome(t, s, a.UID, verify.ID, journal.Succeeded)
	if n := dbBeforeRole.Load(); n != 0 {
		t.Errorf("CreateDatabase ran before CreateRole succeeded")
	}
	var all []journal.Record
	for _, o := range []journal.ObjectRef{a, b, c, e} {
		recs, err := s.Read(ctx, o.UID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	// Verify: the orphan's dangling After is reported, nothing else.
	var rules []string
	for _, v := range journal.Verify(all, nil) {
		rules = append(rules, v.Rule)
		if v.Rule != journal.RuleDependencyOrder || v.UID != c.UID {
			t.Errorf("unexpected violation: %+v", v)
		}
	}
	if len(rules) != 1 {
		t.Errorf("violations %v, want the orphan's one %s", rules, journal.RuleDependencyOrder)
	}
}

// TestVerifyDependencyOrder: Verify reports an intent that ran before the
// intent it is ordered after succeeded, and a skip although it succeeded.
func TestVerifyDependencyOrder(t *testing.T) {
	o := obj()
	seq := uint64(0)
	rec := func(r journal.Record) journal.Record {
		seq++
		r.Sequence = seq
		return r
	}
	out := func(in *journal.Record, res journal.Result) journal.Record {
		r, err := journal.NewOutcome(*in, res, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rec(r)
	}
	role := intent(t, o, "CreateRole", 1)
	db := intent(t, o, "CreateDatabase", 1)
	db.After = role.ID
	ext := intent(t, o, "EnsureExtensions", 1)
	ext.After = db.ID
	succeeded := journal.Result{Class: journal.Succeeded}
	skipped := journal.Result{Class: journal.Failed, Reason: journal.ReasonDependencyFailed}
	recs := []journal.Record{rec(*role), rec(*db), rec(*ext),
		out(db, succeeded), // ran before CreateRole had an outcome
		out(role, succeeded),
		out(ext, skipped), // skipped although CreateDatabase succeeded
	}
	var got int
	for _, v := range journal.Verify(recs, nil) {
		if v.Rule != journal.RuleDependencyOrder {
			t.Errorf("unexpected violation: %+v", v)
			continue
		}
		got++
	}
	if got != 2 {
		t.Errorf("%d dependency-order violations, want 2", got)
	}
}

// TestAfterMustNameSameObject: an intent can only be ordered after an
// intent of its own object; only an intent carries After.
func TestAfterMustNameSameObject(t *testing.T) {
	a, b := obj(), obj()
	in := intent(t, a, "CreateDatabase", 1)
	in.After = journal.IntentID(b.UID, 1, "CreateRole", "", 1)
	if err := in.Validate(); !errors.Is(err, journal.ErrInvalidRecord) {
		t.Errorf("After naming another object's intent: %v, want ErrInvalidRecord", err)
	}
	in.After = in.ID
	if err := in.Validate(); !errors.Is(err, journal.ErrInvalidRecord) {
		t.Errorf("After naming itself: %v, want ErrInvalidRecord", err)
	}
	o, err := journal.NewOutcome(*intent(t, a, "CreateRole", 1), journal.Result{Class: journal.Succeeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.After = journal.IntentID(a.UID, 1, "CheckExtensions", "", 1)
	if err := o.Validate(); !errors.Is(err, journal.ErrInvalidRecord) {
		t.Errorf("an outcome with After: %v, want ErrInvalidRecord", err)
	}
}

// A chain of intents delivered at once waits for each link's outcome
// without asking the stream leader again and again: while this process
// runs the link waited for, its end wakes the wait, and an outcome this
// process recorded is taken from its cached state. (Before, every waiting
// link read the UID's last sequence from the leader every 20 ms, doubling
// to 1 s, for as long as the link before it ran.)
func TestAChainWaitsWithoutAskingTheLeader(t *testing.T) {
	ctx := context.Background()
	m := journal.NewMetrics(nil)
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{Metrics: m})
	w := open(t, n, journal.Config{}) // the test's own reads
	d, err := journal.NewDispatcher(testDomain)
	if err != nil {
		t.Fatal(err)
	}
	const links, slow = 4, 3 * time.Second
	ok := journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}
	for i := range links {
		op := fmt.Sprintf("Link%d", i)
		if err := d.Handle("pg", op, func(ctx context.Context, r journal.Record) (journal.Outcome, error) {
			if r.After == "" {
				time.Sleep(slow)
			}
			return ok, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	o := obj()
	var chain []*journal.Record
	for i := range links {
		r := intent(t, o, fmt.Sprintf("Link%d", i), 1)
		if i > 0 {
			r.After = chain[i-1].ID
		}
		if _, err := s.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
		chain = append(chain, r)
	}
	gets := func() float64 { return testutil.ToFloat64(m.Requests.WithLabelValues("message_get")) }
	before := gets()
	consumeUntilCleanup(t, s, journal.ConsumerConfig{Durable: "exec-chain", AckWait: 30 * time.Second, MaxDeliver: 5, Concurrency: links}, d)
	for _, r := range chain {
		waitOutcomeWithin(t, w, o.UID, r.ID, journal.Succeeded, 20*time.Second)
	}
	// Each link: its outcome check and one look at its dependency, and
	// one more when the link before it ends.
	if n := gets() - before; n > 3*links {
		t.Errorf("%.0f message gets to run a chain of %d links whose first took %s, want at most %d", n, links, slow, 3*links)
	}
}
