// Command demo is what `make demo` (and `make dev`) run: the product on
// real input. It starts the local stack through the integration harness
// (real kube-apiserver + etcd, NATS JetStream, PostgreSQL with TLS, the
// ayatori-manager process built from this checkout), applies the samples
// from deploy/samples with the Kubernetes API as a user would with kubectl,
// waits for Ready with a progress line per phase transition, prints the
// `kubectl get` tables, the journal timeline and `ayatori-journal verify`,
// then deletes what it created and tears the stack down. It exits 0 only if
// everything worked. With -keep (make dev) the stack stays up until Ctrl-C.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	section("starting the local stack")
	s, err := integration.StartStack(ctx, integration.StackOptions{Log: say})
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

	section("waiting for PostgreSQLInstance/shared to be Ready (phase transitions as they happen)")
	inst, err := waitInstance(ctx, c, "shared", 3*time.Minute)
	if err != nil {
		return fmt.Errorf("%w\nmanager log tail:\n%s", err, integration.Tail(s.ManagerLog, 20))
	}

	section("kubectl get pginstance")
	if err := printTable(ctx, s, "/apis/database.ayatori.ddupan.top/v1alpha1/postgresqlinstances"); err != nil {
		return err
	}
	section("kubectl get pgtenant -A")
	if err := printTable(ctx, s, "/apis/database.ayatori.ddupan.top/v1alpha1/postgresqltenants"); err != nil {
		return err
	}
	fmt.Println("    (Tenant provisioning is not implemented yet; the apiserver validated and stored the Tenants.)")

	section("the ownership registry the manager created, read back as the admin role over verify-full TLS")
	conn, err := pgx.Connect(ctx, s.PG.DSN(s.AdminUser, s.AdminPassword, "postgres"))
	if err != nil {
		return err
	}
	var user, db string
	var version int32
	err = conn.QueryRow(ctx, "SELECT current_user, current_database(), (SELECT version FROM postgresql_tenant_operator.schema_version)").Scan(&user, &db, &version)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("    current_user=%s current_database=%s registry_schema_version=%d\n", user, db, version)

	section(fmt.Sprintf("ayatori-journal timeline --kind PostgreSQLInstance --name shared   (uid %s)", inst.UID))
	if err := journalCLI(ctx, s, "timeline", "--kind", "PostgreSQLInstance", "--name", "shared"); err != nil {
		return err
	}
	section("ayatori-journal verify")
	if err := journalCLI(ctx, s, "verify"); err != nil {
		return err
	}

	if keep {
		section("the stack is up; explore it (Ctrl-C stops everything)")
		fmt.Printf("    export KUBECONFIG=%s\n", s.CP.KubeconfigPath)
		fmt.Printf("    kubectl get pginstance,pgtenant -A      # kubectl from Debian's kubectl package\n")
		fmt.Printf("    go run ./cmd/ayatori-journal --server %s list\n", s.NATS.URL)
		fmt.Printf("    go run ./cmd/ayatori-journal --server %s timeline --kind PostgreSQLInstance --name shared --follow\n", s.NATS.URL)
		fmt.Printf("    manager log: %s\n", s.ManagerLog)
		<-ctx.Done()
		return nil
	}

	section("deleting the Tenants, then the Instance (its finalizer waits for no Tenant to reference it)")
	for _, nn := range []types.NamespacedName{{Namespace: "netbox", Name: "netbox"}, {Namespace: "wiki", Name: "wiki"}} {
		if err := c.Delete(ctx, &v1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name}}); err != nil {
			return err
		}
	}
	if err := c.Delete(ctx, &v1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Get(ctx, types.NamespacedName{Name: "shared"}, &v1alpha1.PostgreSQLInstance{})
		if client.IgnoreNotFound(err) == nil && err != nil {
			say("PostgreSQLInstance/shared is gone; the registry stays in PostgreSQL (nothing external is deleted)")
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Instance was not released")
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Println("\ndemo OK")
	return nil
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
		if err := dec.Decode(&u.Object); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func waitInstance(ctx context.Context, c client.Client, name string, timeout time.Duration) (*v1alpha1.PostgreSQLInstance, error) {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		inst := &v1alpha1.PostgreSQLInstance{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, inst); err != nil {
			return nil, err
		}
		state := string(inst.Status.Phase)
		for _, cond := range inst.Status.Conditions {
			if cond.Type == "Ready" {
				state += fmt.Sprintf("  Ready=%s (%s) %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		if state != last {
			say("PostgreSQLInstance/%s phase=%s", name, state)
			last = state
		}
		if inst.Status.Phase == v1alpha1.InstancePhaseReady && inst.Status.ObservedGeneration == inst.Generation {
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

// printTable prints what `kubectl get` prints: the server-side Table with
// the CRD's printer columns.
func printTable(ctx context.Context, s *integration.Stack, path string) error {
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
	namespaced := strings.Contains(path, "tenants")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	var head []string
	if namespaced {
		head = append(head, "NAMESPACE")
	}
	var cols []int
	for i, col := range table.ColumnDefinitions {
		if col.Priority == 0 {
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
	cmd := exec.CommandContext(ctx, s.JournalBin, append([]string{"--server", s.NATS.URL}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}
