package execution_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestJobChangeFeed: with Observes 90 s apart, a Job still reaches its
// result, and a cancelled Job its stop, within seconds of the Job
// controller's report, because the native Job's change wakes the projector
// (execution.Adapter.Changes); and a batch/v1 Job someone else created with
// a Job's labels and annotations wakes no Observe of it while its own
// state changes.
func TestJobChangeFeed(t *testing.T) {
	e := startJobEnv(t, integration.ExecutionStackOptions{
		ManagerArgs: []string{"--job-observe-interval=90s", "--job-observe-max-interval=90s"}})
	ns := e.namespace(t, true)
	ctx := context.Background()

	t.Run("ResultWithoutWaitingForTheBackOff", func(t *testing.T) {
		j := e.create(t, newJob(ns, "woken", integration.ImageSucceed))
		e.wait(t, j, "Succeeded=True/Completed well before the first Observe the back-off allows (90 s)", 45*time.Second,
			func(j *executionv1alpha1.Job) bool { return succeeded(j) == "True/Completed" })
	})

	t.Run("ForgedNativeJobWakesNothing", func(t *testing.T) {
		victim := e.create(t, newJob(ns, "victim", integration.ImageHang))
		running := e.wait(t, victim, "an execution", 45*time.Second, func(j *executionv1alpha1.Job) bool {
			return j.Status.Execution != nil && len(j.Status.Execution.References) > 0
		})
		native := e.wantOneNative(t, running)
		time.Sleep(2 * time.Second) // let the running Job's own changes settle
		before := e.countRecords(t, running, journal.TypeIntent, execution.OpObserve)

		// The same labels, annotations and pod template under another
		// name: its pod starts and finishes, so its state changes twice.
		forged := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged", Labels: native.Labels, Annotations: native.Annotations},
			Spec: batchv1.JobSpec{Template: *native.Spec.Template.DeepCopy()}}
		delete(forged.Spec.Template.Labels, "batch.kubernetes.io/controller-uid")
		delete(forged.Spec.Template.Labels, "controller-uid")
		delete(forged.Spec.Template.Labels, "batch.kubernetes.io/job-name")
		delete(forged.Spec.Template.Labels, "job-name")
		forged.Spec.Template.Spec.Containers[0].Image = integration.ImageSucceed
		if err := e.c.Create(ctx, forged); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(45 * time.Second)
		for {
			cur := &batchv1.Job{}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(forged), cur); err != nil {
				t.Fatal(err)
			}
			if cur.Status.Succeeded > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the forged Job did not complete: %+v", cur.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		if after := e.countRecords(t, running, journal.TypeIntent, execution.OpObserve); after != before {
			t.Fatalf("the forged Job's changes woke %d Observes of the victim", after-before)
		}

		// The victim's own stop is confirmed as soon as the Job
		// controller reports it (Suspended=True), not after the back-off.
		e.update(t, running, func(j *executionv1alpha1.Job) { j.Spec.DesiredState = executionv1alpha1.JobDesiredStateCancelled })
		e.wait(t, running, "Succeeded=False/Cancelled well before the first Observe the back-off allows (90 s)", 45*time.Second,
			func(j *executionv1alpha1.Job) bool { return succeeded(j) == "False/Cancelled" })
	})
}
