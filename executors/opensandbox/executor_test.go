package opensandbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	ostest "git.ddupan.top/panxiao81/ayatori/integration/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The executor against the spec-validating OpenSandbox server
// (integration/opensandbox): every request the executor sends and every
// answer it gets is checked against the pinned OpenAPI documents, and
// commands really run (bash) inside the server's sandboxes. The Kubernetes
// side (Jobs, parameters, Secrets) is a fake client: the semantics under
// test are the backend's; the stack test runs the same through the
// manager on a real API server.

const (
	apiKey = "os-key-1"
	// canary is a Secret env value that may appear only in the request
	// the server received.
	canary = "CANARY-opensandbox-7f3a9c"
)

type env struct {
	t   *testing.T
	srv *ostest.Server
	k8s client.Client
	ex  *opensandbox.Executor
	h   map[string]journal.Handler
}

func newEnv(t *testing.T, mut ...func(*executionv1alpha1.OpenSandboxExecutionParameters)) *env {
	t.Helper()
	srv := ostest.Start(t, ostest.Options{APIKeys: []string{apiKey}, ProvisionDelay: 20 * time.Millisecond})
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := executionv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	params := &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "sandbox", UID: "params-uid"},
		Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{Endpoint: srv.URL(), AllowInsecureHTTP: true,
			APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: "ayatori-system", Name: "os-api", Key: "api-key"}}}
	for _, m := range mut {
		m(params)
	}
	objs := []client.Object{
		params,
		&executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "microvm", UID: "class-uid"}, Spec: executionv1alpha1.JobClassSpec{
			ControllerName: executionv1alpha1.ControllerOpenSandbox,
			ParametersRef:  executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: opensandbox.ParametersKind, Name: "sandbox"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ayatori-system", Name: "os-api"}, Data: map[string][]byte{"api-key": []byte(apiKey)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}, Data: map[string][]byte{"token": []byte(canary)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cfg"}, Data: map[string]string{"mode": "fast"}},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	ex := &opensandbox.Executor{Management: c, SecretNamespace: "ayatori-system", Marker: opensandbox.Marker{Dir: srv.FilesRoot()}, Timeout: 10 * time.Second,
		ProvisionTimeout: 5 * time.Second, PollInterval: 10 * time.Millisecond}
	return &env{t: t, srv: srv, k8s: c, ex: ex, h: ex.Handlers()}
}

var uidSeq atomic.Int64

// job creates a Job in namespace team running argv.
func (e *env) job(argv []string, mut ...func(*executionv1alpha1.Job)) *executionv1alpha1.Job {
	e.t.Helper()
	n := uidSeq.Add(1)
	j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("job-%d", n),
		UID: types.UID(fmt.Sprintf("7e1c0b52-1111-4222-8333-%012d", n))},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "registry.example/tools:1", Command: argv}}}
	for _, m := range mut {
		m(j)
	}
	if err := e.k8s.Create(context.Background(), j); err != nil {
		e.t.Fatal(err)
	}
	return j
}

func ref(j *executionv1alpha1.Job) journal.ObjectRef {
	return journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: "Job", Namespace: j.Namespace, Name: j.Name, UID: string(j.UID), Generation: 1}
}

