package execution_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	contract "git.ddupan.top/panxiao81/ayatori/contracts/execution"
	kexec "git.ddupan.top/panxiao81/ayatori/executors/kubernetes"
	osexec "git.ddupan.top/panxiao81/ayatori/executors/opensandbox"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/projectors/execution"
)

// testAdapters are the manager's two adapters as the projectors see them,
// with probe as the OpenSandbox probe (nil: none) and executors nobody
// builds (these tests run no executor).
func testAdapters(probe func(context.Context, client.Object) (bool, string, string)) contract.Adapters {
	noExecutor := func() (*kexec.Executor, error) { return nil, fmt.Errorf("no executor in this test") }
	sandbox := (&osexec.Executor{}).Adapter()
	sandbox.Probe = probe
	return contract.Adapters{kexec.Adapter(noExecutor), sandbox}
}

// classEnv is a real apiserver plus a manager running the JobClass
// controller (metrics and probes off).
type classEnv struct {
	c   client.Client
	ctx context.Context
}

func startClassEnv(t *testing.T) *classEnv {
	t.Helper()
	return startClassEnvWith(t, nil)
}

// testManager is a controller manager on cp for the envtest tests of this
// package (no metrics or probe listener; the same controller names may be
// registered by several tests of the binary), logging to t.
func testManager(t *testing.T, cp *integration.ControlPlane) ctrl.Manager {
	t.Helper()
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)))
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:                 cp.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several tests of this binary start a manager with the same
		// controllers.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// startClassEnvWith is startClassEnv with configure applied to the
// reconciler before it is set up (nil: none).
func startClassEnvWith(t *testing.T, configure func(*execution.JobClassReconciler)) *classEnv {
	t.Helper()
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	mgr := testManager(t, cp)
	r := &execution.JobClassReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("ayatori-manager"),
		Adapters: testAdapters(nil),
	}
	if configure != nil {
		configure(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	e := &classEnv{c: cp.Client, ctx: context.Background()}
	if err := e.c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// testWriter sends controller logs to t.Log only when the test fails
// verbosely enough to matter (kept quiet otherwise).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// eventually polls cond every 50 ms for up to 15 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, 15*time.Second, what, cond)
}

// eventuallyWithin polls cond every 50 ms for up to timeout.
func eventuallyWithin(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last state: %s", what, last)
}

func (e *classEnv) newClass(t *testing.T, name, controller, kind, params string, mut func(*executionv1alpha1.JobClass)) *executionv1alpha1.JobClass {
	t.Helper()
	c := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: executionv1alpha1.JobClassSpec{
		ControllerName: controller,
		ParametersRef:  executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: kind, Name: params},
	}}
	if mut != nil {
		mut(c)
	}
	if err := e.c.Create(e.ctx, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *classEnv) newK8sParams(t *testing.T, name, runtimeClass string) *executionv1alpha1.KubernetesExecutionParameters {
	t.Helper()
	p := &executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: "ayatori-job", RuntimeClassName: runtimeClass}}
	if err := e.c.Create(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitCondition waits until the class's condition typ has status and
// reason for the class's current generation and returns the class.
func (e *classEnv) waitCondition(t *testing.T, name, typ string, status metav1.ConditionStatus, reason string) *executionv1alpha1.JobClass {
	t.Helper()
	return e.waitConditionWithin(t, 15*time.Second, name, typ, status, reason)
}

// waitConditionWithin is waitCondition with its own timeout.
func (e *classEnv) waitConditionWithin(t *testing.T, timeout time.Duration, name, typ string, status metav1.ConditionStatus, reason string) *executionv1alpha1.JobClass {
	t.Helper()
	c := &executionv1alpha1.JobClass{}
	eventuallyWithin(t, timeout, fmt.Sprintf("JobClass %s %s=%s/%s", name, typ, status, reason), func() (bool, string) {
		if err := e.c.Get(e.ctx, types.NamespacedName{Name: name}, c); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil {
			return false, fmt.Sprintf("no %s condition: %+v", typ, c.Status)
		}
		ok := cond.Status == status && cond.Reason == reason && cond.ObservedGeneration == c.Generation && c.Status.ObservedGeneration == c.Generation
		return ok, fmt.Sprintf("%s=%s/%s: %s (gen %d/%d)", typ, cond.Status, cond.Reason, cond.Message, cond.ObservedGeneration, c.Generation)
	})
	return c
}

func (e *classEnv) gone(t *testing.T, obj client.Object) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s to be deleted", obj, obj.GetName()), func() (bool, string) {
		err := e.c.Get(e.ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("err %v, finalizers %v", err, obj.GetFinalizers())
	})
}

