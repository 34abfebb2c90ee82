//go:build !unit

package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"git.ddupan.top/panxiao81/ayatori/deploy/monitoring"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestAlertRules: the shipped PrometheusRule passes `promtool check rules`
// and its unit tests (deploy/monitoring/testdata/rules_test.yaml) with the
// pinned promtool; every alert follows kube-prometheus' conventions
// (severity, summary, description, runbook_url), is unit-tested, and its
// runbook_url points at a section of docs/runbook.md that exists; every
// ayatori_ series an alert reads is documented in docs/operations.md.
func TestAlertRules(t *testing.T) {
	promtool, err := integration.ToolPath("promtool")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := monitoring.RuleFile("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("monitoring/testdata/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}

	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(runbook), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(h), " ", "-"))] = true
		}
	}
	const runbookBase = "https://git.ddupan.top/panxiao81/ayatori/src/branch/main/docs/runbook.md#"
	series := regexp.MustCompile(`\bayatori_[a-z_]+`)
	groups, err := monitoring.Groups()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is not a section of docs/runbook.md", r.Alert, r.Annotations["runbook_url"])
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("%s: no promtool unit test", r.Alert)
			}
			for _, s := range series.FindAllString(r.Expr, -1) {
				if !strings.Contains(string(ops), "`"+s+"`") && !strings.Contains(string(ops), "`"+s+"{") {
					t.Errorf("%s reads %s, which docs/operations.md does not document", r.Alert, s)
				}
			}
		}
	}
	t.Logf("%d alerts: %s", len(names), strings.Join(names, ", "))
}

// TestDashboardQueriesAreDocumented: every panel of the shipped dashboard
// has a query, and every ayatori_ series it reads is documented in
// docs/operations.md. (Each query runs against a real Prometheus in
// integration/monitoring.)
func TestDashboardQueriesAreDocumented(t *testing.T) {
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(monitoring.Dashboard()) {
		t.Fatal("dashboard.json is not JSON")
	}
	panels, err := monitoring.Panels()
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`\bayatori_[a-z_]+`)
	for _, p := range panels {
		if len(p.Queries) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Queries {
			for _, s := range series.FindAllString(q, -1) {
				s = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s, "_bucket"), "_count"), "_sum")
				if !strings.Contains(string(ops), "`"+s+"`") && !strings.Contains(string(ops), "`"+s+"{") {
					t.Errorf("panel %q reads %s, which docs/operations.md does not document", p.Title, s)
				}
			}
		}
	}
}

// TestMonitoringRenders: deploy/monitoring builds with kustomize into a
// PrometheusRule, a PodMonitor and the dashboard ConfigMap, each of which
// decodes strictly into the Prometheus Operator's API types (no unknown
// field), and the PodMonitor selects the manager's pods on their metrics
// port.
func TestMonitoringRenders(t *testing.T) {
	objs := render(t, "monitoring")
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if o.GetNamespace() != "ayatori-system" {
			t.Errorf("%s/%s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		switch o.GetKind() {
		case "PrometheusRule":
			var r monitoringv1.PrometheusRule
			if err := yaml.UnmarshalStrict(b, &r); err != nil {
				t.Errorf("PrometheusRule: %v", err)
			}
		case "PodMonitor":
			var pm monitoringv1.PodMonitor
			if err := yaml.UnmarshalStrict(b, &pm); err != nil {
				t.Fatalf("PodMonitor: %v", err)
			}
			if pm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "ayatori-manager" || len(pm.Spec.PodMetricsEndpoints) != 1 ||
				pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
				t.Errorf("PodMonitor does not select the manager's metrics port: %+v", pm.Spec)
			}
		case "ConfigMap":
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			if data["ayatori.json"] != string(monitoring.Dashboard()) || o.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap: labels %v, data keys %d", o.GetLabels(), len(data))
			}
		}
	}
	slices.Sort(kinds)
	if want := []string{"ConfigMap/ayatori-grafana-dashboard", "PodMonitor/ayatori-manager", "PrometheusRule/ayatori"}; !slices.Equal(kinds, want) {
		t.Fatalf("deploy/monitoring renders %v, want %v", kinds, want)
	}
	// The manager's container names its metrics port as the PodMonitor expects.
	for _, o := range render(t, "overlays/dev") {
		if o.GetKind() != "Deployment" || o.GetName() != "ayatori-manager" {
			continue
		}
		ports, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
		if !strings.Contains(fmt.Sprint(ports), "name:metrics") {
			t.Errorf("the manager container has no port named metrics")
		}
	}
}
