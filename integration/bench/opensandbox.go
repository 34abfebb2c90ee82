package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	osexec "git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/integration"
	ostest "git.ddupan.top/panxiao81/ayatori/integration/opensandbox"
)

const (
	// osClass is the OpenSandbox JobClass (and its parameters) of
	// -opensandbox-jobs.
	osClass = "sandbox"
	osKey   = "bench-opensandbox-key"
	// osIdle is how long the run watches the server after all Jobs
	// succeeded and after all are gone: what finished Jobs cost.
	osIdle = 10 * time.Second
)

// osRoutes are the request classes of the OpenSandbox figures, in print
// order: lifecycle API (list by Job UID, create, get, execd endpoint,
// metadata patch, delete; probe is the JobClass probe's unfiltered list)
// and execd (files: the marker, command start, command status,
// interrupt, logs, ping).
var osRoutes = []string{"list", "create", "get", "endpoint", "files", "command", "status", "patch", "delete", "interrupt", "logs", "ping", "probe", "other"}

// osJob is the i-th Job of -opensandbox-jobs: 0.2 s of bash in a sandbox.
func osJob(i int) *executionv1alpha1.Job {
	return &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNamespace, Name: fmt.Sprintf("os%05d", i)},
		Spec: executionv1alpha1.JobSpec{JobClassName: osClass, Task: executionv1alpha1.TaskSpec{Image: "registry.example/tools:1",
			Command: []string{"bash", "-c", "sleep 0.2; exit 0"}}}}
}

