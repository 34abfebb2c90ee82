package execution_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// This file runs the state-machine rows (docs/execution/job-api.md, M1..M22)
// that need the executor's backend to go away, and the admission rows of
// JobClass resolution, on real servers.

// outageArgs make the executor's delivery budget as short as the flags
// allow: a 2s bound per operation and a 3s ack wait. The budget itself
// (5 deliveries, nak back-off 1s, 5s, 15s, 30s) is the journal's, so an
// intent against an unreachable backend gets its RetriesExhausted outcome
// about a minute after it was appended.
var outageArgs = []string{"--executor-ack-wait=3s", "--reconcile-timeout=2s", "--retry-base=300ms", "--retry-max=2s"}

// condition returns "Status/Reason" of the Job's condition typ.
func condition(j *executionv1alpha1.Job, typ string) string {
	c := meta.FindStatusCondition(j.Status.Conditions, typ)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

func (e *jobEnv) waitCondition(t *testing.T, j *executionv1alpha1.Job, typ, want string, timeout time.Duration) *executionv1alpha1.Job {
	t.Helper()
	return e.wait(t, j, typ+"="+want, timeout, func(j *executionv1alpha1.Job) bool { return condition(j, typ) == want })
}

// get reads the Job (fails when it is gone).
func (e *jobEnv) get(t *testing.T, j *executionv1alpha1.Job) *executionv1alpha1.Job {
	t.Helper()
	cur := &executionv1alpha1.Job{}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(j), cur); err != nil {
		t.Fatalf("get %s/%s: %v", j.Namespace, j.Name, err)
	}
	return cur
}

// withStore runs fn with a reader of the stack's journal.
func (e *jobEnv) withStore(t *testing.T, fn func(ctx context.Context, store *journal.Store)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := e.s.NATS.Connect(journal.IdentityReader)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	store, err := journal.OpenExisting(ctx, nc, journal.Config{Trust: integration.JournalTrust(t)})
	if err != nil {
		t.Fatal(err)
	}
	fn(ctx, store)
}

// records reads the journal of a Job UID.
func (e *jobEnv) records(t *testing.T, uid types.UID) []journal.Record {
	t.Helper()
	var recs []journal.Record
	e.withStore(t, func(ctx context.Context, store *journal.Store) {
		var err error
		if recs, err = store.Read(ctx, string(uid)); err != nil {
			t.Fatal(err)
		}
	})
	return recs
}

// noCanary fails when any of secrets is in the journal, the manager log
// or the metrics.
func (e *jobEnv) noCanary(t *testing.T, secrets ...string) {
	t.Helper()
	e.withStore(t, func(ctx context.Context, store *journal.Store) {
		for _, s := range secrets {
			if hits, err := store.ScanForSecret(ctx, s); err != nil || len(hits) > 0 {
				t.Fatalf("a secret is in the journal at %v (err %v)", hits, err)
			}
		}
	})
	logb, _ := os.ReadFile(e.s.ManagerLog)
	metrics, _ := httpGet(e.s.MetricsURL)
	for _, s := range secrets {
		if bytes.Contains(logb, []byte(s)) {
			t.Fatal("a secret is in the manager log")
		}
		if strings.Contains(metrics, s) {
			t.Fatal("a secret is in the metrics")
		}
	}
}

// failedOutcome returns the first outcome of op that is Failed without an
// observation (the executor could not reach its backend), nil when none.
func failedOutcome(recs []journal.Record, op string) *journal.Record {
	for i, r := range recs {
		if r.Type == journal.TypeOutcome && r.Operation == op && r.Result != nil && r.Result.Class == journal.Failed && len(r.Payload) == 0 {
			return &recs[i]
		}
	}
	return nil
}

// waitFailedOutcome waits until the Job's journal holds a Failed outcome
// of op without an observation.
func (e *jobEnv) waitFailedOutcome(t *testing.T, j *executionv1alpha1.Job, op string, timeout time.Duration) journal.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if r := failedOutcome(e.records(t, j.UID), op); r != nil {
			return *r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no Failed %s outcome after %s", j.Name, op, timeout)
		}
		time.Sleep(time.Second)
	}
}

