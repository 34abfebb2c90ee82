package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

const (
	jobsNamespace = "bench-jobs"
	// jobsSA is the JobClass parameters' ServiceAccount, also used by the
	// plain Jobs.
	jobsSA = "ayatori-job"
	// createWorkers create the objects of a phase concurrently.
	createWorkers = 8
	// plainLabel marks the plain batch/v1 Jobs (the native Jobs of the
	// Ayatori Jobs live in the same namespace).
	plainLabel = "bench.ayatori.ddupan.top/plain"
)

// phase is what one row of the Jobs table measured.
type phase struct {
	createdIn, allDone time.Duration
	// lat is each object's create call returning → done seen by a watch,
	// sorted.
	lat []time.Duration
	// start is the first create call; createdAt each object's create
	// call returning, by name.
	start     time.Time
	createdAt map[string]time.Time
	// doneAt is when a watch first saw each object done, by name.
	doneAt map[string]time.Time
}

// ayatoriJob is the i-th Ayatori Job of ayatori.test/succeed, with
// ttlSecondsAfterFinished ttl (nil: none).
func ayatoriJob(i int, ttl *int32) *executionv1alpha1.Job {
	return &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: fmt.Sprintf("j%05d", i)},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: integration.ImageSucceed, Command: []string{"/bin/task"}},
			TTLSecondsAfterFinished: ttl}}
}

// succeeded says whether the Job's Succeeded condition is True; False is
// an error (ayatori.test/succeed must succeed).
func succeeded(j *executionv1alpha1.Job) (bool, error) {
	cond := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionSucceeded)
	if cond != nil && cond.Status == metav1.ConditionFalse {
		return false, fmt.Errorf("Job %s ended Succeeded=False/%s: %s", j.Name, cond.Reason, cond.Message)
	}
	return cond != nil && cond.Status == metav1.ConditionTrue, nil
}