// runOpenSandbox is -opensandbox-jobs N: an ExecutionStack (manager with
// its default timings, --opensandbox-marker-dir the test server's files
// root) and the spec-validating OpenSandbox test server in this process;
// an OpenSandbox class on it; N Jobs created at once (createWorkers
// clients), each `bash -c "sleep 0.2; exit 0"`, until all are
// Succeeded=True; then all deleted until all are gone. It prints the
// times, the OpenSandbox requests per Job by route (from the server's
// request log, attributed to Jobs by the sandbox's job-uid metadata), the
// journal records per Job and the manager's memory, and checks one
// sandbox per Job UID, one command per sandbox, no sandbox left and no
// spec violation. No timed assertion: the figures are the point.
func runOpenSandbox(n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	srv, err := ostest.New(ostest.Options{APIKeys: []string{osKey}})
	if err != nil {
		return err
	}
	defer srv.Close()
	s, wc, err := startClassStack(ctx, integration.ExecutionStackOptions{ManagerArgs: append([]string{"--opensandbox-marker-dir=" + srv.FilesRoot()}, managerFlags...)}, osClass,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: integration.ControllerNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: integration.ControllerNamespace, Name: "opensandbox-api"}, Data: map[string][]byte{"api-key": []byte(osKey)}},
		&executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: osClass},
			Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{Endpoint: srv.URL(), AllowInsecureHTTP: true,
				APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: integration.ControllerNamespace, Name: "opensandbox-api", Key: "api-key"}}},
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: osClass},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerOpenSandbox,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: osexec.ParametersKind, Name: osClass}}},
	)
	if err != nil {
		return err
	}
	defer s.Close()
	c := s.CP.Client
	pid := s.ManagerPID()
	rssBefore := procStatus(pid, "VmRSS")
	reqsBefore := len(srv.Requests())

	// Run: create N, wait for all Succeeded=True.
	run, err := measure(ctx, "OpenSandbox Jobs", wc, &executionv1alpha1.JobList{}, nil, n, func(i int) client.Object { return osJob(i) },
		func(ev watch.EventType, o client.Object) (bool, error) {
			if ev == watch.Deleted {
				return false, nil
			}
			return succeeded(o.(*executionv1alpha1.Job))
		})
	if err != nil {
		return fmt.Errorf("OpenSandbox Jobs: %w\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
	runEnd := run.start.Add(run.allDone)
	hwm, rss := procStatus(pid, "VmHWM"), procStatus(pid, "VmRSS")
	var jobs executionv1alpha1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(jobsNamespace)); err != nil {
		return err
	}
	uids := map[string]bool{}
	sandboxOf := map[string]string{}
	for _, j := range jobs.Items {
		uids[string(j.UID)] = true
		if j.Status.Execution != nil {
			for _, r := range j.Status.Execution.References {
				if r.Type == "Sandbox" {
					sandboxOf[string(j.UID)] = r.ID
				}
			}
		}
	}
	time.Sleep(osIdle)
	idle1End := time.Now()

	// Delete: all at once (one deletecollection), until a watch saw each gone.
	del, err := deleteAll(ctx, wc, n)
	if err != nil {
		return fmt.Errorf("deleting the Jobs: %w\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
	delEnd := del.start.Add(del.allDone)
	time.Sleep(osIdle)
	idle2End := time.Now()
	hwmEnd := procStatus(pid, "VmHWM")

	jj, err := scanJobJournal(ctx, s.NATS, uids)
	if err != nil {
		return err
	}

	// Checks: one sandbox per Job UID, one command per sandbox, none left.
	var problems []string
	var sandboxBad, commandBad, left []string
	for uid := range uids {
		if k := srv.CreatedSandboxes(osexec.LabelJobUID, uid); k != 1 {
			sandboxBad = append(sandboxBad, fmt.Sprintf("%s (%d)", uid, k))
		}
		sb := sandboxOf[uid]
		if k := srv.Commands(sb); sb == "" || k != 1 {
			commandBad = append(commandBad, fmt.Sprintf("%s sandbox %q (%d)", uid, sb, k))
		}
		if sb != "" && srv.SandboxDir(sb) != "" {
			left = append(left, sb)
		}
	}
	sort.Strings(sandboxBad)
	sort.Strings(commandBad)
	violations := srv.Violations()

	tally := tallyOSRequests(srv, reqsBefore, uids)
	window := func(from, to time.Time) osTally { return tally.between(from, to) }
	runT, idle1T, delT, idle2T := window(run.start, runEnd.Add(time.Nanosecond)), window(runEnd.Add(time.Nanosecond), idle1End),
		window(idle1End, delEnd.Add(time.Nanosecond)), window(delEnd.Add(time.Nanosecond), idle2End)

	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	dist := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %s  p95 %s  max %s", r(quantile(d, 0.5)), r(quantile(d, 0.95)), r(d[len(d)-1]))
	}
	fmt.Printf("\nN=%d OpenSandbox Jobs (bash -c \"sleep 0.2; exit 0\", one sandbox each) through the spec-validating OpenSandbox test server (in-process, provision delay %s), manager with default timings (local execution stack, 2 vCPU, load average %s)\n",
		n, ostest.DefaultProvisionDelay, loadAverage())
	fmt.Printf("  created in               %s (%d clients)\n", r(run.createdIn), createWorkers)
	fmt.Printf("  all Succeeded            %s after the first create call (%.1f Jobs/s)\n", r(run.allDone), float64(n)/run.allDone.Seconds())
	fmt.Printf("  create → Succeeded seen  %s\n", dist(run.lat))
	fmt.Printf("  OpenSandbox requests     %s\n", runT.describe(n))
	fmt.Printf("    per Job by route       %s\n", runT.byRoute(n))
	fmt.Printf("    non-2xx                %s\n", runT.failures())
	fmt.Printf("  next %s (all finished) %d requests: %s\n", osIdle, idle1T.total, idle1T.byRoute(0))
	fmt.Printf("  all deleted              %s after the delete call (one deletecollection); per Job %s\n", r(del.allDone), dist(del.lat))
	fmt.Printf("  OpenSandbox requests     %s\n", delT.describe(n))
	fmt.Printf("    per Job by route       %s\n", delT.byRoute(n))
	fmt.Printf("    non-2xx                %s\n", delT.failures())
	fmt.Printf("  next %s (all gone)     %d requests: %s\n", osIdle, idle2T.total, idle2T.byRoute(0))
	fmt.Printf("  sandboxes                %s; %d left at the end\n", oneEach(sandboxBad, n), len(left))
	fmt.Printf("  commands                 %s\n", oneEach(commandBad, n))
	fmt.Printf("  spec violations          %d\n", len(violations))
	fmt.Printf("  journal records per Job  %s\n", jj.describe())
	fmt.Printf("  records per Job by kind  %s\n", strings.Join(jj.breakdown(), ", "))
	fmt.Printf("  manager memory           VmHWM %.1f MiB, VmRSS %.1f MiB when all had succeeded (VmRSS %.1f MiB idle before the run); VmHWM %.1f MiB at the end\n",
		float64(hwm)/1024, float64(rss)/1024, float64(rssBefore)/1024, float64(hwmEnd)/1024)
	fmt.Printf("  (requests attributed to a Job by the sandbox in their path, the job-uid filter of a list, the job-uid metadata of a create; probe: the JobClass probe's list)\n")

	if len(sandboxBad) > 0 || len(commandBad) > 0 {
		problems = append(problems, "not one sandbox and one command per Job")
	}
	if len(left) > 0 {
		problems = append(problems, fmt.Sprintf("%d sandboxes left", len(left)))
	}
	if len(violations) > 0 {
		problems = append(problems, fmt.Sprintf("%d spec violations: %s", len(violations), strings.Join(violations[:min(len(violations), 5)], "; ")))
	}
	fmt.Printf("\nayatori-journal verify\n")
	if err := verifyJournal(ctx, s.JournalBin, s.JournalReaderArgs()); err != nil {
		problems = append(problems, fmt.Sprintf("ayatori-journal verify: %v", err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// deleteAll deletes every Ayatori Job in jobsNamespace with one
// deletecollection call and waits until a watch saw n deletions.
func deleteAll(ctx context.Context, wc client.WithWatch, n int) (phase, error) {
	opts := []client.ListOption{client.InNamespace(jobsNamespace)}
	var mu sync.Mutex
	doneAt := map[string]time.Time{}
	w, err := wc.Watch(ctx, &executionv1alpha1.JobList{}, opts...)
	if err != nil {
		return phase{}, err
	}
	finished := make(chan error, 1)
	go func() {
		finished <- follow(ctx, wc, &executionv1alpha1.JobList{}, opts, w, n, func(ev watch.EventType, _ client.Object) (bool, error) {
			return ev == watch.Deleted, nil
		}, &mu, doneAt)
	}()
	start := time.Now()
	if err := wc.DeleteAllOf(ctx, &executionv1alpha1.Job{}, client.InNamespace(jobsNamespace)); err != nil {
		return phase{}, err
	}
	if err := <-finished; err != nil {
		return phase{}, fmt.Errorf("%d of %d gone: %w", len(doneAt), n, err)
	}
	p := phase{start: start, doneAt: doneAt}
	for _, at := range doneAt {
		p.lat = append(p.lat, at.Sub(start))
		p.allDone = max(p.allDone, at.Sub(start))
	}
	sort.Slice(p.lat, func(i, j int) bool { return p.lat[i] < p.lat[j] })
	return p, nil
}

// osRequest is one request to the OpenSandbox server, classified.
type osRequest struct {
	route, uid string
	status     int
	at         time.Time
}

// osTally is a set of classified requests.
type osTally struct {
	reqs  []osRequest
	total int
}

// tallyOSRequests classifies the server's requests after the first skip by route and attributes each to a Job
// UID of uids where it can: by the sandbox in its path (the sandbox's
// job-uid metadata as created), by the job-uid filter of a list, by the
// job-uid metadata in the body of a create (the server keeps the bodies
// of the requests that had one, in arrival order: the creates, metadata
// patches and command starts; the i-th body is the i-th of those
// requests).
func tallyOSRequests(srv *ostest.Server, skip int, uids map[string]bool) osTally {
	sandboxUID := map[string]string{}
	uidOfSandbox := func(id string) string {
		if u, ok := sandboxUID[id]; ok {
			return u
		}
		cr, _ := srv.Sandbox(id)
		sandboxUID[id] = cr.Metadata[osexec.LabelJobUID]
		return sandboxUID[id]
	}
	// Bodies in order, matched to the requests that send one.
	all := srv.Requests()
	bodies := srv.Bodies()
	hasBody := func(r ostest.Request) bool {
		return (r.Method == "POST" && (r.Path == "/v1/sandboxes" || strings.HasSuffix(r.Path, "/command"))) ||
			(r.Method == "PATCH" && strings.HasSuffix(r.Path, "/metadata"))
	}
	createUID := map[int]string{}
	withBody := 0
	for _, r := range all {
		if hasBody(r) {
			withBody++
		}
	}
	if withBody <= len(bodies) { // later requests only append
		i := 0
		for k, r := range all {
			if !hasBody(r) {
				continue
			}
			if r.Method == "POST" && r.Path == "/v1/sandboxes" {
				var cr ostest.CreateRequest
				if json.Unmarshal(bodies[i], &cr) == nil {
					createUID[k] = cr.Metadata[osexec.LabelJobUID]
				}
			}
			i++
		}
	}
	var t osTally
	for k, r := range all[skip:] {
		k += skip
		route, uid := "other", ""
		q, _ := url.ParseQuery(r.Query)
		switch p := strings.Split(strings.Trim(r.Path, "/"), "/"); {
		case len(p) == 2 && p[0] == "v1" && p[1] == "sandboxes" && r.Method == "GET":
			route = "probe"
			if md, err := url.ParseQuery(q.Get("metadata")); err == nil && md.Get(osexec.LabelJobUID) != "" {
				route, uid = "list", md.Get(osexec.LabelJobUID)
			}
		case len(p) == 2 && p[0] == "v1" && p[1] == "sandboxes" && r.Method == "POST":
			route, uid = "create", createUID[k]
		case len(p) >= 3 && p[0] == "v1" && p[1] == "sandboxes":
			uid = uidOfSandbox(p[2])
			switch {
			case len(p) == 3 && r.Method == "GET":
				route = "get"
			case len(p) == 3 && r.Method == "DELETE":
				route = "delete"
			case len(p) == 4 && p[3] == "metadata":
				route = "patch"
			case len(p) == 5 && p[3] == "endpoints":
				route = "endpoint"
			}
		case len(p) >= 4 && p[0] == "sandboxes" && p[2] == "port":
			uid = uidOfSandbox(p[1])
			rest := "/" + strings.Join(p[4:], "/")
			switch {
			case strings.HasPrefix(rest, "/files/"):
				route = "files"
			case rest == "/command" && r.Method == "POST":
				route = "command"
			case rest == "/command" && r.Method == "DELETE":
				route = "interrupt"
			case strings.HasPrefix(rest, "/command/status/"):
				route = "status"
			case strings.HasPrefix(rest, "/command/") && strings.HasSuffix(rest, "/logs"):
				route = "logs"
			case rest == "/ping":
				route = "ping"
			}
		}
		if !uids[uid] {
			uid = ""
		}
		t.reqs = append(t.reqs, osRequest{route: route, uid: uid, status: r.Status, at: r.At})
	}
	t.total = len(t.reqs)
	return t
}

// between is the requests that arrived in [from, to).
func (t osTally) between(from, to time.Time) osTally {
	var out osTally
	for _, r := range t.reqs {
		if !r.at.Before(from) && r.at.Before(to) {
			out.reqs = append(out.reqs, r)
		}
	}
	out.total = len(out.reqs)
	return out
}

// describe gives the total, per Job, and the distribution over the Jobs
// of the attributed ones.
func (t osTally) describe(n int) string {
	per := map[string]int{}
	unattributed := 0
	for _, r := range t.reqs {
		if r.uid == "" {
			unattributed++
			continue
		}
		per[r.uid]++
	}
	counts := make([]int, 0, n)
	sum := 0
	for _, c := range per {
		counts = append(counts, c)
		sum += c
	}
	for len(counts) < n {
		counts = append(counts, 0)
	}
	sort.Ints(counts)
	return fmt.Sprintf("%d, %.1f per Job; attributed to a Job: mean %.1f, p50 %d, min %d, max %d; not attributed %d",
		t.total, float64(t.total)/float64(n), float64(sum)/float64(n), counts[len(counts)/2], counts[0], counts[len(counts)-1], unattributed)
}

// byRoute gives each route's count, per Job when n > 0.
func (t osTally) byRoute(n int) string {
	count := map[string]int{}
	for _, r := range t.reqs {
		count[r.route]++
	}
	var parts []string
	for _, route := range osRoutes {
		if count[route] == 0 {
			continue
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", route, float64(count[route])/float64(n)))
		} else {
			parts = append(parts, fmt.Sprintf("%s %d", route, count[route]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// failures counts the responses that were not 2xx by route and status.
func (t osTally) failures() string {
	count := map[string]int{}
	for _, r := range t.reqs {
		if r.status < 200 || r.status > 299 {
			count[fmt.Sprintf("%s %d", r.route, r.status)]++
		}
	}
	if len(count) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, count[k]))
	}
	return strings.Join(parts, ", ")
}
