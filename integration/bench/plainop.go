package main

// The side-by-side with a plain database operator (issue 28): N databases
// with a user each through movetokube/postgres-operator (ext-postgres-
// operator: CREATE ROLE, CREATE DATABASE and a Secret per user, nothing
// else), against N PostgreSQLTenants through Ayatori, interleaved round by
// round on one stack. Nothing of the operator is in this repository: the
// bench takes the path of a binary built from a copy of its public
// repository and the directory of its CRDs (docs/testing.md "Side by side
// with a plain operator").

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

const (
	// plainGroupVersion is the API of the plain operator's CRs.
	plainGroupVersion = "db.movetokube.com/v1alpha1"
	// plainSecretPrefix is each PostgresUser's spec.secretName; the
	// operator names the Secret "<secretName>-<PostgresUser name>".
	plainSecretPrefix = "creds"
	// plainExe is the name the operator's binary runs under (a symlink),
	// so that its row in the CPU table is not a bare "manager".
	plainExe = "plain-operator"
	// settle is the pause after each side's round, so that the next one
	// starts on a quiet stack.
	settle = 3 * time.Second
)

// plainOptions configures runPlainOperator.
type plainOptions struct {
	// bin is the plain operator's built manager binary; crds the
	// directory of its CRD manifests.
	bin, crds string
	// n is the number of objects per side and round; rounds the number
	// of interleaved rounds.
	n, rounds int
	timeout   time.Duration
	// resync and intentEvents are the Ayatori manager's
	// --tenant-resync-interval and --intent-events, as in run.
	resync       time.Duration
	intentEvents bool
}

// sideRound is what one side measured in one round.
type sideRound struct {
	// total is the first create call → the last object seen done.
	total time.Duration
	// lat is each object's create calls returned → done, sorted.
	lat []time.Duration
	// cpu is the CPU time (user+system) each stack process used over
	// total, by command name (procCPU).
	cpu map[string]time.Duration
	// machine is what the whole machine did meanwhile (/proc/stat: busy,
	// iowait, steal).
	machine map[string]time.Duration
	// sessions is how many sessions PostgreSQL started over the round
	// (pgSessions; -1: unreadable).
	sessions int64
}

// runPlainOperator starts one stack, registers the Instance, installs the
// plain operator's CRDs and runs o.rounds rounds; each round runs both
// sides, one after the other, the plain operator first in odd rounds and
// Ayatori first in even ones. It prints every round, both medians, the
// operator's fastest round, CPU-seconds per object by process, and then
// checks the journal (verify clean, zero duplicate intents).
func runPlainOperator(o plainOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("-plain-operator %s: not an executable file", o.bin)
	}
	// The manager's flags as run gives them (the executors at their
	// default per-backend bounds).
	args := []string{"--tenant-resync-interval=" + o.resync.String(), fmt.Sprintf("--intent-events=%t", o.intentEvents)}
	args = append(args, managerFlags...)
	s, err := integration.StartStack(ctx, integration.StackOptions{ManagerArgs: args, NoWorkload: true})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := registerInstance(ctx, s); err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(s.CP.Config, envtest.CRDInstallOptions{Paths: []string{o.crds}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("plain operator CRDs from %s: %w", o.crds, err)
	}
	// A client made after the CRDs exist: its REST mapper knows them.
	wc, err := client.NewWithWatch(s.CP.Config, client.Options{Scheme: s.CP.Client.Scheme()})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ayatori-bench-plainop-")
	if err != nil {
		return err
	}
	exe := filepath.Join(dir, plainExe)
	if err := os.Symlink(bin, exe); err != nil {
		return err
	}
	fmt.Printf("side by side: N=%d per side and round, %d interleaved rounds on one stack; plain operator %s, logs in %s\n", o.n, o.rounds, bin, dir)

	var plain, ayatori []sideRound
	var firsts []string
	for r := 1; r <= o.rounds; r++ {
		sides := []string{"plain", "ayatori"}
		if r%2 == 0 {
			sides = []string{"ayatori", "plain"}
		}
		firsts = append(firsts, sides[0])
		for _, side := range sides {
			var res sideRound
			var err error
			if side == "plain" {
				res, err = plainRound(ctx, s, wc, exe, dir, r, o.n)
				plain = append(plain, res)
			} else {
				res, err = ayatoriRound(ctx, s, wc, r, o.n)
				ayatori = append(ayatori, res)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, side, err)
			}
			fmt.Printf("round %d %-15s all done after %7s  (p50 %s, max %s per object create→done; load average %s)\n", r, sideName[side],
				res.total.Round(10*time.Millisecond), quantile(res.lat, 0.5).Round(10*time.Millisecond), res.lat[len(res.lat)-1].Round(10*time.Millisecond), loadAverage())
			time.Sleep(settle)
		}
	}
	printSideBySide(o.n, firsts, plain, ayatori)
	// Every run: verify clean and zero duplicate intents.
	return checkJournal(ctx, s)
}

