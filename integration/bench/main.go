// Command bench is `make bench`: N PostgreSQLTenants on one Instance through
// the real local stack. It prints time until all are Ready (p50/p99 per
// Tenant and total), the manager's peak RSS, the peak number of PostgreSQL
// connections the manager holds (bounded by the pool, not by N), and the
// journal's share of the time from the manager's own metrics.
//
// With -handover=term or -handover=kill every manager runs with
// --leader-elect; half-way through the run (mean checkpoint of all Tenants
// at half of the chain) a second replica is started, and once it runs the first one is stopped (SIGTERM: releases the
// Lease; SIGKILL: the standby waits for it to expire). The run then checks
// the journal: `ayatori-journal verify` must be clean and no intent may
// repeat a step whose previous intent was still pending or had succeeded
// (a duplicate decision).
//
// With -nats-cluster the journal runs on a three-node JetStream cluster
// (stream replicas 3, sync_interval always on every node, the manager with
// every node's URL); the run then checks the journal as after a hand-over.
//
// With -jobs N it benchmarks the execution domain instead (jobs.go): N
// Ayatori Jobs, then N plain batch/v1 Jobs with the same pod, on the
// execution stack (kube-controller-manager, kube-scheduler, kwok nodes).
// With -jobs N -ttl T only the N Ayatori Jobs, with
// ttlSecondsAfterFinished T, each done when the TTL controller deleted it
// (ttl.go); -restart kills the manager half-way through.
//
// With -opensandbox-jobs N: N Ayatori Jobs on an OpenSandbox class against
// the spec-validating OpenSandbox test server, then all deleted
// (opensandbox.go): times, OpenSandbox requests per Job by route, journal
// records per Job, manager memory.
//
// With -plain-operator BIN -plain-operator-crds DIR: the side by side with a
// plain database operator (plainop.go): -rounds R interleaved rounds on one
// stack, each N databases with a user through the operator at BIN and N
// Tenants through Ayatori; every round of both, their medians and the
// operator's fastest round.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// managerFlags are the -manager-flag values: extra flags given to the
// Ayatori manager in every mode, after the bench's own.
var managerFlags stringList

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

