// Package monitoring holds the monitoring Ayatori ships for Prometheus
// (prometheusrule.yaml: the alert rules; podmonitor.yaml; dashboard.json:
// the Grafana dashboard) and gives the rules and the dashboard's queries
// to a Prometheus that runs outside a cluster: the local stack (make dev,
// make demo) and the alert and dashboard tests load exactly these files.
package monitoring

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/common/model"

	"sigs.k8s.io/yaml"
)

var (
	//go:embed prometheusrule.yaml
	ruleManifest []byte
	//go:embed dashboard.json
	dashboardJSON []byte
)

// Rule is one alerting rule of the shipped PrometheusRule.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RuleGroup is one group of the shipped PrometheusRule.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Groups returns the rule groups of prometheusrule.yaml (its spec.groups).
func Groups() ([]RuleGroup, error) {
	var m struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []RuleGroup `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(ruleManifest, &m); err != nil {
		return nil, fmt.Errorf("prometheusrule.yaml: %w", err)
	}
	return m.Spec.Groups, nil
}

// RuleFile returns the rule groups as a Prometheus rule file (what the
// Prometheus Operator generates from the PrometheusRule). A non-empty
// interval overrides every group's evaluation interval (tests shorten it;
// the shipped rules keep Prometheus' global one).
func RuleFile(interval string) ([]byte, error) {
	groups, err := Groups()
	if err != nil {
		return nil, err
	}
	if interval != "" {
		for i := range groups {
			groups[i].Interval = interval
		}
	}
	return yaml.Marshal(map[string]any{"groups": groups})
}

// ScaledRuleFile is RuleFile(interval) with every alert's `for` divided
// by divisor (60: minutes become seconds): the expressions, labels and
// annotations stay the shipped ones. For tests and the demo, which cannot
// wait minutes; never for a real Prometheus.
func ScaledRuleFile(interval string, divisor int) ([]byte, error) {
	groups, err := Groups()
	if err != nil {
		return nil, err
	}
	for gi := range groups {
		groups[gi].Interval = interval
		for ri := range groups[gi].Rules {
			r := &groups[gi].Rules[ri]
			if r.For == "" {
				continue
			}
			d, err := model.ParseDuration(r.For)
			if err != nil {
				return nil, fmt.Errorf("alert %s: for: %w", r.Alert, err)
			}
			r.For = model.Duration(time.Duration(d) / time.Duration(divisor)).String()
		}
	}
	return yaml.Marshal(map[string]any{"groups": groups})
}

// Panel is one panel of the shipped dashboard with its PromQL queries.
type Panel struct {
	Title   string
	Queries []string
}

// Dashboard returns the Grafana dashboard JSON as shipped.
func Dashboard() []byte { return dashboardJSON }

// Panels returns every panel of the dashboard that has queries, with the
// dashboard's variables left in place ($__rate_interval and friends).
func Panels() ([]Panel, error) {
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("dashboard.json: %w", err)
	}
	var out []Panel
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		var qs []string
		for _, t := range p.Targets {
			if t.Expr != "" {
				qs = append(qs, t.Expr)
			}
		}
		out = append(out, Panel{Title: p.Title, Queries: qs})
	}
	return out, nil
}