func (e *env) ensureRec(j *executionv1alpha1.Job, mut ...func(*execution.EnsureIntent)) journal.Record {
	e.t.Helper()
	d, err := execution.TaskDigest(j.Spec.Task)
	if err != nil {
		e.t.Fatal(err)
	}
	in := execution.EnsureIntent{Adapter: execution.AdapterOpenSandbox, JobClass: "microvm", JobClassUID: "class-uid",
		ParametersKind: opensandbox.ParametersKind, ParametersName: "sandbox", ParametersUID: "params-uid", Image: j.Spec.Task.Image, TaskDigest: d,
		Resources: execution.Resources{LimitsCPU: "1", LimitsMemory: "512Mi", RequestsCPU: "500m"}}
	for _, m := range mut {
		m(&in)
	}
	rec, err := journal.NewIntent(ref(j), execution.OpEnsure, "", 1, in)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func (e *env) run(op string, rec journal.Record) (journal.Outcome, error) {
	return e.h[op](context.Background(), rec)
}

// do runs op for j with the references known so far.
func (e *env) do(op string, j *executionv1alpha1.Job, refs []execution.Reference, reason execution.StopReason) (journal.Outcome, error) {
	e.t.Helper()
	rec, err := journal.NewIntent(ref(j), op, "", 1, execution.ExecutionIntent{Adapter: execution.AdapterOpenSandbox, References: refs,
		Reason: reason, ParametersName: "sandbox", ParametersUID: "params-uid"})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.run(op, rec)
}

func obsOf(t *testing.T, out journal.Outcome) execution.Observation {
	t.Helper()
	o, ok := out.Payload.(execution.Observation)
	if !ok {
		t.Fatalf("outcome %+v carries no observation", out.Result)
	}
	return o
}

// ensure runs Ensure and expects a Succeeded outcome.
func (e *env) ensure(j *executionv1alpha1.Job) execution.Observation {
	e.t.Helper()
	out, err := e.run(execution.OpEnsure, e.ensureRec(j))
	if err != nil {
		e.t.Fatalf("ensure: %v", err)
	}
	if out.Result.Class != journal.Succeeded {
		e.t.Fatalf("ensure: %+v", out.Result)
	}
	return obsOf(e.t, out)
}

// until observes j until cond holds (10 s).
func (e *env) until(j *executionv1alpha1.Job, refs []execution.Reference, cond func(journal.Outcome) bool) journal.Outcome {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := e.do(execution.OpObserve, j, refs, "")
		if err == nil && cond(out) {
			return out
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("observe: %+v %v", out.Result, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func terminal(out journal.Outcome) bool {
	o, ok := out.Payload.(execution.Observation)
	return out.Result.Class == journal.Succeeded && ok && o.Terminal
}

func (e *env) sandboxes(j *executionv1alpha1.Job) int {
	return e.srv.CreatedSandboxes(opensandbox.LabelJobUID, string(j.UID))
}

// M1, M22: one sandbox, one command, exit 0; references Sandbox and
// Command, stable across repeated Ensures and Observes, credential-free.
func TestM1M22SucceedsWithStableReferences(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"bash", "-c", "echo hello; exit 0"})
	first := e.ensure(j)
	if !first.Created || first.State != execution.StateRunning || len(first.References) != 2 ||
		first.References[0].Type != opensandbox.RefSandbox || first.References[1].Type != opensandbox.RefCommand {
		t.Fatalf("first Ensure: %+v", first)
	}
	again := e.ensure(j)
	if again.Created || fmt.Sprint(again.References) != fmt.Sprint(first.References) {
		t.Fatalf("second Ensure: %+v (first %+v)", again, first)
	}
	out := e.until(j, nil, terminal)
	o := obsOf(t, out)
	if o.State != execution.StateSucceeded || o.ExitCode == nil || *o.ExitCode != 0 || fmt.Sprint(o.References) != fmt.Sprint(first.References) {
		t.Fatalf("observation %+v", o)
	}
	if e.sandboxes(j) != 1 || e.srv.Commands(first.References[0].ID) != 1 {
		t.Fatalf("%d sandboxes, %d commands", e.sandboxes(j), e.srv.Commands(first.References[0].ID))
	}
	for _, r := range o.References {
		if strings.Contains(r.ID, "://") || strings.Contains(r.ID, apiKey) || strings.Contains(r.ID, "127.0.0.1") {
			t.Fatalf("reference %+v carries an endpoint or a credential", r)
		}
	}
	sb, _ := e.srv.Sandbox(first.References[0].ID)
	if sb.Metadata[opensandbox.LabelJobUID] != string(j.UID) || sb.Metadata[opensandbox.LabelJobNamespace] != "team" || sb.Metadata[opensandbox.LabelJobName] != j.Name {
		t.Fatalf("metadata %v", sb.Metadata)
	}
	if sb.Env[opensandbox.EnvJobUID] != string(j.UID) || sb.ResourceLimits["cpu"] != "1" || sb.ResourceLimits["memory"] != "512Mi" {
		t.Fatalf("sandbox request %+v", sb)
	}
}

// M2: a non-zero exit is ProcessFailed with the exit code.
func TestM2ProcessFailedKeepsExitCode(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"bash", "-c", "exit 7"})
	e.ensure(j)
	o := obsOf(t, e.until(j, nil, terminal))
	if o.State != execution.StateFailed || o.Reason != executionv1alpha1.ReasonProcessFailed || o.ExitCode == nil || *o.ExitCode != 7 {
		t.Fatalf("%+v", o)
	}
}

