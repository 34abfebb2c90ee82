package execution

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// executionChanges connects the adapters' change feeds
// (execution.Adapter.Changes) to the Job projector. The feed reports every
// change of an execution it sees (reference and revision); a pass that
// waits to observe an execution asks, with the reference and the revision
// its latest outcome reported, whether a change at another revision came
// since (Changed), and then observes at once instead of after its
// back-off. A change reported while a pass waits on its execution also
// enqueues the Job.
//
// The Job of a change is only ever the one whose journal reported the
// reference (an ID the backend assigned, as the executor observed it): a
// change of any other object, whatever its name or labels, enqueues
// nothing and answers no pass. Each reported change answers at most one
// Changed (then it is consumed), so a feed lagging behind the executor's
// reads costs at most one Observe per change, never a loop. A change is a
// hint: the Observe's Observation decides. Safe for concurrent use.
type executionChanges struct {
	mu    sync.Mutex
	byRef map[execution.Reference]*followed
	// byJob is the reference each Job (by UID) follows.
	byJob map[types.UID]execution.Reference
}

// followed is what is known of one execution.
type followed struct {
	// job and uid are the Job that registered the reference (zero: none
	// yet, only the feed reported it).
	job types.NamespacedName
	uid types.UID
	// revision is the one the Job's latest outcome reported.
	revision string
	// seen is the revision of the feed's latest change, gone that the
	// feed reported the execution gone; pending: that change has not
	// answered a Changed yet.
	seen          string
	gone, pending bool
}

func newExecutionChanges() *executionChanges {
	return &executionChanges{byRef: map[execution.Reference]*followed{}, byJob: map[types.UID]execution.Reference{}}
}

// Changed registers ref for Job (key, uid), at the revision its latest
// outcome reported, and reports whether the feed reported a change of the
// execution, at another revision or gone, that no Changed answered yet.
func (c *executionChanges) Changed(key types.NamespacedName, uid types.UID, ref execution.Reference, revision string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.byJob[uid]; ok && prev != ref {
		delete(c.byRef, prev)
	}
	c.byJob[uid] = ref
	f := c.byRef[ref]
	if f == nil {
		f = &followed{}
		c.byRef[ref] = f
	}
	f.job, f.uid = key, uid
	changed := f.pending && (f.gone || f.seen != revision)
	f.revision, f.pending = revision, false
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

// changed is the feeds' callback (execution.Adapter.Changes): it records
// the change of ref at revision ("": gone) and returns the Job to enqueue
// when one registered ref and revision is not the one its latest outcome
// reported.
func (c *executionChanges) changed(ref execution.Reference, revision string) []reconcile.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.byRef[ref]
	switch {
	case f == nil && revision == "":
		return nil
	case f == nil:
		f = &followed{}
		c.byRef[ref] = f
	}
	registered := f.uid != ""
	switch {
	case revision == "" && !registered:
		delete(c.byRef, ref)
		return nil
	case revision == "":
		f.gone, f.pending = true, true
	case registered && revision == f.revision:
		// The change the latest outcome already observed.
		f.seen, f.pending = revision, false
		return nil
	default:
		f.seen, f.pending = revision, true
	}
	if !registered {
		return nil
	}
	return []reconcile.Request{{NamespacedName: f.job}}
}

// len is the number of executions known (tests).
func (c *executionChanges) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byRef)
}
