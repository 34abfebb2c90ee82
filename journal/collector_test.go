package journal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestStreamCollectorFollowsNATS: the journal probe reports the stream and
// the executors' consumer lag while NATS answers, ayatori_journal_up 0 while
// it is stopped (and an append then counts as an append error), 1 again
// after it is back.
func TestStreamCollectorFollowsNATS(t *testing.T) {
	n := integration.StartNATS(t)
	reg := prometheus.NewRegistry()
	m := journal.NewMetrics(reg)
	s := open(t, n, journal.Config{Actor: "test", Metrics: m})
	ctx := context.Background()
	if _, err := s.DurableConsumer(ctx, "database", journal.ConsumerConfig{Durable: "ayatori-executor-database-v1"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Append(ctx, intent(t, obj(), "CreateRole", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	c := &journal.StreamCollector{Store: s, Consumers: []string{"ayatori-executor-database-v1", "absent-consumer"}, MinInterval: -1}
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP ayatori_journal_consumer_pending_messages Intents not yet delivered to an executor, by durable consumer.
# TYPE ayatori_journal_consumer_pending_messages gauge
ayatori_journal_consumer_pending_messages{consumer="ayatori-executor-database-v1"} 3
# HELP ayatori_journal_up 1 when the journal stream answered this process's probe at the last scrape, else 0.
# TYPE ayatori_journal_up gauge
ayatori_journal_up 1
`
	// nats-server counts a consumer's pending messages asynchronously, after
	// the stream acknowledged the append: the gauge reaches 3 soon after,
	// not at once (a CI run saw 2). Wait for it, bounded.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err = testutil.GatherAndCompare(reg, strings.NewReader(want), "ayatori_journal_up", "ayatori_journal_consumer_pending_messages")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.LastAppend); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last append timestamp %v, want about now", got)
	}

	// A collector with the default MinInterval answers a scrape within 10 s
	// of its last probe from that probe: /metrics requests never reach NATS
	// more often.
	cachedReg := prometheus.NewRegistry()
	cachedReg.MustRegister(&journal.StreamCollector{Store: s})
	upOnly := `
# HELP ayatori_journal_up 1 when the journal stream answered this process's probe at the last scrape, else 0.
# TYPE ayatori_journal_up gauge
ayatori_journal_up 1
`
	if err := testutil.GatherAndCompare(cachedReg, strings.NewReader(upOnly), "ayatori_journal_up"); err != nil {
		t.Fatal(err)
	}

	n.Stop()
	if err := testutil.GatherAndCompare(cachedReg, strings.NewReader(upOnly), "ayatori_journal_up"); err != nil {
		t.Fatalf("a scrape right after the last probe asked NATS again: %v", err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ayatori_journal_up 1 when the journal stream answered this process's probe at the last scrape, else 0.
# TYPE ayatori_journal_up gauge
ayatori_journal_up 0
`), "ayatori_journal_up", "ayatori_journal_consumer_pending_messages"); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = s.Append(actx, intent(t, obj(), "CreateRole", 1))
	cancel()
	if err == nil {
		t.Fatal("append with NATS stopped succeeded")
	}
	if got := testutil.ToFloat64(m.AppendErrors); got != 0 {
		// The append's own context ended: not counted as the journal's fault.
		t.Fatalf("append errors %v after a timed-out append, want 0", got)
	}
	// An append whose context is fine but that NATS can not take counts.
	_, err = s.Append(ctx, intent(t, obj(), "CreateRole", 1))
	if err == nil {
		t.Fatal("append with NATS stopped succeeded")
	}
	if got := testutil.ToFloat64(m.AppendErrors); got != 1 {
		t.Fatalf("append errors %v, want 1", got)
	}

	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := testutil.GatherAndCount(reg, "ayatori_journal_stream_messages")
		if err == nil && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ayatori_journal_up did not return to 1 after NATS restarted")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