func intents(recs []journal.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Type == journal.TypeIntent {
			out = append(out, r.Operation)
		}
	}
	return out
}

// TestJobBackendOutage cuts the executor's connection to its cluster (the
// workload proxy) while Jobs are running, finished and about to be
// created, then restores it. Only the executor loses its backend; the
// projector, the Kubernetes Job controller and kwok go on.
func TestJobBackendOutage(t *testing.T) {
	t.Parallel()
	e := startJobEnv(t, integration.ExecutionStackOptions{WorkloadProxy: true, ManagerArgs: outageArgs})
	ctx := context.Background()
	ns := e.namespace(t, true)

	// Before the cut: A runs, B finished.
	running := e.create(t, newJob(ns, "running", integration.ImageHang))
	finished := e.create(t, newJob(ns, "finished", integration.ImageSucceed))
	running = e.wait(t, running, "Running", 60*time.Second, func(j *executionv1alpha1.Job) bool { return succeeded(j) == "Unknown/Running" })
	nativeRunning := e.wantOneNative(t, running)
	finished = e.waitSucceeded(t, finished, "True/Completed")
	nativeFinished := e.wantOneNative(t, finished)

	cutAt := time.Now()
	e.s.CutWorkload()
	if err := e.c.Delete(ctx, finished); err != nil {
		t.Fatal(err)
	}
	ensured := e.create(t, newJob(ns, "ensured", integration.ImageSucceed))

	t.Run("cut", func(t *testing.T) {
		t.Run("M9_ObserveUnreachable_ResultUnknown", func(t *testing.T) {
			t.Parallel()
			got := e.waitSucceeded(t, running, "Unknown/ResultUnknown")
			t.Logf("ResultUnknown %s after the cut", time.Since(cutAt).Round(time.Second))
			if got.Status.CompletionTime != nil || got.Status.Result != nil {
				t.Fatalf("completionTime %v result %+v on ResultUnknown", got.Status.CompletionTime, got.Status.Result)
			}
			if got.Status.StartTime == nil || condition(got, executionv1alpha1.JobConditionScheduled) != "True/BackendCreated" {
				t.Fatalf("startTime %v Scheduled %s: a lost connection must not rewrite what was observed", got.Status.StartTime, condition(got, executionv1alpha1.JobConditionScheduled))
			}
			if n := e.wantOneNative(t, got); n.UID != nativeRunning.UID {
				t.Fatal("the native Job changed")
			}
		})
		t.Run("M16_DeleteUnreachable_FinalizerKept", func(t *testing.T) {
			t.Parallel()
			// The Delete ran out of its delivery budget: the object must
			// still be there, deleting, with its finalizer.
			out := e.waitFailedOutcome(t, finished, execution.OpDelete, 150*time.Second)
			t.Logf("Delete %s %s after the cut", out.Result, time.Since(cutAt).Round(time.Second))
			for range 3 {
				cur := e.get(t, finished)
				if cur.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(cur, executionv1alpha1.JobFinalizer) {
					t.Fatalf("deletionTimestamp %v finalizers %v: the cleanup was reported done while the backend was unreachable", cur.DeletionTimestamp, cur.Finalizers)
				}
				time.Sleep(time.Second)
			}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(&nativeFinished), &batchv1.Job{}); err != nil {
				t.Fatalf("native Job: %v (the executor could not have deleted it)", err)
			}
		})
		t.Run("M9_EnsureUnreachable_NotTerminal", func(t *testing.T) {
			t.Parallel()
			e.waitFailedOutcome(t, ensured, execution.OpEnsure, 150*time.Second)
			for range 3 {
				cur := e.get(t, ensured)
				if s := succeeded(cur); !strings.HasPrefix(s, "Unknown/") || cur.Status.CompletionTime != nil {
					t.Fatalf("Succeeded=%s completionTime %v after an unanswered Ensure", s, cur.Status.CompletionTime)
				}
				if c := condition(cur, executionv1alpha1.JobConditionScheduled); c == "True/BackendCreated" {
					t.Fatalf("Scheduled=%s without an answer from the backend", c)
				}
				time.Sleep(time.Second)
			}
			e.waitSucceeded(t, ensured, "Unknown/ResultUnknown")
			if n := e.natives(t, ensured); len(n) != 0 {
				t.Fatal("a native Job appeared while the executor's backend was cut")
			}
		})
	})
	restoredAt := time.Now()
	e.s.RestoreWorkload()
	if t.Failed() {
		return
	}

	t.Run("restored", func(t *testing.T) {
		t.Run("M10_FoundAgain_Running_ThenCancel", func(t *testing.T) {
			t.Parallel()
			got := e.waitSucceeded(t, running, "Unknown/Running")
			t.Logf("Running again %s after the restore", time.Since(restoredAt).Round(time.Second))
			if got.Status.CompletionTime != nil {
				t.Fatal("completionTime while running")
			}
			if n := e.wantOneNative(t, got); n.UID != nativeRunning.UID {
				t.Fatal("a second execution was created")
			}
			e.update(t, running, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
			got = e.waitSucceeded(t, running, "False/Cancelled")
			native := e.wantOneNative(t, got)
			if n := e.activePods(t, &native); n != 0 {
				t.Fatalf("Cancelled while %d pods still run", n)
			}
		})
		t.Run("M16_Restored_Deleted", func(t *testing.T) {
			t.Parallel()
			e.waitGone(t, finished)
			t.Logf("deleted %s after the restore", time.Since(restoredAt).Round(time.Second))
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(&nativeFinished), &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Fatalf("the finalizer went while the native Job is still there: %v", err)
			}
		})
		t.Run("M9_Restored_EnsureRunsOnce", func(t *testing.T) {
			t.Parallel()
			got := e.waitSucceeded(t, ensured, "True/Completed")
			t.Logf("completed %s after the restore", time.Since(restoredAt).Round(time.Second))
			e.wantOneNative(t, got)
		})
	})
	e.verifyJournal(t)
}

