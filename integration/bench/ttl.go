package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// runTTL is -jobs N -ttl T: N Ayatori Jobs of ayatori.test/succeed with
// ttlSecondsAfterFinished T on the execution stack; a Job is done when a
// watch sees it deleted (the TTL controller's delete, through the
// finalizer: its native Job is gone by then). It prints the throughput
// (Jobs per second, first create call → last deletion seen), the TTL
// deletion lag (Succeeded=True seen → deletion seen), the journal records
// per Job by kind, the manager's memory, checks one native Job per Job
// while it lived and none left, one Finished and one TTLExpired note per
// Job, and runs `ayatori-journal verify`.
//
// With restart the manager is killed (SIGKILL) and started again once
// half the Jobs succeeded; each Job must still be deleted exactly once.
func runTTL(n, ttl, kcmQPS int, restart bool, profile, apiProfile time.Duration, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Room for every pod (each node takes 110) even if finished pods
	// still counted until their Job is deleted.
	nodes := (2*n + 109) / 110
	pprofPort, err := integration.FreePort()
	if err != nil {
		return err
	}
	pprofURL := fmt.Sprintf("http://127.0.0.1:%d", pprofPort)
	s, wc, kcm, err := startJobsStack(ctx, nodes, kcmQPS, "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pprofPort))
	if err != nil {
		return err
	}
	defer s.Close()
	c := s.CP.Client
	rssBefore := procStatus(s.ManagerPID(), "VmRSS")
	outDir, err := os.MkdirTemp("", "ayatori-bench-ttl-")
	if err != nil {
		return err
	}
	var profiled <-chan string
	if profile > 0 && !restart {
		// From the first create on (the stack is idle before): where the
		// manager's CPU goes while the Jobs run.
		profiled = profileManager(ctx, pprofURL, profile, outDir)
	}
	var apiProfiled <-chan string
	if apiProfile > 0 && !restart {
		apiProfiled = profileAPIServer(ctx, s.CP.Config, apiProfile, outDir)
	}
	cpu0 := procCPU()

	// Native Jobs by the Ayatori Job UID they carry, and the ones seen
	// deleted, from a watch that runs through the whole phase.
	var nmu sync.Mutex
	natives := map[string]map[types.UID]bool{}
	nativeGone := map[types.UID]bool{}
	nctx, ncancel := context.WithCancel(ctx)
	defer ncancel()
	nopts := []client.ListOption{client.InNamespace(jobsNamespace), client.HasLabels{execution.LabelJobUID}}
	nw, err := wc.Watch(nctx, &batchv1.JobList{}, nopts...)
	if err != nil {
		return err
	}
	nerr := make(chan error, 1)
	go func() {
		nerr <- follow(nctx, wc, &batchv1.JobList{}, nopts, nw, -1, func(ev watch.EventType, o client.Object) (bool, error) {
			nmu.Lock()
			defer nmu.Unlock()
			owner := o.GetLabels()[execution.LabelJobUID]
			if natives[owner] == nil {
				natives[owner] = map[types.UID]bool{}
			}
			natives[owner][o.GetUID()] = true
			if ev == watch.Deleted {
				nativeGone[o.GetUID()] = true
			}
			return false, nil
		}, &sync.Mutex{}, map[string]time.Time{})
	}()

	var mu sync.Mutex
	succeededAt := map[string]time.Time{}
	uidOf := map[string]types.UID{}
	deletions := map[types.UID]int{}
	var rs restartState
	restartDone := make(chan struct{})
	if !restart {
		close(restartDone)
	}
	t := int32(ttl)
	p, err := measure(ctx, fmt.Sprintf("Ayatori Jobs with ttlSecondsAfterFinished %d", ttl), wc, &executionv1alpha1.JobList{}, nil, n,
		func(i int) client.Object { return ayatoriJob(i, &t) },
		func(ev watch.EventType, o client.Object) (bool, error) {
			j := o.(*executionv1alpha1.Job)
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			uidOf[j.Name] = j.UID
			if ev == watch.Deleted {
				deletions[j.UID]++
				return true, nil
			}
			ok, err := succeeded(j)
			if !ok || err != nil {
				return false, err
			}
			if _, seen := succeededAt[j.Name]; !seen {
				succeededAt[j.Name] = now
				if restart && len(succeededAt) == n/2 {
					rs.succeeded, rs.deleted = len(succeededAt), len(deletions)
					go rs.run(s, restartDone)
				}
			}
			return false, nil
		})
	if err != nil {
		return fmt.Errorf("Ayatori Jobs: %w\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
	<-restartDone
	if rs.err != nil {
		return rs.err
	}
	cpu1 := procCPU()
	pid := s.ManagerPID()
	hwm, rss := procStatus(pid, "VmHWM"), procStatus(pid, "VmRSS")
	appendSum, appendCount, deliverySum, deliveryCount := journalMetrics(s.MetricsURL)
	reconciles, busy := metricPair(s.MetricsURL, "controller_runtime_reconcile_time_seconds", `controller="job"`)
	ttlReconciles, _ := metricPair(s.MetricsURL, "controller_runtime_reconcile_time_seconds", `controller="jobttl"`)

	// Every Job: seen succeeded, then deleted exactly once.
	mu.Lock()
	var lag, toSucceeded []time.Duration
	var lost []string
	uids := map[string]bool{}
	var last, lastSucceeded time.Time
	for name, created := range p.createdAt {
		uid := uidOf[name]
		uids[string(uid)] = true
		sAt, ok := succeededAt[name]
		if !ok || deletions[uid] != 1 {
			lost = append(lost, fmt.Sprintf("%s (succeeded seen %v, deletions %d)", name, ok, deletions[uid]))
			continue
		}
		lag = append(lag, p.doneAt[name].Sub(sAt))
		toSucceeded = append(toSucceeded, sAt.Sub(created))
		if sAt.After(lastSucceeded) {
			lastSucceeded = sAt
		}
		if p.doneAt[name].After(last) {
			last = p.doneAt[name]
		}
	}
	mu.Unlock()
	if len(lost) > 0 || len(p.createdAt) != n {
		return fmt.Errorf("%d of %d created Jobs not seen succeeded and deleted once: %s", len(lost), len(p.createdAt), strings.Join(lost[:min(len(lost), 10)], ", "))
	}
	sort.Slice(lag, func(i, j int) bool { return lag[i] < lag[j] })
	sort.Slice(toSucceeded, func(i, j int) bool { return toSucceeded[i] < toSucceeded[j] })

	// The native Jobs: one per Job while it lived, all deleted.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		nmu.Lock()
		gone := len(nativeGone)
		nmu.Unlock()
		if gone >= n || time.Now().After(deadline) {
			break
		}
	}
	ncancel()
	<-nerr
	var nativeBad []string
	for uid := range uids {
		if k := len(natives[uid]); k != 1 {
			nativeBad = append(nativeBad, fmt.Sprintf("%s (%d)", uid, k))
		}
	}
	if len(natives) != n {
		nativeBad = append(nativeBad, fmt.Sprintf("native Jobs carry %d Job UIDs, want %d", len(natives), n))
	}
	var leftJobs executionv1alpha1.JobList
	var leftNatives batchv1.JobList
	var leftPods corev1.PodList
	for _, l := range []struct {
		list client.ObjectList
		opts []client.ListOption
	}{{&leftJobs, nil}, {&leftNatives, []client.ListOption{client.HasLabels{execution.LabelJobUID}}}, {&leftPods, nil}} {
		if err := c.List(ctx, l.list, append(l.opts, client.InNamespace(jobsNamespace))...); err != nil {
			return err
		}
	}

	jj, err := scanJobJournal(ctx, s.NATS, uids)
	if err != nil {
		return err
	}
	badTTL, badFinished := jj.exactlyOne("note "+execution.NoteTTLExpired), jj.exactlyOne("note "+execution.NoteFinished)

	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	dist := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %s  p99 %s  max %s", r(quantile(d, 0.5)), r(quantile(d, 0.99)), r(d[len(d)-1]))
	}
	allDone := last.Sub(p.start)
	mode := ""
	if restart {
		mode = ", manager SIGKILLed and restarted mid-run"
	}
	fmt.Printf("\nN=%d Jobs of %s (pod runs 0.5 s) with ttlSecondsAfterFinished %d on %d kwok nodes, manager with default timings%s, %s (local execution stack, 2 vCPU, load average %s)\n",
		n, integration.ImageSucceed, ttl, nodes, mode, kcm, loadAverage())
	fmt.Printf("  created in               %s\n", r(p.createdIn))
	fmt.Printf("  all deleted              %s after the first create call: %.2f Jobs/s\n", r(allDone), float64(n)/allDone.Seconds())
	fmt.Printf("  all Succeeded            %s after the first create call: %.2f Jobs/s\n", r(lastSucceeded.Sub(p.start)), float64(n)/lastSucceeded.Sub(p.start).Seconds())
	fmt.Printf("  create → Succeeded seen  %s\n", dist(toSucceeded))
	fmt.Printf("  create → deletion seen   %s\n", dist(p.lat))
	fmt.Printf("  TTL deletion lag         %s  (Succeeded=True seen → deletion seen, by a watch)\n", dist(lag))
	fmt.Printf("  deletions per Job        exactly one (%d Jobs, none lost)\n", n)
	if len(nativeBad) == 0 {
		fmt.Printf("  native Jobs              exactly one per Job while it lived (%d), %d seen deleted\n", len(uids), len(nativeGone))
	} else {
		fmt.Printf("  native Jobs              NOT one per Job: %s\n", strings.Join(nativeBad[:min(len(nativeBad), 10)], ", "))
	}
	fmt.Printf("  left at the end          %d Ayatori Jobs, %d native Jobs, %d pods\n", len(leftJobs.Items), len(leftNatives.Items), len(leftPods.Items))
	fmt.Printf("  journal records per Job  %s\n", jj.describe())
	fmt.Printf("  records per Job by kind  %s\n", strings.Join(jj.breakdown(), ", "))
	fmt.Printf("  TTLExpired notes         %s\n", oneEach(badTTL, n))
	fmt.Printf("  Finished notes           %s\n", oneEach(badFinished, n))
	who := "the manager"
	if restart {
		who = "the restarted manager"
	}
	fmt.Printf("  journal appends          %d, mean %.2f ms; intent delivery %d, mean %.2f ms (%s)\n",
		int(appendCount), 1000*appendSum/max(appendCount, 1), int(deliveryCount), 1000*deliverySum/max(deliveryCount, 1), who)
	fmt.Printf("  Job projector            %d reconciles, %.1f s busy (summed over its workers); TTL controller %d reconciles (%s)\n",
		int(reconciles), busy, int(ttlReconciles), who)
	if restart {
		fmt.Printf("  manager memory           killed process: VmHWM %.1f MiB, VmRSS %.1f MiB; restarted: VmHWM %.1f MiB, VmRSS %.1f MiB at the end (VmRSS %.1f MiB idle before the run)\n",
			float64(rs.hwm)/1024, float64(rs.rss)/1024, float64(hwm)/1024, float64(rss)/1024, float64(rssBefore)/1024)
		first := time.Time{}
		for _, at := range p.doneAt {
			if at.After(rs.startedAt) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		fmt.Printf("\nmanager restart (SIGKILL)\n")
		fmt.Printf("  killed                   %s into the run, %d of %d Jobs succeeded, %d deleted\n", r(rs.killAt.Sub(p.start)), rs.succeeded, n, rs.deleted)
		fmt.Printf("  started again            %s after the kill, metrics answering %s after the kill\n", r(rs.startedAt.Sub(rs.killAt)), r(rs.upAt.Sub(rs.killAt)))
		if !first.IsZero() {
			fmt.Printf("  first deletion after it  %s after the kill\n", r(first.Sub(rs.killAt)))
		}
	} else {
		fmt.Printf("  manager memory           VmHWM %.1f MiB, VmRSS %.1f MiB at the end (VmRSS %.1f MiB idle before the run)\n",
			float64(hwm)/1024, float64(rss)/1024, float64(rssBefore)/1024)
	}

	if !restart {
		jobCosts(s.MetricsURL, float64(n))
		printCPU(cpu0, cpu1, allDone.Seconds(), float64(n), "Job")
	}
	if profiled != nil {
		fmt.Printf("\n%s\n", <-profiled)
	}
	if apiProfiled != nil {
		fmt.Printf("\n%s\n", <-apiProfiled)
	}

	fmt.Printf("\nayatori-journal verify\n")
	verr := verifyJournal(ctx, s.JournalBin, s.JournalReaderArgs())
	var problems []string
	if verr != nil {
		problems = append(problems, fmt.Sprintf("ayatori-journal verify: %v", verr))
	}
	if len(nativeBad) > 0 {
		problems = append(problems, "native Jobs not one per Job")
	}
	if n := len(leftJobs.Items) + len(leftNatives.Items); n > 0 {
		problems = append(problems, fmt.Sprintf("%d Jobs left", n))
	}
	if len(badTTL) > 0 || len(badFinished) > 0 {
		problems = append(problems, "TTLExpired/Finished notes not one per Job")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func oneEach(bad []string, n int) string {
	if len(bad) == 0 {
		return fmt.Sprintf("exactly one per Job (%d)", n)
	}
	return fmt.Sprintf("NOT one per Job for %d: %s", len(bad), strings.Join(bad[:min(len(bad), 10)], ", "))
}

// restartState is the mid-run manager restart of -restart.
type restartState struct {
	succeeded, deleted      int
	hwm, rss                int64
	killAt, startedAt, upAt time.Time
	err                     error
}

// run kills the manager (SIGKILL, after reading its memory), starts it
// again and waits until its metrics endpoint answers.
func (rs *restartState) run(s *integration.ExecutionStack, done chan struct{}) {
	defer close(done)
	pid := s.ManagerPID()
	rs.hwm, rs.rss = procStatus(pid, "VmHWM"), procStatus(pid, "VmRSS")
	rs.killAt = time.Now()
	s.KillManager()
	if rs.err = s.StartManager(nil); rs.err != nil {
		return
	}
	rs.startedAt = time.Now()
	fmt.Printf("manager killed (SIGKILL) after %d Jobs succeeded, started again\n", rs.succeeded)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(s.MetricsURL); err == nil {
			resp.Body.Close()
			rs.upAt = time.Now()
			return
		}
		if time.Now().After(deadline) {
			rs.err = fmt.Errorf("manager did not come back\n%s", integration.Tail(s.ManagerLog, 20))
			return
		}
	}
}
