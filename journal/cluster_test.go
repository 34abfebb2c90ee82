package journal_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// clusterLoad appends and reads continuously through a fault, and records
// what every append and read returned.
type clusterLoad struct {
	t       *testing.T
	writers []*journal.Store
	reader  *journal.Store
	uids    [][]string // per writer

	mu        sync.Mutex
	acked     map[string]uint64 // record ID -> sequence of its first ack
	stored    map[string]bool   // every record Append eventually accepted (acked or Duplicate)
	byUID     map[string][]string
	ackTimes  []time.Time
	ackLat    []time.Duration
	ackBy     []int // writer index
	errs      []timedErr
	readErrs  []timedErr
	readTimes []time.Time // successful reads
	stale     []string    // reads that missed a record acked before they started
	dupAfter  int         // Duplicate answers to a retry after an error: stored, ack lost
}

type timedErr struct {
	at  time.Time
	err error
}

func newClusterLoad(t *testing.T, writers []*journal.Store, reader *journal.Store, uidsPerWriter int) *clusterLoad {
	l := &clusterLoad{t: t, writers: writers, reader: reader, acked: map[string]uint64{}, stored: map[string]bool{}, byUID: map[string][]string{}}
	for range writers {
		var us []string
		for range uidsPerWriter {
			us = append(us, obj().UID)
		}
		l.uids = append(l.uids, us)
	}
	return l
}

