package execution_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	contract "git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/execution"
)

// This file covers the projector side of the OpenSandbox adapter
// (docs/execution/jobclass-api.md C10 and C11, and C8 for an OpenSandbox
// class): JobClass Ready from an injected backend probe (a fake here; the
// real one lives in executors/opensandbox), and the admission rules of
// OpenSandboxExecutionParameters (allowSecretEnv, allowImageAuth, a
// required command), all before any intent is journaled.

const osParamsKind = "OpenSandboxExecutionParameters"

// probeVerdict is what fakeProbe answers for one parameters object.
type probeVerdict struct {
	ready           bool
	reason, message string
}

// fakeProbe is an OpenSandbox adapter's Probe whose verdict the test sets per parameters
// name (default: ready); it records what it was given.
type fakeProbe struct {
	mu       sync.Mutex
	verdicts map[string]probeVerdict
	// calls are "<Go type> <name> <uid>" of every object it was given.
	calls []string
}

func newFakeProbe() *fakeProbe { return &fakeProbe{verdicts: map[string]probeVerdict{}} }

func (p *fakeProbe) set(name string, ready bool, reason, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.verdicts[name] = probeVerdict{ready, reason, message}
}

func (p *fakeProbe) probe(_ context.Context, params client.Object) (bool, string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("%T %s %s", params, params.GetName(), params.GetUID()))
	v, ok := p.verdicts[params.GetName()]
	if !ok {
		return true, "", ""
	}
	return v.ready, v.reason, v.message
}

func (p *fakeProbe) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

func (p *fakeProbe) callList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

func sandboxParams(name string) *executionv1alpha1.OpenSandboxExecutionParameters {
	return &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{
		Endpoint:        "https://opensandbox.example.internal",
		APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: "ayatori-system", Name: "opensandbox-api", Key: "api-key"}}}
}

// waitEvent waits for an Event of type typ and reason about the object
// named name.
func waitEvent(t *testing.T, c client.Client, name, typ, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("a %s Event %s about %s", typ, reason, name), func() (bool, string) {
		var list eventsv1.EventList
		if err := c.List(context.Background(), &list); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Reason == reason && ev.Type == typ {
				return true, ""
			}
			seen = append(seen, ev.Regarding.Name+":"+ev.Type+"/"+ev.Reason)
		}
		return false, fmt.Sprintf("events %v", seen)
	})
}