// Set appends one value.
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	// Runs for minutes on controller-runtime clients: no missing-logger
	// stack trace in the figures' output.
	integration.QuietControllerRuntimeLog()
	n := flag.Int("n", 100, "number of Tenants")
	timeout := flag.Duration("timeout", 60*time.Minute, "give up after")
	handover := flag.String("handover", "", "leader hand-over mid-run: term (graceful) or kill (crash); empty: one manager")
	cluster := flag.Bool("nats-cluster", false, "run the journal on a three-node JetStream cluster with stream replicas 3")
	resync := flag.Duration("resync", 24*time.Hour, "the manager's --tenant-resync-interval")
	idle := flag.Duration("idle", 0, "after all are Ready, keep them idling this long and report records appended per hour and reconcile latency")
	jobs := flag.Int("jobs", 0, "instead of Tenants: N Ayatori Jobs, then N plain batch/v1 Jobs, on the execution stack (see jobs.go)")
	kcmQPS := flag.Int("kcm-qps", 0, "with -jobs: kube-controller-manager --kube-api-qps (burst twice that); 0: its default (20, burst 30)")
	ttl := flag.Int("ttl", -1, "with -jobs: the Ayatori Jobs get this ttlSecondsAfterFinished and are done when deleted (no plain Jobs; see ttl.go); -1: no TTL")
	restart := flag.Bool("restart", false, "with -jobs and -ttl: SIGKILL the manager and start it again once half the Jobs succeeded")
	out := flag.String("out", "", "directory for the critical-path timeline picture (timeline.svg); empty: a new temporary directory, printed at the end")
	intentEvents := flag.Bool("intent-events", false, "the manager's --intent-events (an IntentAppended Event per decided step)")
	profile := flag.Duration("profile-apiserver", 0, "with -n, or -jobs and -ttl: take a CPU profile of the kube-apiserver over this much of the run from the first create, write it next to the picture and print its top functions")
	profileManagerFor := flag.Duration("profile-manager", 0, "with -jobs and -ttl: take a CPU profile of the manager (--pprof-bind-address on loopback) over this much of the run from the first create, write it to a temporary directory and print its top functions")
	repeat := flag.Int("repeat", 0, "with -n 1: create M Tenants one after another, each once the previous is Ready (an idle stack), and report create→Ready p50/p90/max")
	osJobs := flag.Int("opensandbox-jobs", 0, "instead of Tenants: N Ayatori Jobs on an OpenSandbox class against the spec-validating OpenSandbox test server, then all deleted (see opensandbox.go)")
	plainOp := flag.String("plain-operator", "", "with -n: the side by side with the plain operator at this path (a manager binary built from movetokube/postgres-operator; see plainop.go)")
	plainCRDs := flag.String("plain-operator-crds", "", "with -plain-operator: the directory of its CRD manifests")
	rounds := flag.Int("rounds", 5, "with -plain-operator: interleaved rounds of both sides")
	flag.Var(&managerFlags, "manager-flag", "an extra flag for the Ayatori manager, as --name=value (repeatable; e.g. -manager-flag=--job-workers=16 to compare a setting)")
	flag.Parse()
	if *plainOp != "" {
		if *plainCRDs == "" || *n < 1 || *rounds < 1 || *osJobs != 0 || *jobs != 0 || *handover != "" || *cluster || *repeat != 0 || *idle != 0 || *profile != 0 {
			fmt.Fprintln(os.Stderr, "bench: -plain-operator needs -plain-operator-crds, goes with -n N and -rounds R (both positive) and without the other modes")
			os.Exit(2)
		}
		if err := runPlainOperator(plainOptions{bin: *plainOp, crds: *plainCRDs, n: *n, rounds: *rounds, timeout: *timeout, resync: *resync, intentEvents: *intentEvents}); err != nil {
			fmt.Fprintln(os.Stderr, "bench FAILED:", err)
			os.Exit(1)
		}
		return
	}
	if *osJobs != 0 {
		if *osJobs < 1 || *jobs != 0 || *handover != "" || *cluster || *restart || *ttl >= 0 || *kcmQPS != 0 {
			fmt.Fprintln(os.Stderr, "bench: -opensandbox-jobs must be positive and goes alone (besides -timeout)")
			os.Exit(2)
		}
		if err := runOpenSandbox(*osJobs, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "bench FAILED:", err)
			os.Exit(1)
		}
		return
	}
	if *jobs != 0 {
		if *jobs < 1 || *handover != "" || *cluster || (*restart && *ttl < 0) {
			fmt.Fprintln(os.Stderr, "bench: -jobs must be positive and goes without -handover and -nats-cluster; -restart needs -ttl")
			os.Exit(2)
		}
		run := func() error { return runJobs(*jobs, *kcmQPS, *timeout) }
		if *ttl >= 0 {
			run = func() error { return runTTL(*jobs, *ttl, *kcmQPS, *restart, *profileManagerFor, *profile, *timeout) }
		}
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, "bench FAILED:", err)
			os.Exit(1)
		}
		return
	}
	var sig syscall.Signal
	switch *handover {
	case "":
	case "term":
		sig = syscall.SIGTERM
	case "kill":
		sig = syscall.SIGKILL
	default:
		fmt.Fprintf(os.Stderr, "bench: -handover must be term or kill, got %q\n", *handover)
		os.Exit(2)
	}
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n must be at least 1")
		os.Exit(2)
	}
	if *repeat != 0 && (*n != 1 || *repeat < 1 || sig != 0 || *idle != 0) {
		fmt.Fprintln(os.Stderr, "bench: -repeat M goes with -n 1 (and without -handover and -idle)")
		os.Exit(2)
	}
	if err := run(*n, *timeout, sig, *cluster, *resync, *idle, *repeat, *out, *intentEvents, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "bench FAILED:", err)
		os.Exit(1)
	}
}