// run appends from every writer (one record every 20 ms each, retrying a
// failed record with the same ID until Append accepts it) and reads back
// random UIDs until stop is set; a record being appended then is finished.
func (l *clusterLoad) run(ctx context.Context, stop *atomic.Bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w, st := range l.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; !stop.Load() && ctx.Err() == nil; k++ {
				uid := l.uids[w][k%len(l.uids[w])]
				o := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ns", Name: "app", UID: uid, Generation: 1}
				rec, err := journal.NewIntent(o, "ClusterProbe", fmt.Sprintf("k%d", k), 1, nil)
				if err != nil {
					l.t.Error(err)
					return
				}
				failed := false
				for ctx.Err() == nil {
					start := time.Now()
					// 5 s per attempt: JetStream's default publish timeout,
					// which the projectors' appends get.
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					r := rec // Append fills in fields; keep the ID
					res, err := st.Append(actx, &r)
					cancel()
					now := time.Now()
					l.mu.Lock()
					if err != nil {
						l.errs = append(l.errs, timedErr{now, err})
						l.mu.Unlock()
						failed = true
						time.Sleep(100 * time.Millisecond)
						continue
					}
					if res.Duplicate {
						if !failed {
							l.t.Errorf("first append of %s answered Duplicate", rec.ID)
						}
						l.dupAfter++
					} else {
						l.acked[rec.ID] = res.Sequence
						l.ackTimes = append(l.ackTimes, now)
						l.ackLat = append(l.ackLat, now.Sub(start))
						l.ackBy = append(l.ackBy, w)
					}
					l.stored[rec.ID] = true
					l.byUID[uid] = append(l.byUID[uid], rec.ID)
					l.mu.Unlock()
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() { // read-your-acked-writes from another connection
		defer wg.Done()
		for !stop.Load() && ctx.Err() == nil {
			w := rand.IntN(len(l.uids))
			uid := l.uids[w][rand.IntN(len(l.uids[w]))]
			l.mu.Lock()
			want := append([]string(nil), l.byUID[uid]...)
			l.mu.Unlock()
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			recs, err := l.reader.Read(rctx, uid)
			cancel()
			l.mu.Lock()
			if err != nil {
				l.readErrs = append(l.readErrs, timedErr{time.Now(), err})
			} else {
				l.readTimes = append(l.readTimes, time.Now())
				got := map[string]bool{}
				for _, r := range recs {
					got[r.ID] = true
				}
				for _, id := range want {
					if !got[id] {
						var last uint64
						if len(recs) > 0 {
							last = recs[len(recs)-1].Sequence
						}
						l.stale = append(l.stale, fmt.Sprintf("%s (acked at sequence %d; read at %s returned %d of %d records, last sequence %d)",
							id, l.acked[id], time.Now().Format("15:04:05.000"), len(recs), len(want), last))
						break
					}
				}
			}
			l.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return &wg
}

// window summarises the appends and reads between from and to.
type window struct {
	acks, reads    int
	errs, readErrs int
	maxGap         time.Duration // longest time without any ack
	maxReadGap     time.Duration // longest time without a successful read
	firstAckAfter  time.Duration // from `from` to the first ack
	p50, p99, pmax time.Duration // append latency of the acks in the window
	firstErr       string
	firstReadErr   string
}

func (l *clusterLoad) window(from, to time.Time) window { return l.windowOf(from, to, -1) }

// windowOf is window over the acks of the writers in only (-1: all).
func (l *clusterLoad) windowOf(from, to time.Time, only int) window {
	l.mu.Lock()
	defer l.mu.Unlock()
	var w window
	prev := from
	var lat []time.Duration
	for i, at := range l.ackTimes {
		if at.Before(from) || at.After(to) || (only >= 0 && l.ackBy[i] != only) {
			continue
		}
		if w.acks == 0 {
			w.firstAckAfter = at.Sub(from)
		}
		w.acks++
		w.maxGap = max(w.maxGap, at.Sub(prev))
		prev = at
		lat = append(lat, l.ackLat[i])
	}
	w.maxGap = max(w.maxGap, to.Sub(prev))
	for _, e := range l.errs {
		if !e.at.Before(from) && !e.at.After(to) {
			if w.errs == 0 {
				w.firstErr = e.err.Error()
			}
			w.errs++
		}
	}
	prev = from
	for _, at := range l.readTimes {
		if !at.Before(from) && !at.After(to) {
			w.reads++
			w.maxReadGap = max(w.maxReadGap, at.Sub(prev))
			prev = at
		}
	}
	w.maxReadGap = max(w.maxReadGap, to.Sub(prev))
	for _, e := range l.readErrs {
		if !e.at.Before(from) && !e.at.After(to) {
			if w.readErrs == 0 {
				w.firstReadErr = e.err.Error()
			}
			w.readErrs++
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n := len(lat); n > 0 {
		w.p50, w.p99, w.pmax = lat[n/2], lat[(n*99)/100], lat[n-1]
	}
	return w
}

func (w window) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	s := fmt.Sprintf("%d acks, longest gap without an ack %s, first ack after %s, append p50 %s p99 %s max %s, %d append errors, %d reads (%d failed, longest gap without a read %s)",
		w.acks, r(w.maxGap), r(w.firstAckAfter), r(w.p50), r(w.p99), r(w.pmax), w.errs, w.reads+w.readErrs, w.readErrs, r(w.maxReadGap))
	if w.firstErr != "" {
		s += fmt.Sprintf(" (first: %s)", w.firstErr)
	}
	if w.firstReadErr != "" {
		s += fmt.Sprintf(" (first read error: %s)", w.firstReadErr)
	}
	return s
}

// connectFirst connects with every node's URL, trying first first (no
// shuffling), with the manager's options (journal.ClientOptions).
func connectFirst(t *testing.T, c *integration.NATSCluster, first int, name string) *nats.Conn {
	t.Helper()
	urls := c.URLs()
	urls = append(urls[first:], urls[:first]...)
	nc, err := nats.Connect(strings.Join(urls, ","), c.ClientOptions(journal.IdentityManager, append(journal.ClientOptions(name), nats.DontRandomize())...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// openAvoiding opens a store whose connection starts on the first running
// node that is not avoid (DontRandomize), so freezing avoid leaves the
// connection up and only silences what avoid answers. It returns the store
// and the node it connected to first.
func openAvoiding(t *testing.T, c *integration.NATSCluster, avoid *integration.NATSNode, name string, cfg journal.Config) (*journal.Store, *integration.NATSNode) {
	t.Helper()
	first := -1
	for i, n := range c.Nodes {
		if n != avoid && n.Running() {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatalf("no running node other than %s", avoid.Name)
	}
	s, err := journal.Open(context.Background(), connectFirst(t, c, first, name), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, c.Nodes[first]
}

// TestR3ClusterFaults runs the journal on a three-node JetStream cluster
// (stream replicas 3, every node sync_interval always) and appends and
// reads continuously through (a) SIGKILL of a node that does not lead the
// stream, (b) SIGKILL of the stream leader, (c) the stream leader stopped
// for 30 s, then back to catch up, and (d) a writer's server partitioned
// (frozen) for 30 s: the writer must move to another server meanwhile. Each connection starts on a
// different node, so every fault also drops a client connection that must
// reconnect to another node. Afterwards: every acknowledged record is in
// the stream at its acked sequence, exactly once; records whose ack was
// lost in a fault were stored once (a retry with the same ID answers
// Duplicate, never a second copy); the sequence has no gap; reads returned
// every record acked before them; Verify is clean. The figures (election
// time, append stall, catch-up) are logged for docs/journal.md.
func TestR3ClusterFaults(t *testing.T) {
	const partition = 30 * time.Second
	c := integration.StartNATSCluster(t, integration.NATSClusterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := journal.Config{Replicas: 3, Actor: "r3-test", Signer: testKey(t)}
	mk := func(first int, name string) *journal.Store {
		s, err := journal.Open(ctx, connectFirst(t, c, first, name), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	wa, wb, rd := mk(0, "writer-a"), mk(1, "writer-b"), mk(2, "reader")
	info, err := c.StreamInfo(ctx, journal.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream replicas %d, peers %+v", info.Config.Replicas, info.Cluster)
	}
	load := newClusterLoad(t, []*journal.Store{wa, wa, wa, wb, wb, wb}, rd, 5)
	var stop atomic.Bool
	wg := load.run(ctx, &stop)
	defer func() { stop.Store(true); wg.Wait() }()

	leader := func() *integration.NATSNode {
		t.Helper()
		l, err := c.WaitStreamLeader(ctx, journal.DefaultStreamName, nil, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	rejoin := func(n *integration.NATSNode) (healthy, current time.Duration) {
		t.Helper()
		start := time.Now()
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitHealthy(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		healthy = time.Since(start)
		if err := c.WaitStreamCurrent(ctx, journal.DefaultStreamName, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		current = time.Since(start)
		time.Sleep(3 * time.Second) // settle: the window ends 3 s after the node is back
		return healthy, current
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	// Appends and reads keep working through every fault: neither stops
	// for longer than an election plus a client timeout (a publish or a
	// read in flight when a node dies only ends at its timeout).
	check := func(phase string, w window) window {
		t.Helper()
		// An election takes 4-9 s (up to 16 s seen on a loaded machine);
		// a request in flight to a dead leader is sent again after 2 s, a
		// read's fetch waits 5 s and the test's reads end at 10 s.
		if w.acks == 0 || w.maxGap > 30*time.Second || w.maxReadGap > 35*time.Second {
			t.Errorf("%s: appends or reads stopped: %s", phase, w)
		}
		return w
	}
	time.Sleep(3 * time.Second)
	t.Logf("baseline (3 nodes): %s", load.window(time.Now().Add(-2*time.Second), time.Now()))

	// (a) SIGKILL of a node that does not lead the stream.
	l := leader()
	var victim *integration.NATSNode
	for _, n := range c.Nodes {
		if n != l {
			victim = n
			break
		}
	}
	at := time.Now()
	victim.Kill()
	time.Sleep(5 * time.Second)
	after, err := c.StreamLeader(ctx, journal.DefaultStreamName)
	if err != nil || after != l {
		t.Errorf("(a) the stream leader changed when a follower died: %v, %v", after, err)
	}
	h, cur := rejoin(victim)
	t.Logf("(a) follower %s SIGKILLed (leader %s): %s; back: healthy after %s, replicas current after %s",
		victim.Name, l.Name, check("(a)", load.window(at, time.Now())), r(h), r(cur))

	// (b) SIGKILL of the stream leader.
	l = leader()
	at = time.Now()
	l.Kill()
	nl, err := c.WaitStreamLeader(ctx, journal.DefaultStreamName, l, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Since(at)
	time.Sleep(3 * time.Second)
	h, cur = rejoin(l)
	t.Logf("(b) leader %s SIGKILLed: new leader %s after %s; %s; back: healthy after %s, replicas current after %s",
		l.Name, nl.Name, r(elected), check("(b)", load.window(at, time.Now())), r(h), r(cur))

	// (c) The stream leader is stopped for 30 s, then comes back on the same
	// store and catches up as a follower.
	l = leader()
	at = time.Now()
	l.Stop()
	stopped := time.Since(at)
	nl, err = c.WaitStreamLeader(ctx, journal.DefaultStreamName, l, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	elected = time.Since(at)
	time.Sleep(partition - time.Since(at))
	during := check("(c)", load.window(at, time.Now()))
	back := time.Now()
	h, cur = rejoin(l)
	t.Logf("(c) leader %s stopped for %s (shutdown took %s): new leader %s after %s; %s; back: healthy after %s, replicas current after %s",
		l.Name, partition, r(stopped), nl.Name, r(elected), during, r(h), r(cur))
	t.Logf("(c) after it came back: %s", check("(c) back", load.window(back, time.Now())))

	// (d) A partition between writer-a and its server: the server is
	// frozen (SIGSTOP) for 30 s, its connections stay open and silent. The
	// client's pings (journal.ClientOptions) declare it stale and move it
	// to another server well before the partition heals.
	frozen := c.ClientNode("writer-a")
	if frozen == nil {
		t.Fatal("writer-a is not connected")
	}
	l = leader()
	at = time.Now()
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(partition)
	wd := load.windowOf(at, time.Now(), 0)
	if wd.acks == 0 || wd.firstAckAfter > partition-time.Second {
		t.Errorf("(d) writer-a stayed on its partitioned server: %s", wd)
	}
	if err := frozen.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := frozen.WaitHealthy(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreamCurrent(ctx, journal.DefaultStreamName, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	t.Logf("(d) %s (stream leader: %s) frozen for %s: writer-a %s; all writers: %s; back and current %s after the thaw",
		frozen.Name, l.Name, partition, wd, check("(d)", load.window(at, time.Now())), r(time.Since(at)-partition))
	stop.Store(true)
	wg.Wait()

	// Every acknowledged record is stored once at its acked sequence; every
	// record Append accepted after an error is stored once too.
	info, err = c.StreamInfo(ctx, journal.DefaultStreamName)
	if err != nil {
		t.Fatal(err)
	}
	var (
		recs        []journal.Record
		undecodable []uint64
		gaps        []string
	)
	seen, next := map[string]uint64{}, uint64(1)
	if _, err := integration.ScanJournal(ctx, rd, func(rec journal.Record, err error) error {
		if err != nil {
			undecodable = append(undecodable, rec.Sequence)
		}
		if rec.Sequence != next {
			gaps = append(gaps, fmt.Sprintf("%d after %d", rec.Sequence, next-1))
		}
		next = rec.Sequence + 1
		if prev, dup := seen[rec.ID]; dup {
			t.Errorf("record %s stored twice (sequences %d and %d)", rec.ID, prev, rec.Sequence)
		}
		seen[rec.ID] = rec.Sequence
		recs = append(recs, rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(gaps) > 0 {
		t.Errorf("sequence gaps: %v", gaps)
	}
	load.mu.Lock()
	defer load.mu.Unlock()
	for id, seq := range load.acked {
		if got, ok := seen[id]; !ok {
			t.Errorf("acked record %s (sequence %d) lost", id, seq)
		} else if got != seq {
			t.Errorf("acked record %s at sequence %d, stored at %d", id, seq, got)
		}
	}
	for id := range load.stored {
		if _, ok := seen[id]; !ok {
			t.Errorf("accepted record %s lost", id)
		}
	}
	if uint64(len(recs)) != info.State.Msgs || info.State.FirstSeq != 1 || info.State.LastSeq != info.State.Msgs {
		t.Errorf("scan returned %d records, stream state %+v", len(recs), info.State)
	}
	if len(seen) != len(load.stored) {
		t.Errorf("stream holds %d records, the writers had %d accepted", len(seen), len(load.stored))
	}
	// A Read may be served by a replica that is still catching up (the
	// consumer behind it is placed on any replica of the stream): it must
	// wait for the records the leader had acked when it started, or fail.
	if len(load.stale) > 0 {
		t.Errorf("%d stale reads (a replica behind the leader served them):\n%s", len(load.stale), strings.Join(load.stale[:min(len(load.stale), 10)], "\n"))
	}
	if v := journal.Verify(recs, undecodable); len(v) > 0 {
		t.Errorf("verify: %d violations, e.g. %+v", len(v), v[0])
	}
	distinct := map[string]int{}
	for _, e := range append(append([]timedErr(nil), load.errs...), load.readErrs...) {
		distinct[e.err.Error()[strings.LastIndex(e.err.Error(), ":")+1:]]++
	}
	t.Logf("errors by kind: %v", distinct)
	t.Logf("total: %d records (%d acked, %d stored with the ack lost and answered Duplicate on retry), %d append errors, %d reads (%d failed), verify clean",
		len(recs), len(load.acked), load.dupAfter, len(load.errs), len(load.readTimes)+len(load.readErrs), len(load.readErrs))
}