// TestJobClassOpenSandboxReady is C10: an OpenSandbox class is Ready as
// its backend probe says (API key Secret missing, key rotated to one the
// backend refuses and back, backend down and recovering), re-probed every
// ProbeInterval without a Secret watch, written only on a change.
func TestJobClassOpenSandboxReady(t *testing.T) {
	const interval = 200 * time.Millisecond
	// Within a number of intervals, far below any resync (10 h): only the
	// periodic probe can see the change. Not a few intervals: on a loaded
	// machine a reconcile and its status write may take seconds.
	const soon = 10 * time.Second
	probe := newFakeProbe()
	e := startClassEnvWith(t, func(r *execution.JobClassReconciler) {
		r.Adapters = testAdapters(probe.probe)
		r.ProbeInterval = interval
	})
	kube, sandbox := executionv1alpha1.ControllerKubernetes, executionv1alpha1.ControllerOpenSandbox
	ready, accepted := executionv1alpha1.JobClassConditionReady, executionv1alpha1.JobClassConditionAccepted

	// A Kubernetes class (no probe for its kind) and an OpenSandbox class
	// whose parameters are missing: neither is ever probed.
	e.newK8sParams(t, "kube", "")
	e.newClass(t, "kube", kube, "KubernetesExecutionParameters", "kube", nil)
	e.newClass(t, "c10-missing", sandbox, osParamsKind, "c10-missing", nil)

	probe.set("c10", false, executionv1alpha1.ReasonAPIKeySecretNotFound, "Secret ayatori-system/opensandbox-api (apiKeySecretRef of OpenSandboxExecutionParameters c10) does not exist")
	p := sandboxParams("c10")
	if err := e.c.Create(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.newClass(t, "c10", sandbox, osParamsKind, "c10", nil)

	e.waitCondition(t, "c10", accepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
	c := e.waitCondition(t, "c10", ready, metav1.ConditionFalse, executionv1alpha1.ReasonAPIKeySecretNotFound)
	if msg := meta.FindStatusCondition(c.Status.Conditions, ready).Message; !strings.Contains(msg, "opensandbox-api") {
		t.Fatalf("Ready message %q is not the probe's", msg)
	}
	waitEvent(t, e.c, "c10", corev1.EventTypeWarning, executionv1alpha1.ReasonAPIKeySecretNotFound)
	e.waitCondition(t, "kube", ready, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
	e.waitCondition(t, "c10-missing", accepted, metav1.ConditionFalse, executionv1alpha1.ReasonParametersNotFound)

	// The Secret appears: no watch tells the class, the next probe does.
	probe.set("c10", true, "", "")
	c = e.waitConditionWithin(t, soon, "c10", ready, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
	if !meta.IsStatusConditionTrue(c.Status.Conditions, accepted) {
		t.Fatalf("Accepted %+v", c.Status.Conditions)
	}

	// Steady and ready: probed every interval, the class is not rewritten.
	rv, before := c.ResourceVersion, probe.callCount()
	time.Sleep(20 * interval)
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(c), c); err != nil || c.ResourceVersion != rv {
		t.Fatalf("class rewritten without a change: rv %s → %s (%v)", rv, c.ResourceVersion, err)
	}
	if n := probe.callCount() - before; n < 3 {
		t.Fatalf("%d probes in %s with a %s interval", n, 20*interval, interval)
	}

	// The key is rotated to one the backend refuses, then to a good one.
	probe.set("c10", false, executionv1alpha1.ReasonAPIKeyRejected, "the OpenSandbox API refused the API key (HTTP 401)")
	e.waitConditionWithin(t, soon, "c10", ready, metav1.ConditionFalse, executionv1alpha1.ReasonAPIKeyRejected)
	waitEvent(t, e.c, "c10", corev1.EventTypeWarning, executionv1alpha1.ReasonAPIKeyRejected)
	probe.set("c10", true, "", "")
	e.waitConditionWithin(t, soon, "c10", ready, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)

	// The backend goes down, and recovers.
	probe.set("c10", false, executionv1alpha1.ReasonBackendUnavailable, "the OpenSandbox API did not answer within 5s")
	e.waitConditionWithin(t, soon, "c10", ready, metav1.ConditionFalse, executionv1alpha1.ReasonBackendUnavailable)
	probe.set("c10", true, "", "")
	e.waitConditionWithin(t, soon, "c10", ready, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
	waitEvent(t, e.c, "c10", corev1.EventTypeNormal, executionv1alpha1.ReasonBackendReachable)

	// The probe was only ever given the class's parameters object.
	want := fmt.Sprintf("*v1alpha1.OpenSandboxExecutionParameters c10 %s", p.UID)
	calls := probe.callList()
	if len(calls) == 0 {
		t.Fatal("never probed")
	}
	for _, got := range calls {
		if got != want {
			t.Fatalf("probe given %q, want only %q", got, want)
		}
	}
}

// osEnv is a real apiserver and JetStream journal with the JobClass and
// Job projectors of both controllers in one manager, and no executor: the
// test reads the intents the Job projector journals and answers them
// itself where it needs an execution.
type osEnv struct {
	c     client.Client
	ctx   context.Context
	store *journal.Store
	probe *fakeProbe
}

func startOpenSandboxEnv(t *testing.T) *osEnv {
	t.Helper()
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	store := integration.OpenJournal(t, integration.StartNATS(t), "test-manager")
	ctx := context.Background()
	mgr := testManager(t, cp)
	e := &osEnv{c: cp.Client, ctx: ctx, store: store, probe: newFakeProbe()}
	rec := mgr.GetEventRecorder("ayatori-manager")
	adapters := testAdapters(e.probe.probe)
	cr := &execution.JobClassReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec,
		Adapters:      adapters,
		ProbeInterval: 200 * time.Millisecond,
	}
	if err := cr.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	router := execution.NewOutcomeRouter(store)
	if err := mgr.Add(router); err != nil {
		t.Fatal(err)
	}
	policy := execution.DefaultJobPolicy
	// A waiting Job must be woken by the watches (class, parameters), not
	// by the periodic re-check.
	policy.ResolveRecheck = time.Hour
	jr := &execution.JobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Recorder: rec,
		Policy: policy, Adapters: adapters}
	if err := jr.SetupWithManager(mgr, router.For(execution.KindJob)); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return e
}

func (e *osEnv) create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := e.c.Create(e.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// sandboxClass creates OpenSandbox parameters and a class, both named
// name (mut changes the parameters first).
func (e *osEnv) sandboxClass(t *testing.T, name string, mut func(*executionv1alpha1.OpenSandboxExecutionParameters)) *executionv1alpha1.OpenSandboxExecutionParameters {
	t.Helper()
	p := sandboxParams(name)
	if mut != nil {
		mut(p)
	}
	e.create(t, p, &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: executionv1alpha1.JobClassSpec{
		ControllerName: executionv1alpha1.ControllerOpenSandbox,
		ParametersRef:  executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: osParamsKind, Name: name}}})
	return p
}

func (e *osEnv) updateParams(t *testing.T, name string, mut func(*executionv1alpha1.OpenSandboxExecutionParameters)) {
	t.Helper()
	for range 10 {
		p := &executionv1alpha1.OpenSandboxExecutionParameters{}
		if err := e.c.Get(e.ctx, types.NamespacedName{Name: name}, p); err != nil {
			t.Fatal(err)
		}
		mut(p)
		err := e.c.Update(e.ctx, p)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("update kept conflicting")
}

func (e *osEnv) updateJob(t *testing.T, j *executionv1alpha1.Job, mut func(*executionv1alpha1.Job)) {
	t.Helper()
	for range 10 {
		cur := &executionv1alpha1.Job{}
		if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(j), cur); err != nil {
			t.Fatal(err)
		}
		mut(cur)
		err := e.c.Update(e.ctx, cur)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("update kept conflicting")
}

func (e *osEnv) namespace(t *testing.T, name string) string {
	t.Helper()
	e.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// osJob is a Job of class with a command (what the OpenSandbox adapter needs).
func osJob(ns, name, class string) *executionv1alpha1.Job {
	return &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: executionv1alpha1.JobSpec{JobClassName: class, Task: executionv1alpha1.TaskSpec{Image: "ayatori.test/succeed", Command: []string{"/bin/task"}}}}
}

func (e *osEnv) waitClass(t *testing.T, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("JobClass %s Ready=%s/%s", name, status, reason), func() (bool, string) {
		c := &executionv1alpha1.JobClass{}
		if err := e.c.Get(e.ctx, types.NamespacedName{Name: name}, c); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, executionv1alpha1.JobClassConditionReady)
		return cond != nil && cond.Status == status && cond.Reason == reason, fmt.Sprintf("%+v", c.Status.Conditions)
	})
}

