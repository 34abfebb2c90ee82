package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// PrometheusTarget is one scrape target: host:port with the labels a
// PodMonitor would add (namespace, pod).
type PrometheusTarget struct {
	Address string
	Labels  map[string]string
}

// PrometheusOptions configure a Prometheus server.
type PrometheusOptions struct {
	// Targets are scraped at ScrapeInterval on /metrics.
	Targets []PrometheusTarget
	// RuleFile is a Prometheus rule file (nil: no rules).
	RuleFile []byte
	// ScrapeInterval and EvalInterval (0: 1 s each).
	ScrapeInterval, EvalInterval time.Duration
}

// Prometheus is a real Prometheus server (PROMETHEUS_VERSION, built by make
// tools) on a free 127.0.0.1 port, with its TSDB in a temporary directory.
// Used by the alert rule and dashboard tests and by make dev / make demo.
type Prometheus struct {
	// URL is the server's base URL (API under /api/v1).
	URL string
	// API is a client of its HTTP API.
	API promv1.API

	dir       string
	p         *process
	closeHook func()
}

// NewPrometheus starts a Prometheus server and waits until it is ready.
func NewPrometheus(opts PrometheusOptions) (_ *Prometheus, err error) {
	bin, err := ToolPath("prometheus")
	if err != nil {
		return nil, err
	}
	scrape, eval := opts.ScrapeInterval, opts.EvalInterval
	if scrape == 0 {
		scrape = time.Second
	}
	if eval == 0 {
		eval = time.Second
	}
	dir, err := os.MkdirTemp("", "ayatori-prometheus-")
	if err != nil {
		return nil, err
	}
	pr := &Prometheus{dir: dir}
	defer func() {
		if err != nil {
			pr.Close()
		}
	}()
	var statics []map[string]any
	for _, t := range opts.Targets {
		statics = append(statics, map[string]any{"targets": []string{t.Address}, "labels": t.Labels})
	}
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": scrape.String(), "evaluation_interval": eval.String(), "scrape_timeout": scrape.String()},
		"scrape_configs": []any{map[string]any{"job_name": "ayatori-manager", "static_configs": statics}},
	}
	if opts.RuleFile != nil {
		if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), opts.RuleFile, 0o644); err != nil {
			return nil, err
		}
		cfg["rule_files"] = []string{filepath.Join(dir, "rules.yaml")}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o644); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	pr.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	pr.p, err = startProcess(processSpec{name: "prometheus", path: bin, dir: dir, logPath: filepath.Join(dir, "prometheus.log"), args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--web.enable-lifecycle",
	}})
	if err != nil {
		return nil, err
	}
	unreg := registerCleanup(pr.Close)
	pr.closeHook = unreg
	client, err := promapi.NewClient(promapi.Config{Address: pr.URL})
	if err != nil {
		return nil, err
	}
	pr.API = promv1.NewAPI(client)
	if err := pr.p.waitReady(60*time.Second, func() error {
		resp, err := http.Get(pr.URL + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return pr, nil
}

// Log is the path of the server's log.
func (pr *Prometheus) Log() string { return filepath.Join(pr.dir, "prometheus.log") }

// Close stops the server and removes its data.
func (pr *Prometheus) Close() {
	if pr.p != nil {
		pr.p.stop(syscall.SIGTERM, 10*time.Second)
	}
	if pr.closeHook != nil {
		pr.closeHook()
	}
	_ = os.RemoveAll(pr.dir)
}

// Alert returns the state of the alert named (with the labels of its
// first instance): "firing", "pending", or "" when it is inactive.
func (pr *Prometheus) Alert(ctx context.Context, name string) (state string, labels model.LabelSet, err error) {
	res, err := pr.API.Alerts(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, a := range res.Alerts {
		if string(a.Labels[model.AlertNameLabel]) == name {
			if state == "" || a.State == promv1.AlertStateFiring {
				state, labels = string(a.State), a.Labels
			}
		}
	}
	return state, labels, nil
}

// WaitAlert polls until the alert named is in state ("firing", or "" for
// inactive) and returns the labels of its instance.
func (pr *Prometheus) WaitAlert(ctx context.Context, name, state string, timeout time.Duration) (model.LabelSet, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		got, labels, err := pr.Alert(ctx, name)
		if err == nil && got == state {
			return labels, nil
		}
		if err == nil {
			last = got
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("timed out")
			}
			return nil, fmt.Errorf("alert %s: want state %q, last %q after %s: %w", name, state, last, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Query runs an instant PromQL query now.
func (pr *Prometheus) Query(ctx context.Context, q string) (model.Value, error) {
	v, _, err := pr.API.Query(ctx, q, time.Now())
	return v, err
}