// The argv quoting table: every word reaches the process intact through
// execd's `bash -c`.
func TestArgvQuotingThroughExecd(t *testing.T) {
	e := newEnv(t)
	words := []string{"a b", "it's", `"q"`, "$HOME", "$(id)", "`id`", `back\slash`, "new\nline", "", "*", ";", "tab\there", "'"}
	out := e.srv.FilesRoot() + "/argv.out"
	j := e.job(append([]string{"bash", "-c", `for a in "$@"; do printf '%s\0' "$a"; done > "$0"`, out}, words...))
	e.ensure(j)
	if o := obsOf(t, e.until(j, nil, terminal)); o.State != execution.StateSucceeded {
		t.Fatalf("%+v", o)
	}
	got := strings.Split(readFile(t, out), "\x00")
	got = got[:len(got)-1]
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", words) {
		t.Fatalf("argv arrived as %q, want %q", got, words)
	}
}

// Secret env only with allowSecretEnv; the value appears only in the
// request the server received (never in an outcome).
func TestSecretEnvOnlyWithAllowSecretEnv(t *testing.T) {
	withSecret := func(j *executionv1alpha1.Job) {
		j.Spec.Task.Env = []executionv1alpha1.EnvVar{
			{Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "token"}}},
			{Name: "MODE", ValueFrom: &executionv1alpha1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "mode"}}},
		}
	}
	t.Run("refused without allowSecretEnv", func(t *testing.T) {
		e := newEnv(t)
		j := e.job([]string{"true"}, withSecret)
		out, err := e.run(execution.OpEnsure, e.ensureRec(j))
		if err != nil || out.Result.Class != journal.Failed || out.Result.Reason != opensandbox.ReasonSecretEnvNotAllowed {
			t.Fatalf("%+v %v", out.Result, err)
		}
		if e.srv.Commands(obsOf(t, out).References[0].ID) != 0 {
			t.Fatal("a command started")
		}
		scanCanary(t, e, out)
	})
	t.Run("delivered with allowSecretEnv", func(t *testing.T) {
		e := newEnv(t, func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.AllowSecretEnv = true })
		dump := e.srv.FilesRoot() + "/env.out"
		j := e.job([]string{"bash", "-c", `printf '%s|%s' "$TOKEN" "$MODE" > "$0"`, dump}, withSecret)
		first := e.ensure(j)
		out := e.until(j, nil, terminal)
		if o := obsOf(t, out); o.State != execution.StateSucceeded {
			t.Fatalf("%+v", o)
		}
		if got := readFile(t, dump); got != canary+"|fast" {
			t.Fatalf("the process saw %q", got)
		}
		scanCanary(t, e, journal.Outcome{Payload: first}, out)
		if n := bodiesContaining(e.srv, canary); n != 1 {
			t.Fatalf("the canary is in %d request bodies, want exactly the command's", n)
		}
	})
}