// sideName is how the table names each side.
var sideName = map[string]string{"plain": "plain operator", "ayatori": "Ayatori"}

// registerInstance creates the admin Secret and the PostgreSQLInstance
// "shared" on the stack's PostgreSQL (every Tenant run), and waits until the
// Instance is Ready.
func registerInstance(ctx context.Context, s *integration.Stack) error {
	c := s.CP.Client
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: integration.ControllerNamespace},
		StringData: map[string]string{"username": s.AdminUser, "password": s.AdminPassword}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "admin"}}}); err != nil {
		return err
	}
	for {
		i := &databasev1alpha1.PostgreSQLInstance{}
		if err := c.Get(ctx, types.NamespacedName{Name: "shared"}, i); err == nil && i.Status.Phase == databasev1alpha1.InstancePhaseReady {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// plainRound runs the plain operator on a fresh namespace (its only watched
// namespace), creates n Postgres and n PostgresUser CRs (createWorkers at a
// time, each worker a Postgres then its user) and waits until every
// Postgres reports status.succeeded and every user's Secret exists; then
// stops the operator. The operator's start is not timed: the round starts
// at the first create, once both its controllers run their workers.
func plainRound(ctx context.Context, s *integration.Stack, wc client.WithWatch, exe, dir string, round, n int) (sideRound, error) {
	ns := fmt.Sprintf("plain-r%d", round)
	if err := wc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return sideRound{}, err
	}
	op, err := startPlain(s, exe, filepath.Join(dir, fmt.Sprintf("round%d.log", round)), ns)
	if err != nil {
		return sideRound{}, err
	}
	defer op.stop()
	if err := op.waitWorkers(ctx, 2, time.Minute); err != nil {
		return sideRound{}, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dbs := &unstructured.UnstructuredList{}
	dbs.SetAPIVersion(plainGroupVersion)
	dbs.SetKind("PostgresList")
	dbDone := func(t watch.EventType, o client.Object) (bool, error) {
		ok, _, _ := unstructured.NestedBool(o.(*unstructured.Unstructured).Object, "status", "succeeded")
		return ok && t != watch.Deleted, nil
	}
	secretDone := func(t watch.EventType, o client.Object) (bool, error) {
		return t != watch.Deleted && strings.HasPrefix(o.GetName(), plainSecretPrefix+"-"), nil
	}
	var mu sync.Mutex
	dbAt, secretAt := map[string]time.Time{}, map[string]time.Time{}
	followed, err := followAll(ctx, wc, ns, n, &mu,
		followSpec{dbs, dbDone, dbAt}, followSpec{&corev1.SecretList{}, secretDone, secretAt})
	if err != nil {
		return sideRound{}, err
	}

	sessions0 := pgSessions(ctx, s)
	cpu0, start := procCPU(), time.Now()
	createdAt, err := createAll(ctx, wc, n, func(i int) []client.Object {
		return []client.Object{plainDatabase(ns, round, i), plainUser(ns, round, i)}
	})
	if err != nil {
		return sideRound{}, err
	}
	select {
	case err = <-followed:
	case <-op.exited:
		err = fmt.Errorf("the plain operator exited\n%s", integration.Tail(op.log, 20))
	}
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		return sideRound{}, fmt.Errorf("%d of %d Postgres succeeded, %d of %d Secrets: %w", len(dbAt), n, len(secretAt), n, err)
	}
	cpu1 := procCPU() // before the stop: an exited child's CPU is no longer its own
	doneAt := make([]time.Time, n)
	for i := range n {
		doneAt[i] = dbAt[plainName("db", i)]
		if at := secretAt[plainSecretPrefix+"-"+plainName("user", i)]; at.After(doneAt[i]) {
			doneAt[i] = at
		}
	}
	r := newSideRound(start, createdAt, doneAt, cpu0, cpu1)
	r.sessions = sessionsSince(ctx, s, sessions0)
	return r, nil
}

// ayatoriRound creates n PostgreSQLTenants (createWorkers at a time) in a
// fresh namespace and waits until every one is Ready.
func ayatoriRound(ctx context.Context, s *integration.Stack, wc client.WithWatch, round, n int) (sideRound, error) {
	ns := fmt.Sprintf("ayatori-r%d", round)
	if err := wc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return sideRound{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := func(t watch.EventType, o client.Object) (bool, error) {
		return t != watch.Deleted && meta.IsStatusConditionTrue(o.(*databasev1alpha1.PostgreSQLTenant).Status.Conditions, "Ready"), nil
	}
	var mu sync.Mutex
	readyAt := map[string]time.Time{}
	followed, err := followAll(ctx, wc, ns, n, &mu, followSpec{&databasev1alpha1.PostgreSQLTenantList{}, ready, readyAt})
	if err != nil {
		return sideRound{}, err
	}
	// The Tenant's name is its database's and role's: unique per round.
	name := func(i int) string { return fmt.Sprintf("r%dt%05d", round, i) }
	sessions0 := pgSessions(ctx, s)
	cpu0, start := procCPU(), time.Now()
	createdAt, err := createAll(ctx, wc, n, func(i int) []client.Object {
		return []client.Object{&databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)},
			Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}}
	})
	if err != nil {
		return sideRound{}, err
	}
	if err := <-followed; err != nil {
		mu.Lock()
		defer mu.Unlock()
		return sideRound{}, fmt.Errorf("%d of %d Ready: %w", len(readyAt), n, err)
	}
	cpu1 := procCPU()
	doneAt := make([]time.Time, n)
	for i := range n {
		doneAt[i] = readyAt[name(i)]
	}
	r := newSideRound(start, createdAt, doneAt, cpu0, cpu1)
	r.sessions = sessionsSince(ctx, s, sessions0)
	return r, nil
}

