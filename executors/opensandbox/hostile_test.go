package opensandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	ostest "git.ddupan.top/panxiao81/ayatori/integration/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Hostile and broken backends: small httptest fakes in place of the
// lifecycle API, for answers the spec-validating server never gives.

const hostileUID = "7e1c0b52-9999-4222-8333-000000000001"

// hostileExecutor is an executor whose parameters point at endpoint.
func hostileExecutor(t *testing.T, endpoint string, insecure bool, hc *http.Client) map[string]journal.Handler {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := executionv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "sandbox", UID: "params-uid"},
			Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{Endpoint: endpoint, AllowInsecureHTTP: insecure,
				APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: "ayatori-system", Name: "os-api", Key: "api-key"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ayatori-system", Name: "os-api"}, Data: map[string][]byte{"api-key": []byte(apiKey)}},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	ex := &opensandbox.Executor{Management: c, SecretNamespace: "ayatori-system", HTTPClient: hc, Timeout: 5 * time.Second, ProvisionTimeout: time.Second, PollInterval: 10 * time.Millisecond}
	return ex.Handlers()
}

func hostileObserve(t *testing.T, h map[string]journal.Handler) (journal.Outcome, error) {
	t.Helper()
	rec, err := journal.NewIntent(journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: "team", Name: "job", UID: hostileUID, Generation: 1},
		execution.OpObserve, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterOpenSandbox, ParametersName: "sandbox", ParametersUID: "params-uid"})
	if err != nil {
		t.Fatal(err)
	}
	return h[execution.OpObserve](context.Background(), rec)
}

func listAnswer(items ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"items": items, "pagination": map[string]any{"page": 1, "pageSize": 20, "totalItems": len(items), "totalPages": 1, "hasNextPage": false}})
	return b
}

// A redirect is not followed: the API key (and request bodies with image
// pull credentials) would go to whatever host the redirect names, also
// over plain http although the parameters require https.
func TestRedirectIsNotFollowed(t *testing.T) {
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("OPEN-SANDBOX-API-KEY") != "" {
			leaked.Add(1)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(listAnswer())
	}))
	defer other.Close()
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer api.Close()
	h := hostileExecutor(t, api.URL, false, api.Client())
	out, err := hostileObserve(t, h)
	if n := leaked.Load(); n > 0 {
		t.Fatalf("the API key was sent %d times to the http:// host a redirect named (outcome %+v %v)", n, out.Result, err)
	}
}

// A 2xx answer that does not decode is UnexpectedResponse, and nothing of
// its body reaches the outcome (a time field's parse error quotes it).
func TestUndecodableAnswerIsNotCopied(t *testing.T) {
	const leak = "BODY-CANARY-4d1e"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(listAnswer(map[string]any{"id": "sb-1", "status": map[string]any{"state": "Running"},
			"metadata": map[string]string{opensandbox.LabelJobUID: hostileUID}, "createdAt": leak + strings.Repeat("x", 10000)}))
	}))
	defer api.Close()
	out, err := hostileObserve(t, hostileExecutor(t, api.URL, true, nil))
	if err != nil || out.Result.Class != journal.Failed || out.Result.Reason != opensandbox.ReasonUnexpectedResponse {
		t.Fatalf("want Failed/UnexpectedResponse, got %+v %v", out.Result, err)
	}
	if strings.Contains(out.Result.Message, leak) || len(out.Result.Message) > 512 {
		t.Fatalf("the answer's body reached the outcome (%d bytes): %.200q", len(out.Result.Message), out.Result.Message)
	}
}