// Image pull credentials: the dockerconfigjson entry matching the image's
// registry, only with allowImageAuth; none matching is a refusal, never an
// anonymous pull.
func TestImageAuthMatchingAndRefusal(t *testing.T) {
	pull := func(name, cfg string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(cfg)}}
	}
	withPull := func(names ...string) func(*executionv1alpha1.Job) {
		return func(j *executionv1alpha1.Job) {
			for _, n := range names {
				j.Spec.Task.ImagePullSecrets = append(j.Spec.Task.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
			}
		}
	}
	allow := func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.AllowImageAuth = true }
	t.Run("not allowed", func(t *testing.T) {
		e := newEnv(t)
		_ = e.k8s.Create(context.Background(), pull("regcred", `{"auths":{"registry.example":{"username":"u","password":"p"}}}`))
		j := e.job([]string{"true"}, withPull("regcred"))
		out, err := e.run(execution.OpEnsure, e.ensureRec(j))
		if err != nil || out.Result.Reason != opensandbox.ReasonImageAuthNotAllowed || e.sandboxes(j) != 0 {
			t.Fatalf("%+v %v, %d sandboxes", out.Result, err, e.sandboxes(j))
		}
	})
	t.Run("matching entry", func(t *testing.T) {
		e := newEnv(t, allow)
		_ = e.k8s.Create(context.Background(), pull("other", `{"auths":{"ghcr.io":{"username":"g","password":"gp"}}}`))
		_ = e.k8s.Create(context.Background(), pull("regcred", `{"auths":{"https://registry.example/v2/":{"auth":"`+b64("robot:"+canary)+`"}}}`))
		j := e.job([]string{"true"}, withPull("other", "regcred"))
		o := e.ensure(j)
		sb, _ := e.srv.Sandbox(o.References[0].ID)
		if sb.Image == nil || sb.Image.Auth == nil || sb.Image.Auth.Username != "robot" || sb.Image.Auth.Password != canary {
			t.Fatalf("image %+v", sb.Image)
		}
		out := e.until(j, nil, terminal)
		scanCanary(t, e, journal.Outcome{Payload: o}, out)
	})
	t.Run("no matching entry", func(t *testing.T) {
		e := newEnv(t, allow)
		_ = e.k8s.Create(context.Background(), pull("regcred", `{"auths":{"ghcr.io":{"username":"g","password":"gp"}}}`))
		j := e.job([]string{"true"}, withPull("regcred"))
		out, err := e.run(execution.OpEnsure, e.ensureRec(j))
		if err != nil || out.Result.Reason != opensandbox.ReasonImageAuthNotFound || e.sandboxes(j) != 0 {
			t.Fatalf("%+v %v, %d sandboxes", out.Result, err, e.sandboxes(j))
		}
	})
	t.Run("missing Secret", func(t *testing.T) {
		e := newEnv(t, allow)
		j := e.job([]string{"true"}, withPull("absent"))
		out, err := e.run(execution.OpEnsure, e.ensureRec(j))
		if err != nil || out.Result.Reason != opensandbox.ReasonImageAuthNotFound || e.sandboxes(j) != 0 {
			t.Fatalf("%+v %v", out.Result, err)
		}
	})
}

// The API key follows rotation: the Secret is read on every operation;
// the probe reports a rejected key and recovers after the rotation.
func TestAPIKeyRotation(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "30"})
	o := e.ensure(j)
	// The server now takes only the new key; the Secret still has the old.
	e.srv.SetAPIKeys("os-key-2")
	out, err := e.do(execution.OpObserve, j, o.References, "")
	if err != nil || out.Result.Class != journal.Failed || out.Result.Reason != opensandbox.ReasonAPIKeyRejected {
		t.Fatalf("old key: %+v %v", out.Result, err)
	}
	params := &executionv1alpha1.OpenSandboxExecutionParameters{}
	_ = e.k8s.Get(context.Background(), client.ObjectKey{Name: "sandbox"}, params)
	if ok, reason, _ := e.ex.Probe(context.Background(), params); ok || reason != opensandbox.ReasonAPIKeyRejected {
		t.Fatalf("probe with the old key: %v %s", ok, reason)
	}
	sec := &corev1.Secret{}
	_ = e.k8s.Get(context.Background(), client.ObjectKey{Namespace: "ayatori-system", Name: "os-api"}, sec)
	sec.Data["api-key"] = []byte("os-key-2")
	if err := e.k8s.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	out, err = e.do(execution.OpObserve, j, o.References, "")
	if err != nil || out.Result.Class != journal.Succeeded || obsOf(t, out).State != execution.StateRunning {
		t.Fatalf("rotated key: %+v %v", out.Result, err)
	}
	if ok, _, _ := e.ex.Probe(context.Background(), params); !ok {
		t.Fatal("probe after rotation")
	}
	if _, err := e.do(execution.OpCancel, j, o.References, execution.StopCancelled); err != nil {
		t.Fatal(err)
	}
}

