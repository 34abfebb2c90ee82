//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// uninstall removes what the tests made and then Ayatori itself, as a user
// would (delete the namespaces and the cluster-scoped objects, then
// kubectl delete -k of the overlay), and checks that nothing Ayatori
// created is left: no Tenant database or role in PostgreSQL (every Tenant
// has deletionPolicy Delete), no ExternalSecret, no credential Secret, no
// ayatori-secrets-reader ServiceAccount (once the applications' namespaces
// are gone), no native Job, no pod outside the dependencies' and
// kube-system.
func uninstall(ctx context.Context) error {
	k := func(args ...string) (string, error) {
		out, err := cluster.Kubectl(ctx, nil, args...)
		return strings.TrimSpace(string(out)), err
	}
	// The Tenants first, while the manager runs: Delete drops their
	// databases and roles.
	if _, err := k("delete", "postgresqltenants", "--all", "-A", "--wait=true", "--timeout=180s"); err != nil {
		return err
	}
	if _, err := k("delete", "jobs.execution.ayatori.ddupan.top", "--all", "-A", "--wait=true", "--timeout=120s"); err != nil {
		return err
	}
	if _, err := k("delete", "postgresqlinstances,jobclasses,kubernetesexecutionparameters", "--all", "--wait=true", "--timeout=120s"); err != nil {
		return err
	}
	// The applications' namespaces go too: with them the ServiceAccount
	// ayatori-secrets-reader, which Ayatori leaves when the last Tenant of
	// a namespace goes (docs/database/README.md "Retain vs Delete").
	for _, ns := range []string{"e2e-app", "e2e-failover", "e2e-jobs", "e2e-nats", "e2e-admission"} {
		if _, err := k("delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=120s"); err != nil {
			return err
		}
	}
	if _, err := k("delete", "-k", filepath.Join(integration.RepoRoot(), "deploy", "overlays", "e2e"), "--ignore-not-found", "--wait=true", "--timeout=180s"); err != nil {
		return err
	}
	var problems []string
	dbs, err := k("-n", "e2e-postgres", "exec", "deploy/postgres", "--", "psql", "-XAt", "-U", "postgres", "-c",
		"select string_agg(datname, ',') from pg_database where datname not in ('postgres','template0','template1')")
	if err != nil {
		return err
	}
	if dbs != "" {
		problems = append(problems, "Tenant databases left in PostgreSQL: "+dbs)
	}
	roles, err := k("-n", "e2e-postgres", "exec", "deploy/postgres", "--", "psql", "-XAt", "-U", "postgres", "-c",
		"select string_agg(rolname, ',') from pg_roles where rolname not like 'pg\\_%' and rolname not in ('postgres','ayatori_admin')")
	if err != nil {
		return err
	}
	if roles != "" {
		problems = append(problems, "Tenant roles left in PostgreSQL: "+roles)
	}
	checks := map[string][]string{
		"ExternalSecrets":                 {"get", "externalsecrets", "-A", "-o", "name"},
		"ayatori-secrets-reader accounts": {"get", "serviceaccounts", "-A", "--field-selector", "metadata.name=ayatori-secrets-reader", "-o", "name"},
		"native Jobs":                     {"get", "jobs.batch", "-A", "-o", "name"},
		"Ayatori CRDs":                    {"get", "crd", "-o", "name", "-l", "app.kubernetes.io/part-of=ayatori"},
	}
	for what, args := range checks {
		out, err := k(args...)
		if err != nil && !strings.Contains(err.Error(), "the server doesn't have a resource type") {
			return err
		}
		if out != "" {
			problems = append(problems, what+" left: "+strings.ReplaceAll(out, "\n", " "))
		}
	}
	crds, err := k("get", "crd", "-o", "name")
	if err != nil {
		return err
	}
	if strings.Contains(crds, "ayatori.ddupan.top") {
		problems = append(problems, "Ayatori CRDs left: "+crds)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := k("get", "pods", "-A", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}")
		if err != nil {
			return err
		}
		var left []string
		for _, p := range strings.Fields(pods) {
			switch strings.SplitN(p, "/", 2)[0] {
			case "kube-system", "e2e-postgres", "openbao", "external-secrets":
			default:
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			problems = append(problems, "pods left: "+strings.Join(left, " "))
			break
		}
		time.Sleep(2 * time.Second)
	}
	if len(problems) > 0 {
		return fmt.Errorf("after uninstall:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}