// runJobs is -jobs N: an ExecutionStack (manager with its default
// timings) runs N Ayatori Jobs of ayatori.test/succeed (the pod runs
// 0.5 s), then, on the same cluster, N plain batch/v1 Jobs with the same
// pod; it prints both rows and the overhead, the journal records per Job,
// the manager's memory, and checks one native Job per Ayatori Job.
func runJobs(n, kcmQPS int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Room for both phases' pods (each node takes 110) even if finished
	// pods still counted.
	nodes := (2*n + 109) / 110
	s, wc, kcm, err := startJobsStack(ctx, nodes, kcmQPS)
	if err != nil {
		return err
	}
	defer s.Close()
	c := s.CP.Client
	pid := s.ManagerPID()
	rssBefore := procStatus(pid, "VmRSS")

	ayatori, err := measure(ctx, "Ayatori Jobs", wc, &executionv1alpha1.JobList{}, nil, n, func(i int) client.Object { return ayatoriJob(i, nil) },
		func(ev watch.EventType, o client.Object) (bool, error) {
			if ev == watch.Deleted {
				return false, nil
			}
			return succeeded(o.(*executionv1alpha1.Job))
		})
	if err != nil {
		return fmt.Errorf("Ayatori Jobs: %w\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
	hwm, rss := procStatus(pid, "VmHWM"), procStatus(pid, "VmRSS")
	appendSum, appendCount, deliverySum, deliveryCount := journalMetrics(s.MetricsURL)
	reconciles, busy := metricPair(s.MetricsURL, "controller_runtime_reconcile_time_seconds", `controller="job"`)
	queued, queueWait := metricPair(s.MetricsURL, "workqueue_queue_duration_seconds", `name="job"`)
	uids, err := oneNativeEach(ctx, c, n)
	if err != nil {
		return err
	}
	recs, err := scanJobJournal(ctx, s.NATS, uids)
	if err != nil {
		return err
	}

	plain, err := measure(ctx, "plain batch/v1 Jobs", wc, &batchv1.JobList{}, []client.ListOption{client.HasLabels{plainLabel}}, n, func(i int) client.Object {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: fmt.Sprintf("plain-%05d", i), Labels: map[string]string{plainLabel: "true"}},
			Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, ServiceAccountName: jobsSA,
				Containers: []corev1.Container{{Name: "task", Image: integration.ImageSucceed, Command: []string{"/bin/task"}}}}}}}
	}, func(ev watch.EventType, o client.Object) (bool, error) {
		if ev == watch.Deleted {
			return false, nil
		}
		j := o.(*batchv1.Job)
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("batch/v1 Job %s failed: %s", j.Name, cond.Reason)
			}
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("plain Jobs: %w", err)
	}

	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	row := func(name string, p phase) {
		fmt.Printf("  %-22s %10s %10s %10s %10s %10s\n", name, r(p.createdIn), r(p.allDone), r(quantile(p.lat, 0.5)), r(quantile(p.lat, 0.99)), r(p.lat[len(p.lat)-1]))
	}
	ratio := func(f func(phase) time.Duration) string {
		return fmt.Sprintf("%.1fx", f(ayatori).Seconds()/f(plain).Seconds())
	}
	fmt.Printf("\nN=%d Jobs of %s (pod runs 0.5 s) on %d kwok nodes, manager with default timings, %s (local execution stack, 2 vCPU, load average %s)\n",
		n, integration.ImageSucceed, nodes, kcm, loadAverage())
	fmt.Printf("  %-22s %10s %10s %10s %10s %10s\n", "", "created in", "all done", "p50", "p99", "max")
	row("Ayatori Job", ayatori)
	row("plain batch/v1 Job", plain)
	fmt.Printf("  %-22s %10s %10s %10s %10s\n", "overhead Ayatori/plain", "", ratio(func(p phase) time.Duration { return p.allDone }),
		ratio(func(p phase) time.Duration { return quantile(p.lat, 0.5) }), ratio(func(p phase) time.Duration { return quantile(p.lat, 0.99) }))
	fmt.Printf("  (all done: first create call → last done seen; p50/p99/max per Job: its create call returning → Succeeded=True / Complete=True seen by a watch)\n")
	fmt.Printf("  native Jobs              exactly one per Ayatori Job (%d)\n", len(uids))
	fmt.Printf("  journal records per Job  %s\n", recs.describe())
	fmt.Printf("  journal appends          %d, mean %.2f ms; intent delivery %d, mean %.2f ms\n",
		int(appendCount), 1000*appendSum/max(appendCount, 1), int(deliveryCount), 1000*deliverySum/max(deliveryCount, 1))
	fmt.Printf("  Job projector            %d reconciles, %.1f s busy (summed over its workers); %d queued, mean wait %.2f s\n",
		int(reconciles), busy, int(queued), queueWait/max(queued, 1))
	fmt.Printf("  manager memory           VmHWM %.1f MiB, VmRSS %.1f MiB after the Ayatori Jobs (VmRSS %.1f MiB before)\n",
		float64(hwm)/1024, float64(rss)/1024, float64(rssBefore)/1024)
	return nil
}

// startJobsStack starts an ExecutionStack with nodes kwok nodes, the
// manager with its default timings and kube-controller-manager with
// --kube-api-qps=kcmQPS (0: its default), creates the default JobClass
// std, its parameters (ServiceAccount jobsSA) and the namespace
// jobsNamespace, and waits until the class is Ready (the manager is up).
// It returns the stack, a watching client and a description of
// kube-controller-manager's rate limit.
func startJobsStack(ctx context.Context, nodes, kcmQPS int, managerArgs ...string) (*integration.ExecutionStack, client.WithWatch, string, error) {
	opts := integration.ExecutionStackOptions{Nodes: nodes, ManagerArgs: append(managerArgs, managerFlags...)}
	kcm := "kube-controller-manager with its default API rate limit (20 QPS, burst 30)"
	if kcmQPS > 0 {
		opts.ControllerManagerArgs = []string{fmt.Sprintf("--kube-api-qps=%d", kcmQPS), fmt.Sprintf("--kube-api-burst=%d", 2*kcmQPS)}
		kcm = fmt.Sprintf("kube-controller-manager --kube-api-qps=%d --kube-api-burst=%d", kcmQPS, 2*kcmQPS)
	}
	s, wc, err := startClassStack(ctx, opts, "std",
		&executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "std"},
			Spec: executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: jobsSA}},
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "std", Annotations: map[string]string{executionv1alpha1.AnnotationIsDefaultJobClass: "true"}},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: jobsSA}},
	)
	return s, wc, kcm, err
}