// TestJobAdmission covers acceptance against classes on real servers:
// a class created later (M3), the class's resource policy, its
// allowedNamespaces and a class recreated under the same name.
func TestJobAdmission(t *testing.T) {
	t.Parallel()
	e := startJobEnv(t, integration.ExecutionStackOptions{})
	ctx := context.Background()
	params := executionv1alpha1.ParametersReference{Group: executionv1alpha1.GroupVersion.Group, Kind: "KubernetesExecutionParameters", Name: "std"}
	newClass := func(name string) *executionv1alpha1.JobClass {
		return &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: executionv1alpha1.JobClassSpec{ControllerName: executionv1alpha1.ControllerKubernetes, ParametersRef: params}}
	}
	mustCreate := func(t *testing.T, o client.Object) {
		t.Helper()
		if err := e.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	noNative := func(t *testing.T, j *executionv1alpha1.Job) {
		t.Helper()
		if n := e.natives(t, j); len(n) != 0 {
			t.Fatalf("%d native Jobs for %s", len(n), j.Name)
		}
		if in := intents(e.records(t, j.UID)); len(in) != 0 {
			t.Fatalf("intents %v journaled for a Job that is not accepted", in)
		}
	}

	t.Run("M3_JobClassCreatedLater", func(t *testing.T) {
		t.Parallel()
		ns := e.namespace(t, true)
		j := newJob(ns, "early", integration.ImageSucceed)
		j.Spec.JobClassName = "late"
		e.create(t, j)
		e.waitCondition(t, j, executionv1alpha1.JobConditionAccepted, "False/"+executionv1alpha1.ReasonJobClassNotFound, 30*time.Second)
		time.Sleep(3 * time.Second) // more than one --job-resolve-interval
		if c := condition(e.get(t, j), executionv1alpha1.JobConditionAccepted); c != "False/"+executionv1alpha1.ReasonJobClassNotFound {
			t.Fatalf("Accepted=%s without the class", c)
		}
		noNative(t, j)
		mustCreate(t, &executionv1alpha1.KubernetesExecutionParameters{ObjectMeta: metav1.ObjectMeta{Name: "late"},
			Spec: executionv1alpha1.KubernetesExecutionParametersSpec{ServiceAccountName: "ayatori-job"}})
		late := newClass("late")
		late.Spec.ParametersRef.Name = "late"
		mustCreate(t, late)
		got := e.waitSucceeded(t, j, "True/Completed")
		if rc := got.Status.ResolvedJobClass; rc == nil || rc.Name != "late" || rc.UID != late.UID || rc.ParametersRef.Name != "late" {
			t.Fatalf("resolvedJobClass %+v", rc)
		}
		e.wantOneNative(t, got)
	})

	t.Run("Resources_MaximumAndDefaults", func(t *testing.T) {
		t.Parallel()
		q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
		class := newClass("sized")
		class.Spec.Resources = executionv1alpha1.ExecutionResourcePolicy{
			Defaults: executionv1alpha1.ExecutionResourceRequirements{
				Requests: executionv1alpha1.ResourceValues{CPU: q("100m"), Memory: q("64Mi")},
				Limits:   executionv1alpha1.ResourceValues{CPU: q("500m"), Memory: q("128Mi")}},
			Maximum: executionv1alpha1.ExecutionResourceRequirements{Limits: executionv1alpha1.ResourceValues{CPU: q("1")}},
		}
		mustCreate(t, class)
		ns := e.namespace(t, true)
		big := newJob(ns, "big", integration.ImageSucceed)
		big.Spec.JobClassName = "sized"
		big.Spec.Resources.Limits.CPU = q("2")
		small := newJob(ns, "small", integration.ImageSucceed)
		small.Spec.JobClassName = "sized"
		small.Spec.Resources.Requests.CPU = q("200m")
		e.create(t, big)
		e.create(t, small)

		e.waitCondition(t, big, executionv1alpha1.JobConditionAccepted, "False/"+executionv1alpha1.ReasonInvalidResources, 30*time.Second)

		got := e.waitSucceeded(t, small, "True/Completed")
		want := map[string]map[corev1.ResourceName]string{
			"requests": {corev1.ResourceCPU: "200m", corev1.ResourceMemory: "64Mi"},
			"limits":   {corev1.ResourceCPU: "500m", corev1.ResourceMemory: "128Mi"},
		}
		er := got.Status.EffectiveResources
		for kind, vals := range map[string]executionv1alpha1.ResourceValues{"requests": er.Requests, "limits": er.Limits} {
			for name, v := range map[corev1.ResourceName]*resource.Quantity{corev1.ResourceCPU: vals.CPU, corev1.ResourceMemory: vals.Memory} {
				if v == nil || v.Cmp(resource.MustParse(want[kind][name])) != 0 {
					t.Errorf("status.effectiveResources.%s.%s = %v, want %s", kind, name, v, want[kind][name])
				}
			}
		}
		native := e.wantOneNative(t, got)
		res := native.Spec.Template.Spec.Containers[0].Resources
		for kind, list := range map[string]corev1.ResourceList{"requests": res.Requests, "limits": res.Limits} {
			for name, w := range want[kind] {
				if v, ok := list[name]; !ok || v.Cmp(resource.MustParse(w)) != 0 {
					t.Errorf("native container %s.%s = %v, want %s", kind, name, list[name], w)
				}
			}
		}
		// The refused Job never started anything.
		e.waitCondition(t, big, executionv1alpha1.JobConditionAccepted, "False/"+executionv1alpha1.ReasonInvalidResources, time.Second)
		noNative(t, big)
	})

	t.Run("AllowedNamespaces", func(t *testing.T) {
		t.Parallel()
		class := newClass("team-a")
		class.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"ayatori.test/team": "a"}}
		mustCreate(t, class)
		label := func(ns string) {
			var n corev1.Namespace
			if err := e.c.Get(ctx, types.NamespacedName{Name: ns}, &n); err != nil {
				t.Fatal(err)
			}
			n.Labels = map[string]string{"ayatori.test/team": "a"}
			if err := e.c.Update(ctx, &n); err != nil {
				t.Fatal(err)
			}
		}
		other, team := e.namespace(t, true), e.namespace(t, true)
		label(team)
		refused := newJob(other, "outsider", integration.ImageSucceed)
		refused.Spec.JobClassName = "team-a"
		allowed := newJob(team, "member", integration.ImageSucceed)
		allowed.Spec.JobClassName = "team-a"
		e.create(t, refused)
		e.create(t, allowed)
		e.waitCondition(t, refused, executionv1alpha1.JobConditionAccepted, "False/"+executionv1alpha1.ReasonNamespaceNotAllowed, 30*time.Second)
		got := e.waitSucceeded(t, allowed, "True/Completed")
		e.wantOneNative(t, got)
		noNative(t, refused)
		// Labelling the namespace admits the waiting Job.
		label(other)
		e.wantOneNative(t, e.waitSucceeded(t, refused, "True/Completed"))
	})

	t.Run("RecreatedClassNotAdopted", func(t *testing.T) {
		t.Parallel()
		first := newClass("recreated")
		mustCreate(t, first)
		ns := e.namespace(t, false) // no ServiceAccount: accepted, then waits
		j := newJob(ns, "pinned", integration.ImageSucceed)
		j.Spec.JobClassName = "recreated"
		e.create(t, j)
		e.waitCondition(t, j, executionv1alpha1.JobConditionScheduled, "False/"+executionv1alpha1.ReasonServiceAccountNotFound, 60*time.Second)
		if rc := e.get(t, j).Status.ResolvedJobClass; rc == nil || rc.UID != first.UID {
			t.Fatalf("resolvedJobClass %+v, want UID %s", rc, first.UID)
		}
		// The waiting Job keeps the class's protection finalizer; an
		// administrator removes it by hand.
		if err := e.c.Delete(ctx, first); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; {
			cur := &executionv1alpha1.JobClass{}
			err := e.c.Get(ctx, client.ObjectKeyFromObject(first), cur)
			if apierrors.IsNotFound(err) {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("JobClass %s not gone: %v", first.Name, err)
			}
			if controllerutil.RemoveFinalizer(cur, executionv1alpha1.JobClassFinalizer) {
				if err := e.c.Update(ctx, cur); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		second := newClass("recreated")
		mustCreate(t, second)
		if second.UID == first.UID {
			t.Fatal("same UID")
		}
		e.waitCondition(t, j, executionv1alpha1.JobConditionScheduled, "False/"+executionv1alpha1.ReasonJobClassNotFound, 30*time.Second)
		e.wait(t, j, "the message names the recreated class", 30*time.Second, func(j *executionv1alpha1.Job) bool {
			c := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionScheduled)
			return c != nil && c.Reason == executionv1alpha1.ReasonJobClassNotFound && strings.Contains(c.Message, string(second.UID))
		})
		// Even with the ServiceAccount there now, the recreated class is
		// not adopted.
		mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ayatori-job"}})
		time.Sleep(5 * time.Second)
		got := e.get(t, j)
		if c := condition(got, executionv1alpha1.JobConditionScheduled); c != "False/"+executionv1alpha1.ReasonJobClassNotFound {
			t.Fatalf("Scheduled=%s after the class was recreated", c)
		}
		if rc := got.Status.ResolvedJobClass; rc == nil || rc.UID != first.UID {
			t.Fatalf("resolvedJobClass %+v: the Job adopted the recreated class", rc)
		}
		if n := e.natives(t, got); len(n) != 0 {
			t.Fatal("a native Job was created under the recreated class")
		}
		// It can still be cancelled.
		e.update(t, j, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
		e.waitSucceeded(t, j, "False/Cancelled")
	})
	if t.Failed() {
		return
	}
	e.verifyJournal(t)
}