// waitJob waits until every "Type=Status/Reason" in want holds and
// returns the Job.
func (e *osEnv) waitJob(t *testing.T, j *executionv1alpha1.Job, want ...string) *executionv1alpha1.Job {
	t.Helper()
	cur := &executionv1alpha1.Job{}
	eventually(t, fmt.Sprintf("Job %s/%s %v", j.Namespace, j.Name, want), func() (bool, string) {
		if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(j), cur); err != nil {
			return false, err.Error()
		}
		var got []string
		ok := true
		for _, w := range want {
			typ, _, _ := strings.Cut(w, "=")
			g := typ + "=" + condition(cur, typ)
			got = append(got, g)
			ok = ok && g == w
		}
		return ok, strings.Join(got, " ")
	})
	return cur
}

func (e *osEnv) message(t *testing.T, j *executionv1alpha1.Job, typ string) string {
	t.Helper()
	cur := &executionv1alpha1.Job{}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(j), cur); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, typ); c != nil {
		return c.Message
	}
	return ""
}

func (e *osEnv) records(t *testing.T, j *executionv1alpha1.Job) []journal.Record {
	t.Helper()
	cur := &executionv1alpha1.Job{}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(j), cur); err == nil {
		j = cur
	}
	if j.UID == "" {
		t.Fatalf("Job %s/%s has no UID", j.Namespace, j.Name)
	}
	recs, err := e.store.Read(e.ctx, string(j.UID))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// noIntents asserts the Job's journal holds no intent.