func run(n int, timeout time.Duration, handover syscall.Signal, cluster bool, resync, idle time.Duration, repeat int, outDir string, intentEvents bool, profile time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The executors run with their default per-backend bounds
	// (--executor-backend-concurrency: PostgreSQL by its pool).
	args := []string{"--tenant-resync-interval=" + resync.String(), fmt.Sprintf("--intent-events=%t", intentEvents)}
	if handover != 0 {
		args = append(args, "--leader-elect")
	}
	args = append(args, managerFlags...)
	s, err := integration.StartStack(ctx, integration.StackOptions{ManagerArgs: args, NATSCluster: cluster, NoWorkload: true})
	if err != nil {
		return err
	}
	defer s.Close()
	c := s.CP.Client
	if err := registerInstance(ctx, s); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}
	var peakRSS, peakConns int64
	var mu sync.Mutex
	stopSampling := make(chan struct{})
	managers := []*integration.Manager{s.Primary()}
	pids := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for _, m := range managers {
			if pid := m.PID(); pid != 0 {
				out = append(out, pid)
			}
		}
		return out
	}
	go sample(s, pids, &mu, &peakRSS, &peakConns, stopSampling)
	var ho handoverState
	if repeat > 0 {
		defer close(stopSampling)
		return runRepeat(ctx, s, repeat, outDir)
	}
	sessions0 := pgSessions(ctx, s)
	cpu0 := procCPU()

	start := time.Now()
	var profiled <-chan string
	if profile > 0 {
		if outDir == "" {
			if outDir, err = os.MkdirTemp("", "ayatori-bench-"); err != nil {
				return err
			}
		}
		profiled = profileAPIServer(ctx, s.CP.Config, profile, outDir)
	}
	created := map[string]time.Time{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("t%05d", i)
		created[name] = time.Now()
		if err := c.Create(ctx, &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}); err != nil {
			return err
		}
	}
	fmt.Printf("created %d Tenants in %s\n", n, time.Since(start).Round(time.Millisecond))
	readyAt := map[string]time.Time{}
	// A watch, not a List every 250 ms: the bench should not load the API
	// server it measures (100 Tenants listed 4 times a second is a good
	// part of its work), and a Tenant's Ready time is the event's.
	tenants, err := watchTenants(ctx, s, "bench")
	if err != nil {
		return err
	}
	for len(readyAt) < n {
		rank := 0
		for _, t := range tenants.snapshot() {
			rank += phaseRank[t.phase]
			if _, done := readyAt[t.name]; !done && !t.readyAt.IsZero() {
				readyAt[t.name] = t.readyAt
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d Ready after %s", len(readyAt), n, timeout)
		}
		if progress := float64(rank) / float64(7*n); handover != 0 && ho.stoppedAt.IsZero() && progress >= 0.5 {
			ho.progress = progress
			if err := ho.run(s, handover, len(readyAt), &mu, &managers); err != nil {
				return err
			}
		}
		if !ho.stoppedAt.IsZero() && ho.leaderAt.IsZero() {
			if h := leaseHolder(ctx, c); h != "" && h != ho.oldHolder {
				ho.leaderAt, ho.newHolder = time.Now(), h
			}
		}
		if !ho.stoppedAt.IsZero() && ho.firstReadyAfter.IsZero() {
			for _, at := range readyAt {
				if at.After(ho.stoppedAt) {
					ho.firstReadyAfter = at
					break
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var last time.Time
	for _, at := range readyAt {
		if at.After(last) {
			last = at
		}
	}
	total := last.Sub(start)
	close(stopSampling)
	var lat []time.Duration
	for name, at := range readyAt {
		lat = append(lat, at.Sub(created[name]))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration { return quantile(lat, q).Round(10 * time.Millisecond) }
	var appendSum, appendCount, deliverySum, deliveryCount float64
	var metricURLs []string
	for _, m := range managers {
		if m.PID() == 0 {
			continue // its metrics ended with it
		}
		metricURLs = append(metricURLs, m.MetricsURL)
		a, b, c, d := journalMetrics(m.MetricsURL)
		appendSum, appendCount, deliverySum, deliveryCount = appendSum+a, appendCount+b, deliverySum+c, deliveryCount+d
	}
	mu.Lock()
	rss, conns := peakRSS, peakConns
	mu.Unlock()
	journalOn := "one JetStream server"
	if cluster {
		journalOn = "a three-node JetStream cluster, stream replicas 3"
	}
	fmt.Printf("\nN=%d Tenants on one Instance (local stack, 2 vCPU, journal on %s)\n", n, journalOn)
	fmt.Printf("  all Ready after          %s  (%.1f Tenants/s)\n", total.Round(10*time.Millisecond), float64(n)/total.Seconds())
	fmt.Printf("  per Tenant create→Ready  p50 %s  p99 %s  max %s\n", pct(0.50), pct(0.99), lat[len(lat)-1].Round(10*time.Millisecond))
	fmt.Printf("  manager peak RSS         %.1f MiB (largest process)\n", float64(rss)/1024)
	fmt.Printf("  peak PostgreSQL connections of the manager(s): %d (pool max 4 per process + short-lived per-tenant logins)\n", conns)
	if sessions := sessionsSince(ctx, s, sessions0); sessions >= 0 {
		fmt.Printf("  PostgreSQL sessions started %d (%.2f per Tenant; each is a backend process, most with a TLS handshake)\n", sessions, float64(sessions)/float64(n))
	}
	fmt.Printf("  journal appends          %d, mean %.2f ms, total %.1f s\n", int(appendCount), 1000*appendSum/max(appendCount, 1), appendSum)
	fmt.Printf("  intent delivery          %d, mean %.2f ms, total %.1f s\n", int(deliveryCount), 1000*deliverySum/max(deliveryCount, 1), deliverySum)
	journalRequestsRow(metricURLs, n, "Tenant")
	if handover == 0 {
		fmt.Printf("  journal share            append+delivery time / (N x mean create→Ready) = %.1f%%\n",
			100*(appendSum+deliverySum)/(float64(n)*meanSeconds(lat)))
		if err := breakdown(ctx, s, s.Primary().MetricsURL, start, start.Add(total), created, readyAt, cpu0, outDir); err != nil {
			return err
		}
		if idle > 0 {
			if err := idleRow(ctx, s, n, resync, idle); err != nil {
				return err
			}
		}
		if profiled != nil {
			fmt.Println(<-profiled)
		}
		// Every run: verify clean and zero duplicate intents.
		return checkJournal(ctx, s)
	}
	fmt.Printf("  (journal metrics of the surviving replica only)\n")
	fmt.Printf("\nleader hand-over (%s)\n", ho.signal)
	fmt.Printf("  second replica started   %s into the run, at %.0f%% of all steps (%d of %d Ready)\n",
		ho.startedAt.Sub(start).Round(10*time.Millisecond), 100*ho.progress, ho.readyAtStart, n)
	fmt.Printf("  first replica stopped    %s into the run (%s)\n", ho.stoppedAt.Sub(start).Round(10*time.Millisecond), ho.signal)
	fmt.Printf("  Lease taken over         %s after the stop (%s -> %s)\n", ho.leaderAt.Sub(ho.stoppedAt).Round(10*time.Millisecond), ho.oldHolder, ho.newHolder)
	if ho.firstReadyAfter.IsZero() {
		fmt.Printf("  first Ready afterwards   none (all were Ready before the stop)\n")
	} else {
		fmt.Printf("  first Ready afterwards   %s after the stop\n", ho.firstReadyAfter.Sub(ho.stoppedAt).Round(10*time.Millisecond))
	}
	return checkJournal(ctx, s)
}

type handoverState struct {
	progress                              float64
	oldHolder, newHolder                  string
	leaderAt                              time.Time
	signal                                string
	readyAtStart                          int
	startedAt, stoppedAt, firstReadyAfter time.Time
}

// run starts the second replica, waits until its metrics endpoint answers
// (it is up, executing intents, and standing by for the Lease), then stops
// the first one with sig.
func (h *handoverState) run(s *integration.Stack, sig syscall.Signal, ready int, mu *sync.Mutex, managers *[]*integration.Manager) error {
	h.signal, h.readyAtStart, h.startedAt = map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL"}[sig], ready, time.Now()
	second, err := s.StartReplica("second", "--leader-elect", "--actor", "replica-2")
	if err != nil {
		return err
	}
	mu.Lock()
	*managers = append(*managers, second)
	mu.Unlock()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(second.MetricsURL); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) || second.PID() == 0 {
			return fmt.Errorf("second replica did not come up\n%s", integration.Tail(second.Log, 20))
		}
	}
	fmt.Printf("second replica up after %s; stopping the first with %s\n", time.Since(h.startedAt).Round(10*time.Millisecond), h.signal)
	h.oldHolder = leaseHolder(context.Background(), s.CP.Client)
	h.stoppedAt = time.Now()
	go s.Primary().Stop(sig) // keep polling readiness meanwhile
	return nil
}

// checkJournal runs `ayatori-journal verify` on the stream (which includes
// "no intent while the same step is pending") and journal.RepeatedSteps on
// the Tenant records: no step decided again after it had succeeded.
// Together: zero duplicate intents.
func checkJournal(ctx context.Context, s *integration.Stack) error {
	fmt.Printf("\nayatori-journal verify\n")
	verr := verifyJournal(ctx, s.JournalBin, s.JournalReaderArgs())

	nc, err := s.ConnectNATS(journal.IdentityReader)
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := journal.OpenExisting(ctx, nc, journal.Config{})
	if err != nil {
		return err
	}
	var tenants []journal.Record
	intentsBy, outcomesBy := map[string]int{}, map[string]int{}
	intents := 0
	_, err = integration.ScanJournal(ctx, store, func(r journal.Record, err error) error {
		if err != nil {
			return err
		}
		switch r.Type {
		case journal.TypeIntent:
			intents++
			intentsBy[r.Actor]++
		case journal.TypeOutcome:
			outcomesBy[r.Actor]++
		}
		if r.Object.Kind == "PostgreSQLTenant" {
			tenants = append(tenants, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	repeated := journal.RepeatedSteps(tenants)
	for _, v := range repeated {
		fmt.Printf("  %s %s: %s\n", v.Rule, v.Object, v.Detail)
	}
	fmt.Printf("  intents by actor         %v\n", intentsBy)
	fmt.Printf("  outcomes by actor        %v\n", outcomesBy)
	fmt.Printf("  Tenant steps decided again after success: %d (of %d intents)\n", len(repeated), intents)
	if verr != nil {
		return fmt.Errorf("ayatori-journal verify: %w", verr)
	}
	if len(repeated) > 0 {
		return fmt.Errorf("%d duplicate intents", len(repeated))
	}
	return nil
}

// verifyJournal runs the built `ayatori-journal verify` on the journal at
// url, its output to ours.
func verifyJournal(ctx context.Context, bin string, readerArgs []string) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		cmd := exec.CommandContext(ctx, bin, append(readerArgs, "verify")...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		// Exit 2 (could not read) on a cluster: the scan hit the
		// consumer-interest race (integration.ScanJournal); read again.
		if err = cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
			break
		}
	}
	return err
}

func meanSeconds(d []time.Duration) float64 {
	var s float64
	for _, x := range d {
		s += x.Seconds()
	}
	return s / float64(len(d))
}

// leaseHolder returns the holder identity of the manager's leader-election
// Lease ("" when released or unreadable).
func leaseHolder(ctx context.Context, c client.Client) string {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: integration.ControllerNamespace, Name: "ayatori-manager.ayatori.ddupan.top"}, l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// phaseRank orders the provisioning checkpoints: progress of a run is the
// mean rank over all Tenants divided by the rank of Ready.
var phaseRank = map[databasev1alpha1.TenantPhase]int{
	databasev1alpha1.TenantPhasePending: 0, databasev1alpha1.TenantPhasePlanned: 1, databasev1alpha1.TenantPhaseCredentialCreated: 2,
	databasev1alpha1.TenantPhaseRoleCreated: 3, databasev1alpha1.TenantPhaseDatabaseCreated: 4, databasev1alpha1.TenantPhaseExternalSecretCreated: 5,
	databasev1alpha1.TenantPhaseCredentialProjected: 6, databasev1alpha1.TenantPhaseReady: 7,
}

// sample records the peak RSS (largest single manager process) and the peak
// number of PostgreSQL connections held by managers, every 200 ms.
func sample(s *integration.Stack, pids func() []int, mu *sync.Mutex, rss, conns *int64, stop chan struct{}) {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		return
	}
	defer db.Close(ctx)
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		var n int64
		_ = db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ayatori-manager'").Scan(&n)
		var r int64
		for _, pid := range pids() {
			r = max(r, readRSS(pid))
		}
		mu.Lock()
		*conns = max(*conns, n)
		*rss = max(*rss, r)
		mu.Unlock()
	}
}

// pgSessions returns how many sessions the stack's PostgreSQL has started
// in all its databases (the sum of pg_stat_database.sessions, PostgreSQL
// 14 and later), read over a short superuser session of its own; -1 when
// it can not be read.
func pgSessions(ctx context.Context, s *integration.Stack) int64 {
	db, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		return -1
	}
	defer db.Close(context.WithoutCancel(ctx))
	var n int64
	if err := db.QueryRow(ctx, "SELECT coalesce(sum(sessions), 0)::bigint FROM pg_stat_database").Scan(&n); err != nil {
		return -1
	}
	return n
}

// sessionsSince returns the sessions PostgreSQL started since pgSessions
// returned before (-1: either read failed), less the reads' own session.
// A backend reports its session to the statistics within a second of
// going idle or at its exit: a pooled session started in the last second
// may be missing.
func sessionsSince(ctx context.Context, s *integration.Stack, before int64) int64 {
	after := pgSessions(ctx, s)
	if before < 0 || after < 0 {
		return -1
	}
	return max(after-before-1, 0)
}

// readRSS returns VmRSS of a process in KiB.
func readRSS(pid int) int64 { return procStatus(pid, "VmRSS") }

// procStatus returns a KiB field of /proc/<pid>/status (VmRSS, VmHWM: the
// peak resident set), 0 when unreadable.
func procStatus(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), field+":") {
			fields := strings.Fields(sc.Text())
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			return v
		}
	}
	return 0
}

