// Command demo is what `make demo` (and `make dev`) run: the product on
// real input. It starts the local stack through the integration harness
// (real kube-apiserver + etcd, kube-controller-manager, kube-scheduler and
// a kwok fake node, NATS JetStream, PostgreSQL with TLS, the
// ayatori-manager process built from this checkout running both domains),
// applies the samples from deploy/samples with the Kubernetes API as a user
// would with kubectl, waits for Ready with a progress line per phase
// transition, prints the `kubectl get` tables, the journal timeline and
// `ayatori-journal verify`; then runs three Jobs (one succeeds, one exits
// 3, one is cancelled) on the default JobClass and one on an OpenSandbox
// JobClass against the spec-validating OpenSandbox test server (started in
// this process, its files root the manager's --opensandbox-marker-dir),
// and prints their table, the OpenSandbox Job's references and two Jobs'
// timelines; then deletes the Delete tenant, waits for the TTL controller
// to delete the finished Jobs (the sandbox with its Job) and tears the
// stack down. It
// exits 0 only if everything worked. With -keep (make dev) the stack stays
// up until Ctrl-C, the Tenants and Jobs in place.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	bao "github.com/openbao/openbao/api/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/deploy/monitoring"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

var begin = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
}

func section(title string) { fmt.Printf("\n==> %s\n", title) }

func main() {
	keep := flag.Bool("keep", false, "keep the stack running until Ctrl-C (make dev)")
	flag.Parse()
	if err := run(*keep); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo FAILED:", err)
		os.Exit(1)
	}
}