// startClassStack starts an ExecutionStack with opts, the manager with
// its default timings, creates the namespace jobsNamespace and then objs
// (in order), and waits until the JobClass class is Ready (the manager is
// up and the class usable before any clock starts). It returns the stack
// and a watching client.
func startClassStack(ctx context.Context, opts integration.ExecutionStackOptions, class string, objs ...client.Object) (*integration.ExecutionStack, client.WithWatch, error) {
	opts.DefaultTimings = true
	s, err := integration.NewExecutionStack(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	c := s.CP.Client
	wc, err := client.NewWithWatch(s.CP.Config, client.Options{Scheme: s.CP.Scheme})
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	for _, o := range append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jobsNamespace}}}, objs...) {
		if err := c.Create(ctx, o); err != nil {
			s.Close()
			return nil, nil, err
		}
	}
	for {
		jc := &executionv1alpha1.JobClass{}
		if err := c.Get(ctx, types.NamespacedName{Name: class}, jc); err == nil && meta.IsStatusConditionTrue(jc.Status.Conditions, executionv1alpha1.JobClassConditionReady) {
			return s, wc, nil
		}
		if ctx.Err() != nil {
			err := fmt.Errorf("JobClass %s not Ready: %w\n%s", class, ctx.Err(), integration.Tail(s.ManagerLog, 20))
			s.Close()
			return nil, nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measure (a phase, what) watches list (in jobsNamespace, with opts), creates n objects
// made by obj (createWorkers at a time) and waits until done holds for
// each of them (an error from done ends the phase). done sees every
// watch event but bookmarks, deletions included.
func measure(ctx context.Context, what string, wc client.WithWatch, list client.ObjectList, opts []client.ListOption, n int,
	obj func(int) client.Object, done func(watch.EventType, client.Object) (bool, error)) (phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts = append([]client.ListOption{client.InNamespace(jobsNamespace)}, opts...)
	var mu sync.Mutex
	createdAt, doneAt := map[string]time.Time{}, map[string]time.Time{}
	finished := make(chan error, 1)
	w, err := wc.Watch(ctx, list, opts...)
	if err != nil {
		return phase{}, err
	}
	go func() { finished <- follow(ctx, wc, list, opts, w, n, done, &mu, doneAt) }()

	start := time.Now()
	objs := make([]client.Object, n)
	times, err := createAll(ctx, wc, n, func(i int) []client.Object {
		objs[i] = obj(i)
		return []client.Object{objs[i]}
	})
	createdIn := time.Since(start)
	if err != nil {
		return phase{}, err
	}
	mu.Lock()
	for i, o := range objs {
		createdAt[o.GetName()] = times[i]
	}
	mu.Unlock()
	fmt.Printf("created %d %s in %s\n", n, what, createdIn.Round(time.Millisecond))
	if err := <-finished; err != nil {
		mu.Lock()
		defer mu.Unlock()
		return phase{}, fmt.Errorf("%d of %d done: %w", len(doneAt), n, err)
	}
	p := phase{createdIn: createdIn, start: start, createdAt: createdAt, doneAt: doneAt}
	var last time.Time
	for name, at := range doneAt {
		p.lat = append(p.lat, max(0, at.Sub(createdAt[name])))
		if at.After(last) {
			last = at
		}
	}
	p.allDone = last.Sub(start)
	sort.Slice(p.lat, func(i, j int) bool { return p.lat[i] < p.lat[j] })
	return p, nil
}

// follow records when each object is first seen done, until n are. A
// watch that ends is opened again from the last resourceVersion (from
// now after an error event: objects that finished meanwhile are then
// seen in its initial ADDED events).
func follow(ctx context.Context, wc client.WithWatch, list client.ObjectList, opts []client.ListOption, w watch.Interface, n int,
	done func(watch.EventType, client.Object) (bool, error), mu *sync.Mutex, doneAt map[string]time.Time) error {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = ""
				break
			}
			o, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv = o.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			ok, err := done(ev.Type, o)
			if err != nil {
				w.Stop()
				return err
			}
			if !ok {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, seen := doneAt[o.GetName()]; !seen {
				doneAt[o.GetName()] = now
			}
			count := len(doneAt)
			mu.Unlock()
			if count == n {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var err error
		if w, err = wc.Watch(ctx, list, append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})...); err != nil {
			return err
		}
	}
}