// quantile returns the q-quantile of sorted latencies (nearest rank below).
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1))]
}

func journalMetrics(url string) (appendSum, appendCount, deliverySum, deliveryCount float64) {
	appendCount, appendSum = metricPair(url, "ayatori_journal_append_seconds", "")
	deliveryCount, deliverySum = metricPair(url, "ayatori_journal_intent_delivery_seconds", "")
	return
}

// idleRow lets the N Ready Tenants idle for d (re-checked every resync)
// and reports what the steady state costs: journal records appended per
// hour (all of them, per Tenant), Tenant reconciles and their p99 from the
// manager's controller-runtime histogram, and whether every Tenant stayed
// Ready throughout.
func idleRow(ctx context.Context, s *integration.Stack, n int, resync, d time.Duration) error {
	nc, err := s.ConnectNATS(journal.IdentityManager)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	msgs := func() (uint64, error) {
		str, err := js.Stream(ctx, journal.DefaultStreamName)
		if err != nil {
			return 0, err
		}
		info, err := str.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq, nil
	}
	before, err := msgs()
	if err != nil {
		return err
	}
	h0 := reconcileHistogram(s.Primary().MetricsURL, "postgresqltenant")
	start := time.Now()
	flapped := map[string]bool{}
	for time.Since(start) < d {
		var list databasev1alpha1.PostgreSQLTenantList
		if err := s.CP.Client.List(ctx, &list, client.InNamespace("bench")); err != nil {
			return err
		}
		for _, t := range list.Items {
			ready := false
			for _, c := range t.Status.Conditions {
				ready = ready || (c.Type == "Ready" && c.Status == metav1.ConditionTrue)
			}
			if !ready {
				flapped[t.Name] = true
			}
		}
		time.Sleep(time.Second)
	}
	elapsed := time.Since(start)
	after, err := msgs()
	if err != nil {
		return err
	}
	h1 := reconcileHistogram(s.Primary().MetricsURL, "postgresqltenant")
	perHour := float64(after-before) / elapsed.Hours()
	fmt.Printf("\nidle: N=%d Ready Tenants for %s, re-check every %s (%.1f intervals)\n", n, elapsed.Round(time.Second), resync, elapsed.Seconds()/resync.Seconds())
	fmt.Printf("  journal records appended %d  (%.0f per hour, %.1f per Tenant per hour, %.2f per Tenant per re-check)\n",
		after-before, perHour, perHour/float64(n), float64(after-before)/float64(n)/(elapsed.Seconds()/resync.Seconds()))
	count, p99 := h1.since(h0)
	fmt.Printf("  Tenant reconciles        %d, p99 %s\n", int(count), p99)
	fmt.Printf("  Tenants not Ready at some sample: %d of %d\n", len(flapped), n)
	return nil
}

