package main

// The critical-path breakdown of a Tenant run: per step, where
// the time between the Tenant's creation and its Ready went, from the
// journal's own records (intent and outcome times) and the manager's
// metrics (executor queue and execution per operation, projector pass
// phases, API request latency by verb); per backend the busy time; per
// stack process the CPU it used. It prints a table and writes a timeline
// picture (timeline.svg) into the output directory.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// tenantSteps is the provisioning chain in order (rows of the table).
var tenantSteps = []string{dbcontract.OpCheckExtensions, dbcontract.OpClaimOwnership, dbcontract.OpWriteCredential,
	dbcontract.OpCreateRole, dbcontract.OpCreateDatabase, dbcontract.OpEnsureExtensions, dbcontract.OpEnsureExternalSecret,
	dbcontract.OpObserveProjection, dbcontract.OpVerifyLogin}

// stepColor colours a step in the timeline.
var stepColor = map[string]string{
	dbcontract.OpCheckExtensions: "#8dd3c7", dbcontract.OpClaimOwnership: "#bebada", dbcontract.OpWriteCredential: "#fb8072",
	dbcontract.OpCreateRole: "#80b1d3", dbcontract.OpCreateDatabase: "#fdb462", dbcontract.OpEnsureExtensions: "#b3de69",
	dbcontract.OpEnsureExternalSecret: "#fccde5", dbcontract.OpObserveProjection: "#bc80bd", dbcontract.OpVerifyLogin: "#ccebc5",
}

// span is one intent and its outcome in one Tenant's journal.
type span struct {
	op               string
	decidedAfter     time.Time // the previous outcome (or the creation)
	intent, outcome  time.Time
	failed, finished bool
}

// tenantTrace is one Tenant's provisioning as the journal recorded it.
type tenantTrace struct {
	name           string
	created, ready time.Time
	spans          []span
}

// procCPU is the CPU time (user+system) of every process below this one,
// by command name, each with the CPU of its children that ended and were
// waited for (cutime, cstime: a PostgreSQL server's ended backends count
// as "postgres").
const machinePrefix = "machine: "

// machineCPU reads the machine's CPU time from the first line of
// /proc/stat (USER_HZ ticks): busy (user, nice, system, irq, softirq),
// iowait and steal, under the keys machinePrefix + "busy", "iowait",
// "steal". Empty when /proc/stat cannot be read.
func machineCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return out
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return out
	}
	tick := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * (time.Second / 100)
	}
	out[machinePrefix+"busy"] = tick(1) + tick(2) + tick(3) + tick(6) + tick(7)
	out[machinePrefix+"iowait"] = tick(5)
	out[machinePrefix+"steal"] = tick(8)
	return out
}

func procCPU() map[string]time.Duration {
	self := os.Getpid()
	parent := map[int]int{}
	comm := map[int]string{}
	ticks := map[int]int64{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < 0 {
			continue
		}
		f := strings.Fields(s[j+2:])
		if len(f) < 15 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		// utime, stime, and cutime, cstime: the CPU of its children
		// that ended and were waited for (PostgreSQL's backends, one
		// per connection, end while the run goes on; without these
		// their CPU showed as "outside the stack").
		var t int64
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			t += v
		}
		parent[pid], comm[pid], ticks[pid] = pp, s[i+1:j], t
	}
	out := machineCPU()
	for pid := range comm {
		for p := pid; p > 1; p = parent[p] {
			if p == self {
				name := comm[pid]
				if pid == self {
					name = "bench (+ in-process servers)"
				}
				out[name] += time.Duration(ticks[pid]) * (time.Second / 100) // USER_HZ
				break
			}
		}
	}
	return out
}

// promSample is one line of a Prometheus text exposition: the metric name,
// the value of the label asked for ("" without it) and the value.
type promSample struct {
	metric, key string
	value       float64
}

// scrape reads the samples at url, each keyed by the value of label
// ("" for none); nothing when url does not answer.
func scrape(url, label string) []promSample {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []promSample
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.LastIndex(line, " ")
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		metric, labels, _ := strings.Cut(line[:i], "{")
		key := ""
		if label != "" {
			k := label + `="`
			if x := strings.Index(labels, k); x >= 0 {
				key = labels[x+len(k):]
				key = key[:strings.Index(key, `"`)]
			}
		}
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		out = append(out, promSample{metric: metric, key: key, value: v})
	}
	return out
}

// metricSums reads the _count and _sum of every series of a histogram
// from url, keyed by the value of label ("" for the whole histogram).
func metricSums(url, name, label string) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, sm := range scrape(url, label) {
		e := out[sm.key]
		switch sm.metric {
		case name + "_count":
			e[0] += sm.value
		case name + "_sum":
			e[1] += sm.value
		default:
			continue
		}
		out[sm.key] = e
	}
	return out
}