func (e *osEnv) noIntents(t *testing.T, j *executionv1alpha1.Job) {
	t.Helper()
	if ops := intents(e.records(t, j)); len(ops) != 0 {
		t.Fatalf("%s/%s: intents %v journaled, want none", j.Namespace, j.Name, ops)
	}
}

// nextIntent stands in for the executor: it waits for an unanswered intent
// of op, answering any other unanswered intent with other (nil: leave it),
// and returns it.
func (e *osEnv) nextIntent(t *testing.T, j *executionv1alpha1.Job, op string, other *contract.Observation) journal.Record {
	t.Helper()
	var found journal.Record
	eventually(t, fmt.Sprintf("a %s intent of %s/%s", op, j.Namespace, j.Name), func() (bool, string) {
		recs := e.records(t, j)
		answered := map[string]bool{}
		for _, r := range recs {
			if r.Type == journal.TypeOutcome {
				answered[r.CausationID] = true
			}
		}
		for _, r := range recs {
			if r.Type != journal.TypeIntent || answered[r.ID] {
				continue
			}
			if r.Operation == op {
				found = r
				return true, ""
			}
			if other != nil {
				e.answer(t, r, *other)
			}
		}
		return false, fmt.Sprint(intents(recs))
	})
	return found
}

// answer journals the executor's Succeeded outcome of intent with obs.
func (e *osEnv) answer(t *testing.T, intent journal.Record, obs contract.Observation) {
	t.Helper()
	out, err := journal.NewOutcome(intent, journal.Result{Class: journal.Succeeded}, obs)
	if err != nil {
		t.Fatal(err)
	}
	out.Actor = "test-manager/executor"
	if _, err := e.store.Append(e.ctx, &out); err != nil {
		t.Fatal(err)
	}
}

func countIntents(recs []journal.Record, op string) int {
	n := 0
	for _, o := range intents(recs) {
		if o == op {
			n++
		}
	}
	return n
}

