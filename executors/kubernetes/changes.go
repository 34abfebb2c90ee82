package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// RBAC of the change feed (read only; the Job projector's process).
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=list;watch

// ChangeCacheOptions are the options of the change feed's cache: batch/v1
// Jobs carrying LabelManagedBy=ayatori only, without their managed fields.
// The label only narrows the watch: anyone may copy it, and the feed's
// consumer matches a change by the native Job's UID, which the API server
// assigns, never by a label or a name.
func ChangeCacheOptions(scheme *runtime.Scheme) cache.Options {
	return cache.Options{
		Scheme:           scheme,
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: "ayatori"})},
		},
	}
}

// ChangeSource is the Kubernetes adapter's change feed
// (execution.Adapter.Changes) over c, a cache built with
// ChangeCacheOptions: it calls changed, and enqueues what changed returns,
// when a native Job's result or stop changes as the Job controller reports
// it (stateKey: its conditions, spec.suspend, the start of its deletion),
// with the native Job's reference and resourceVersion, and when a native
// Job is removed (revision ""). Other updates (pod counts, labels,
// annotations, finalizers) and resyncs call nothing: the start of the pod
// (Running) and what only the pods show (an image that can not be pulled)
// are found by the projector's next Observe on its back-off. Waking on
// them cost one Observe more per Job on a saturated stack (issue 28).
func ChangeSource(c cache.Cache, changed func(ref execution.Reference, revision string) []reconcile.Request) source.Source {
	// Not source.Kind: that one fails the controller's start when the
	// cache does not sync in time, and a workload cluster that is down
	// must not stop the projector (the back-off still observes).
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		add := func(job *batchv1.Job, revision string) {
			for _, r := range changed(references(job)[0], revision) {
				q.Add(r)
			}
		}
		handlers := toolscache.ResourceEventHandlerFuncs{
			UpdateFunc: func(oldObj, newObj any) {
				o, ok1 := oldObj.(*batchv1.Job)
				n, ok2 := newObj.(*batchv1.Job)
				if ok1 && ok2 && stateKey(o) != stateKey(n) {
					add(n, n.ResourceVersion)
				}
			},
			DeleteFunc: func(obj any) {
				if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				if j, ok := obj.(*batchv1.Job); ok {
					add(j, "")
				}
			},
		}
		// The informer needs the workload cluster's discovery: while that
		// cluster is down, try again every changeRetry, in the background.
		go func() {
			for {
				inf, err := c.GetInformer(ctx, &batchv1.Job{}, cache.BlockUntilSynced(false))
				if err == nil {
					if _, err = inf.AddEventHandler(handlers); err == nil {
						return
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(changeRetry):
				}
			}
		}()
		return nil
	})
}

// changeRetry is the pause before the feed asks for its informer again.
const changeRetry = 2 * time.Second

// stateKey sums up what of native Job job decides an Observation's result
// or stop (observe): the conditions Complete, Failed and Suspended (type
// and status), spec.suspend and whether its deletion started. The interim
// conditions SuccessCriteriaMet and FailureTarget are left out: the Job
// controller writes them one status update before Complete or Failed, and
// an Observation between the two still sees the Job running.
func stateKey(job *batchv1.Job) string {
	var b strings.Builder
	for _, c := range job.Status.Conditions {
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobFailed, batchv1.JobSuspended:
			fmt.Fprintf(&b, "%s=%s,", c.Type, c.Status)
		}
	}
	fmt.Fprintf(&b, "suspend=%t deleting=%t", job.Spec.Suspend != nil && *job.Spec.Suspend, job.DeletionTimestamp != nil)
	return b.String()
}