// counterValues reads every series of counter name from url, keyed by
// the value of label.
func counterValues(url, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, sm := range scrape(url, label) {
		if sm.metric == name {
			out[sm.key] += sm.value
		}
	}
	return out
}

// journalRequestsRow prints the JetStream requests the managers' journal
// sent and where their projector reads started, per object (n objects).
func journalRequestsRow(urls []string, n int, per string) {
	req, views := map[string]float64{}, map[string]float64{}
	for _, u := range urls {
		for k, v := range counterValues(u, "ayatori_journal_requests_total", "request") {
			req[k] += v
		}
		for k, v := range counterValues(u, "ayatori_journal_view_reads_total", "from") {
			views[k] += v
		}
	}
	if len(req) == 0 {
		return // a manager without these metrics (before 2026-12-07)
	}
	var parts []string
	total := 0.0
	for _, k := range []string{"message_get", "consumer_create", "fetch", "consumer_delete", "publish"} {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, req[k]/float64(n)))
		total += req[k]
	}
	fmt.Printf("  journal requests per %s %.1f: %s\n", per, total/float64(n), strings.Join(parts, ", "))
	fmt.Printf("  journal View reads       %.0f from the cache, %.0f from the checkpoint\n", views["cache"], views["checkpoint"])
}

func meanMS(e [2]float64) string {
	if e[0] == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", 1000*e[1]/e[0])
}