// oneNativeEach checks that every Ayatori Job has exactly one native
// batch/v1 Job (by the UID label) and returns the Jobs' UIDs.
func oneNativeEach(ctx context.Context, c client.Client, n int) (map[string]bool, error) {
	var jobs executionv1alpha1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(jobsNamespace)); err != nil {
		return nil, err
	}
	var natives batchv1.JobList
	if err := c.List(ctx, &natives, client.InNamespace(jobsNamespace), client.HasLabels{execution.LabelJobUID}); err != nil {
		return nil, err
	}
	per := map[string]int{}
	for _, nj := range natives.Items {
		per[nj.Labels[execution.LabelJobUID]]++
	}
	uids := map[string]bool{}
	for _, j := range jobs.Items {
		uids[string(j.UID)] = true
		if per[string(j.UID)] != 1 {
			return nil, fmt.Errorf("Job %s has %d native Jobs, want 1", j.Name, per[string(j.UID)])
		}
	}
	if len(jobs.Items) != n || len(natives.Items) != n {
		return nil, fmt.Errorf("%d Ayatori Jobs and %d native Jobs, want %d of each", len(jobs.Items), len(natives.Items), n)
	}
	return uids, nil
}

// jobJournal is what the journal holds of a set of Job UIDs.
type jobJournal struct {
	// per counts records by UID (every UID of the set, 0 included).
	per map[string]int
	// kinds counts records by "type operation" (e.g. "note TTLExpired"),
	// perKind the same by UID.
	kinds   map[string]int
	perKind map[string]map[string]int
	total   int
	// other counts records of UIDs outside the set.
	other int
}

// scanJobJournal reads the whole journal and counts the records of each
// Job UID in uids.
func scanJobJournal(ctx context.Context, n *integration.NATS, uids map[string]bool) (jobJournal, error) {
	jj := jobJournal{per: map[string]int{}, kinds: map[string]int{}, perKind: map[string]map[string]int{}}
	nc, err := n.Connect(journal.IdentityReader)
	if err != nil {
		return jj, err
	}
	defer nc.Close()
	store, err := journal.OpenExisting(ctx, nc, journal.Config{})
	if err != nil {
		return jj, err
	}
	for uid := range uids {
		jj.per[uid] = 0
		jj.perKind[uid] = map[string]int{}
	}
	_, err = integration.ScanJournal(ctx, store, func(r journal.Record, err error) error {
		if err != nil {
			return err
		}
		if !uids[r.Object.UID] {
			jj.other++
			return nil
		}
		kind := string(r.Type) + " " + r.Operation
		jj.per[r.Object.UID]++
		jj.kinds[kind]++
		jj.perKind[r.Object.UID][kind]++
		jj.total++
		return nil
	})
	return jj, err
}