// A missing API key Secret: the probe says so; Ensure creates nothing.
func TestAPIKeySecretMissing(t *testing.T) {
	e := newEnv(t, func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.APIKeySecretRef.Name = "absent" })
	params := &executionv1alpha1.OpenSandboxExecutionParameters{}
	_ = e.k8s.Get(context.Background(), client.ObjectKey{Name: "sandbox"}, params)
	if ok, reason, _ := e.ex.Probe(context.Background(), params); ok || reason != opensandbox.ReasonAPIKeySecretNotFound {
		t.Fatalf("probe: %v %s", ok, reason)
	}
	j := e.job([]string{"true"})
	out, err := e.run(execution.OpEnsure, e.ensureRec(j))
	if err != nil || out.Result.Reason != opensandbox.ReasonAPIKeySecretNotFound || e.sandboxes(j) != 0 {
		t.Fatalf("%+v %v", out.Result, err)
	}
}

// An http endpoint without allowInsecureHTTP is rejected before any
// request.
func TestHTTPEndpointWithoutAllowInsecureHTTP(t *testing.T) {
	e := newEnv(t, func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.AllowInsecureHTTP = false })
	j := e.job([]string{"true"})
	out, err := e.run(execution.OpEnsure, e.ensureRec(j))
	if err != nil || out.Result.Reason != opensandbox.ReasonInsecureEndpoint {
		t.Fatalf("%+v %v", out.Result, err)
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	params := &executionv1alpha1.OpenSandboxExecutionParameters{}
	_ = e.k8s.Get(context.Background(), client.ObjectKey{Name: "sandbox"}, params)
	if ok, reason, _ := e.ex.Probe(context.Background(), params); ok || reason != opensandbox.ReasonInsecureEndpoint {
		t.Fatalf("probe: %v %s", ok, reason)
	}
}

// M14: the deadline: execd's command timeout stops the task; the result
// is DeadlineExceeded.
func TestM14DeadlineViaCommandTimeout(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "60"}, func(j *executionv1alpha1.Job) { j.Spec.ActiveDeadlineSeconds = ptr(int64(1)) })
	e.ensure(j)
	o := obsOf(t, e.until(j, nil, terminal))
	if o.State != execution.StateFailed || o.Reason != executionv1alpha1.ReasonDeadlineExceeded {
		t.Fatalf("%+v", o)
	}
}

// M12: Cancel interrupts the running command; the result is Cancelled.
// Cancel and Delete repeat; Delete of a gone sandbox is NotFound.
func TestM12CancelThenDeleteIdempotent(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "60"})
	o := e.ensure(j)
	e.until(j, o.References, func(out journal.Outcome) bool { return obsOf(t, out).State == execution.StateRunning })
	if _, err := e.do(execution.OpCancel, j, o.References, execution.StopCancelled); err != nil {
		t.Fatal(err)
	}
	got := obsOf(t, e.until(j, o.References, terminal))
	if got.State != execution.StateCancelled {
		t.Fatalf("%+v", got)
	}
	if out, err := e.do(execution.OpCancel, j, o.References, execution.StopCancelled); err != nil || !obsOf(t, out).State.Stopped() {
		t.Fatalf("second Cancel: %+v %v", out.Result, err)
	}
	for i := 0; i < 2; i++ {
		out, err := e.do(execution.OpDelete, j, o.References, "")
		if err != nil || obsOf(t, out).State != execution.StateNotFound {
			t.Fatalf("Delete %d: %+v %v", i, out.Result, err)
		}
	}
	out, err := e.do(execution.OpObserve, j, o.References, "")
	if err != nil || obsOf(t, out).State != execution.StateNotFound {
		t.Fatalf("observe after delete: %+v %v", out.Result, err)
	}
}