// histogram is a cumulative Prometheus histogram: upper bound -> count.
type histogram map[float64]float64

// reconcileHistogram reads controller_runtime_reconcile_time_seconds of one
// controller from the manager's metrics endpoint.
func reconcileHistogram(url, controller string) histogram {
	h := histogram{}
	resp, err := http.Get(url)
	if err != nil {
		return h
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := "controller_runtime_reconcile_time_seconds_bucket{"
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, `controller="`+controller+`"`) {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.LastIndex(line, " ")
		if i < 0 || j < 0 {
			continue
		}
		le := line[i+4:]
		le = le[:strings.Index(le, `"`)]
		bound, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			bound, err = math.Inf(1), nil
		}
		v, verr := strconv.ParseFloat(line[j+1:], 64)
		if err == nil && verr == nil {
			h[bound] = v
		}
	}
	return h
}

// since returns the observations between h0 and h and the bucket bound
// that holds their 99th percentile.
func (h histogram) since(h0 histogram) (float64, string) {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, "n/a"
	}
	total := h[bounds[len(bounds)-1]] - h0[bounds[len(bounds)-1]]
	for _, b := range bounds {
		if h[b]-h0[b] >= 0.99*total {
			if math.IsInf(b, 1) {
				return total, "> largest bucket"
			}
			return total, "<= " + time.Duration(b*float64(time.Second)).String()
		}
	}
	return total, "n/a"
}