// An ErrorResponse code is repeated only when it is a plain token: no
// control characters (terminal escapes, CR) reach an outcome.
func TestErrorCodeIsAToken(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"code":"X\u001b[2J\rFAKE","message":"m"}`))
	}))
	defer api.Close()
	out, err := hostileObserve(t, hostileExecutor(t, api.URL, true, nil))
	if err != nil || out.Result.Class != journal.Failed {
		t.Fatalf("%+v %v", out.Result, err)
	}
	if strings.ContainsAny(out.Result.Message, "\x1b\r") {
		t.Fatalf("control characters of the answer reached the outcome: %q", out.Result.Message)
	}
}

// Ids the backend gives become status.execution.references, whose schema
// takes 1..253 characters: a longer (or empty) id is an unexpected answer,
// never a reference.
func TestBackendIDsFitReferences(t *testing.T) {
	for _, id := range []string{strings.Repeat("s", 300), ""} {
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(listAnswer(map[string]any{"id": id, "status": map[string]any{"state": "Pending"},
				"metadata": map[string]string{opensandbox.LabelJobUID: hostileUID}, "createdAt": time.Now().UTC().Format(time.RFC3339)}))
		}))
		out, err := hostileObserve(t, hostileExecutor(t, api.URL, true, nil))
		api.Close()
		if err != nil {
			continue
		}
		if o, ok := out.Payload.(execution.Observation); ok {
			for _, r := range o.References {
				if len(r.ID) == 0 || len(r.ID) > 253 {
					t.Fatalf("a reference the Job status can not hold: %s id of %d characters (%+v)", r.Type, len(r.ID), out.Result)
				}
			}
		}
	}
}

// The task's PATH is the task's: the wrapper's own mkdir and mv do not
// depend on it. (A task PATH without /bin made the claim fail, so the task
// never ran and the Job stayed ResultUnknown.)
func TestTaskPathDoesNotBreakTheWrapper(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"/bin/sh", "-c", "exit 5"}, func(j *executionv1alpha1.Job) {
		j.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "PATH", Value: ptr("/opt/app/bin")}}
	})
	o := e.ensure(j)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := e.do(execution.OpObserve, j, o.References, "")
		if err == nil && terminal(out) {
			if got := obsOf(t, out); got.State != execution.StateFailed || got.ExitCode == nil || *got.ExitCode != 5 {
				t.Fatalf("want Failed with exit code 5, got %+v", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task never recorded a result: %+v %v", out.Result, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bash -c takes the whole command as one argument, which Linux bounds at
// 128 KiB (MAX_ARG_STRLEN); argv words have no length bound in the Job
// schema. A command that can not be executed is refused before anything
// is created, not left to a sandbox whose command never starts.
func TestOversizedCommandRefusedBeforeCreate(t *testing.T) {
	e := newEnv(t)
	argv := []string{"/bin/echo"}
	for range 40 {
		argv = append(argv, strings.Repeat("a", 4000))
	}
	j := e.job(argv)
	out, err := e.run(execution.OpEnsure, e.ensureRec(j))
	if err != nil || out.Result.Class != journal.Failed {
		t.Fatalf("want a Failed Ensure, got %+v %v", out.Result, err)
	}
	if n := e.sandboxes(j); n != 0 {
		t.Fatalf("%d sandboxes created for a command that can not run", n)
	}
}

// Two deliveries of one Ensure at once (an AckWait expiry while the first
// still runs, two replicas) must not both create and launch: in
// production each sandbox has its own marker directory, so two sandboxes
// with a command are two runs of the task. (The test server shares one
// files root, which would hide the second run; the commands are counted.)
func TestConcurrentEnsureLaunchesInOneSandbox(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"bash", "-c", "sleep 0.5"})
	// Both lists answer before either create lands.
	e.srv.Inject(ostest.Fault{Method: "GET", Path: "/v1/sandboxes", Delay: 300 * time.Millisecond, Times: 2})
	// And both launches look for the marker before either command runs
	// (the server's sandboxes share one files root, hence one marker).
	e.srv.Inject(ostest.Fault{Method: "POST", Path: "/sandboxes/", Delay: 300 * time.Millisecond, Times: 2})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.run(execution.OpEnsure, e.ensureRec(j))
		}()
	}
	wg.Wait()
	// A redelivery continues whatever survived.
	for range 3 {
		if _, err := e.run(execution.OpEnsure, e.ensureRec(j)); err == nil {
			break
		}
	}
	launched := map[string]bool{}
	for _, r := range e.srv.Requests() {
		// (The status is recorded after the stream ends, maybe after the
		// client left it: any POST /command counts.)
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/port/44772/command") {
			launched[strings.Split(r.Path, "/")[2]] = true
		}
	}
	if len(launched) != 1 {
		t.Fatalf("commands were launched in %d sandboxes of one Job UID", len(launched))
	}
}

// A sandbox that stays Pending past ProvisionTimeout is a transient error
// whose reason (the RetriesExhausted outcome's, once the budget is spent)
// says so, not a generic BackendUnavailable.
func TestProvisioningTimeoutKeepsItsReason(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		sb := map[string]any{"id": "sb-1", "status": map[string]any{"state": "Pending"},
			"metadata": map[string]string{opensandbox.LabelJobUID: hostileUID}, "createdAt": time.Now().UTC().Format(time.RFC3339)}
		if r.URL.Path == "/v1/sandboxes" {
			_, _ = w.Write(listAnswer(sb))
			return
		}
		b, _ := json.Marshal(sb)
		_, _ = w.Write(b)
	}))
	defer api.Close()
	h := hostileExecutor(t, api.URL, true, nil)
	rec, err := journal.NewIntent(journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: "team", Name: "job", UID: hostileUID, Generation: 1},
		execution.OpEnsure, "", 1, execution.EnsureIntent{Adapter: execution.AdapterOpenSandbox, JobClass: "microvm", JobClassUID: "class-uid",
			ParametersKind: opensandbox.ParametersKind, ParametersName: "sandbox", ParametersUID: "params-uid", TaskDigest: "sha256:x"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h[execution.OpEnsure](context.Background(), rec)
	if f := journal.AsFailure(err); f == nil || !f.Transient || f.Reason != opensandbox.ReasonSandboxProvisioningTimeout {
		t.Fatalf("want a transient error with reason %s, got %v", opensandbox.ReasonSandboxProvisioningTimeout, err)
	}
}

// A command that lost the claim to an earlier launch whose id is lost
// (a cut stream, execd slower than LaunchSettle) may be the one recorded.
// It ends at once without an exit code while the task runs under the
// earlier command: neither Observe nor Cancel may read its end as the
// task's (Cancelled while the task goes on).
func TestLosingCommandIsNotTheTask(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "30"})
	o := e.ensure(j)
	sb := o.References[0].ID
	// A second launch of the same Job's wrapper with its own token, as a
	// redelivery would send it, recorded as the Job's command.
	m := opensandbox.Marker{Dir: e.srv.FilesRoot()}
	// The first command claims the marker asynchronously after its launch
	// returned: on a loaded machine the loser could otherwise claim it
	// first and run the task itself (CI saw it still running after 20 s).
	waitFileWritten(t, m.OwnerPath(string(j.UID)))
	loser := rawCommand(t, e.srv, sb, m.Script(string(j.UID), []string{"sleep", "30"}, "loser-token"))
	patchMetadata(t, e.srv, sb, map[string]string{opensandbox.LabelCommandID: loser, opensandbox.LabelLaunching: "loser-token"})
	refs := []execution.Reference{{Type: opensandbox.RefSandbox, ID: sb}, {Type: opensandbox.RefCommand, ID: loser}}
	waitCommandExited(t, e.srv, sb, loser) // a fixed sleep was too short on a loaded machine
	out, err := e.do(execution.OpObserve, j, refs, "")
	if err != nil || out.Result.Class != journal.ResultUnknown || out.Result.Reason != opensandbox.ReasonCommandStateLost {
		t.Fatalf("observe: %+v %v", out.Result, err)
	}
	out, err = e.do(execution.OpCancel, j, refs, execution.StopCancelled)
	if err != nil {
		t.Fatal(err)
	}
	if got := obsOf(t, out); got.State == execution.StateCancelled {
		t.Fatalf("cancel reported the loser's end as the task's: %+v", got)
	}
	// The Cancel stopped the task for real: the sandbox (and the task in
	// it) is gone.
	out, err = e.do(execution.OpObserve, j, refs, "")
	if err != nil || obsOf(t, out).State != execution.StateNotFound {
		t.Fatalf("after cancel: %+v %v", out.Result, err)
	}
}

// waitFileWritten polls until the file at path exists and is not empty
// (at most 20 s).
func waitFileWritten(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written after 20 s", path)
		}
	}
}

// waitCommandExited polls execd's status of command id in sandbox until it
// is no longer running (at most 20 s).
func waitCommandExited(t *testing.T, srv *ostest.Server, sandbox, id string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL()+"/sandboxes/"+sandbox+"/port/44772/command/status/"+id, nil)
		req.Header.Set("X-EXECD-ACCESS-TOKEN", srv.ExecdToken(sandbox))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Running bool `json:"running"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK && !st.Running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("command %s still running after 20 s (HTTP %d, %v)", id, resp.StatusCode, err)
		}
	}
}

