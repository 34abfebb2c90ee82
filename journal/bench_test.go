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
	url, cfg := "", journal.Config{Actor: "bench"}
	if r3 {
		url, cfg.Replicas = integration.StartNATSCluster(b, integration.NATSClusterOptions{Log: func(string, ...any) {}}).URL(), 3
	} else {
		url = integration.StartNATS(b).URL
	}
	nc, err := nats.Connect(url)
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
	total := 1_000_000
	if v := os.Getenv("AYATORI_BENCH_RECORDS"); v != "" {
		total, _ = strconv.Atoi(v)
	}
	largeOnce.Do(func() { largeUID, largeErr = populateLarge(b, total) })
	if largeErr != nil {
		b.Fatal(largeErr)
	}
	nc, _ := nats.Connect(largeNATS.URL)
	defer nc.Close()
	ctx := context.Background()
	st, err := journal.Open(ctx, nc, journal.Config{Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		recs, err := st.Read(ctx, largeUID)
		if err != nil {
			b.Fatal(err)
		}
		if rows := journal.Timeline(recs); len(rows) != 5 {
			b.Fatalf("timeline has %d rows", len(rows))
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

var (
	largeOnce sync.Once
	largeNATS *integration.NATS
	largeUID  string
	largeErr  error
)

// populateLarge bulk-loads total records with sync_interval always off, then
// restarts the server on the same store with it on, so the measured reads
// run with the production setting. The server lives until the process ends.
func populateLarge(b *testing.B, total int) (string, error) {
	n, err := integration.NewNATS(integration.NATSOptions{NoSyncAlways: true})
	if err != nil {
		return "", err
	}
	largeNATS = n
	nc, err := nats.Connect(n.URL)
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
	var target journal.ObjectRef
	for i := 0; i < total/10; i++ {
		if i%200 == 0 {
			<-js.PublishAsyncComplete()
		}
		o := obj()
		if i == total/20 {
			target = o
		}
		for k := 0; k < 5; k++ {
			in, _ := journal.NewIntent(o, fmt.Sprintf("Op%d", k), "", 1, nil)
			in.Time, in.Actor = time.Now(), "bench"
			out, _ := journal.NewOutcome(in, journal.Result{Class: journal.Succeeded}, nil)
			out.Time, out.Actor = time.Now(), "bench"
			for _, r := range []journal.Record{in, out} {
				data, _ := json.Marshal(r)
				if _, err := js.PublishAsync("ayatori.journal.database."+o.UID+"."+string(r.Type), data); err != nil {
					return "", err
				}
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Minute):
		return "", fmt.Errorf("population did not complete")
	}
	b.Logf("populated %d records in %s", total, time.Since(populateStart).Round(time.Second))
	nc.Close()
	n.SetSyncAlways(true)
	if err := n.Restart(); err != nil {
		return "", err
	}
	return target.UID, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if largeNATS != nil {
		largeNATS.Close()
	}
	os.Exit(code)
}
