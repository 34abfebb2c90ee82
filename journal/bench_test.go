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
// sync_interval always (every ack follows an fsync). Figures are recorded
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

func benchAppend(b *testing.B, uids int) {
	n := integration.StartNATS(b)
	nc, _ := nats.Connect(n.URL)
	defer nc.Close()
	st, err := journal.Open(context.Background(), nc, journal.Config{Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
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
func BenchmarkAppendOneUID(b *testing.B) { benchAppend(b, 1) }

// BenchmarkAppend100UIDs: sequential appends spread over 100 UIDs.
func BenchmarkAppend100UIDs(b *testing.B) { benchAppend(b, 100) }

// BenchmarkAppendConcurrent: concurrent appenders (GOMAXPROCS x 8
// goroutines), each on its own UID; reports records/s.
func BenchmarkAppendConcurrent(b *testing.B) {
	n := integration.StartNATS(b)
	nc, _ := nats.Connect(n.URL)
	defer nc.Close()
	st, err := journal.Open(context.Background(), nc, journal.Config{Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
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