// newSideRound is a round that started at start, its object i created at
// createdAt[i] and done at doneAt[i], and cpu0, cpu1 the procCPU samples
// at its start and end.
func newSideRound(start time.Time, createdAt, doneAt []time.Time, cpu0, cpu1 map[string]time.Duration) sideRound {
	r := sideRound{cpu: map[string]time.Duration{}, machine: map[string]time.Duration{}}
	var last time.Time
	for i, at := range doneAt {
		r.lat = append(r.lat, max(0, at.Sub(createdAt[i])))
		if at.After(last) {
			last = at
		}
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	r.total = last.Sub(start)
	for name, d := range cpu1 {
		d -= cpu0[name]
		switch {
		case strings.HasPrefix(name, machinePrefix):
			r.machine[strings.TrimPrefix(name, machinePrefix)] = d
		case d > 0:
			r.cpu[name] = d
		}
	}
	return r
}

// plainName is the name of the i-th CR of a kind ("db" or "user").
func plainName(kind string, i int) string { return fmt.Sprintf("%s%05d", kind, i) }

// plainDatabase is the i-th Postgres CR of a round: database
// plain_r<round>_<i> (the operator also creates the roles
// <database>-group, -reader and -writer).
func plainDatabase(ns string, round, i int) client.Object {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"database": fmt.Sprintf("plain_r%d_%05d", round, i)},
	}}
	u.SetAPIVersion(plainGroupVersion)
	u.SetKind("Postgres")
	u.SetNamespace(ns)
	u.SetName(plainName("db", i))
	return u
}

// plainUser is the i-th PostgresUser CR of a round: a LOGIN role
// plain_r<round>_u<i>-<random suffix> in the owner group of the i-th
// database, its credentials in the Secret creds-user<i>.
func plainUser(ns string, round, i int) client.Object {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"role":       fmt.Sprintf("plain_r%d_u%05d", round, i),
			"database":   plainName("db", i),
			"secretName": plainSecretPrefix,
			"privileges": "OWNER",
		},
	}}
	u.SetAPIVersion(plainGroupVersion)
	u.SetKind("PostgresUser")
	u.SetNamespace(ns)
	u.SetName(plainName("user", i))
	return u
}