func run(keep bool) error {
	// The newcomer's first screen: no controller-runtime stack trace.
	integration.QuietControllerRuntimeLog()
	// Ctrl-C ends `make dev` normally: this program tears the stack down
	// itself (deferred Close) and exits 0.
	integration.OwnSignals()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	section("starting the local stack")
	// The OpenSandbox test server first: the manager serves its files root
	// as the marker dir. Closed after the stack (deferred first).
	srv, err := startOpenSandbox()
	if err != nil {
		return err
	}
	defer srv.Close()
	say("OpenSandbox test server on %s (files root %s)", srv.URL(), srv.FilesRoot())
	s, err := integration.StartStack(ctx, integration.StackOptions{Log: say, ManagerArgs: osManagerArgs(srv)})
	if err != nil {
		return err
	}
	defer func() {
		section("tearing the stack down")
		s.Close()
		say("stopped every process and removed %s", s.Dir)
	}()
	c := s.CP.Client
	samples := filepath.Join(integration.RepoRoot(), "deploy", "samples")

	// Every phase / Ready change, as the API server stores it, from now
	// until all objects are Ready.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched, err := watchProgress(wctx, s)
	if err != nil {
		return err
	}

	section("applying deploy/samples with the Kubernetes API (as kubectl apply would)")
	for _, f := range []string{"admin-secret.yaml", "postgresqlinstance.yaml", "postgresqltenant-netbox.yaml", "postgresqltenant-wiki.yaml"} {
		objs, err := load(filepath.Join(samples, f))
		if err != nil {
			return err
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "Secret":
				// The sample holds a placeholder: put the generated admin credentials in.
				_ = unstructured.SetNestedStringMap(o.Object, map[string]string{"username": s.AdminUser, "password": s.AdminPassword}, "stringData")
				say("%s: Secret %s/%s (generated admin password, not printed)", f, o.GetNamespace(), o.GetName())
			case "PostgreSQLInstance":
				// Point the sample at the local server (its certificate covers localhost and 127.0.0.1).
				_ = unstructured.SetNestedField(o.Object, "localhost", "spec", "endpoint", "host")
				_ = unstructured.SetNestedField(o.Object, "127.0.0.1", "spec", "endpoint", "hostaddr")
				_ = unstructured.SetNestedField(o.Object, int64(s.PG.Port), "spec", "endpoint", "port")
				say("%s: PostgreSQLInstance %s -> localhost / 127.0.0.1:%d, sslMode verify-full", f, o.GetName(), s.PG.Port)
			default:
				say("%s: %s %s", f, o.GetKind(), strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"))
			}
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}

	section("waiting for the Instance and the Tenants to be Ready (every phase transition, watched)")
	inst, err := waitInstance(ctx, c, "shared", 3*time.Minute)
	if err != nil {
		return fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
	tenants := []types.NamespacedName{{Namespace: "netbox", Name: "netbox"}, {Namespace: "wiki", Name: "wiki"}}
	for _, nn := range tenants {
		if _, err := waitTenant(ctx, c, nn, 3*time.Minute); err != nil {
			return fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 30))
		}
	}
	stopWatch()
	<-watched

	section("kubectl get pginstance")
	if err := printTable(ctx, s, "/apis/database.ayatori.ddupan.top/v1alpha1/postgresqlinstances", false, false); err != nil {
		return err
	}
	section("kubectl get pgtenant -A")
	if err := printTable(ctx, s, "/apis/database.ayatori.ddupan.top/v1alpha1/postgresqltenants", true, false); err != nil {
		return err
	}

	section("kubectl events --for pgtenant/netbox -n netbox   (each decided step, then Ready)")
	if err := printEvents(ctx, c, tenants[0]); err != nil {
		return err
	}

	section("logging in to each tenant database with the Secret ESO projected (sslmode verify-full, via host and via hostaddr)")
	for _, nn := range tenants {
		t := &databasev1alpha1.PostgreSQLTenant{}
		if err := c.Get(ctx, nn, t); err != nil {
			return err
		}
		sec := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: nn.Namespace, Name: t.Status.Credential.SecretRef.Name}, sec); err != nil {
			return err
		}
		for _, target := range []string{"host=" + string(sec.Data["host"]), "host=" + string(sec.Data["hostaddr"])} {
			dsn := fmt.Sprintf("%s port=%s dbname=%s user=%s password=%s sslmode=%s sslrootcert=%s", target, sec.Data["port"], sec.Data["database"],
				sec.Data["username"], sec.Data["password"], sec.Data["sslmode"], s.PG.CAFile)
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return fmt.Errorf("login to %s with the projected Secret: %w", nn, err)
			}
			var user, db string
			var exts []string
			err = conn.QueryRow(ctx, "SELECT current_user, current_database(), array(SELECT extname FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1)").Scan(&user, &db, &exts)
			conn.Close(ctx)
			if err != nil {
				return err
			}
			fmt.Printf("    %-14s %-22s current_user=%s current_database()=%s extensions=%v\n", nn, target, user, db, exts)
		}
		fmt.Printf("    %-14s status.credential.openBaoURL=%s\n", nn, t.Status.Credential.OpenBaoURL)
	}

	section("the ownership registry, read back as the admin role over verify-full TLS")
	conn, err := pgx.Connect(ctx, s.PG.DSN(s.AdminUser, s.AdminPassword, "postgres"))
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT tenant_namespace || '/' || tenant_name, database_name, role_name, managed FROM postgresql_tenant_operator.tenant_ownership ORDER BY 1")
	if err != nil {
		conn.Close(ctx)
		return err
	}
	for rows.Next() {
		var tn, db, role string
		var managed bool
		if err := rows.Scan(&tn, &db, &role, &managed); err != nil {
			conn.Close(ctx)
			return err
		}
		fmt.Printf("    tenant=%-14s database=%-8s role=%-8s managed=%t\n", tn, db, role, managed)
	}
	rows.Close()
	conn.Close(ctx)

	section("ayatori-journal timeline --kind PostgreSQLTenant -n netbox --name netbox")
	if err := journalCLI(ctx, s, "timeline", "--kind", "PostgreSQLTenant", "-n", "netbox", "--name", "netbox"); err != nil {
		return err
	}
	section(fmt.Sprintf("ayatori-journal timeline --kind PostgreSQLInstance --name shared   (uid %s)", inst.UID))
	if err := journalCLI(ctx, s, "timeline", "--kind", "PostgreSQLInstance", "--name", "shared"); err != nil {
		return err
	}
	section("ayatori-journal replay --kind PostgreSQLTenant -n netbox --name netbox --kubeconfig ...   (last lines: the live object against the journal)")
	out, err := exec.CommandContext(ctx, s.JournalBin, append(s.JournalReaderArgs(), "replay", "--kind", "PostgreSQLTenant", "-n", "netbox",
		"--name", "netbox", "--kubeconfig", s.CP.KubeconfigPath)...).CombinedOutput()
	if i := bytes.LastIndex(out, []byte("live object:")); i >= 0 {
		fmt.Print(string(out[i:]))
	}
	if err != nil {
		return fmt.Errorf("replay found the live Tenant disagreeing with the journal: %w\n%s", err, out)
	}
	section("ayatori-journal verify")
	if err := journalCLI(ctx, s, "verify"); err != nil {
		return err
	}

	pr, err := alertDemo(ctx, s)
	if err != nil {
		return err
	}
	defer pr.Close()

	jobs, err := runJobs(ctx, s, srv, samples, keep)
	if err != nil {
		return err
	}

	if keep {
		section("the stack is up; explore it (Ctrl-C stops everything)")
		fmt.Printf("    export KUBECONFIG=%s\n", s.CP.KubeconfigPath)
		fmt.Printf("    kubectl get pginstance,pgtenant -A      # kubectl from Debian's kubectl package\n")
		fmt.Printf("    kubectl get externalsecret,secret -n netbox\n")
		fmt.Printf("    kubectl describe pgtenant -n netbox netbox   # conditions and the Ready Event\n")
		fmt.Printf("    export NATS_URL=%s\n", s.NATSURL)
		fmt.Printf("    export NATS_NKEY=%s NATS_CA=%s   # the journal's read-only identity and the NATS servers' CA\n", s.NATSAuth.ReaderSeedFile, s.NATSAuth.CAFile)
		fmt.Printf("    export AYATORI_JOURNAL_TRUSTED_KEYS=%s   # every record's proof of origin is checked\n", s.JournalKeys.TrustedKeysFile)
		aj := s.JournalBin
		fmt.Printf("    %s list\n", aj)
		fmt.Printf("    %s timeline --kind PostgreSQLTenant -n netbox --name netbox --follow\n", aj)
		fmt.Printf("    %s replay --kind PostgreSQLTenant -n netbox --name netbox --kubeconfig $KUBECONFIG\n", aj)
		fmt.Printf("    %s verify\n", aj)
		fmt.Printf("    %s export > journal.ndjson && %s --from-file journal.ndjson list\n", aj, aj)
		fmt.Println("  the execution domain (Jobs run on the fake node kwok-node-0; ttlSecondsAfterFinished 3600):")
		fmt.Printf("    kubectl get jobclass,ajob -A -o wide    # ajob: job.execution.ayatori.ddupan.top\n")
		fmt.Printf("    kubectl describe ajob -n %s fail      # conditions, the exit code, the Events\n", jobsNamespace)
		fmt.Printf("    kubectl get jobs.batch,pods -n %s -o wide   # the native Jobs the Kubernetes executor created\n", jobsNamespace)
		fmt.Printf("    %s timeline --kind Job -n %s --name sleep\n", aj, jobsNamespace)
		fmt.Printf("    echo '{\"apiVersion\":\"execution.ayatori.ddupan.top/v1alpha1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"sleep2\",\"namespace\":\"%s\"},\"spec\":{\"task\":{\"image\":\"%s\"}}}' | kubectl create -f -\n", jobsNamespace, integration.ImageHang)
		fmt.Printf("    kubectl wait --for=jsonpath='{.status.conditions[?(@.type==\"Succeeded\")].reason}'=Running ajob -n %s sleep2\n", jobsNamespace)
		fmt.Printf("    kubectl patch ajob -n %s sleep2 --type merge -p '{\"spec\":{\"desiredState\":\"Cancelled\"}}'\n", jobsNamespace)
		fmt.Printf("    kubectl wait --for=jsonpath='{.status.completionTime}' ajob -n %s sleep2 && kubectl get ajob -n %s sleep2 -o wide\n", jobsNamespace, jobsNamespace)
		fmt.Printf("    kubectl patch ajob -n %s hello --type merge -p '{\"spec\":{\"ttlSecondsAfterFinished\":5}}'   # the TTL controller deletes it\n", jobsNamespace)
		fmt.Printf("  the OpenSandbox class (the spec-validating test server in this process, %s):\n", srv.URL())
		fmt.Printf("    kubectl get jobclass %s -o yaml            # Ready from the probe of its endpoint and API key\n", osClassName)
		fmt.Printf("    kubectl get ajob -n %s %s -o jsonpath='{.status.execution}'   # adapter opensandbox, the Sandbox and Command references\n", jobsNamespace, osJobName)
		fmt.Printf("    %s timeline --kind Job -n %s --name %s\n", aj, jobsNamespace, osJobName)
		fmt.Printf("    (docs/execution/user-guide.md explains every condition and reason)\n")
		fmt.Println("  monitoring (the shipped alert rules, with every `for` divided by 60, on a real Prometheus scraping the manager):")
		fmt.Printf("    Prometheus: %s   (alerts: %s/alerts, API: %s/api/v1/alerts)\n", pr.URL, pr.URL, pr.URL)
		fmt.Printf("    curl -s '%s/api/v1/query?query=ayatori_objects' | head -c 600\n", pr.URL)
		fmt.Println("  kubectl ayatori (the plugin: put it on PATH as kubectl-ayatori; the NATS_* variables above are its journal identity):")
		fmt.Printf("    export PATH=%s:$PATH\n", s.Dir)
		fmt.Printf("    kubectl ayatori why tenant/netbox -n netbox\n")
		fmt.Printf("    kubectl ayatori why ajob/fail -n %s -o yaml\n", jobsNamespace)
		fmt.Printf("    kubectl ayatori timeline tenant/netbox -n netbox && kubectl ayatori verify tenant/netbox -n netbox\n")
		fmt.Printf("    manager log: %s\n", s.ManagerLog)
		for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kwok"} {
			fmt.Printf("    %s log: %s\n", name, s.Workload.LogPaths[name])
		}
		<-ctx.Done()
		return nil
	}

	section("deleting PostgreSQLTenant wiki/wiki (deletionPolicy: Delete)")
	if err := c.Delete(ctx, &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "wiki", Name: "wiki"}}); err != nil {
		return err
	}
	if err := waitGone(ctx, c, &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "wiki", Name: "wiki"}}, 2*time.Minute); err != nil {
		return fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 30))
	}
	say("PostgreSQLTenant wiki/wiki is gone")
	conn, err = pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		return err
	}
	var dbs, roles, claims int
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = 'wiki'), (SELECT count(*) FROM pg_roles WHERE rolname = 'wiki'),
		(SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_name = 'wiki')`).Scan(&dbs, &roles, &claims)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	_, kvErr := root.KVv2(integration.KVMount).GetMetadata(ctx, integration.TenantBasePath+"/wiki/wiki")
	secErr := c.Get(ctx, types.NamespacedName{Namespace: "wiki", Name: "shared-wiki-postgresql"}, &corev1.Secret{})
	kvGone := kvErr != nil && errors.Is(kvErr, bao.ErrSecretNotFound)
	fmt.Printf("    database wiki: %d, role wiki: %d, registry records: %d, OpenBao record: %s, projected Secret: %s\n",
		dbs, roles, claims, gone(kvGone), gone(client.IgnoreNotFound(secErr) == nil && secErr != nil))
	if dbs+roles+claims != 0 || !kvGone || secErr == nil {
		return fmt.Errorf("the Delete tenant left resources behind")
	}

	if err := waitTTL(ctx, s, jobs); err != nil {
		return err
	}
	if err := sandboxDeleted(srv, jobs[len(jobs)-1]); err != nil {
		return err
	}
	section("ayatori-journal verify   (both domains, the TTL deletes included)")
	if err := journalCLI(ctx, s, "verify"); err != nil {
		return err
	}
	fmt.Println("\ndemo OK")
	return nil
}

func gone(b bool) string {
	if b {
		return "gone"
	}
	return "STILL THERE"
}

func waitGone(ctx context.Context, c client.Client, o client.Object, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if client.IgnoreNotFound(err) == nil && err != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still exists after %s", client.ObjectKeyFromObject(o), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitTenant(ctx context.Context, c client.Client, nn types.NamespacedName, timeout time.Duration) (*databasev1alpha1.PostgreSQLTenant, error) {
	deadline := time.Now().Add(timeout)
	for {
		t := &databasev1alpha1.PostgreSQLTenant{}
		if err := c.Get(ctx, nn, t); err != nil {
			return nil, err
		}
		state := string(t.Status.Phase)
		ready := false
		for _, cond := range t.Status.Conditions {
			if cond.Type == "Ready" {
				state += fmt.Sprintf("  Ready=%s (%s) %s", cond.Status, cond.Reason, cond.Message)
				ready = cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == t.Generation
			}
		}
		if ready {
			return t, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("PostgreSQLTenant/%s not Ready after %s (last: %s)", nn, timeout, state)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func load(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func waitInstance(ctx context.Context, c client.Client, name string, timeout time.Duration) (*databasev1alpha1.PostgreSQLInstance, error) {
	deadline := time.Now().Add(timeout)
	for {
		inst := &databasev1alpha1.PostgreSQLInstance{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, inst); err != nil {
			return nil, err
		}
		state := string(inst.Status.Phase)
		for _, cond := range inst.Status.Conditions {
			if cond.Type == "Ready" {
				state += fmt.Sprintf("  Ready=%s (%s) %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		if inst.Status.Phase == databasev1alpha1.InstancePhaseReady && inst.Status.ObservedGeneration == inst.Generation {
			return inst, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("PostgreSQLInstance/%s not Ready after %s (last: %s)", name, timeout, state)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watchProgress watches Instances and Tenants and prints each change of
// phase or Ready condition as the API server stores it (a watch sees
// every stored version, so no transition is missed the way polling could).
// The returned channel closes when ctx ends and the printer has stopped.
func watchProgress(ctx context.Context, s *integration.Stack) (<-chan struct{}, error) {
	wc, err := client.NewWithWatch(s.CP.Config, client.Options{Scheme: s.CP.Scheme})
	if err != nil {
		return nil, err
	}
	iw, err := wc.Watch(ctx, &databasev1alpha1.PostgreSQLInstanceList{})
	if err != nil {
		return nil, err
	}
	tw, err := wc.Watch(ctx, &databasev1alpha1.PostgreSQLTenantList{})
	if err != nil {
		iw.Stop()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer iw.Stop()
		defer tw.Stop()
		last := map[string]string{}
		show := func(kind, name, phase string, conds []metav1.Condition) {
			state := "phase=" + phase
			for _, c := range conds {
				if c.Type == "Ready" {
					state += fmt.Sprintf("  Ready=%s (%s) %s", c.Status, c.Reason, c.Message)
				}
			}
			if key := kind + "/" + name; state != last[key] && phase != "" {
				last[key] = state
				say("%s %s", key, state)
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-iw.ResultChan():
				if !ok {
					return
				}
				if i, isInst := ev.Object.(*databasev1alpha1.PostgreSQLInstance); isInst {
					show("PostgreSQLInstance", i.Name, string(i.Status.Phase), i.Status.Conditions)
				}
			case ev, ok := <-tw.ResultChan():
				if !ok {
					return
				}
				if t, isTenant := ev.Object.(*databasev1alpha1.PostgreSQLTenant); isTenant {
					show("PostgreSQLTenant", t.Namespace+"/"+t.Name, string(t.Status.Phase), t.Status.Conditions)
				}
			}
		}
	}()
	return done, nil
}

// printEvents prints the events.k8s.io Events about one Tenant, oldest
// first, as `kubectl events --for` would.
func printEvents(ctx context.Context, c client.Client, nn types.NamespacedName) error {
	t := &databasev1alpha1.PostgreSQLTenant{}
	if err := c.Get(ctx, nn, t); err != nil {
		return err
	}
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(nn.Namespace)); err != nil {
		return err
	}
	evs := slices.DeleteFunc(list.Items, func(e eventsv1.Event) bool { return e.Regarding.UID != t.UID })
	slices.SortStableFunc(evs, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tREASON\tACTION\tNOTE")
	for _, e := range evs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Type, e.Reason, e.Action, e.Note)
	}
	return tw.Flush()
}

// printTable prints what `kubectl get` prints: the server-side Table with
// the CRD's printer columns; namespaced adds the NAMESPACE column (-A),
// wide the priority > 0 columns (-o wide).
func printTable(ctx context.Context, s *integration.Stack, path string, namespaced, wide bool) error {
	hc, err := rest.HTTPClientFor(s.CP.Config)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.CP.Config.Host, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	var head []string
	if namespaced {
		head = append(head, "NAMESPACE")
	}
	var cols []int
	for i, col := range table.ColumnDefinitions {
		if col.Priority == 0 || wide {
			head = append(head, strings.ToUpper(col.Name))
			cols = append(cols, i)
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, row := range table.Rows {
		var cells []string
		if namespaced {
			var meta metav1.PartialObjectMetadata
			_ = json.Unmarshal(row.Object.Raw, &meta)
			cells = append(cells, meta.Namespace)
		}
		for _, i := range cols {
			v := fmt.Sprint(row.Cells[i])
			if v == "" || v == "<nil>" {
				v = "<none>"
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func journalCLI(ctx context.Context, s *integration.Stack, args ...string) error {
	cmd := exec.CommandContext(ctx, s.JournalBin, append(s.JournalReaderArgs(), args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// alertDemo starts a real Prometheus that scrapes the manager with the
// shipped alert rules (every `for` divided by 60), makes a Tenant conflict
// with a foreign role, prints the alert firing and `kubectl ayatori why`,
// then deletes the Tenant and prints the alert resolved. The caller closes
// the Prometheus (make dev keeps it up).
func alertDemo(ctx context.Context, s *integration.Stack) (*integration.Prometheus, error) {
	section("monitoring: the shipped alert rules on a real Prometheus scraping the manager")
	rules, err := monitoring.ScaledRuleFile("1s", 60)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s.MetricsURL)
	if err != nil {
		return nil, err
	}
	pr, err := integration.NewPrometheus(integration.PrometheusOptions{ScrapeInterval: 3 * time.Second, EvalInterval: time.Second, RuleFile: rules,
		Targets: []integration.PrometheusTarget{{Address: u.Host, Labels: map[string]string{"namespace": integration.ControllerNamespace, "pod": "ayatori-manager-0"}}}})
	if err != nil {
		return nil, err
	}
	say("Prometheus %s scrapes %s every 3 s (rules: deploy/monitoring/prometheusrule.yaml, `for` divided by 60)", pr.URL, s.MetricsURL)
	conn, err := pgx.Connect(ctx, s.PG.SuperuserDSN("postgres"))
	if err != nil {
		pr.Close()
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE ROLE legacy_app LOGIN")
	conn.Close(ctx)
	if err != nil {
		pr.Close()
		return nil, err
	}
	say("created role legacy_app by hand (not Ayatori's); PostgreSQLTenant netbox/legacy asks for it as its loginRole")
	tn := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "netbox", Name: "legacy"},
		Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared", LoginRole: "legacy_app"}}
	if err := s.CP.Client.Create(ctx, tn); err != nil {
		pr.Close()
		return nil, err
	}
	labels, err := pr.WaitAlert(ctx, "AyatoriTenantConflict", "firing", 2*time.Minute)
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 20))
	}
	say("alert firing: %s", labels)
	section("kubectl ayatori why tenant/legacy -n netbox")
	cmd := exec.CommandContext(ctx, s.PluginBin, append(s.PluginArgs(), "why", "tenant/legacy", "-n", "netbox")...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		pr.Close()
		return nil, fmt.Errorf("kubectl ayatori why: %w", err)
	}
	section("deleting PostgreSQLTenant netbox/legacy: the alert resolves")
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		pr.Close()
		return nil, err
	}
	if _, err := pr.WaitAlert(ctx, "AyatoriTenantConflict", "", 2*time.Minute); err != nil {
		pr.Close()
		return nil, err
	}
	say("AyatoriTenantConflict resolved")
	return pr, nil
}