// TestOpenSandboxJobs runs the Job projector against OpenSandbox classes:
// C8 (a class that is not Ready blocks new executions only) and C11 (what
// the parameters do not allow is refused before anything is journaled).
func TestOpenSandboxJobs(t *testing.T) {
	e := startOpenSandboxEnv(t)
	accepted, scheduled, succeededC := executionv1alpha1.JobConditionAccepted, executionv1alpha1.JobConditionScheduled, executionv1alpha1.JobConditionSucceeded

	t.Run("C8_NotReadyBlocksOnlyNewExecutions", func(t *testing.T) {
		ns := e.namespace(t, "c8")
		e.probe.set("c8", false, executionv1alpha1.ReasonBackendUnavailable, "the OpenSandbox API did not answer within 5s")
		p := e.sandboxClass(t, "c8", nil)
		e.waitClass(t, "c8", metav1.ConditionFalse, executionv1alpha1.ReasonBackendUnavailable)

		j := osJob(ns, "waits", "c8")
		e.create(t, j)
		e.waitJob(t, j, accepted+"=True/"+executionv1alpha1.ReasonValid, scheduled+"=False/"+executionv1alpha1.ReasonClassNotReady)
		if msg := e.message(t, j, scheduled); !strings.Contains(msg, executionv1alpha1.ReasonBackendUnavailable) {
			t.Fatalf("Scheduled message %q does not say why the class is not ready", msg)
		}
		time.Sleep(time.Second)
		e.noIntents(t, j)

		// The backend recovers: the class's status change wakes the Job.
		e.probe.set("c8", true, "", "")
		ensure := e.nextIntent(t, j, contract.OpEnsure, nil)
		var in contract.EnsureIntent
		if err := json.Unmarshal(ensure.Payload, &in); err != nil {
			t.Fatal(err)
		}
		if in.Adapter != contract.AdapterOpenSandbox || in.ParametersKind != osParamsKind || in.ParametersName != "c8" || in.ParametersUID != string(p.UID) {
			t.Fatalf("Ensure intent %+v", in)
		}

		// The backend goes away again after the execution was created:
		// Observe, Cancel and Delete go on.
		e.probe.set("c8", false, executionv1alpha1.ReasonBackendUnavailable, "the OpenSandbox API did not answer within 5s")
		e.waitClass(t, "c8", metav1.ConditionFalse, executionv1alpha1.ReasonBackendUnavailable)
		now := time.Now()
		refs := []contract.Reference{{Type: "sandbox", ID: "sbx-c8"}}
		running := contract.Observation{State: contract.StateRunning, Adapter: contract.AdapterOpenSandbox, References: refs, StartTime: &now}
		created := running
		created.Created = true
		e.answer(t, ensure, created)
		e.waitJob(t, j, scheduled+"=True/"+executionv1alpha1.ReasonBackendCreated, succeededC+"=Unknown/"+executionv1alpha1.ReasonRunning)
		observe := e.nextIntent(t, j, contract.OpObserve, nil)
		e.answer(t, observe, running)

		e.updateJob(t, j, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
		cancel := e.nextIntent(t, j, contract.OpCancel, &running)
		e.answer(t, cancel, contract.Observation{State: contract.StateCancelled, Terminal: true, Adapter: contract.AdapterOpenSandbox, References: refs})
		e.waitJob(t, j, succeededC+"=False/"+executionv1alpha1.ReasonCancelled)

		if err := e.c.Delete(e.ctx, j); err != nil {
			t.Fatal(err)
		}
		del := e.nextIntent(t, j, contract.OpDelete, nil)
		e.answer(t, del, contract.Observation{State: contract.StateNotFound, Adapter: contract.AdapterOpenSandbox})
		eventually(t, "the Job to be gone", func() (bool, string) {
			err := e.c.Get(e.ctx, client.ObjectKeyFromObject(j), &executionv1alpha1.Job{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		recs, err := e.store.Read(e.ctx, string(ensure.Object.UID))
		if err != nil {
			t.Fatal(err)
		}
		if n := countIntents(recs, contract.OpEnsure); n != 1 {
			t.Fatalf("%d Ensure intents (%v), want 1", n, intents(recs))
		}
	})

	t.Run("C11_SecretEnvImageAuthCommand", func(t *testing.T) {
		ns := e.namespace(t, "c11")
		const canary = "CANARY-opensandbox-env-51e9"
		e.create(t,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"}, StringData: map[string]string{"token": canary}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"level": "debug"}})
		e.sandboxClass(t, "c11", nil)
		e.waitClass(t, "c11", metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)

		secretEnv := osJob(ns, "secret-env", "c11")
		secretEnv.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "PLAIN", Value: ptr.To("x")}, {Name: "TOKEN", ValueFrom: &executionv1alpha1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "token"}}}}
		optionalSecret := osJob(ns, "optional-secret", "c11")
		optionalSecret.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "MAYBE", ValueFrom: &executionv1alpha1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k", Optional: ptr.To(true)}}}}
		imageAuth := osJob(ns, "image-auth", "c11")
		imageAuth.Spec.Task.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		noCommand := osJob(ns, "no-command", "c11")
		noCommand.Spec.Task.Command, noCommand.Spec.Task.Args = nil, []string{"--flag"}
		configEnv := osJob(ns, "configmap-env", "c11")
		configEnv.Spec.Task.Env = []executionv1alpha1.EnvVar{{Name: "LEVEL", ValueFrom: &executionv1alpha1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "level"}}}}
		e.create(t, secretEnv, optionalSecret, imageAuth, noCommand, configEnv)

		refused := func(reason string) []string {
			return []string{accepted + "=False/" + reason, scheduled + "=False/" + executionv1alpha1.ReasonNotScheduled, succeededC + "=Unknown/" + executionv1alpha1.ReasonPending}
		}
		e.waitJob(t, secretEnv, refused(executionv1alpha1.ReasonSecretEnvNotAllowed)...)
		e.waitJob(t, optionalSecret, refused(executionv1alpha1.ReasonSecretEnvNotAllowed)...)
		e.waitJob(t, imageAuth, refused(executionv1alpha1.ReasonImageAuthNotAllowed)...)
		e.waitJob(t, noCommand, refused(executionv1alpha1.ReasonCommandRequired)...)
		// A ConfigMap reference never needs the parameters' consent.
		e.waitJob(t, configEnv, accepted+"=True/"+executionv1alpha1.ReasonValid)
		e.nextIntent(t, configEnv, contract.OpEnsure, nil)

		for _, c := range []struct {
			j    *executionv1alpha1.Job
			want []string
		}{
			{secretEnv, []string{"TOKEN", "Secret token", "OpenSandboxExecutionParameters c11", "allowSecretEnv"}},
			{optionalSecret, []string{"MAYBE", "OpenSandboxExecutionParameters c11", "allowSecretEnv"}},
			{imageAuth, []string{"imagePullSecrets", "registry", "OpenSandboxExecutionParameters c11", "allowImageAuth"}},
			{noCommand, []string{"task.command", "entrypoint"}},
		} {
			msg := e.message(t, c.j, accepted)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: Accepted message %q does not name %q", c.j.Name, msg, w)
				}
			}
			if strings.Contains(msg, canary) || strings.Contains(msg, "PLAIN") {
				t.Errorf("%s: Accepted message %q names a value or an unrelated variable", c.j.Name, msg)
			}
		}
		waitEvent(t, e.c, "secret-env", corev1.EventTypeWarning, executionv1alpha1.ReasonSecretEnvNotAllowed)
		time.Sleep(time.Second)
		for _, j := range []*executionv1alpha1.Job{secretEnv, optionalSecret, imageAuth, noCommand} {
			e.noIntents(t, j)
		}

		// The administrator allows Secret env: the parameters' change wakes
		// the Jobs that wait (the re-check interval is an hour here).
		e.updateParams(t, "c11", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.AllowSecretEnv = true })
		e.waitJob(t, secretEnv, accepted+"=True/"+executionv1alpha1.ReasonValid)
		e.waitJob(t, optionalSecret, accepted+"=True/"+executionv1alpha1.ReasonValid)
		e.nextIntent(t, secretEnv, contract.OpEnsure, nil)
		e.waitJob(t, imageAuth, accepted+"=False/"+executionv1alpha1.ReasonImageAuthNotAllowed)
		e.noIntents(t, imageAuth)

		e.updateParams(t, "c11", func(p *executionv1alpha1.OpenSandboxExecutionParameters) { p.Spec.AllowImageAuth = true })
		e.waitJob(t, imageAuth, accepted+"=True/"+executionv1alpha1.ReasonValid)
		e.nextIntent(t, imageAuth, contract.OpEnsure, nil)

		// No parameter admits a task without a command; it is not terminal.
		e.waitJob(t, noCommand, refused(executionv1alpha1.ReasonCommandRequired)...)
		e.noIntents(t, noCommand)
	})
}
