package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Benchmarks run against an embedded JetStream server with file storage and
// sync_interval always (every ack follows an fsync); the *R3 ones against a
// three-node cluster of nats-server processes, each with sync_interval
// always, and the stream at replicas 3. Figures are recorded
// in docs/journal.md; run them with `make bench-journal`.

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(p(0.50), "p50-ms")
	b.ReportMetric(p(0.99), "p99-ms")
}

// benchStore opens a journal on one embedded server, or with r3 on a
// three-node cluster (nats-server processes, sync_interval always on each)
// with stream replicas 3.
func benchStore(b *testing.B, r3 bool) *journal.Store {
	cfg := journal.Config{Actor: "bench", Signer: testKey(b)}
	var nc *nats.Conn
	var err error
	if r3 {
		cfg.Replicas = 3
		nc, err = integration.StartNATSCluster(b, integration.NATSClusterOptions{Log: func(string, ...any) {}}).Connect(journal.IdentityManager)
	} else {
		nc, err = integration.StartNATS(b).Connect(journal.IdentityManager)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	st, err := journal.Open(context.Background(), nc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return st
}

func benchAppend(b *testing.B, uids int, r3 bool) {
	st := benchStore(b, r3)
	objs := make([]journal.ObjectRef, uids)
	for i := range objs {
		objs[i] = obj()
	}
	lat := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, _ := journal.NewIntent(objs[i%uids], "ObserveInstance", "", i+1, nil)
		start := time.Now()
		if _, err := st.Append(ctx, &r); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkAppendOneUID: sequential appends to one UID.
func BenchmarkAppendOneUID(b *testing.B) { benchAppend(b, 1, false) }

// BenchmarkAppend100UIDs: sequential appends spread over 100 UIDs.
func BenchmarkAppend100UIDs(b *testing.B) { benchAppend(b, 100, false) }

// BenchmarkAppendOneUIDR3: BenchmarkAppendOneUID on a three-node cluster,
// stream replicas 3.
func BenchmarkAppendOneUIDR3(b *testing.B) { benchAppend(b, 1, true) }

// BenchmarkAppendConcurrent: concurrent appenders (GOMAXPROCS x 8
// goroutines), each on its own UID; reports records/s.
func BenchmarkAppendConcurrent(b *testing.B) { benchAppendConcurrent(b, false) }

// BenchmarkAppendConcurrentR3: BenchmarkAppendConcurrent on a three-node
// cluster, stream replicas 3.
func BenchmarkAppendConcurrentR3(b *testing.B) { benchAppendConcurrent(b, true) }

func benchAppendConcurrent(b *testing.B, r3 bool) {
	st := benchStore(b, r3)
	var seq atomic.Int64
	b.SetParallelism(8)
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		o := obj()
		for pb.Next() {
			r, _ := journal.NewIntent(o, "ObserveInstance", "", int(seq.Add(1)), nil)
			if _, err := st.Append(context.Background(), &r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkReadOneUID: Read of one UID holding 20 records (what a
// projector does per reconcile); reports the share of reads that failed
// (and were repeated).
func BenchmarkReadOneUID(b *testing.B) { benchRead(b, false) }

// BenchmarkReadOneUIDR3: BenchmarkReadOneUID on a three-node cluster,
// stream replicas 3.
func BenchmarkReadOneUIDR3(b *testing.B) { benchRead(b, true) }

func benchRead(b *testing.B, r3 bool) {
	st := benchStore(b, r3)
	ctx := context.Background()
	o := obj()
	for i := 1; i <= 20; i++ {
		r, _ := journal.NewIntent(o, "ObserveInstance", "", i, nil)
		if _, err := st.Append(ctx, &r); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	failed := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for {
			recs, err := st.Read(ctx, o.UID)
			if err == nil && len(recs) == 20 {
				break
			}
			if failed++; failed > b.N {
				b.Fatalf("reads keep failing: %v (%d records)", err, len(recs))
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
	b.ReportMetric(100*float64(failed)/float64(b.N+failed), "failed-%")
}

// BenchmarkFold: folding records in memory; reports records/s.
func BenchmarkFold(b *testing.B) {
	o := obj()
	recs := make([]journal.Record, 0, 1000)
	for i := 1; len(recs) < 1000; i++ {
		in, _ := journal.NewIntent(o, fmt.Sprintf("Op%d", i%12), "", i, nil)
		in.Sequence = uint64(len(recs) + 1)
		recs = append(recs, in)
		out, _ := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, nil)
		out.Sequence = uint64(len(recs) + 1)
		recs = append(recs, out)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st := journal.Fold(recs)
		if len(st.Pending()) != 0 {
			b.Fatal("pending")
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkTimelineLargeStream: read + pair one UID's records in a stream of
// AYATORI_BENCH_RECORDS records (default 1,000,000; 10 records per UID).
// The stream is populated with async publishes (population speed is not
// what is measured).
func BenchmarkTimelineLargeStream(b *testing.B) {
	benchTimelineLarge(b, &tenantStream, tenantRecords, 5)
}

// BenchmarkTimelineLargeStreamJob: the same for one Ayatori Job in a
// stream of execution-domain records only: every UID holds the 10 records
// of a Job that ran, succeeded and was deleted after its TTL (Ensure,
// Observe, Finished, TTLExpired, two Deletes, with their payloads: what
// `go run ./integration/bench -jobs 1000 -ttl 0` journals per Job), so
// 100,000 Jobs in 1,000,000 records. Its timeline has 6 rows.
func BenchmarkTimelineLargeStreamJob(b *testing.B) {
	benchTimelineLarge(b, &jobStream, jobRecords, 6)
}

// benchTimelineLarge populates ls once (records makes every UID's
// records) and times reading one UID's records and pairing them into its
// timeline, which must have rows rows.
func benchTimelineLarge(b *testing.B, ls *largeStream, records func(journal.ObjectRef) []journal.Record, rows int) {
	total := 1_000_000
	if v := os.Getenv("AYATORI_BENCH_RECORDS"); v != "" {
		total, _ = strconv.Atoi(v)
	}
	ls.once.Do(func() { ls.uid, ls.err = populateLarge(b, ls, total, records) })
	if ls.err != nil {
		b.Fatal(ls.err)
	}
	nc, _ := ls.nats.Connect(journal.IdentityManager)
	defer nc.Close()
	ctx := context.Background()
	st, err := journal.Open(ctx, nc, journal.Config{Actor: "bench", Signer: testKey(b)})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		recs, err := st.Read(ctx, ls.uid)
		if err != nil {
			b.Fatal(err)
		}
		if got := journal.Timeline(recs); len(got) != rows {
			b.Fatalf("timeline has %d rows, want %d", len(got), rows)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// largeStream is one populated server of a large-stream benchmark; it
// lives until the process ends.
type largeStream struct {
	once sync.Once
	nats *integration.NATS
	uid  string
	err  error
}

var tenantStream, jobStream largeStream

// tenantRecords are a Tenant's 10 records: five intents with their
// outcomes.
func tenantRecords(o journal.ObjectRef) []journal.Record {
	var recs []journal.Record
	for k := 0; k < 5; k++ {
		in, _ := journal.NewIntent(o, fmt.Sprintf("Op%d", k), "", 1, nil)
		out, _ := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, nil)
		recs = append(recs, in, out)
	}
	return recs
}

// jobRecords are the 10 records of an Ayatori Job (o's group and kind
// replaced) that succeeded and was deleted after its TTL: Ensure (created,
// running), Observe (succeeded), Finished, TTLExpired, Delete (stopping),
// Delete (not found).
func jobRecords(o journal.ObjectRef) []journal.Record {
	o.Group, o.Kind, o.Namespace, o.Name = "execution.ayatori.ddupan.top", "Job", "bench-jobs", "j"+o.UID[len(o.UID)-5:]
	refs := []execution.Reference{{Type: "batch/v1/Job", ID: "bench-jobs/ayatori-" + o.UID}}
	exit := int32(0)
	var recs []journal.Record
	step := func(op string, attempt int, payload any, obs execution.Observation) {
		in, _ := journal.NewIntent(o, op, "", attempt, payload)
		out, _ := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, obs)
		recs = append(recs, in, out)
	}
	note := func(op string, payload any) {
		r := journal.Record{SchemaVersion: journal.SchemaVersion, ID: o.UID + "/note/" + op, Type: journal.TypeNote, Operation: op, Object: o, Attempt: 1}
		_ = r.SetPayload(payload)
		recs = append(recs, r)
	}
	step(execution.OpEnsure, 1, execution.EnsureIntent{Adapter: execution.AdapterKubernetes, JobClass: "std", JobClassUID: "c1a55000-0000-0000-0000-000000000001",
		ParametersKind: "KubernetesExecutionParameters", ParametersName: "std", ParametersUID: "9a7a0000-0000-0000-0000-000000000001",
		Image: "ayatori.test/succeed", TaskDigest: "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"},
		execution.Observation{State: execution.StatePending, Adapter: execution.AdapterKubernetes, References: refs, Created: true})
	step(execution.OpObserve, 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, References: refs},
		execution.Observation{Terminal: true, State: execution.StateSucceeded, Adapter: execution.AdapterKubernetes, References: refs, ExitCode: &exit, Reason: "Completed"})
	note(execution.NoteFinished, execution.FinishedNote{Succeeded: true, Reason: "Completed", ExitCode: &exit})
	note(execution.NoteTTLExpired, execution.TTLNote{})
	step(execution.OpDelete, 1, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, References: refs},
		execution.Observation{Terminal: true, State: execution.StateStopping, Adapter: execution.AdapterKubernetes, References: refs})
	step(execution.OpDelete, 2, execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, References: refs},
		execution.Observation{Terminal: true, State: execution.StateNotFound, Adapter: execution.AdapterKubernetes})
	return recs
}

// populateLarge bulk-loads total records into a new server of ls, each
// UID's made by records, with sync_interval always off, then restarts the
// server on the same store with it on, so the measured reads run with the
// production setting. It returns the UID in the middle of the stream.
func populateLarge(b *testing.B, ls *largeStream, total int, records func(journal.ObjectRef) []journal.Record) (string, error) {
	n, err := integration.NewNATS(integration.NATSOptions{NoSyncAlways: true})
	if err != nil {
		return "", err
	}
	ls.nats = n
	nc, err := n.Connect(journal.IdentityManager)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	ctx := context.Background()
	if _, err := journal.Open(ctx, nc, journal.Config{Actor: "bench"}); err != nil {
		return "", err
	}
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	populateStart := time.Now()
	perUID := len(records(obj()))
	var target string
	for i := 0; i < total/perUID; i++ {
		if i%200 == 0 {
			<-js.PublishAsyncComplete()
		}
		o := obj()
		if i == total/perUID/2 {
			target = o.UID
		}
		for _, r := range records(o) {
			r.Time, r.Actor = time.Now(), "bench"
			if err := r.Sign(testKey(b)); err != nil {
				return "", err
			}
			domain, err := journal.Domain(r.Object.Group)
			if err != nil {
				return "", err
			}
			data, _ := json.Marshal(r)
			if _, err := js.PublishAsync("ayatori.journal."+domain+"."+o.UID+"."+string(r.Type), data); err != nil {
				return "", err
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Minute):
		return "", fmt.Errorf("population did not complete")
	}
	b.Logf("populated %d records (%d per UID) in %s", total, perUID, time.Since(populateStart).Round(time.Second))
	nc.Close()
	n.SetSyncAlways(true)
	if err := n.Restart(); err != nil {
		return "", err
	}
	return target, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, ls := range []*largeStream{&tenantStream, &jobStream} {
		if ls.nats != nil {
			ls.nats.Close()
		}
	}
	os.Exit(code)
}
