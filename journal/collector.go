package journal

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StreamCollector probes the journal stream and the executors' durable
// consumers at every scrape (one STREAM.INFO and one CONSUMER.INFO per
// consumer, each bounded by Timeout) and reports:
//
//	ayatori_journal_up: 1 when the stream answered (a leader exists and
//	this process reaches it), else 0;
//	ayatori_journal_stream_messages, ayatori_journal_stream_bytes;
//	ayatori_journal_stream_replicas{state="current"|"lagging"|"offline"}:
//	the stream's peers as its leader sees them (only with Replicas > 1);
//	ayatori_journal_consumer_pending_messages{consumer}: intents not yet
//	delivered to any executor (the consumer's lag);
//	ayatori_journal_consumer_ack_pending_messages{consumer}: intents
//	delivered and not settled yet;
//	ayatori_journal_consumer_redelivered_messages{consumer}: of those, the
//	ones delivered more than once.
//
// Consumer names are the manager's own durables: bounded labels.
//
// A scrape within MinInterval of the last probe gets that probe's figures
// (concurrent scrapes wait for one probe): however often /metrics is
// requested, the journal is asked at most once per MinInterval.
type StreamCollector struct {
	Store     *Store
	Consumers []string
	// Timeout bounds each probe (0: 2 s).
	Timeout time.Duration
	// MinInterval between two probes (0: 10 s; < 0: every scrape).
	MinInterval time.Duration

	mu     sync.Mutex
	last   []prometheus.Metric
	lastAt time.Time
}

var (
	journalUpDesc = prometheus.NewDesc("ayatori_journal_up",
		"1 when the journal stream answered this process's probe at the last scrape, else 0.", nil, nil)
	streamMessagesDesc = prometheus.NewDesc("ayatori_journal_stream_messages",
		"Records (messages) in the journal stream.", nil, nil)
	streamBytesDesc = prometheus.NewDesc("ayatori_journal_stream_bytes",
		"Bytes stored in the journal stream.", nil, nil)
	streamReplicasDesc = prometheus.NewDesc("ayatori_journal_stream_replicas",
		"The journal stream's peers by state (current, lagging, offline), the leader included, as the leader reports them.",
		[]string{"state"}, nil)
	consumerPendingDesc = prometheus.NewDesc("ayatori_journal_consumer_pending_messages",
		"Intents not yet delivered to an executor, by durable consumer.", []string{"consumer"}, nil)
	consumerAckPendingDesc = prometheus.NewDesc("ayatori_journal_consumer_ack_pending_messages",
		"Intents delivered to an executor and not settled yet, by durable consumer.", []string{"consumer"}, nil)
	consumerRedeliveredDesc = prometheus.NewDesc("ayatori_journal_consumer_redelivered_messages",
		"Intents delivered more than once and not settled yet, by durable consumer.", []string{"consumer"}, nil)
)

// Describe implements prometheus.Collector.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{journalUpDesc, streamMessagesDesc, streamBytesDesc, streamReplicasDesc,
		consumerPendingDesc, consumerAckPendingDesc, consumerRedeliveredDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	every := c.MinInterval
	if every == 0 {
		every = 10 * time.Second
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || every < 0 || time.Since(c.lastAt) >= every {
		buf := make(chan prometheus.Metric, 64)
		go func() {
			c.probe(buf)
			close(buf)
		}()
		c.last = c.last[:0]
		for m := range buf {
			c.last = append(c.last, m)
		}
		c.lastAt = time.Now()
	}
	for _, m := range c.last {
		ch <- m
	}
}

func (c *StreamCollector) probe(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	info, err := c.Store.stream.Info(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(journalUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(journalUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(streamMessagesDesc, prometheus.GaugeValue, float64(info.State.Msgs))
	ch <- prometheus.MustNewConstMetric(streamBytesDesc, prometheus.GaugeValue, float64(info.State.Bytes))
	if cl := info.Cluster; cl != nil && len(cl.Replicas) > 0 {
		state := map[string]int{"current": 1, "lagging": 0, "offline": 0} // the leader
		for _, p := range cl.Replicas {
			switch {
			case p.Offline:
				state["offline"]++
			case p.Current:
				state["current"]++
			default:
				state["lagging"]++
			}
		}
		for s, n := range state {
			ch <- prometheus.MustNewConstMetric(streamReplicasDesc, prometheus.GaugeValue, float64(n), s)
		}
	}
	for _, name := range c.Consumers {
		cctx, ccancel := context.WithTimeout(context.Background(), timeout)
		// Consumer is one CONSUMER.INFO call; its answer is CachedInfo.
		if cons, err := c.Store.stream.Consumer(cctx, name); err == nil {
			ci := cons.CachedInfo()
			ch <- prometheus.MustNewConstMetric(consumerPendingDesc, prometheus.GaugeValue, float64(ci.NumPending), name)
			ch <- prometheus.MustNewConstMetric(consumerAckPendingDesc, prometheus.GaugeValue, float64(ci.NumAckPending), name)
			ch <- prometheus.MustNewConstMetric(consumerRedeliveredDesc, prometheus.GaugeValue, float64(ci.NumRedelivered), name)
		}
		ccancel()
	}
}
