package journal

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the journal's own Prometheus metrics. Labels carry only
// operation names and result classes, never object data or values.
type Metrics struct {
	// AppendSeconds: time from Append call to server ack (incl. the read-first check).
	AppendSeconds prometheus.Histogram
	// DeliverySeconds: time from an intent's record time to its delivery to an executor.
	DeliverySeconds prometheus.Histogram
	// Outcomes counts outcomes appended by executors, by operation, result
	// class and reason (a stable CamelCase reason; "" for a success
	// without one). Refused untrusted intents count under operation
	// "Untrusted": an operation name from a record the manager did not
	// write never becomes a label.
	Outcomes *prometheus.CounterVec
	// AppendErrors counts Append calls that failed for another reason than
	// a lost optimistic-concurrency race or an invalid record (the journal
	// could not be written: NATS down, no stream leader, timeouts).
	AppendErrors prometheus.Counter
	// LastAppend is the Unix time (seconds, this process's clock) of the
	// last record this process stored.
	LastAppend prometheus.Gauge
	// Redeliveries counts deliveries of an intent after its first, by
	// operation (crashes, AckWait expiries, transient retries, hand-backs).
	Redeliveries *prometheus.CounterVec
	// RetriesExhausted counts intents ended with a Failed outcome because a
	// budget ran out, by operation and budget: "retries" (MaxDeliver
	// transient failures) or "deliveries" (DeliveryLimit deliveries
	// without an outcome).
	RetriesExhausted *prometheus.CounterVec
	// PullRestarts counts pulls of an executor consumer that failed (a
	// NATS fault) and were started again.
	PullRestarts prometheus.Counter
	// QueueSeconds: per operation, time from an intent's record time to
	// the start of its handler on its first delivery (waiting in the
	// stream and for a free executor slot, plus the outcome check).
	QueueSeconds *prometheus.HistogramVec
	// ExecutionSeconds: per operation, how long its handler ran (the
	// backend's work as the executor sees it).
	ExecutionSeconds *prometheus.HistogramVec
	// UntrustedRecords counts records and checkpoints without a valid
	// proof of origin that a reader dropped or an executor refused, by
	// reader (read, watch, checkpoint, executor). Any increase means
	// someone other than the manager wrote to the journal (an alert).
	UntrustedRecords *prometheus.CounterVec
	// TransientFailures counts attempts that failed transiently and were
	// handed back for redelivery (docs/decisions/0007), by operation and
	// reason: the retries that leave no record in the journal.
	TransientFailures *prometheus.CounterVec
	// Requests counts the JetStream requests this process's reads and
	// writes sent, by request: message_get (a read's last sequence and
	// the records after a kept View, from the stream leader),
	// consumer_create, consumer_delete and fetch (a read through a
	// consumer), publish (records and checkpoints). Each attempt counts.
	Requests *prometheus.CounterVec
	// ViewReads counts projector reads of an object's journal (ReadView)
	// by where they started: "cache" (the View this process read before,
	// continued) or "checkpoint" (the checkpoint and every record after it).
	ViewReads *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18) // 0.1 ms .. ~13 s
	m := &Metrics{
		AppendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ayatori_journal_append_seconds", Help: "Latency of journal appends until the server ack.", Buckets: buckets,
		}),
		DeliverySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ayatori_journal_intent_delivery_seconds", Help: "Time from an intent's append to its delivery to an executor.", Buckets: buckets,
		}),
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_outcomes_total", Help: "Outcomes appended by executors.",
		}, []string{"operation", "result", "reason"}),
		AppendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ayatori_journal_append_errors_total", Help: "Journal appends that failed because the journal could not be written (not lost races, not invalid records).",
		}),
		LastAppend: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ayatori_journal_last_append_timestamp_seconds", Help: "Unix time of the last record this process stored in the journal (its own clock).",
		}),
		Redeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_redeliveries_total", Help: "Deliveries of an intent to an executor after its first, by operation.",
		}, []string{"operation"}),
		RetriesExhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_retries_exhausted_total", Help: "Intents ended Failed because a retry budget ran out, by operation and budget (retries, deliveries).",
		}, []string{"operation", "budget"}),
		PullRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ayatori_journal_consumer_pull_restarts_total", Help: "Executor consumer pulls that failed on a NATS fault and were started again.",
		}),
		QueueSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ayatori_journal_intent_queue_seconds", Help: "Time from an intent's append to the start of its handler (first delivery), by operation.", Buckets: buckets,
		}, []string{"operation"}),
		ExecutionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ayatori_journal_execution_seconds", Help: "How long an intent's handler ran, by operation.", Buckets: buckets,
		}, []string{"operation"}),
		UntrustedRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_untrusted_records_total", Help: "Journal records and checkpoints without a valid proof of origin, dropped by a reader or refused by an executor.",
		}, []string{"reader"}),
		TransientFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_transient_failures_total", Help: "Executor attempts that failed transiently and were redelivered, by operation and reason.",
		}, []string{"operation", "reason"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_requests_total", Help: "JetStream requests sent by this process's journal reads and writes, by request (message_get, consumer_create, consumer_delete, fetch, publish).",
		}, []string{"request"}),
		ViewReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ayatori_journal_view_reads_total", Help: "Projector reads of an object's journal, by where they started (cache: the View read before, continued; checkpoint).",
		}, []string{"from"}),
	}
	// Series an alert reads with increase() exist at 0 from the start: a
	// counter's first increment would otherwise be its first sample, which
	// increase() can not see.
	for _, reader := range []string{"read", "watch", "checkpoint", "executor"} {
		m.UntrustedRecords.WithLabelValues(reader)
	}
	if reg != nil {
		reg.MustRegister(m.AppendSeconds, m.DeliverySeconds, m.Outcomes, m.PullRestarts, m.QueueSeconds, m.ExecutionSeconds, m.UntrustedRecords, m.TransientFailures,
			m.AppendErrors, m.LastAppend, m.Redeliveries, m.RetriesExhausted, m.Requests, m.ViewReads)
	}
	return m
}