// runRepeat creates m Tenants one after another on the idle stack, each
// once the previous one is Ready (watched), and prints their
// create→Ready latencies: what one user waits for one Tenant.
func runRepeat(ctx context.Context, s *integration.Stack, m int, outDir string) error {
	c := s.CP.Client
	var lat []time.Duration
	created, readyAt := map[string]time.Time{}, map[string]time.Time{}
	cpu0, begin := procCPU(), time.Now()
	tenants, err := watchTenants(ctx, s, "bench")
	if err != nil {
		return err
	}
	for i := 0; i < m; i++ {
		name := fmt.Sprintf("single%03d", i)
		start := time.Now()
		created[name] = start
		if err := c.Create(ctx, &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}); err != nil {
			return err
		}
		for readyAt[name].IsZero() {
			for _, t := range tenants.snapshot() {
				if t.name == name && !t.readyAt.IsZero() {
					readyAt[name] = t.readyAt
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s not Ready: %w", name, ctx.Err())
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, readyAt[name].Sub(start))
		fmt.Printf("  %s create→Ready %s\n", name, lat[i].Round(time.Millisecond))
		time.Sleep(200 * time.Millisecond) // let the stack settle: idle again
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("\none Tenant at a time on an idle stack, %d times (2 vCPU, load average %s)\n", m, loadAverage())
	fmt.Printf("  create→Ready  p50 %s  p90 %s  min %s  max %s\n", quantile(lat, 0.5).Round(time.Millisecond), quantile(lat, 0.9).Round(time.Millisecond),
		lat[0].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	if err := breakdown(ctx, s, s.Primary().MetricsURL, begin, time.Now(), created, readyAt, cpu0, outDir); err != nil {
		return err
	}
	return checkJournal(ctx, s)
}

// tenantState is what the bench's watch saw of one Tenant.
type tenantState struct {
	name    string
	phase   databasev1alpha1.TenantPhase
	readyAt time.Time // first seen Ready
}

// tenantWatch follows the Tenants of one namespace.
type tenantWatch struct {
	mu sync.Mutex
	by map[string]*tenantState
}

func (w *tenantWatch) snapshot() []tenantState {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]tenantState, 0, len(w.by))
	for _, t := range w.by {
		out = append(out, *t)
	}
	return out
}

// watchTenants watches the Tenants of ns (re-watching from the last
// resourceVersion when the watch ends) until ctx ends.
func watchTenants(ctx context.Context, s *integration.Stack, ns string) (*tenantWatch, error) {
	wc, err := client.NewWithWatch(s.CP.Config, client.Options{Scheme: s.CP.Client.Scheme()})
	if err != nil {
		return nil, err
	}
	w := &tenantWatch{by: map[string]*tenantState{}}
	go func() {
		rv := ""
		for ctx.Err() == nil {
			wi, err := wc.Watch(ctx, &databasev1alpha1.PostgreSQLTenantList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				t, ok := ev.Object.(*databasev1alpha1.PostgreSQLTenant)
				if !ok {
					continue
				}
				rv = t.ResourceVersion
				now := time.Now()
				w.mu.Lock()
				st := w.by[t.Name]
				if st == nil {
					st = &tenantState{name: t.Name}
					w.by[t.Name] = st
				}
				st.phase = t.Status.Phase
				for _, cond := range t.Status.Conditions {
					if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue && st.readyAt.IsZero() {
						st.readyAt = now
					}
				}
				w.mu.Unlock()
			}
			wi.Stop()
		}
	}()
	return w, nil
}
