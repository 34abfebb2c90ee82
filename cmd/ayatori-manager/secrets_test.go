package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestMain lets a test run this binary's main() as a child process (the
// test binary re-executed with AYATORI_MANAGER_RUN_MAIN=1), so that what
// the real binary prints on stdout and stderr can be scanned.
func TestMain(m *testing.M) {
	if os.Getenv("AYATORI_MANAGER_RUN_MAIN") == "1" {
		os.Args = append([]string{"ayatori-manager"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runManager runs main() in a child process and returns its combined
// stdout+stderr and exit status.
func runManager(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "AYATORI_MANAGER_RUN_MAIN=1", "NATS_URL=", "POD_NAMESPACE="), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// discoveryOnlyKubeconfig points at a fake API server that answers only
// the discovery the manager needs to be created (core/v1 with Secrets):
// the manager gets past its setup and reaches the NATS connection without
// a real control plane.
func discoveryOnlyKubeconfig(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}`)
		case "/apis":
			fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
		case "/api/v1":
			fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"secrets","singularName":"secret","namespaced":true,"kind":"Secret","verbs":["get","list","watch"]}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestManagerHidesCredentialsInURLs: a NATS URL with a password or a token
// (--nats-url or NATS_URL, alone or in a server list, parseable or not) and
// an OpenBao address with credentials never appear with their secret in
// anything the manager prints: connection errors, flag errors, --help.
func TestManagerHidesCredentialsInURLs(t *testing.T) {
	const canary = "CANARY-mgr-8d41"
	kubeconfig := discoveryOnlyKubeconfig(t)
	keys := integration.TestJournalKeys(t)
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "manager.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	base := append([]string{"--kubeconfig", kubeconfig, "--namespace", "ayatori-system", "--metrics-bind-address", "0",
		"--health-probe-bind-address", "0", "--projectors", "instance", "--executors", "postgresql", "--nats-nkey", seedFile},
		keys.ManagerJournalArgs()...)
	natsURLs := []string{
		"nats://user:" + canary + "@127.0.0.1:1",
		"nats://" + canary + "@127.0.0.1:1",
		"tls://user:" + canary + "@127.0.0.1:1",
		"nats://user:pa ss" + canary + "@127.0.0.1:1",
		"nats://user:" + canary + "%zz@127.0.0.1:1",
		"nats://user:12/" + canary + "@127.0.0.1:1",
		"nats://a:" + canary + "@127.0.0.1:1,nats://b:" + canary + "@127.0.0.1:2",
		"http://user:" + canary + "@127.0.0.1:1",
	}
	for _, u := range natsURLs {
		for _, viaEnv := range []bool{false, true} {
			args, env := append([]string{}, base...), []string(nil)
			if viaEnv {
				env = []string{"NATS_URL=" + u}
			} else {
				args = append(args, "--nats-url", u)
			}
			out, code := runManager(t, env, args...)
			if strings.Contains(out, canary) {
				t.Errorf("%s (env %v): the secret is printed:\n%s", u, env, out)
			}
			if code != 1 || !strings.Contains(out, "127.0.0.1:1") {
				t.Errorf("%s (env %v): exit %d, want 1 and an error naming the server:\n%s", u, env, code, out)
			}
		}
	}
	for _, addr := range []string{
		"https://root:" + canary + "@127.0.0.1:1",
		"https://" + canary + "@127.0.0.1:1",
		"https://127.0.0.1:1/?token=" + canary,
		"https://127.0.0.1:1/#" + canary,
		"https://root:pa ss" + canary + "@127.0.0.1:1",
	} {
		for _, flag := range []string{"--openbao-address", "--openbao-consumer-address"} {
			args := append(append([]string{}, base...), "--projectors", "tenant", "--executors", "openbao",
				"--openbao-address", "https://127.0.0.1:1", "--openbao-auth-role", "r", "--external-secret-store-name", "s",
				"--nats-url", "nats://127.0.0.1:1", flag, addr)
			out, code := runManager(t, nil, args...)
			if strings.Contains(out, canary) || code != 1 {
				t.Errorf("%s %s: exit %d, want 1 without the secret:\n%s", flag, addr, code, out)
			}
		}
	}
	out, code := runManager(t, []string{"NATS_URL=nats://user:" + canary + "@127.0.0.1:1"}, "--help")
	if strings.Contains(out, canary) || code != 0 || !strings.Contains(out, "nats://user:xxxxx@127.0.0.1:1") {
		t.Errorf("--help: exit %d, want 0 and NATS_URL shown redacted:\n%s", code, out)
	}
}