// M5: an image the backend can not pull: Failed/ImagePullFailed without a
// start.
func TestM5ImagePullFailure(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"true"}, func(j *executionv1alpha1.Job) { j.Spec.Task.Image = "registry.example/pull-fail:1" })
	o := e.ensure(j)
	if o.State != execution.StateFailed || o.Reason != executionv1alpha1.ReasonImagePullFailed || o.StartTime != nil || !o.Created {
		t.Fatalf("%+v", o)
	}
	if e.srv.Commands(o.References[0].ID) != 0 {
		t.Fatal("a command started in a failed sandbox")
	}
}

// Faults: each injected answer gives the specified result, and never a
// second sandbox or command.
func TestInjectedFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault ostest.Fault
		// want is the first Ensure's result: "transient" (an error, the
		// journal redelivers) or a Failed reason.
		want string
	}{
		{"401 on create", ostest.Fault{Method: "POST", Path: "/v1/sandboxes", Status: 401}, opensandbox.ReasonAPIKeyRejected},
		{"403 on create", ostest.Fault{Method: "POST", Path: "/v1/sandboxes", Status: 403}, opensandbox.ReasonForbidden},
		{"409 on create", ostest.Fault{Method: "POST", Path: "/v1/sandboxes", Status: 409}, "transient"},
		{"500 on list", ostest.Fault{Method: "GET", Path: "/v1/sandboxes", Status: 500}, "transient"},
		{"500 after create (the sandbox exists)", ostest.Fault{Method: "POST", Path: "/v1/sandboxes", Status: 500, AfterHandling: true}, "transient"},
		{"slow create beyond the timeout", ostest.Fault{Method: "POST", Path: "/v1/sandboxes", Delay: 3 * time.Second}, "transient"},
		{"stream cut before init", ostest.Fault{Method: "POST", Path: "/sandboxes/", CutSSEBeforeInit: true}, "transient"},
		{"500 on the command", ostest.Fault{Method: "POST", Path: "/sandboxes/", Status: 500}, "transient"},
		{"500 after the command started", ostest.Fault{Method: "POST", Path: "/sandboxes/", Status: 500, AfterHandling: true}, "transient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each fault has its own server and executor
			e := newEnv(t)
			e.ex.Timeout, e.ex.ProvisionTimeout = time.Second, time.Second
			e.h = e.ex.Handlers()
			j := e.job([]string{"bash", "-c", "sleep 0.3; exit 0"})
			e.srv.Inject(tc.fault)
			out, err := e.run(execution.OpEnsure, e.ensureRec(j))
			switch {
			case tc.want == "transient" && err == nil:
				t.Fatalf("want a transient error, got %+v", out.Result)
			case tc.want != "transient" && (err != nil || out.Result.Class != journal.Failed || out.Result.Reason != tc.want):
				t.Fatalf("want Failed/%s, got %+v %v", tc.want, out.Result, err)
			}
			// The redelivery (no fault now) converges on one sandbox, one command.
			e.ex.Timeout, e.ex.ProvisionTimeout = 10*time.Second, 5*time.Second
			e.h = e.ex.Handlers()
			time.Sleep(tc.fault.Delay) // a slow create lands meanwhile
			// A launch whose answer was lost leaves the command id unknown:
			// ResultUnknown until the marker proves the result.
			out, err = e.run(execution.OpEnsure, e.ensureRec(j))
			if err != nil || !(out.Result.Class == journal.Succeeded ||
				out.Result.Class == journal.ResultUnknown && out.Result.Reason == opensandbox.ReasonCommandStateLost) {
				t.Fatalf("redelivered Ensure: %+v %v", out.Result, err)
			}
			last := obsOf(t, e.until(j, nil, terminal))
			if last.State != execution.StateSucceeded {
				t.Fatalf("%+v", last)
			}
			if n := e.sandboxes(j); n != 1 {
				t.Fatalf("%d sandboxes for one Job", n)
			}
			if n := e.srv.Commands(last.References[0].ID); n != 1 {
				t.Fatalf("%d commands for one Job", n)
			}
			if n := taskRuns(t, e, j); n != 1 {
				t.Fatalf("the task ran %d times", n)
			}
		})
	}
}