// createAll creates n groups of objects with createWorkers workers, each
// taking the next index i and creating the objects of objs(i) in order. It
// returns, by index, when the last create call of each group returned.
func createAll(ctx context.Context, c client.Client, n int, objs func(int) []client.Object) ([]time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	createdAt := make([]time.Time, n)
	next := make(chan int)
	errs := make(chan error, createWorkers)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for _, o := range objs(i) {
					if err := c.Create(ctx, o); err != nil {
						errs <- fmt.Errorf("create %s: %w", o.GetName(), err)
						cancel()
						return
					}
				}
				createdAt[i] = time.Now() // each index is one worker's
			}
		}()
	}
send:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
		return createdAt, ctx.Err()
	}
}

// followSpec is one kind a round waits for: done decides from a watch
// event whether an object is done; doneAt receives when each object was
// first seen done, by name.
type followSpec struct {
	list   client.ObjectList
	done   func(watch.EventType, client.Object) (bool, error)
	doneAt map[string]time.Time
}

// followAll opens a watch per spec in ns (before anything is created) and
// follows each until n of its objects are done (follow, with mu guarding
// every doneAt). The channel receives nil once all are, or the first error.
func followAll(ctx context.Context, wc client.WithWatch, ns string, n int, mu *sync.Mutex, specs ...followSpec) (<-chan error, error) {
	opts := []client.ListOption{client.InNamespace(ns)}
	errs := make(chan error, len(specs))
	for _, sp := range specs {
		w, err := wc.Watch(ctx, sp.list, opts...)
		if err != nil {
			return nil, err
		}
		go func() { errs <- follow(ctx, wc, sp.list, opts, w, n, sp.done, mu, sp.doneAt) }()
	}
	out := make(chan error, 1)
	go func() {
		var first error
		for range specs {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		out <- first
	}()
	return out, nil
}

// plainOperator is one run of the plain operator's binary.
type plainOperator struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// startPlain starts the plain operator as a child of the bench (killed
// with it), logging to logPath, watching namespace ns only, with leader
// election, metrics and probes off. It reaches the stack's kube-apiserver
// through the admin kubeconfig and the stack's PostgreSQL as the stack's
// admin role (CREATEROLE, CREATEDB, not a superuser) with TLS verify-full;
// POSTGRES_CLOUD_PROVIDER=AWS is the operator's mode for an admin that is
// not a superuser (it grants a group role to the admin before it makes
// that role a database's owner). Its environment holds only these
// settings (the admin password among them; never printed).
func startPlain(s *integration.Stack, exe, logPath, ns string) (*plainOperator, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close() // the child has its own descriptor
	cmd := exec.Command(exe, "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"KUBECONFIG=" + s.CP.KubeconfigPath,
		"WATCH_NAMESPACE=" + ns,
		"POSTGRES_HOST=127.0.0.1:" + strconv.Itoa(s.PG.Port),
		"POSTGRES_USER=" + s.AdminUser,
		"POSTGRES_PASS=" + s.AdminPassword,
		"POSTGRES_URI_ARGS=sslmode=verify-full&sslrootcert=" + s.PG.CAFile,
		"POSTGRES_DEFAULT_DATABASE=postgres",
		"POSTGRES_CLOUD_PROVIDER=AWS",
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the plain operator: %w", err)
	}
	op := &plainOperator{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(op.exited)
	}()
	return op, nil
}

// waitWorkers waits until the log shows n controllers running their
// workers (controller-runtime's "Starting workers": caches synced).
func (p *plainOperator) waitWorkers(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.log)
		if strings.Count(string(b), "Starting workers") >= n {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("the plain operator exited at start\n%s", integration.Tail(p.log, 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the plain operator's controllers did not start within %s\n%s", timeout, integration.Tail(p.log, 20))
		}
	}
}

// stop sends SIGTERM and, after 10 s, SIGKILL; it returns once the
// process exited.
func (p *plainOperator) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// median returns the median of durations (the mean of the two middle
// ones for an even count).
func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printSideBySide prints every round of both sides (seconds from the first
// create to the last object done), their medians, the plain operator's
// fastest round, Ayatori's median over it, and CPU-seconds per object by
// process, summed over all rounds of each side.
func printSideBySide(n int, firsts []string, plain, ayatori []sideRound) {
	totals := func(rs []sideRound) []time.Duration {
		out := make([]time.Duration, len(rs))
		for i, r := range rs {
			out[i] = r.total
		}
		return out
	}
	pt, at := totals(plain), totals(ayatori)
	fastest := 0
	for i, d := range pt {
		if d < pt[fastest] {
			fastest = i
		}
	}
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	fmt.Printf("\nside by side: N=%d databases with a user (plain operator) and N=%d Tenants (Ayatori), %d interleaved rounds, %d concurrent creators (2 vCPU)\n",
		n, n, len(pt), createWorkers)
	fmt.Printf("  %-7s %-16s %16s %16s\n", "round", "first", "plain operator", "Ayatori")
	for i := range pt {
		fmt.Printf("  %-7d %-16s %16s %16s\n", i+1, sideName[firsts[i]], sec(pt[i]), sec(at[i]))
	}
	pm, am := median(pt), median(at)
	fmt.Printf("  %-24s %16s %16s\n", "median", sec(pm), sec(am))
	fmt.Printf("  plain operator's fastest round: %s (round %d)\n", sec(pt[fastest]), fastest+1)
	fmt.Printf("  Ayatori's median / plain operator's fastest: %.2f×  (/ its median: %.2f×)\n", am.Seconds()/pt[fastest].Seconds(), am.Seconds()/pm.Seconds())

	cpu := func(rs []sideRound, machine bool) map[string]time.Duration {
		out := map[string]time.Duration{}
		for _, r := range rs {
			m := r.cpu
			if machine {
				m = r.machine
			}
			for name, d := range m {
				out[name] += d
			}
		}
		return out
	}
	pc, ac := cpu(plain, false), cpu(ayatori, false)
	var names []string
	for name := range pc {
		names = append(names, name)
	}
	for name := range ac {
		if _, ok := pc[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return pc[names[i]]+ac[names[i]] > pc[names[j]]+ac[names[j]] })
	perObject := func(d time.Duration, rounds int) float64 { return d.Seconds() / float64(rounds*n) }
	fmt.Printf("\nCPU seconds per object by process during each side's rounds (all %d rounds; the idle other side's processes included)\n", len(pt))
	fmt.Printf("  %-30s %14s %10s\n", "process", "plain operator", "Ayatori")
	var ps, as time.Duration
	for _, name := range names {
		ps, as = ps+pc[name], as+ac[name]
		fmt.Printf("  %-30s %14.4f %10.4f\n", name, perObject(pc[name], len(pt)), perObject(ac[name], len(at)))
	}
	fmt.Printf("  %-30s %14.4f %10.4f\n", "total", perObject(ps, len(pt)), perObject(as, len(at)))
	// What the whole machine did meanwhile: busy time outside the stack
	// is other load, steal is time the hypervisor gave these vCPUs away.
	pmach, amach := cpu(plain, true), cpu(ayatori, true)
	fmt.Printf("  machine (/proc/stat; plain operator / Ayatori, s over all rounds): busy %.1f / %.1f (outside the stack %.1f / %.1f), iowait %.1f / %.1f, steal %.1f / %.1f\n",
		pmach["busy"].Seconds(), amach["busy"].Seconds(), max(pmach["busy"]-ps, 0).Seconds(), max(amach["busy"]-as, 0).Seconds(),
		pmach["iowait"].Seconds(), amach["iowait"].Seconds(), pmach["steal"].Seconds(), amach["steal"].Seconds())
	wall := func(ts []time.Duration) (w time.Duration) {
		for _, t := range ts {
			w += t
		}
		return w
	}
	fmt.Printf("  wall time of all rounds: plain operator %.1f s, Ayatori %.1f s (2 vCPU: twice that available)\n", wall(pt).Seconds(), wall(at).Seconds())
	sessions := func(rs []sideRound) string {
		var sum int64
		for _, r := range rs {
			if r.sessions < 0 {
				return "unknown"
			}
			sum += r.sessions
		}
		return fmt.Sprintf("%.2f", float64(sum)/float64(len(rs)*n))
	}
	fmt.Printf("  PostgreSQL sessions started per object (pg_stat_database.sessions): plain operator %s, Ayatori %s\n", sessions(plain), sessions(ayatori))
}