// rawCommand starts a background command in a sandbox of srv through
// execd and returns its id.
func rawCommand(t *testing.T, srv *ostest.Server, sandbox, command string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command, "background": true})
	req, _ := http.NewRequest(http.MethodPost, srv.URL()+"/sandboxes/"+sandbox+"/port/44772/command", bytes.NewReader(body))
	req.Header.Set("X-EXECD-ACCESS-TOKEN", srv.ExecdToken(sandbox))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct{ Type, Text string }
		if json.Unmarshal([]byte(strings.TrimPrefix(sc.Text(), "data:")), &ev) == nil && ev.Type == "init" {
			return ev.Text
		}
	}
	t.Fatal("no init event")
	return ""
}

func patchMetadata(t *testing.T, srv *ostest.Server, sandbox string, md map[string]string) {
	t.Helper()
	body, _ := json.Marshal(md)
	req, _ := http.NewRequest(http.MethodPatch, srv.URL()+"/v1/sandboxes/"+sandbox+"/metadata", bytes.NewReader(body))
	req.Header.Set("OPEN-SANDBOX-API-KEY", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("patch metadata: %d", resp.StatusCode)
	}
}

// A backend that ignores the metadata filter and pages its answer: the
// Job's sandbox on page 2 is still found (else Observe would report it
// gone and Ensure would create a second one).
func TestFindFollowsPages(t *testing.T) {
	other := func(i int) map[string]any {
		return map[string]any{"id": fmt.Sprintf("other-%d", i), "status": map[string]any{"state": "Running"},
			"metadata":  map[string]string{opensandbox.LabelJobUID: fmt.Sprintf("7e1c0b52-0000-4000-8000-%012d", i)},
			"createdAt": "2026-12-01T00:00:00Z", "entrypoint": []string{"tail"}}
	}
	mine := map[string]any{"id": "mine", "status": map[string]any{"state": "Pending"},
		"metadata": map[string]string{opensandbox.LabelJobUID: hostileUID}, "createdAt": "2026-12-01T00:00:00Z", "entrypoint": []string{"tail"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/sandboxes" {
			http.Error(w, `{"code":"NOT_FOUND","message":"x"}`, http.StatusNotFound)
			return
		}
		page := r.URL.Query().Get("page")
		var items []map[string]any
		next := false
		if page == "" || page == "1" {
			for i := 0; i < 20; i++ {
				items = append(items, other(i))
			}
			next = true
		} else {
			items = []map[string]any{mine}
		}
		b, _ := json.Marshal(map[string]any{"items": items, "pagination": map[string]any{"page": 1, "pageSize": 20, "totalItems": 21, "totalPages": 2, "hasNextPage": next}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	out, err := hostileObserve(t, hostileExecutor(t, srv.URL, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := out.Payload.(execution.Observation); !ok || o.State != execution.StatePending {
		t.Fatalf("the sandbox on page 2 was not found: %+v %+v", out.Result, out.Payload)
	}
}

// A Cancel that kills the wrapper between its claim and its owner token
// (the owner file created, not yet written) still ends Cancelled: an
// empty owner is no proof of another command (seen in CI under load).
func TestCancelDuringClaimIsCancelled(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "60"})
	o := e.ensure(j)
	e.until(j, o.References, func(out journal.Outcome) bool {
		got, ok := out.Payload.(execution.Observation)
		return ok && got.State == execution.StateRunning
	})
	m := opensandbox.Marker{Dir: e.srv.FilesRoot()}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(m.OwnerPath(string(j.UID))); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err := os.Truncate(m.OwnerPath(string(j.UID)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.do(execution.OpCancel, j, o.References, execution.StopCancelled); err != nil {
		t.Fatal(err)
	}
	if got := obsOf(t, e.until(j, o.References, terminal)); got.State != execution.StateCancelled {
		t.Fatalf("%+v", got)
	}
}

// TestAPIKeyOnlyFromTheControllerNamespace: parameters whose apiKeySecretRef
// names a Secret in another namespace (a Tenant's password, say) are
// refused before the Secret is read or anything is sent to the endpoint.
func TestAPIKeyOnlyFromTheControllerNamespace(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = executionv1alpha1.AddToScheme(s)
	params := &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "exfil", UID: "params-uid"},
		Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{Endpoint: srv.URL, AllowInsecureHTTP: true,
			APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: "victim", Name: "db-credentials", Key: "password"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(params,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "db-credentials"}, Data: map[string][]byte{"password": []byte(apiKey)}}).Build()
	ex := &opensandbox.Executor{Management: c, SecretNamespace: "ayatori-system", Timeout: 5 * time.Second}
	ok, reason, msg := ex.Probe(context.Background(), params)
	if ok || reason != executionv1alpha1.ReasonInvalidParametersReference || !strings.Contains(msg, "controller namespace") {
		t.Fatalf("probe: %v %s %q", ok, reason, msg)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the endpoint got %d requests", n)
	}
}
