package journaled

import (
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// pendingIntents is what the leader's passes last saw pending, per object:
// the intents decided and not yet answered by an outcome, with the local
// time this process first observed each (Observations; never another
// host's clock). It is a Prometheus collector: at every scrape it reports,
// per domain, kind and operation, how many intents are pending and the age
// of the oldest. Only the replica that runs the projectors (the leader)
// reports anything. Labels carry no object data.
var pendingIntents = &pendingSet{objects: map[pendingKey]pendingObject{}, now: time.Now}

func init() { crmetrics.Registry.MustRegister(pendingIntents) }

type pendingKey struct {
	kind string
	name types.NamespacedName
}

type pendingObject struct {
	domain string
	since  map[string]time.Time // operation -> oldest pending intent's observation time
	count  map[string]int       // operation -> pending intents
}

type pendingSet struct {
	mu      sync.Mutex
	objects map[pendingKey]pendingObject
	now     func() time.Time
}

var (
	pendingDesc = prometheus.NewDesc("ayatori_intents_pending",
		"Intents decided and not yet answered by an outcome, as the leader's last pass of each object saw them, by domain, kind and operation.",
		[]string{"domain", "kind", "operation"}, nil)
	oldestDesc = prometheus.NewDesc("ayatori_intent_oldest_pending_age_seconds",
		"Age of the oldest pending intent, by domain, kind and operation: seconds since the leader first observed it (its own clock).",
		[]string{"domain", "kind", "operation"}, nil)
)

// Describe implements prometheus.Collector.
func (p *pendingSet) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- oldestDesc
}

// Collect implements prometheus.Collector.
func (p *pendingSet) Collect(ch chan<- prometheus.Metric) {
	type key struct{ domain, kind, op string }
	count := map[key]int{}
	oldest := map[key]time.Time{}
	p.mu.Lock()
	for k, o := range p.objects {
		for op, n := range o.count {
			kk := key{o.domain, k.kind, op}
			count[kk] += n
			if t, ok := oldest[kk]; !ok || o.since[op].Before(t) {
				oldest[kk] = o.since[op]
			}
		}
	}
	p.mu.Unlock()
	now := p.now()
	for k, n := range count {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(n), k.domain, k.kind, k.op)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, max(now.Sub(oldest[k]).Seconds(), 0), k.domain, k.kind, k.op)
	}
}

// set records the pending intents a pass saw for obj (none: forget it).
func (p *pendingSet) set(kind, domain string, name types.NamespacedName, pending []journal.Record) {
	k := pendingKey{kind, name}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(pending) == 0 {
		delete(p.objects, k)
		return
	}
	o := pendingObject{domain: domain, since: map[string]time.Time{}, count: map[string]int{}}
	for _, r := range pending {
		o.count[r.Operation]++
		if t, ok := o.since[r.Operation]; !ok || r.Time.Before(t) {
			o.since[r.Operation] = r.Time
		}
	}
	p.objects[k] = o
}

// kindOf names obj's Go type ("PostgreSQLTenant") and its domain: the
// package directory above the API version ("database" for
// .../api/database/v1alpha1).
func kindOf(obj any) (kind, domain string) {
	t := reflect.TypeOf(obj)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	parts := strings.Split(t.PkgPath(), "/")
	if len(parts) >= 2 {
		domain = parts[len(parts)-2]
	}
	return t.Name(), domain
}
