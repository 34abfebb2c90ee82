package journaled

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConditionKind is one kind an ObjectConditions collector reports.
type ConditionKind struct {
	// Domain and Kind are the labels ("database", "PostgreSQLTenant").
	Domain, Kind string
	// Condition is the condition type reported ("Ready"; "Succeeded" for a
	// Job).
	Condition string
	// NewList returns an empty list of the kind (a pointer).
	NewList func() client.ObjectList
	// Conditions reads an object's status conditions.
	Conditions func(obj client.Object) []metav1.Condition
	// Reasons are the condition reasons the API defines; any other value
	// (a status someone else wrote) is reported as "Other", so a label
	// never takes a value from outside the API's enumeration.
	Reasons []string
}

// ObjectConditions is a Prometheus collector over the manager's informer
// cache: at every scrape it lists each kind and reports
//
//	ayatori_objects{domain,kind,condition,status,reason}: objects per
//	condition status and reason ("" status and reason "None": no such
//	condition yet; Deleting objects count as they are);
//	ayatori_objects_condition_age_seconds_max{...}: for the same groups,
//	the largest age of the condition (now minus its lastTransitionTime,
//	written by the replica that set it: a clock skew between replicas
//	shifts it by the skew; no decision reads it, alerts "for long" do).
//
// Every replica reports the same figures (each has the cache); alerts
// aggregate with max. Labels carry no object name, namespace or UID.
//
// Only while Active says so (nil: always) does it list: the leader's cache
// holds the kinds already, a standby's would start informers for them.
// A scrape within MinInterval (0: 10 s; < 0: none) of the last listing
// gets that listing's figures, so /metrics requests never list more often.
type ObjectConditions struct {
	Reader client.Reader
	Kinds  []ConditionKind
	// Now is the clock for ages (nil: time.Now).
	Now         func() time.Time
	Active      func() bool
	MinInterval time.Duration

	mu       sync.Mutex
	last     []prometheus.Metric
	lastAt   time.Time
	notReady map[types.UID]time.Time // first scrape that saw the object's condition not True
}

var (
	objectsDesc = prometheus.NewDesc("ayatori_objects",
		"Objects per kind by the status and reason of their main condition (Ready; Succeeded for a Job).",
		[]string{"domain", "kind", "condition", "status", "reason"}, nil)
	conditionAgeDesc = prometheus.NewDesc("ayatori_objects_condition_age_seconds_max",
		"Largest time since lastTransitionTime among the objects of a kind with this condition status and reason.",
		[]string{"domain", "kind", "condition", "status", "reason"}, nil)
	notReadyDesc = prometheus.NewDesc("ayatori_objects_not_ready_seconds_max",
		"Largest time an object of the group has been without its condition True, by its current status and reason: since the first scrape of this process that saw it so (its own clock; a status change between False and Unknown does not reset it, True does).",
		[]string{"domain", "kind", "condition", "status", "reason"}, nil)
	listErrorsDesc = prometheus.NewDesc("ayatori_objects_list_errors",
		"1 when the last scrape could not list the kind from the cache (its other series are missing then).",
		[]string{"domain", "kind"}, nil)
)

// Describe implements prometheus.Collector.
func (c *ObjectConditions) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- conditionAgeDesc
	ch <- notReadyDesc
	ch <- listErrorsDesc
}

// Collect implements prometheus.Collector.
func (c *ObjectConditions) Collect(ch chan<- prometheus.Metric) {
	if c.Active != nil && !c.Active() {
		return
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	every := c.MinInterval
	if every == 0 {
		every = 10 * time.Second
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || every < 0 || now.Sub(c.lastAt) >= every {
		buf := make(chan prometheus.Metric, 256)
		go func() {
			c.list(buf, now)
			close(buf)
		}()
		c.last = c.last[:0]
		for m := range buf {
			c.last = append(c.last, m)
		}
		c.lastAt = now
	}
	for _, m := range c.last {
		ch <- m
	}
}

// list lists every kind once and sends its series (c.mu held).
func (c *ObjectConditions) list(ch chan<- prometheus.Metric, now time.Time) {
	if c.notReady == nil {
		c.notReady = map[types.UID]time.Time{}
	}
	seen := map[types.UID]bool{}
	defer func() {
		for uid := range c.notReady {
			if !seen[uid] {
				delete(c.notReady, uid)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, k := range c.Kinds {
		list := k.NewList()
		failed := 0.0
		if err := c.Reader.List(ctx, list); err != nil {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(listErrorsDesc, prometheus.GaugeValue, failed, k.Domain, k.Kind)
		if failed == 1 {
			continue
		}
		type group struct{ status, reason string }
		count := map[group]int{}
		oldest := map[group]float64{}
		notReadyAge := map[group]float64{}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj, ok := o.(client.Object)
			if !ok {
				return nil
			}
			g := group{status: "", reason: "None"}
			age := 0.0
			if cond := meta.FindStatusCondition(k.Conditions(obj), k.Condition); cond != nil {
				g = group{status: string(cond.Status), reason: cond.Reason}
				if !slices.Contains(k.Reasons, g.reason) {
					g.reason = "Other"
				}
				switch g.status {
				case string(metav1.ConditionTrue), string(metav1.ConditionFalse), string(metav1.ConditionUnknown):
				default:
					g.status = "Other"
				}
				if !cond.LastTransitionTime.IsZero() {
					age = max(now.Sub(cond.LastTransitionTime.Time).Seconds(), 0)
				}
			}
			count[g]++
			oldest[g] = max(oldest[g], age)
			if g.status != string(metav1.ConditionTrue) {
				uid := obj.GetUID()
				seen[uid] = true
				since, ok := c.notReady[uid]
				if !ok {
					since = now
					c.notReady[uid] = since
				}
				notReadyAge[g] = max(notReadyAge[g], now.Sub(since).Seconds())
			}
			return nil
		})
		for g, n := range count {
			ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(n), k.Domain, k.Kind, k.Condition, g.status, g.reason)
			ch <- prometheus.MustNewConstMetric(conditionAgeDesc, prometheus.GaugeValue, oldest[g], k.Domain, k.Kind, k.Condition, g.status, g.reason)
			if age, ok := notReadyAge[g]; ok {
				ch <- prometheus.MustNewConstMetric(notReadyDesc, prometheus.GaugeValue, age, k.Domain, k.Kind, k.Condition, g.status, g.reason)
			}
		}
	}
}