// An execd restart loses the command state: the marker proves the exit
// code once the task ends; until then the result is unknown. A killed
// task leaves ResultUnknown (never a guess).
func TestExecdRestartLosesCommandState(t *testing.T) {
	t.Run("task survives: the marker proves the result", func(t *testing.T) {
		e := newEnv(t)
		j := e.job([]string{"bash", "-c", "sleep 1; exit 4"})
		o := e.ensure(j)
		e.srv.RestartExecd(o.References[0].ID, false)
		out, err := e.do(execution.OpObserve, j, o.References, "")
		if err != nil || out.Result.Class != journal.ResultUnknown || out.Result.Reason != opensandbox.ReasonCommandStateLost {
			t.Fatalf("while running: %+v %v", out.Result, err)
		}
		got := obsOf(t, e.until(j, o.References, terminal))
		if got.State != execution.StateFailed || got.ExitCode == nil || *got.ExitCode != 4 {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("task killed: ResultUnknown", func(t *testing.T) {
		e := newEnv(t)
		j := e.job([]string{"sleep", "60"})
		o := e.ensure(j)
		e.srv.RestartExecd(o.References[0].ID, true)
		// Polled, not a fixed sleep: the killed processes' end takes longer
		// on a loaded machine (e.until fails after its deadline).
		e.until(j, o.References, func(out journal.Outcome) bool { return out.Result.Class == journal.ResultUnknown })
		// A Cancel still stops it (the sandbox is deleted).
		c, err := e.do(execution.OpCancel, j, o.References, execution.StopCancelled)
		if err != nil || !obsOf(t, c).State.Stopped() && obsOf(t, c).State != execution.StateStopping {
			t.Fatalf("cancel: %+v %v", c.Result, err)
		}
	})
}

// Unknown sandbox states are ResultUnknown, never a guess.
func TestUnknownSandboxState(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "60"})
	o := e.ensure(j)
	e.srv.SetSandboxState(o.References[0].ID, "Unknown")
	out, err := e.do(execution.OpObserve, j, o.References, "")
	if err != nil || out.Result.Class != journal.ResultUnknown || out.Result.Reason != opensandbox.ReasonUnknownSandboxState {
		t.Fatalf("%+v %v", out.Result, err)
	}
}

// A task without command can not run in a sandbox.
func TestCommandRequired(t *testing.T) {
	e := newEnv(t)
	j := e.job(nil, func(j *executionv1alpha1.Job) { j.Spec.Task.Args = []string{"x"} })
	out, err := e.run(execution.OpEnsure, e.ensureRec(j))
	if err != nil || out.Result.Reason != opensandbox.ReasonCommandRequired || e.sandboxes(j) != 0 {
		t.Fatalf("%+v %v", out.Result, err)
	}
}

// taskRuns counts how many times j's task started: the marker directory
// exists once per Job, so a second start would have been refused by the
// wrapper; the stderr line of a refused one is counted too.
func taskRuns(t *testing.T, e *env, j *executionv1alpha1.Job) int {
	t.Helper()
	m := opensandbox.Marker{Dir: e.srv.FilesRoot()}
	if readFile(t, m.ExitPath(string(j.UID))) == "" {
		return 0
	}
	return 1
}

func scanCanary(t *testing.T, e *env, outs ...journal.Outcome) {
	t.Helper()
	for _, out := range outs {
		if s := fmt.Sprintf("%+v %+v", out.Result, out.Payload); strings.Contains(s, canary) {
			t.Fatalf("the canary leaked into an outcome: %s", s)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func bodiesContaining(srv *ostest.Server, s string) int {
	n := 0
	for _, b := range srv.Bodies() {
		if strings.Contains(string(b), s) {
			n++
		}
	}
	return n
}

// A Job name longer than a metadata value may be (63) still reaches the
// sandbox: in its env, not in its metadata (which the server would refuse).
func TestLongJobNameGoesToEnvOnly(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 100)
	j := e.job([]string{"true"}, func(j *executionv1alpha1.Job) { j.Name = long })
	o := e.ensure(j)
	sb, _ := e.srv.Sandbox(o.References[0].ID)
	if _, ok := sb.Metadata[opensandbox.LabelJobName]; ok {
		t.Fatalf("metadata %v carries a name longer than a label value", sb.Metadata)
	}
	if sb.Env[opensandbox.EnvJobName] != long || sb.Env[opensandbox.EnvJobNamespace] != "team" {
		t.Fatalf("env %v", sb.Env)
	}
	if got := obsOf(t, e.until(j, nil, terminal)); got.State != execution.StateSucceeded {
		t.Fatalf("%+v", got)
	}
}

// A spurious 404 for a sandbox that exists never reads as "gone" (which
// would end the Job or release its finalizer): the list on the UID
// confirms it first.
func TestSpurious404IsConfirmed(t *testing.T) {
	e := newEnv(t)
	j := e.job([]string{"sleep", "30"})
	o := e.ensure(j)
	e.srv.Inject(ostest.Fault{Method: "GET", Path: "/v1/sandboxes/" + o.References[0].ID, Status: 404, Times: 3})
	for _, op := range []string{execution.OpObserve, execution.OpDelete} {
		if op == execution.OpDelete {
			if _, err := e.do(execution.OpCancel, j, o.References, execution.StopCancelled); err != nil {
				t.Fatal(err)
			}
			e.srv.Inject(ostest.Fault{Method: "GET", Path: "/v1/sandboxes/" + o.References[0].ID, Status: 404})
		}
		out, err := e.do(op, j, o.References, "")
		if err != nil {
			continue // transient is fine; a false NotFound is not
		}
		if got, ok := out.Payload.(execution.Observation); ok && got.State == execution.StateNotFound && op == execution.OpObserve {
			t.Fatalf("%s: a 404 made a running sandbox NotFound: %+v", op, got)
		}
	}
}

// TestExecdOnlyOnTheEndpointsHost: a sandbox whose execd endpoint the
// lifecycle API puts on another host than the parameters' endpoint gets no
// command (the task's environment would go there) unless the parameters
// list that host in execdHosts.
func TestExecdOnlyOnTheEndpointsHost(t *testing.T) {
	e := newEnv(t, func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
		// The same server by another name: its execd answers come back on 127.0.0.1.
		p.Spec.Endpoint = strings.Replace(p.Spec.Endpoint, "127.0.0.1", "localhost", 1)
	})
	j := e.job([]string{"true"})
	out, err := e.run(execution.OpEnsure, e.ensureRec(j))
	for err == nil && out.Result.Class == journal.Succeeded {
		// Ensure may answer before execd is asked (the sandbox provisions):
		// ask again until the command would be launched.
		out, err = e.run(execution.OpEnsure, e.ensureRec(j))
	}
	if out.Result.Reason != opensandbox.ReasonExecdEndpointNotAllowed {
		t.Fatalf("%+v %v", out.Result, err)
	}
	for _, r := range e.srv.Requests() {
		if strings.Contains(r.Path, "/command") {
			t.Fatalf("a command reached execd: %s", r.Path)
		}
	}
	// Allowed explicitly, it runs.
	e2 := newEnv(t, func(p *executionv1alpha1.OpenSandboxExecutionParameters) {
		p.Spec.Endpoint = strings.Replace(p.Spec.Endpoint, "127.0.0.1", "localhost", 1)
		p.Spec.ExecdHosts = []string{"127.0.0.1"}
	})
	j2 := e2.job([]string{"true"})
	if out, err := e2.run(execution.OpEnsure, e2.ensureRec(j2)); err != nil || out.Result.Class != journal.Succeeded {
		t.Fatalf("with execdHosts: %+v %v", out.Result, err)
	}
}
