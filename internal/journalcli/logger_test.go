package journalcli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNoMissingLoggerStackTrace: controller-runtime prints a
// "log.SetLogger(...) was never called" stack trace when its logger is
// first used 30 s or more after the process started without a logger.
// replay --kubeconfig uses a controller-runtime client, whose API warning
// handler logs through that logger: a fake API server answers the live
// object's GET 31 s after the binary started, with a Warning header. The
// binary's output must not contain the trace.
func TestNoMissingLoggerStackTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 31 s")
	}
	var started time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}`)
		case "/apis":
			fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"database.ayatori.ddupan.top","versions":[{"groupVersion":"database.ayatori.ddupan.top/v1alpha1","version":"v1alpha1"}],"preferredVersion":{"groupVersion":"database.ayatori.ddupan.top/v1alpha1","version":"v1alpha1"}}]}`)
		case "/api/v1":
			fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[]}`)
		case "/apis/database.ayatori.ddupan.top/v1alpha1":
			fmt.Fprint(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"database.ayatori.ddupan.top/v1alpha1","resources":[{"name":"postgresqlinstances","singularName":"postgresqlinstance","namespaced":false,"kind":"PostgreSQLInstance","verbs":["get","list","watch"]}]}`)
		case "/apis/database.ayatori.ddupan.top/v1alpha1/postgresqlinstances/shared":
			time.Sleep(time.Until(started.Add(31 * time.Second)))
			w.Header().Set("Warning", `299 - "a warning the client logs through controller-runtime"`)
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"details":{"name":"shared","group":"database.ayatori.ddupan.top","kind":"postgresqlinstances"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	started = time.Now()
	out, code := runBinary(t, nil, "replay", "--from-file", "testdata/export-instance.ndjson", "--uid", instanceUID,
		"--kubeconfig", kubeconfig, "--timeout", "2m")
	if time.Since(started) < 30*time.Second {
		t.Fatalf("the binary ended after %s, before controller-runtime's 30 s: the test proves nothing:\n%s", time.Since(started), out)
	}
	if strings.Contains(out, "was never called") || strings.Contains(out, "Detected at:") {
		t.Fatalf("controller-runtime's missing-logger stack trace (exit %d):\n%s", code, out)
	}
	// The live object does not exist: replay reports the mismatch (exit 1).
	if code != 1 || !strings.Contains(out, "no longer exists") {
		t.Fatalf("exit %d, want 1 and the missing object reported:\n%s", code, out)
	}
}