func (e *classEnv) hasFinalizer(t *testing.T, obj client.Object, finalizer string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s to carry %s", obj, obj.GetName(), finalizer), func() (bool, string) {
		if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		return controllerutil.ContainsFinalizer(obj, finalizer), fmt.Sprint(obj.GetFinalizers())
	})
}

// stays asserts obj still exists (with a deletionTimestamp) after a
// short while: a blocked deletion.
func (e *classEnv) stays(t *testing.T, obj client.Object) {
	t.Helper()
	time.Sleep(500 * time.Millisecond)
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("%T %s: %v, want it kept by its finalizer", obj, obj.GetName(), err)
	}
	if obj.GetDeletionTimestamp() == nil {
		t.Fatalf("%T %s has no deletionTimestamp", obj, obj.GetName())
	}
}

func TestJobClassController(t *testing.T) {
	e := startClassEnv(t)
	kube, sandbox := executionv1alpha1.ControllerKubernetes, executionv1alpha1.ControllerOpenSandbox
	const kParams, sParams = "KubernetesExecutionParameters", "OpenSandboxExecutionParameters"
	e.newK8sParams(t, "shared", "")

	t.Run("accepted and ready", func(t *testing.T) {
		e.newClass(t, "ok", kube, kParams, "shared", nil)
		e.waitCondition(t, "ok", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
		c := e.waitCondition(t, "ok", executionv1alpha1.JobClassConditionReady, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
		if !controllerutil.ContainsFinalizer(c, executionv1alpha1.JobClassFinalizer) {
			t.Fatalf("finalizers %v, want %s", c.Finalizers, executionv1alpha1.JobClassFinalizer)
		}
		e.hasFinalizer(t, &executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, executionv1alpha1.ParametersFinalizer)
		// A steady class is not rewritten: the resourceVersion stays.
		rv := c.ResourceVersion
		time.Sleep(500 * time.Millisecond)
		if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(c), c); err != nil || c.ResourceVersion != rv {
			t.Fatalf("class rewritten without a change: rv %s → %s (%v)", rv, c.ResourceVersion, err)
		}
	})

	t.Run("UnsupportedController", func(t *testing.T) {
		c := e.newClass(t, "unsupported", "example.com/other", kParams, "shared", nil)
		e.waitCondition(t, c.Name, executionv1alpha1.JobClassConditionAccepted, metav1.ConditionFalse, executionv1alpha1.ReasonUnsupportedController)
		e.waitCondition(t, c.Name, executionv1alpha1.JobClassConditionReady, metav1.ConditionFalse, executionv1alpha1.ReasonJobClassNotAccepted)
		eventually(t, "a Warning Event UnsupportedController", func() (bool, string) {
			var list eventsv1.EventList
			if err := e.c.List(e.ctx, &list); err != nil {
				return false, err.Error()
			}
			for _, ev := range list.Items {
				if ev.Regarding.Name == c.Name && ev.Reason == executionv1alpha1.ReasonUnsupportedController && ev.Type == corev1.EventTypeWarning {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(list.Items))
		})
	})

	t.Run("InvalidParametersReference", func(t *testing.T) {
		for name, mut := range map[string]func(*executionv1alpha1.JobClass){
			"wrong-kind":  func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Kind = sParams },
			"wrong-group": func(c *executionv1alpha1.JobClass) { c.Spec.ParametersRef.Group = "example.com" },
			"configmap": func(c *executionv1alpha1.JobClass) {
				c.Spec.ParametersRef.Group, c.Spec.ParametersRef.Kind = "core.k8s.io", "ConfigMap"
			},
			"sandbox-k8s-p": func(c *executionv1alpha1.JobClass) { c.Spec.ControllerName = sandbox },
		} {
			e.newClass(t, name, kube, kParams, "shared", mut)
			e.waitCondition(t, name, executionv1alpha1.JobClassConditionAccepted, metav1.ConditionFalse, executionv1alpha1.ReasonInvalidParametersReference)
		}
	})

	t.Run("InvalidResourcePolicy", func(t *testing.T) {
		c := e.newClass(t, "bad-policy", kube, kParams, "shared", func(c *executionv1alpha1.JobClass) {
			c.Spec.Resources.Minimum.Limits.CPU = ptr.To(resource.MustParse("4"))
			c.Spec.Resources.Maximum.Limits.CPU = ptr.To(resource.MustParse("2"))
		})
		got := e.waitCondition(t, c.Name, executionv1alpha1.JobClassConditionAccepted, metav1.ConditionFalse, executionv1alpha1.ReasonInvalidResourcePolicy)
		if msg := meta.FindStatusCondition(got.Status.Conditions, executionv1alpha1.JobClassConditionAccepted).Message; !strings.Contains(msg, "minimum.limits.cpu 4 exceeds maximum.limits.cpu 2") {
			t.Fatalf("message %q", msg)
		}
		// Fixing the policy (a new generation) accepts the class.
		got.Spec.Resources.Minimum.Limits.CPU = ptr.To(resource.MustParse("1"))
		if err := e.c.Update(e.ctx, got); err != nil {
			t.Fatal(err)
		}
		e.waitCondition(t, c.Name, executionv1alpha1.JobClassConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
	})

	t.Run("parameters missing, then appearing, then recreated with a new UID", func(t *testing.T) {
		e.newClass(t, "late", sandbox, sParams, "late", nil)
		e.waitCondition(t, "late", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionFalse, executionv1alpha1.ReasonParametersNotFound)
		p := &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Spec: executionv1alpha1.OpenSandboxExecutionParametersSpec{
			Endpoint: "https://opensandbox.example.internal", APIKeySecretRef: executionv1alpha1.NamespacedKeyReference{Namespace: "ayatori-system", Name: "os", Key: "k"}}}
		if err := e.c.Create(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		c := e.waitCondition(t, "late", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
		if msg := meta.FindStatusCondition(c.Status.Conditions, executionv1alpha1.JobClassConditionAccepted).Message; !strings.Contains(msg, string(p.UID)) {
			t.Fatalf("Accepted message %q does not name the parameters UID %s", msg, p.UID)
		}
		e.waitCondition(t, "late", executionv1alpha1.JobClassConditionReady, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
		e.hasFinalizer(t, p, executionv1alpha1.ParametersFinalizer)

		// An administrator forces the parameters away (finalizer removed
		// by hand) and recreates them: the class follows the new object.
		oldUID := p.UID
		if err := e.c.Delete(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		e.stays(t, p)
		controllerutil.RemoveFinalizer(p, executionv1alpha1.ParametersFinalizer)
		if err := e.c.Update(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		e.gone(t, p)
		e.waitCondition(t, "late", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionFalse, executionv1alpha1.ReasonParametersNotFound)
		p = &executionv1alpha1.OpenSandboxExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Spec: p.Spec}
		if err := e.c.Create(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		if p.UID == oldUID {
			t.Fatal("recreated parameters kept their UID")
		}
		eventually(t, "Accepted naming the new parameters UID", func() (bool, string) {
			c := e.waitCondition(t, "late", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
			msg := meta.FindStatusCondition(c.Status.Conditions, executionv1alpha1.JobClassConditionAccepted).Message
			return strings.Contains(msg, string(p.UID)), msg
		})
		e.hasFinalizer(t, p, executionv1alpha1.ParametersFinalizer)
	})

	t.Run("RuntimeClass missing, then created", func(t *testing.T) {
		e.newK8sParams(t, "gvisor", "gvisor")
		e.newClass(t, "sandboxed", kube, kParams, "gvisor", nil)
		e.waitCondition(t, "sandboxed", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
		e.waitCondition(t, "sandboxed", executionv1alpha1.JobClassConditionReady, metav1.ConditionFalse, executionv1alpha1.ReasonRuntimeClassNotFound)
		if err := e.c.Create(e.ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}); err != nil {
			t.Fatal(err)
		}
		e.waitCondition(t, "sandboxed", executionv1alpha1.JobClassConditionReady, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
	})

	t.Run("class deletion waits for non-terminal Jobs", func(t *testing.T) {
		e.newClass(t, "busy", kube, kParams, "shared", nil)
		c := e.waitCondition(t, "busy", executionv1alpha1.JobClassConditionReady, metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable)
		// Simulate the Job projector's acceptance: status written directly.
		accept := func(name string, uid types.UID, succeeded metav1.ConditionStatus) *executionv1alpha1.Job {
			j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
				Spec: executionv1alpha1.JobSpec{JobClassName: "busy", Task: executionv1alpha1.TaskSpec{Image: "docker.io/library/alpine:3.22"}}}
			if err := e.c.Create(e.ctx, j); err != nil {
				t.Fatal(err)
			}
			j.Status.ResolvedJobClass = &executionv1alpha1.ResolvedJobClassReference{Name: "busy", UID: uid, ControllerName: kube,
				ParametersRef: executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: kParams, Name: "shared", UID: "p"}}
			meta.SetStatusCondition(&j.Status.Conditions, metav1.Condition{Type: executionv1alpha1.JobConditionSucceeded, Status: succeeded, Reason: executionv1alpha1.ReasonRunning})
			if err := e.c.Status().Update(e.ctx, j); err != nil {
				t.Fatal(err)
			}
			return j
		}
		running := accept("running", c.UID, metav1.ConditionUnknown)
		accept("finished", c.UID, metav1.ConditionFalse)
		accept("other-class", "another-uid", metav1.ConditionUnknown)
		if err := e.c.Delete(e.ctx, c); err != nil {
			t.Fatal(err)
		}
		got := e.waitCondition(t, "busy", executionv1alpha1.JobClassConditionReady, metav1.ConditionFalse, executionv1alpha1.ReasonJobClassDeleting)
		msg := meta.FindStatusCondition(got.Status.Conditions, executionv1alpha1.JobClassConditionReady).Message
		if !strings.Contains(msg, "1 non-terminal Job(s)") || !strings.Contains(msg, "team/running") {
			t.Fatalf("Ready message %q does not name the one blocking Job", msg)
		}
		e.stays(t, c)
		// The Job ends: the class goes.
		meta.SetStatusCondition(&running.Status.Conditions, metav1.Condition{Type: executionv1alpha1.JobConditionSucceeded, Status: metav1.ConditionTrue, Reason: executionv1alpha1.ReasonCompleted})
		if err := e.c.Status().Update(e.ctx, running); err != nil {
			t.Fatal(err)
		}
		e.gone(t, c)
	})

	t.Run("class deletion without Jobs", func(t *testing.T) {
		c := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "unsupported"}}
		if err := e.c.Delete(e.ctx, c); err != nil {
			t.Fatal(err)
		}
		e.gone(t, c)
	})

	t.Run("parameters deletion waits for the classes referencing them", func(t *testing.T) {
		p := e.newK8sParams(t, "guarded", "")
		c := e.newClass(t, "guarded", kube, kParams, "guarded", nil)
		e.hasFinalizer(t, p, executionv1alpha1.ParametersFinalizer)
		if err := e.c.Delete(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		e.stays(t, p)
		// The class keeps its view of the (still present) parameters.
		e.waitCondition(t, "guarded", executionv1alpha1.JobClassConditionAccepted, metav1.ConditionTrue, executionv1alpha1.ReasonAccepted)
		if err := e.c.Delete(e.ctx, c); err != nil {
			t.Fatal(err)
		}
		e.gone(t, c)
		e.gone(t, p)
	})
}