func (m *Metrics) observeAppend(d time.Duration) {
	if m != nil {
		m.AppendSeconds.Observe(d.Seconds())
		m.LastAppend.SetToCurrentTime()
	}
}

func (m *Metrics) countAppendError() {
	if m != nil {
		m.AppendErrors.Inc()
	}
}

func (m *Metrics) countRedelivery(op string) {
	if m != nil {
		m.Redeliveries.WithLabelValues(op).Inc()
	}
}

// initOperations creates the per-operation counters an alert reads at 0
// (the operations an executor consumer handles).
func (m *Metrics) initOperations(ops []string) {
	if m == nil {
		return
	}
	for _, op := range ops {
		m.RetriesExhausted.WithLabelValues(op, "retries")
		m.RetriesExhausted.WithLabelValues(op, "deliveries")
		m.Redeliveries.WithLabelValues(op)
	}
}

func (m *Metrics) countExhausted(op, budget string) {
	if m != nil {
		m.RetriesExhausted.WithLabelValues(op, budget).Inc()
	}
}

func (m *Metrics) observeDelivery(d time.Duration) {
	if m != nil && d >= 0 {
		m.DeliverySeconds.Observe(d.Seconds())
	}
}

func (m *Metrics) countOutcome(op string, r Result) {
	if m != nil {
		m.Outcomes.WithLabelValues(op, string(r.Class), r.Reason).Inc()
	}
}

func (m *Metrics) countUntrusted(reader string) {
	if m != nil {
		m.UntrustedRecords.WithLabelValues(reader).Inc()
	}
}

func (m *Metrics) countRequest(request string) {
	if m != nil {
		m.Requests.WithLabelValues(request).Inc()
	}
}

func (m *Metrics) countViewRead(from string) {
	if m != nil {
		m.ViewReads.WithLabelValues(from).Inc()
	}
}

func (m *Metrics) countPullRestart() {
	if m != nil {
		m.PullRestarts.Inc()
	}
}

func (m *Metrics) observeExecution(op string, queued, ran time.Duration, first bool) {
	if m == nil {
		return
	}
	if first && queued >= 0 {
		m.QueueSeconds.WithLabelValues(op).Observe(queued.Seconds())
	}
	m.ExecutionSeconds.WithLabelValues(op).Observe(ran.Seconds())
}

func (m *Metrics) countTransient(op string, err error) {
	if m == nil {
		return
	}
	reason := ReasonRetriesExhausted
	if f := AsFailure(err); f != nil && f.Reason != "" {
		reason = f.Reason
	}
	m.TransientFailures.WithLabelValues(op, reason).Inc()
}
