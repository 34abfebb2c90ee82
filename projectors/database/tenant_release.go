package database

import (
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// EventLeftInPlace reports the objects a deletion skipped because they are
// not this Tenant's (a retained predecessor's, a foreign one).
const EventLeftInPlace = "LeftInPlace"

// decideTenantRetain is the Retain deletion (specification §11.1,
// docs/decisions/0004-retained-externalsecret.md): RetainOwnership is
// journaled and executed whenever PostgreSQL is reachable (it never holds
// the CR); RetainExternalSecret releases the ExternalSecret from the
// Tenant's owner reference before the finalizer goes, so no garbage
// collector deletes it (and the application's Secret with it).
func decideTenantRetain(f TenantFacts, p TenantPolicy, st *journal.State, after uint64) TenantDecision {
	if len(intentsAfter(st, dbcontract.OpRetainOwnership, f.Generation, after)) == 0 {
		return TenantDecision{Phase: databasev1alpha1.TenantPhaseDeleting, Ready: reconciling("retaining external resources"), RequeueAfter: 200 * time.Millisecond,
			Intent: &PlannedIntent{Operation: dbcontract.OpRetainOwnership, Attempt: journaled.NextAttempt(st, dbcontract.OpRetainOwnership, f.Generation)}}
	}
	step := tenantStep{dbcontract.OpRetainExternalSecret, databasev1alpha1.TenantPhaseDeleting}
	d := runChain(f, p, st, []tenantStep{step}, after, databasev1alpha1.TenantPhaseDeleting)
	if d.done {
		return TenantDecision{Phase: databasev1alpha1.TenantPhaseDeleting, RemoveFinalizer: true, Ready: reconciling("retained"),
			LeftInPlace: leftInPlace(st, []tenantStep{step}, f.Generation, after)}
	}
	d.Phase = databasev1alpha1.TenantPhaseDeleting
	if d.Intent == nil && d.Ready.Reason == databasev1alpha1.ReasonReconciling {
		d.Ready = reconciling("releasing the ExternalSecret from the Tenant (it stays with the retained credential)")
	}
	return d.TenantDecision
}

func intentsAfter(st *journal.State, op string, gen int64, after uint64) []journal.Record {
	var out []journal.Record
	for _, r := range journaled.IntentsOf(st, op, gen) {
		if r.Sequence > after {
			out = append(out, r)
		}
	}
	return out
}

// leftInPlace collects what the successful deletion steps after the
// DeletionStarted note skipped: the executors' messages (ExternalSecret,
// Secret, KV record) and the PostgreSQL steps' "not owned" payloads.
func leftInPlace(st *journal.State, steps []tenantStep, gen int64, after uint64) []string {
	var out []string
	for _, s := range steps {
		in := intentsAfter(st, s.op, gen, after)
		if len(in) == 0 {
			continue
		}
		o, ok := st.OutcomeOf(in[len(in)-1].ID)
		if !ok || o.Result == nil || o.Result.Class != journal.Succeeded {
			continue
		}
		if o.Result.Message != "" {
			out = append(out, o.Operation+": "+o.Result.Message)
			continue
		}
		var p struct {
			Skipped string `json:"skipped"`
		}
		if json.Unmarshal(o.Payload, &p) != nil || p.Skipped == "" || p.Skipped == "absent" {
			continue
		}
		if p.Skipped == "not owned" {
			out = append(out, o.Operation+": skipped, the registry has no managed record of this Tenant for it (left in place)")
			continue
		}
		out = append(out, o.Operation+": "+p.Skipped)
	}
	return out
}

// reportLeftInPlace emits one Warning Event naming every skipped object.
func reportLeftInPlace(rec events.EventRecorder, obj runtime.Object, left []string) {
	if rec == nil || len(left) == 0 {
		return
	}
	rec.Eventf(obj, nil, corev1.EventTypeWarning, EventLeftInPlace, "Delete",
		"deletion finished; not this Tenant's, so left in place: %s", strings.Join(left, "; "))
}