// readTraces reads every Tenant's records of namespace ns from the journal.
func readTraces(ctx context.Context, s *integration.Stack, ns string, created, ready map[string]time.Time) ([]*tenantTrace, error) {
	nc, err := s.ConnectNATS(journal.IdentityReader)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	store, err := journal.OpenExisting(ctx, nc, journal.Config{})
	if err != nil {
		return nil, err
	}
	byName := map[string][]journal.Record{}
	_, err = integration.ScanJournal(ctx, store, func(r journal.Record, err error) error {
		if err != nil {
			return err
		}
		if r.Object.Kind == "PostgreSQLTenant" && r.Object.Namespace == ns {
			byName[r.Object.Name] = append(byName[r.Object.Name], r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []*tenantTrace
	for name, recs := range byName {
		t := &tenantTrace{name: name, created: created[name], ready: ready[name]}
		outcomes := map[string]journal.Record{}
		for _, r := range recs {
			if r.Type == journal.TypeOutcome {
				outcomes[r.ID] = r
			}
		}
		prev := t.created
		for _, r := range recs {
			if r.Type != journal.TypeIntent {
				continue
			}
			sp := span{op: r.Operation, decidedAfter: prev, intent: r.Time}
			if o, ok := outcomes[journal.OutcomeID(r.ID)]; ok {
				sp.outcome, sp.finished = o.Time, true
				sp.failed = o.Result == nil || o.Result.Class != journal.Succeeded
				prev = o.Time
			}
			t.spans = append(t.spans, sp)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// stepRow sums one step over all Tenants.
type stepRow struct {
	n, failed      int
	decide, inflow time.Duration // previous outcome → intent; intent → outcome
}

// breakdown prints the critical-path table and writes the timeline SVG.
func breakdown(ctx context.Context, s *integration.Stack, metricsURL string, start, end time.Time, created, ready map[string]time.Time,
	cpu0 map[string]time.Duration, outDir string) error {
	cpu1 := procCPU()
	traces, err := readTraces(ctx, s, "bench", created, ready)
	if err != nil {
		return err
	}
	rows := map[string]*stepRow{}
	var lastToReady time.Duration
	for _, t := range traces {
		for _, sp := range t.spans {
			r := rows[sp.op]
			if r == nil {
				r = &stepRow{}
				rows[sp.op] = r
			}
			r.n++
			if sp.failed {
				r.failed++
			}
			r.decide += sp.intent.Sub(sp.decidedAfter)
			if sp.finished {
				r.inflow += sp.outcome.Sub(sp.intent)
			}
		}
		if n := len(t.spans); n > 0 && t.spans[n-1].finished && !t.ready.IsZero() {
			lastToReady += t.ready.Sub(t.spans[n-1].outcome)
		}
	}
	queue := metricSums(metricsURL, "ayatori_journal_intent_queue_seconds", "operation")
	exec := metricSums(metricsURL, "ayatori_journal_execution_seconds", "operation")
	appends := metricSums(metricsURL, "ayatori_journal_append_seconds", "")[""]
	nT := float64(max(len(traces), 1))
	fmt.Printf("\ncritical path per Tenant (means over %d Tenants; ms per Tenant, summed over its attempts of the step)\n", len(traces))
	fmt.Printf("  %-21s %7s %7s %12s %10s %9s %9s %10s\n", "step", "intents", "failed", "outcome→", "intent→", "queue", "exec", "exec mean")
	fmt.Printf("  %-21s %7s %7s %12s %10s %9s %9s %10s\n", "", "", "", "next intent", "outcome", "", "", "per call")
	var tot stepRow
	var totQ, totE float64
	ops := append([]string(nil), tenantSteps...)
	for op := range rows {
		if !contains(ops, op) {
			ops = append(ops, op)
		}
	}
	for _, op := range ops {
		r := rows[op]
		if r == nil {
			continue
		}
		q, e := queue[op], exec[op]
		// Per Tenant: the metric sums cover every process's executions of
		// the step (this run's Tenants only: the Instance has its own steps).
		qT, eT := 1000*q[1]/nT, 1000*e[1]/nT
		fmt.Printf("  %-21s %7d %7d %12.0f %10.0f %9.0f %9.0f %10s\n", op, r.n, r.failed,
			ms(r.decide)/nT, ms(r.inflow)/nT, qT, eT, meanMS(e))
		tot.n, tot.failed, tot.decide, tot.inflow = tot.n+r.n, tot.failed+r.failed, tot.decide+r.decide, tot.inflow+r.inflow
		totQ, totE = totQ+qT, totE+eT
	}
	fmt.Printf("  %-21s %7d %7d %12.0f %10.0f %9.0f %9.0f\n", "total", tot.n, tot.failed, ms(tot.decide)/nT, ms(tot.inflow)/nT, totQ, totE)
	fmt.Printf("  last outcome → Ready seen by the bench (watch): %.0f ms\n", ms(lastToReady)/nT)
	fmt.Printf("  outcome→next intent = watch + projector queue + pass until the append starts; intent→outcome = queue + exec + outcome append\n")
	fmt.Printf("  journal appends: %d, mean %s ms\n", int(appends[0]), meanMS(appends))

	phases := metricSums(metricsURL, "ayatori_projector_pass_phase_seconds", "phase")
	fmt.Printf("\nprojector passes (PostgreSQLTenant and PostgreSQLInstance): phase, count, mean ms, total s\n")
	for _, ph := range []string{"finalizer", "read", "plan", "checkpoint", "append", "status"} {
		if e, ok := phases[ph]; ok {
			fmt.Printf("  %-10s %7d %8s %8.1f\n", ph, int(e[0]), meanMS(e), e[1])
		}
	}
	reconciles := metricSums(metricsURL, "controller_runtime_reconcile_time_seconds", "controller")
	for _, c := range []string{"postgresqltenant", "postgresqlinstance"} {
		if e, ok := reconciles[c]; ok {
			fmt.Printf("  reconciles %-18s %7d (%.1f per Tenant), mean %s ms, total %.1f s\n", c, int(e[0]), e[0]/nT, meanMS(e), e[1])
		}
	}

	wall := end.Sub(start).Seconds()
	fmt.Printf("\nbackend busy time during the run (%.1f s wall): sum of handler time, and that / wall = mean calls in flight\n", wall)
	backends := []struct {
		name string
		ops  []string
	}{{"PostgreSQL", dbcontract.PostgreSQLOperations}, {"OpenBao", dbcontract.OpenBaoOperations}, {"ExternalSecrets (API)", dbcontract.ExternalSecretsOperations}}
	var allExec float64
	for _, b := range backends {
		var sum, n float64
		for _, op := range b.ops {
			sum, n = sum+exec[op][1], n+exec[op][0]
		}
		allExec += sum
		fmt.Printf("  %-22s %6d calls  %7.1f s  %5.2f in flight\n", b.name, int(n), sum, sum/wall)
	}
	fmt.Printf("  executor slots         %7.1f s busy of %.1f s × concurrency\n", allExec, wall)
	var esoWait time.Duration
	var esoN int
	for _, t := range traces {
		var ensured time.Time
		for _, sp := range t.spans {
			if sp.op == dbcontract.OpEnsureExternalSecret && sp.finished && !sp.failed {
				ensured = sp.outcome
			}
			if sp.op == dbcontract.OpObserveProjection && sp.finished && !sp.failed && !ensured.IsZero() {
				esoWait += sp.intent.Sub(ensured)
				esoN++
			}
		}
	}
	if esoN > 0 {
		fmt.Printf("  ESO sync (ExternalSecret created → the ObserveProjection that succeeded was decided): mean %.0f ms\n", ms(esoWait)/float64(esoN))
	}
	verbs := metricSums(metricsURL, "rest_client_request_duration_seconds", "verb")
	limiter := metricSums(metricsURL, "rest_client_rate_limiter_duration_seconds", "verb")
	fmt.Printf("  API server (manager's requests; verb, count, per Tenant, mean ms, total s, client-side throttling s):\n")
	vs := make([]string, 0, len(verbs))
	for v := range verbs {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	for _, v := range vs {
		fmt.Printf("    %-7s %7d %6.1f %8s %7.1f %7.2f\n", v, int(verbs[v][0]), verbs[v][0]/nT, meanMS(verbs[v]), verbs[v][1], limiter[v][1])
	}

	printCPU(cpu0, cpu1, wall, nT, "Tenant")

	if outDir == "" {
		if outDir, err = os.MkdirTemp("", "ayatori-bench-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(outDir, "timeline.svg")
	if err := os.WriteFile(path, []byte(timelineSVG(traces, start, end)), 0o644); err != nil {
		return err
	}
	fmt.Printf("\ntimeline picture: %s\n", path)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// timelineSVG draws one row per Tenant: a grey line from creation to
// Ready, a coloured bar per step from intent to outcome (hatched darker
// when the outcome failed), an axis in seconds and a legend.
func timelineSVG(traces []*tenantTrace, start, end time.Time) string {
	const left, top, width = 60, 30, 1100
	rowH := 6.0
	if len(traces) > 200 {
		rowH = 1.2
	}
	total := end.Sub(start).Seconds()
	if total <= 0 {
		total = 1
	}
	x := func(t time.Time) float64 { return left + width*t.Sub(start).Seconds()/total }
	height := top + rowH*float64(len(traces)) + 70
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", left+width+20, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="16">%d Tenants: creation → Ready (grey), each step from its intent to its outcome (colour; red outline: failed attempt); %.1f s</text>`+"\n", left, len(traces), total)
	for i, t := range traces {
		y := top + rowH*float64(i)
		if !t.created.IsZero() && !t.ready.IsZero() {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ccc" stroke-width="1"/>`+"\n", x(t.created), x(t.ready), y+rowH/2, y+rowH/2)
		}
		for _, sp := range t.spans {
			if !sp.finished {
				continue
			}
			w := max(x(sp.outcome)-x(sp.intent), 0.5)
			stroke := ""
			if sp.failed {
				stroke = ` stroke="#d00" stroke-width="0.6"`
			}
			c := stepColor[sp.op]
			if c == "" {
				c = "#999"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"%s/>`+"\n", x(sp.intent), y, w, max(rowH-0.5, 0.8), c, stroke)
		}
	}
	axisY := top + rowH*float64(len(traces)) + 12
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, left+width, axisY, axisY)
	step := 1.0
	for total/step > 20 {
		step *= 2
	}
	for s := 0.0; s <= total; s += step {
		px := left + width*s/total
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n",
			px, px, axisY, axisY+4, px, axisY+16, s)
	}
	lx := float64(left)
	for _, op := range tenantSteps {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", lx, axisY+26, stepColor[op], lx+13, axisY+35, op)
		lx += 13 + 7*float64(len(op)) + 10
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// printCPU prints the CPU time each process of the stack used between the
// snapshots cpu0 and cpu1 (procCPU) over wall seconds, their total, the
// total per object (n objects of kind per) and what /proc/stat says the
// whole machine did meanwhile.
func printCPU(cpu0, cpu1 map[string]time.Duration, wall, n float64, per string) {
	fmt.Printf("\nCPU seconds used during the run by the stack's processes (2 vCPU: %.1f s available)\n", 2*wall)
	type pc struct {
		name string
		d    time.Duration
	}
	var pcs []pc
	var cpuTotal time.Duration
	machine := map[string]time.Duration{}
	for name, d := range cpu1 {
		if strings.HasPrefix(name, machinePrefix) {
			machine[strings.TrimPrefix(name, machinePrefix)] = d - cpu0[name]
			continue
		}
		if d -= cpu0[name]; d > 0 {
			pcs = append(pcs, pc{name, d})
			cpuTotal += d
		}
	}
	sort.Slice(pcs, func(i, j int) bool { return pcs[i].d > pcs[j].d })
	for _, p := range pcs {
		fmt.Printf("  %-30s %6.1f s  %3.0f%%\n", p.name, p.d.Seconds(), 100*p.d.Seconds()/wall/2)
	}
	fmt.Printf("  %-30s %6.1f s  %3.0f%% of both cores (the machine's load average: %s)\n", "total", cpuTotal.Seconds(), 100*cpuTotal.Seconds()/wall/2, loadAverage())
	fmt.Printf("  CPU-seconds per %-14s %6.3f s (every process of the stack)\n", per, cpuTotal.Seconds()/n)
	if busy := machine["busy"]; busy > 0 {
		// /proc/stat: what the whole machine did meanwhile. Steal is time
		// the hypervisor gave these vCPUs to someone else: the same work
		// then takes longer, and runs of one code differ.
		fmt.Printf("  machine (/proc/stat): busy %.1f s (processes outside the stack %.1f s), iowait %.1f s, steal %.1f s\n",
			busy.Seconds(), max(busy-cpuTotal, 0).Seconds(), machine["iowait"].Seconds(), machine["steal"].Seconds())
	}
}
