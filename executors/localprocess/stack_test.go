package localprocess_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/executors/localprocess"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
	exprojector "git.ddupan.top/panxiao81/ayatori/projectors/execution"
)

// TestJobsThroughTheProjectors runs the domain as the manager wires it —
// the JobClass and Job projectors, the outcome router, the domain's
// dispatcher behind a durable consumer of a real JetStream journal, on a
// real API server — with this adapter as its only registration: a class
// becomes Ready, a Job that prints succeeds with exit code 0, one that
// exits 3 fails with ProcessFailed and exit code 3.
func TestJobsThroughTheProjectors(t *testing.T) {
	if testing.Short() {
		t.Skip("real API server and JetStream")
	}
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{Paths: []string{"testdata"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	store := integration.OpenJournal(t, integration.StartNATS(t), "test-manager")
	ctx := context.Background()
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}

	// The registration: one adapter.
	ex := &localprocess.Executor{Root: t.TempDir(), Management: mgr.GetAPIReader()}
	adapters := execution.Adapters{ex.Adapter()}

	rec := mgr.GetEventRecorder("ayatori-manager")
	classes := &exprojector.JobClassReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec, Adapters: adapters}
	if err := classes.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	router := exprojector.NewOutcomeRouter(store)
	if err := mgr.Add(router); err != nil {
		t.Fatal(err)
	}
	jobs := &exprojector.JobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Journal: store, Recorder: rec, Adapters: adapters}
	if err := jobs.SetupWithManager(mgr, router.For(exprojector.KindJob)); err != nil {
		t.Fatal(err)
	}
	dispatch, err := execution.NewDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := adapters.Register(dispatch, nil); err != nil {
		t.Fatal(err)
	}
	// The manager's live-object guard (it reads the cache first; the API
	// server alone here).
	dispatch.SetGuard(func(ctx context.Context, rec journal.Record) (string, error) {
		return execution.CheckLive(ctx, mgr.GetAPIReader(), rec)
	})
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- mgr.Start(mctx) }()
	go func() {
		done <- store.Consume(mctx, journal.ConsumerConfig{Durable: "test-executor", AckWait: 20 * time.Second,
			BackOff: []time.Duration{200 * time.Millisecond, time.Second}}, dispatch)
	}()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil && mctx.Err() == nil {
				t.Errorf("manager or consumer: %v", err)
			}
		}
	})

	c := cp.Client
	params := &unstructured.Unstructured{}
	params.SetGroupVersionKind(localprocess.ParametersGVK)
	params.SetName("local")
	must(t, c.Create(ctx, params))
	class := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: executionv1alpha1.JobClassSpec{
		ControllerName: localprocess.ControllerName,
		ParametersRef:  executionv1alpha1.ParametersReference{Group: localprocess.ParametersGroup, Kind: localprocess.ParametersKind, Name: "local"}}}
	must(t, c.Create(ctx, class))
	waitFor(t, 30*time.Second, func() (bool, string) {
		got := &executionv1alpha1.JobClass{}
		if err := c.Get(ctx, types.NamespacedName{Name: "local"}, got); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, executionv1alpha1.JobClassConditionReady), fmt.Sprintf("%+v", got.Status.Conditions)
	})

	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "local"}}))
	for _, j := range []struct {
		name   string
		argv   []string
		status metav1.ConditionStatus
		reason string
		exit   int32
	}{
		{"hello", []string{"/bin/sh", "-c", "echo hello"}, metav1.ConditionTrue, executionv1alpha1.ReasonCompleted, 0},
		{"fail", []string{"/bin/sh", "-c", "exit 3"}, metav1.ConditionFalse, executionv1alpha1.ReasonProcessFailed, 3},
	} {
		job := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "local", Name: j.name}, Spec: executionv1alpha1.JobSpec{
			JobClassName: "local", Task: executionv1alpha1.TaskSpec{Image: "none", Command: j.argv[:1], Args: j.argv[1:]}}}
		must(t, c.Create(ctx, job))
		waitFor(t, 60*time.Second, func() (bool, string) {
			got := &executionv1alpha1.Job{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, executionv1alpha1.JobConditionSucceeded)
			done := cond != nil && cond.Status == j.status && cond.Reason == j.reason
			var exit *int32
			if got.Status.Result != nil {
				exit = got.Status.Result.ExitCode
			}
			if done && (exit == nil || *exit != j.exit || got.Status.Execution == nil || got.Status.Execution.Adapter != localprocess.Name) {
				t.Fatalf("Job %s: exit code %v, execution %+v", j.name, exit, got.Status.Execution)
			}
			return done, fmt.Sprintf("%+v", got.Status.Conditions)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %s: %s", within, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
