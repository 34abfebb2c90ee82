// Package contracts_test holds the dependency rules of the tree (see
// docs/architecture.md "Dependency rules"). The domain contracts live in
// the packages below this directory, one per domain.
package contracts_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const module = "git.ddupan.top/panxiao81/ayatori"

// backendSDKs are module path prefixes of backend client libraries: only
// executors/... may link them.
var backendSDKs = []string{
	"github.com/jackc/pgx",
	"github.com/jackc/tern",
	"github.com/openbao/",
	"github.com/hashicorp/vault",
	"github.com/external-secrets/",
}

// allDeps is every package of the module with the packages it depends on
// (non-test, transitive), as one `go list -deps` reports them.
var allDeps = sync.OnceValues(func() (map[string][]string, error) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go list ./...: %w\n%s", err, out)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	return m, nil
})

// deps returns, per package matched by pattern ("./dir" or "./dir/..."),
// the packages it depends on (non-test, transitive).
func deps(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	all, err := allDeps()
	if err != nil {
		t.Fatal(err)
	}
	path, tree := strings.CutSuffix(strings.TrimPrefix(pattern, "./"), "/...")
	path = module + "/" + path
	m := map[string][]string{}
	for p, ds := range all {
		if p == path || tree && strings.HasPrefix(p, path+"/") {
			m[p] = ds
		}
	}
	if len(m) == 0 {
		t.Fatalf("go list %s matched no package", pattern)
	}
	return m
}

// forbidden reports every dependency of pkgs that starts with one of the prefixes.
func forbidden(pkgs map[string][]string, prefixes ...string) []string {
	var bad []string
	for p, ds := range pkgs {
		for _, d := range ds {
			for _, pre := range prefixes {
				if strings.HasPrefix(d, pre) {
					bad = append(bad, p+" -> "+d)
				}
			}
		}
	}
	return bad
}

func TestProjectorsDependOnContractsOnly(t *testing.T) {
	pkgs := deps(t, "./projectors/...")
	if bad := forbidden(pkgs, append([]string{module + "/executors"}, backendSDKs...)...); len(bad) > 0 {
		t.Errorf("projectors must not depend on executors or a backend SDK (import contracts/<domain> instead):\n%s", strings.Join(bad, "\n"))
	}
}

func TestContractsImportNoBackend(t *testing.T) {
	pkgs := deps(t, "./contracts/...")
	if bad := forbidden(pkgs, append([]string{module + "/executors", module + "/projectors", module + "/cmd"}, backendSDKs...)...); len(bad) > 0 {
		t.Errorf("a domain contract imports no executor, projector or backend SDK:\n%s", strings.Join(bad, "\n"))
	}
}

func TestJournalKnowsNoDomain(t *testing.T) {
	pkgs := deps(t, "./journal/...")
	if bad := forbidden(pkgs, append([]string{module + "/api", module + "/contracts", module + "/executors", module + "/projectors"}, backendSDKs...)...); len(bad) > 0 {
		t.Errorf("journal/ must not depend on a domain package:\n%s", strings.Join(bad, "\n"))
	}
}

func TestReconcileSkeletonKnowsNoDomain(t *testing.T) {
	pkgs := deps(t, "./projectors/journaled")
	if bad := forbidden(pkgs, append([]string{module + "/api", module + "/contracts", module + "/executors", module + "/projectors/"}, backendSDKs...)...); len(bad) > 0 {
		t.Errorf("projectors/journaled is shared by every domain's projectors and must not depend on one:\n%s", strings.Join(bad, "\n"))
	}
}

// domainPackages are, per domain, the package patterns that belong to it:
// its API, its contract, its projector and the executors of its backends.
var domainPackages = map[string][]string{
	"database":  {"./api/database/...", "./contracts/database/...", "./projectors/database/...", "./executors/postgresql/...", "./executors/openbao/...", "./executors/externalsecrets/..."},
	"execution": {"./api/execution/...", "./contracts/execution/...", "./projectors/execution/...", "./executors/kubernetes/...", "./executors/opensandbox/...", "./executors/localprocess/..."},
}

// TestDomainsDoNotImportEachOther: nothing of one domain depends on the
// API, contract, projector or executors of another; they meet only in
// cmd/ (the wiring) and in contracts/contracts.go (the CLI's links).
func TestDomainsDoNotImportEachOther(t *testing.T) {
	for d, own := range domainPackages {
		var others []string
		for o, pats := range domainPackages {
			if o == d {
				continue
			}
			for _, pat := range pats {
				others = append(others, module+"/"+strings.TrimSuffix(strings.TrimPrefix(pat, "./"), "/..."))
			}
		}
		for _, pat := range own {
			if bad := forbidden(deps(t, pat), others...); len(bad) > 0 {
				t.Errorf("domain %s depends on another domain:\n%s", d, strings.Join(bad, "\n"))
			}
		}
	}
}

func TestForensicsCLILinksNoExecutorOrProjector(t *testing.T) {
	pkgs := deps(t, "./cmd/ayatori-journal")
	if bad := forbidden(pkgs, append([]string{module + "/executors", module + "/projectors"}, backendSDKs...)...); len(bad) > 0 {
		t.Errorf("ayatori-journal reads the journal only (domains reach it through their contracts):\n%s", strings.Join(bad, "\n"))
	}
}

// TestNoBinaryLinksATestOnlyBackend: executors/localprocess runs a Job's
// argv on the host, outside any container; it serves tests only and no
// shipped binary may link it.
func TestNoBinaryLinksATestOnlyBackend(t *testing.T) {
	if bad := forbidden(deps(t, "./cmd/..."), module+"/executors/localprocess"); len(bad) > 0 {
		t.Errorf("a binary links the test-only local-process backend:\n%s", strings.Join(bad, "\n"))
	}
}

// TestRulesSeeViolations proves the checks above can fail: the PostgreSQL
// executor does link pgx, and the manager links the executors and both
// domains.
func TestRulesSeeViolations(t *testing.T) {
	if bad := forbidden(deps(t, "./executors/postgresql"), backendSDKs...); len(bad) == 0 {
		t.Error("executors/postgresql shows no backend SDK: the dependency listing is broken")
	}
	if bad := forbidden(deps(t, "./cmd/ayatori-manager"), module+"/executors"); len(bad) == 0 {
		t.Error("cmd/ayatori-manager shows no executor: the dependency listing is broken")
	}
	if bad := forbidden(deps(t, "./cmd/ayatori-manager"), module+"/contracts/database", module+"/contracts/execution"); len(bad) < 2 {
		t.Error("cmd/ayatori-manager, which wires both domains, shows fewer than two: the domain listing is broken")
	}
}

// contractFiles are the files every domain contract has, so that a reader
// who knows one domain finds the same thing in the same place in another
// (docs/architecture.md "Adding a domain").
var contractFiles = []string{"operations.go", "register.go", "failure.go", "reasons.go", "names.go", "invariants.go", "provenance.go"}

func TestEveryContractHasTheSameFiles(t *testing.T) {
	domains, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range domains {
		if !d.IsDir() {
			continue
		}
		n++
		for _, f := range contractFiles {
			if _, err := os.Stat(filepath.Join(d.Name(), f)); err != nil {
				t.Errorf("contracts/%s has no %s", d.Name(), f)
			}
		}
	}
	if n < 2 {
		t.Fatalf("found %d domain contracts", n)
	}
}
