package journaled

import (
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// passSeconds times the phases of one projector pass, by kind: read (the
// journal view), plan (facts and decision), append (the record), status
// (the status write), finalizer (adding or removing it). The bench's
// critical-path breakdown reads it; labels carry no object data.
var passSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "ayatori_projector_pass_phase_seconds",
	Help:    "Time spent in each phase of a projector pass, by kind and phase.",
	Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
}, []string{"kind", "phase"})

func init() { crmetrics.Registry.MustRegister(passSeconds) }

// phaseTimer observes the time since its last call under the phase named.
type phaseTimer struct {
	kind string
	last time.Time
}

func newPhaseTimer(obj any) *phaseTimer {
	t := reflect.TypeOf(obj)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return &phaseTimer{kind: t.Name(), last: time.Now()}
}

func (p *phaseTimer) done(phase string) {
	now := time.Now()
	passSeconds.WithLabelValues(p.kind, phase).Observe(now.Sub(p.last).Seconds())
	p.last = now
}