// describe gives the distribution of records per Job and the intents per
// Job by operation.
func (jj jobJournal) describe() string {
	counts := make([]int, 0, len(jj.per))
	for _, c := range jj.per {
		counts = append(counts, c)
	}
	sort.Ints(counts)
	n := float64(len(counts))
	desc := fmt.Sprintf("mean %.1f, p50 %d, min %d, max %d (%d records; %d of other objects); intents per Job:",
		float64(jj.total)/n, counts[len(counts)/2], counts[0], counts[len(counts)-1], jj.total, jj.other)
	for _, k := range jj.sortedKinds() {
		if op, ok := strings.CutPrefix(k, string(journal.TypeIntent)+" "); ok {
			desc += fmt.Sprintf(" %s %.2f", op, float64(jj.kinds[k])/n)
		}
	}
	return desc
}

func (jj jobJournal) sortedKinds() []string {
	kinds := make([]string, 0, len(jj.kinds))
	for k := range jj.kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// breakdown gives every record kind's mean per Job and its range over
// the Jobs ("intent Observe 1.30 (1-3)").
func (jj jobJournal) breakdown() []string {
	var out []string
	for _, k := range jj.sortedKinds() {
		lo, hi := -1, 0
		for _, m := range jj.perKind {
			c := m[k]
			if lo < 0 || c < lo {
				lo = c
			}
			hi = max(hi, c)
		}
		out = append(out, fmt.Sprintf("%s %.2f (%d-%d)", k, float64(jj.kinds[k])/float64(len(jj.per)), lo, hi))
	}
	return out
}

// exactlyOne returns the UIDs that do not have exactly one record of kind.
func (jj jobJournal) exactlyOne(kind string) []string {
	var bad []string
	for uid, m := range jj.perKind {
		if m[kind] != 1 {
			bad = append(bad, fmt.Sprintf("%s (%d)", uid, m[kind]))
		}
	}
	sort.Strings(bad)
	return bad
}

// metricPair returns count and sum of a Prometheus histogram or summary
// name, added up over the lines holding label (e.g. `controller="job"`;
// "" for every line).
func metricPair(url, name, label string) (count, sum float64) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.LastIndex(line, " ")
		if i < 0 || strings.HasPrefix(line, "#") || !strings.Contains(line, label) {
			continue
		}
		metric, _, _ := strings.Cut(line[:i], "{")
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		switch metric {
		case name + "_count":
			count += v
		case name + "_sum":
			sum += v
		}
	}
	return
}

// loadAverage is the 1-minute load average ("?" when unreadable): the
// figures are only comparable on an otherwise idle machine.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// jobCosts prints, from the manager's metrics at metricsURL, what the n
// Jobs of a run cost it: reconciles of each execution controller, the
// projector pass phases, and the Kubernetes API requests by verb, each
// also per Job.
func jobCosts(metricsURL string, n float64) {
	fmt.Printf("\nmanager costs per Job (its metrics)\n")
	reconciles := metricSums(metricsURL, "controller_runtime_reconcile_time_seconds", "controller")
	for _, c := range []string{"job", "jobttl", "jobclass"} {
		if e, ok := reconciles[c]; ok {
			fmt.Printf("  reconciles %-9s %7d (%.2f per Job), mean %s ms, total %.1f s\n", c, int(e[0]), e[0]/n, meanMS(e), e[1])
		}
	}
	phases := metricSums(metricsURL, "ayatori_projector_pass_phase_seconds", "phase")
	fmt.Printf("  projector pass phases: phase, count, per Job, mean ms, total s\n")
	for _, ph := range []string{"finalizer", "read", "plan", "checkpoint", "append", "status"} {
		if e, ok := phases[ph]; ok {
			fmt.Printf("    %-10s %7d %6.2f %8s %8.1f\n", ph, int(e[0]), e[0]/n, meanMS(e), e[1])
		}
	}
	verbs := metricSums(metricsURL, "rest_client_request_duration_seconds", "verb")
	fmt.Printf("  API requests of the manager: verb, count, per Job, mean ms, total s\n")
	for _, v := range slices.Sorted(maps.Keys(verbs)) {
		fmt.Printf("    %-7s %7d %6.2f %8s %7.1f\n", v, int(verbs[v][0]), verbs[v][0]/n, meanMS(verbs[v]), verbs[v][1])
	}
}
