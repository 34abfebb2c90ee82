package execution

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// executionChanges connects the adapters' change feeds
// (execution.Adapter.Changes) to the Job projector. A pass that waits to
// observe an execution registers the execution's reference with the
// revision its latest outcome reported (Changed); a change the feed then
// reports for that reference, at another revision, enqueues the Job, and
// the Job's next pass observes at once instead of after its back-off.
//
// Only references registered from the Job's own journal (IDs the backend
// assigned, reported by the executor) are followed: a change of any other
// object, whatever its name or labels, wakes nothing. A change is a hint:
// it costs at most one Observe, whose Observation decides. Registrations
// end when the Job's pass finds it finished or releases it (Forget), when
// the execution is registered anew, or when the feed reports it gone and a
// pass took that change. Safe for concurrent use.
type executionChanges struct {
	mu    sync.Mutex
	byRef map[execution.Reference]*followed
	// byJob is the reference each Job (by UID) follows.
	byJob map[types.UID]execution.Reference
}

// followed is one registered execution.
type followed struct {
	job types.NamespacedName
	uid types.UID
	// revision is the one the Job's latest outcome reported.
	revision string
	// seen is the revision of the latest change reported since (""
	// none); gone: the feed reported the execution gone.
	seen string
	gone bool
}

func newExecutionChanges() *executionChanges {
	return &executionChanges{byRef: map[execution.Reference]*followed{}, byJob: map[types.UID]execution.Reference{}}
}

// Changed registers ref, at the revision the latest outcome of Job
// (key, uid) reported, and reports whether the feed saw the execution at
// another revision, or gone, since the previous registration of the same
// reference for this Job. The answer is consumed: the next call reports
// only changes seen after this one.
func (c *executionChanges) Changed(key types.NamespacedName, uid types.UID, ref execution.Reference, revision string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.byJob[uid]; ok && prev != ref {
		delete(c.byRef, prev)
	}
	c.byJob[uid] = ref
	f := c.byRef[ref]
	if f == nil || f.uid != uid {
		c.byRef[ref] = &followed{job: key, uid: uid, revision: revision}
		return false
	}
	changed := f.gone || (f.seen != "" && f.seen != revision)
	f.revision, f.seen, f.gone = revision, "", false
	return changed
}

// Forget ends Job uid's registration (it finished, or its finalizer goes).
func (c *executionChanges) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref, ok := c.byJob[uid]; ok {
		delete(c.byRef, ref)
		delete(c.byJob, uid)
	}
}

// changed is the feeds' callback (execution.Adapter.Changes): the Job to
// enqueue when ref is registered and revision is not the one its latest
// outcome reported ("" = gone), else nothing.
func (c *executionChanges) changed(ref execution.Reference, revision string) []reconcile.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.byRef[ref]
	if f == nil {
		return nil
	}
	switch {
	case revision == "":
		f.gone = true
	case revision == f.revision:
		return nil
	default:
		f.seen = revision
	}
	return []reconcile.Request{{NamespacedName: f.job}}
}

// len is the number of followed executions (tests).
func (c *executionChanges) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byRef)
}
