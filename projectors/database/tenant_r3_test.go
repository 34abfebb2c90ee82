package database_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestTenantsOnR3Cluster (issue 12): the journal on a three-node JetStream
// cluster (nats-server processes, stream replicas 3, sync_interval always
// on every node, the manager with every node's URL and
// --journal-replicas=3). 100 Tenants are created in three groups, and
// while each group provisions one fault hits the cluster: (a) SIGKILL of
// a node that does not lead the stream (the manager's own node when it is
// one), (b) SIGKILL of the stream leader, (c) the stream leader stopped
// for 30 s, then started again on its store. Each killed or stopped node
// comes back and catches up before the next fault.
//
// Afterwards: every Tenant Ready; `ayatori-journal verify` clean and
// journal.Verify over a full Scan clean; no Tenant step decided twice
// (RepeatedSteps) and no intent left without its outcome; the stream's
// sequence has no gap and no record ID twice, and holds at least every
// append the manager had acknowledged; zero duplicate side effects: per
// Tenant one CREATE ROLE and one CREATE DATABASE in PostgreSQL's statement
// log, one role, one database, one registry record, and KV version 1 (one
// password). The figures (election, journal stall, wave time) are logged
// for docs/journal.md.
func TestTenantsOnR3Cluster(t *testing.T) {
	const (
		tenants   = 100
		partition = 30 * time.Second
	)
	integration.Servers(t)
	ctx := context.Background()
	start := time.Now()
	s, err := integration.StartStack(ctx, integration.StackOptions{NATSCluster: true, Log: t.Logf, NoWorkload: true,
		ManagerArgs: []string{"--retry-base=300ms", "--retry-max=3s", "--tenant-resync-interval=1h", "--executor-ack-wait=3s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := applyInstance(s); err != nil {
		t.Fatal(err)
	}
	t.Logf("stack with the R3 cluster and a Ready Instance in %s", time.Since(start).Round(100*time.Millisecond))
	c := s.NATSCluster
	const stream = journal.DefaultStreamName
	info, err := c.StreamInfo(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 {
		t.Fatalf("the manager opened the journal with %d replicas", info.Config.Replicas)
	}
	ns(t, s, "r3")
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	var names []string
	created := map[string]time.Time{}
	create := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("r3t%03d", i)
			created[name] = time.Now()
			newTenant(t, s, "r3", name, nil)
			names = append(names, name)
		}
	}
	ready := func() int {
		var list databasev1alpha1.PostgreSQLTenantList
		if err := s.CP.Client.List(ctx, &list, client.InNamespace("r3")); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tn := range list.Items {
			if tn.Status.Phase == databasev1alpha1.TenantPhaseReady {
				n++
			}
		}
		return n
	}
	where := func() string {
		l, _ := c.StreamLeader(ctx, stream)
		cl, _ := c.ConsumerLeader(ctx, stream, "ayatori-executor-database-v1")
		m := c.ClientNode("ayatori-manager")
		name := func(n *integration.NATSNode) string {
			if n == nil {
				return "?"
			}
			return n.Name
		}
		return fmt.Sprintf("stream leader %s, executor consumer leader %s, manager connected to %s", name(l), name(cl), name(m))
	}
	rejoin := func(n *integration.NATSNode) string {
		t.Helper()
		at := time.Now()
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitHealthy(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		healthy := time.Since(at)
		if err := c.WaitStreamCurrent(ctx, stream, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s back: healthy after %s, stream replicas current after %s", n.Name, r(healthy), r(time.Since(at)))
	}
	leader := func() *integration.NATSNode {
		t.Helper()
		l, err := c.WaitStreamLeader(ctx, stream, nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	type fault struct {
		name string
		at   time.Time
	}
	var faults []fault
	wave := time.Now()

	// (a) SIGKILL of a follower, while the first group provisions.
	create(0, 34)
	time.Sleep(2 * time.Second)
	l := leader()
	victim := c.ClientNode("ayatori-manager")
	if victim == nil || victim == l {
		for _, n := range c.Nodes {
			if n != l {
				victim = n
				break
			}
		}
	}
	t.Logf("(a) %d/%d Ready; %s; SIGKILL follower %s", ready(), len(names), where(), victim.Name)
	faults = append(faults, fault{"(a) follower SIGKILL", time.Now()})
	victim.Kill()
	time.Sleep(5 * time.Second)
	t.Logf("(a) %s", rejoin(victim))

	// (b) SIGKILL of the stream leader, while the second group provisions.
	create(34, 67)
	time.Sleep(2 * time.Second)
	l = leader()
	t.Logf("(b) %d/%d Ready; %s; SIGKILL the stream leader %s", ready(), len(names), where(), l.Name)
	faults = append(faults, fault{"(b) leader SIGKILL", time.Now()})
	l.Kill()
	nl, err := c.WaitStreamLeader(ctx, stream, l, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("(b) new stream leader %s after %s", nl.Name, r(time.Since(faults[1].at)))
	time.Sleep(3 * time.Second)
	t.Logf("(b) %s", rejoin(l))

	// (c) The stream leader stopped for 30 s, while the third group provisions.
	create(67, tenants)
	time.Sleep(2 * time.Second)
	l = leader()
	t.Logf("(c) %d/%d Ready; %s; stopping the stream leader %s for %s", ready(), len(names), where(), l.Name, partition)
	faults = append(faults, fault{"(c) leader stopped 30 s", time.Now()})
	l.Stop()
	if nl, err = c.WaitStreamLeader(ctx, stream, l, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("(c) new stream leader %s after %s; %d/%d Ready", nl.Name, r(time.Since(faults[2].at)), ready(), len(names))
	time.Sleep(partition - time.Since(faults[2].at))
	t.Logf("(c) %d/%d Ready after %s without %s; %s", ready(), len(names), partition, l.Name, rejoin(l))

	// Every Tenant Ready.
	readyAt := map[string]time.Time{}
	for _, n := range names {
		tn := waitTenant(t, s, "r3", n, metav1.ConditionTrue, "Ready", 5*time.Minute)
		for _, cond := range tn.Status.Conditions {
			if cond.Type == "Ready" {
				readyAt[n] = cond.LastTransitionTime.Time
			}
		}
	}
	var lat []time.Duration
	last := time.Time{}
	for n, at := range readyAt {
		lat = append(lat, at.Sub(created[n]))
		if at.After(last) {
			last = at
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("all %d Ready %s after the first was created; per Tenant create→Ready p50 %s p99 %s max %s (Ready times at 1 s resolution); %s",
		tenants, r(last.Sub(wave)), r(lat[len(lat)/2]), r(lat[len(lat)*99/100]), r(lat[len(lat)-1]), where())

	// The journal: complete, gap-free, once per record, invariants clean.
	if err := c.WaitStreamCurrent(ctx, stream, time.Minute); err != nil {
		t.Fatal(err)
	}
	nc, err := s.ConnectNATS(journal.IdentityReader, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	store, err := journal.OpenExisting(ctx, nc, journal.Config{Trust: integration.JournalTrust(t)})
	if err != nil {
		t.Fatal(err)
	}
	var recs, tenantRecs []journal.Record
	var undecodable []uint64
	seen := map[string]uint64{}
	next := uint64(1)
	if _, err := integration.ScanJournal(ctx, store, func(rec journal.Record, err error) error {
		if err != nil {
			undecodable = append(undecodable, rec.Sequence)
		}
		if rec.Sequence != next {
			t.Errorf("journal sequence gap: %d after %d", rec.Sequence, next-1)
		}
		next = rec.Sequence + 1
		if prev, dup := seen[rec.ID]; dup {
			t.Errorf("record %s stored twice (sequences %d, %d)", rec.ID, prev, rec.Sequence)
		}
		seen[rec.ID] = rec.Sequence
		recs = append(recs, rec)
		if rec.Object.Kind == "PostgreSQLTenant" {
			tenantRecs = append(tenantRecs, rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if info, err = c.StreamInfo(ctx, stream); err != nil {
		t.Fatal(err)
	}
	if uint64(len(recs)) != info.State.Msgs || info.State.FirstSeq != 1 || info.State.LastSeq != info.State.Msgs {
		t.Errorf("scanned %d records; stream state %+v", len(recs), info.State)
	}
	if v := journal.Verify(recs, undecodable); len(v) > 0 {
		t.Errorf("journal.Verify: %d violations, e.g. %+v", len(v), v[0])
	}
	if v := journal.RepeatedSteps(tenantRecs); len(v) > 0 {
		t.Errorf("%d Tenant steps decided again after they succeeded, e.g. %+v", len(v), v[0])
	}
	for _, sum := range journal.Summaries(tenantRecs) {
		if sum.Pending > 0 {
			t.Errorf("%s: %d intents without an outcome", sum.Object, sum.Pending)
		}
	}
	appended := managerAppends(t, s.MetricsURL)
	if float64(len(recs)) < appended {
		t.Errorf("the manager had %.0f appends acknowledged, the stream holds %d records", appended, len(recs))
	}
	t.Logf("journal: %d records, no gap, no record twice, Verify clean; the manager counted %.0f acknowledged appends (%.0f more stored: their ack was lost in a fault and the retry found them)",
		len(recs), appended, float64(len(recs))-appended)
	// The journal stall around each fault, as the manager saw it: the
	// longest time between two consecutive records in the 60 s after it.
	byTime := append([]journal.Record(nil), recs...)
	sort.Slice(byTime, func(i, j int) bool { return byTime[i].Time.Before(byTime[j].Time) })
	for _, f := range faults {
		var gap time.Duration
		prev := f.at
		for _, rec := range byTime {
			if rec.Time.Before(f.at) || rec.Time.After(f.at.Add(60*time.Second)) {
				continue
			}
			gap = max(gap, rec.Time.Sub(prev))
			prev = rec.Time
		}
		t.Logf("%s: longest pause between journal records in the 60 s after it: %s", f.name, r(gap))
	}

	// `ayatori-journal verify` over every node's URL.
	var out []byte
	for attempt := 1; ; attempt++ {
		cmd := exec.CommandContext(ctx, s.JournalBin, append(s.JournalReaderArgs(), "verify")...)
		out, err = cmd.CombinedOutput()
		// Exit 2: the journal could not be read (a scan hit the
		// consumer-interest race, see integration.ScanJournal); retry.
		if err == nil || attempt == 5 || cmd.ProcessState.ExitCode() != 2 {
			break
		}
		t.Logf("ayatori-journal verify attempt %d: %v: %s", attempt, err, strings.TrimSpace(string(out)))
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Errorf("ayatori-journal verify: %v\n%s", err, out)
	} else {
		t.Logf("ayatori-journal verify: %s", strings.TrimSpace(string(out)))
	}

	// Zero duplicate side effects.
	pglog, err := s.PG.ReadLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	for _, n := range names {
		tn := waitTenant(t, s, "r3", n, metav1.ConditionTrue, "Ready", time.Second)
		role, db := tn.Status.LoginRole, tn.Status.Database
		for what, stmt := range map[string]string{"CREATE ROLE": `CREATE ROLE "` + role + `" `, "CREATE DATABASE": `CREATE DATABASE "` + db + `" `} {
			// Executions that took effect: each statement logged
			// (log_statement) less those whose ERROR the server logged
			// with it ("STATEMENT:  ..."; e.g. cancelled at the step's
			// deadline on a loaded machine, then retried: not a duplicate).
			run := strings.Count(string(pglog), "statement: "+stmt)
			failed := strings.Count(string(pglog), "STATEMENT:  "+stmt)
			if run-failed != 1 {
				t.Errorf("%s: %s executed %d times with effect (%d logged, %d failed) in the PostgreSQL statement log", n, what, run-failed, run, failed)
			} else if failed > 0 {
				t.Logf("%s: %s failed %d time(s) before it took effect (retried)", n, what, failed)
			}
		}
		for what, q := range map[string]string{
			"roles":            "SELECT count(*) FROM pg_roles WHERE rolname = $1",
			"databases":        "SELECT count(*) FROM pg_database WHERE datname = $1",
			"registry records": "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1",
		} {
			arg := role
			switch what {
			case "databases":
				arg = db
			case "registry records":
				arg = string(tn.UID)
			}
			var k int64
			if err := pg.QueryRow(ctx, q, arg).Scan(&k); err != nil || k != 1 {
				t.Errorf("%s: %d %s (%v)", n, k, what, err)
			}
		}
		if _, ver := kvPassword(t, s, "r3", n); ver != 1 {
			t.Errorf("%s: KV version %d: a second password was written", n, ver)
		}
	}
	t.Logf("total runtime %s", r(time.Since(start)))
}

// managerAppends returns the manager's count of acknowledged journal
// appends (ayatori_journal_append_seconds_count).
func managerAppends(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "ayatori_journal_append_seconds_count" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	t.Fatalf("no ayatori_journal_append_seconds_count at %s", url)
	return 0
}
