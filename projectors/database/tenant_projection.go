package database

import (
	"time"

	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// newExternalSecret returns an empty ExternalSecret for reads and watches.
func newExternalSecret() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	return u
}

// projectionDrift is the read-only check of what a Ready Tenant owns in
// Kubernetes: its ExternalSecret exists, is owned by it and
// is Ready, and the target Secret exists (metadata only). It returns what
// is wrong ("" when nothing is). The cache answers first; a problem is
// confirmed with a live read, so a cache that lags behind the executor
// never restarts the chain. The projector then re-runs every step
// (Revalidate): EnsureExternalSecret repairs a deleted ExternalSecret, and
// a failing step is reported at once instead of at the next re-check.
func (r *TenantReconciler) projectionDrift(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, n tenantNames) (string, error) {
	problem, err := externalSecretProblem(ctx, r.Client, t, n)
	if err != nil || r.APIReader == nil {
		return problem, err
	}
	if problem != "" {
		return externalSecretProblem(ctx, r.APIReader, t, n)
	}
	// Secrets of Tenant namespaces are not cached: a live metadata read
	// (never the data).
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: n.secret}, meta)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("the Secret %s/%s was deleted", t.Namespace, n.secret), nil
	}
	return "", err
}

func externalSecretProblem(ctx context.Context, c client.Reader, t *databasev1alpha1.PostgreSQLTenant, n tenantNames) (string, error) {
	es := newExternalSecret()
	err := c.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: n.externalSecret}, es)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the ExternalSecret %s/%s was deleted", t.Namespace, n.externalSecret), nil
	case err != nil:
		return "", err
	}
	owned := false
	for _, o := range es.GetOwnerReferences() {
		if o.UID == t.UID {
			owned = true
		}
	}
	if !owned {
		return fmt.Sprintf("the ExternalSecret %s/%s is no longer owned by this Tenant", t.Namespace, n.externalSecret), nil
	}
	conds, _, _ := unstructured.NestedSlice(es.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == string(metav1.ConditionFalse) {
			reason, _ := m["reason"].(string)
			return fmt.Sprintf("ESO reports the ExternalSecret %s/%s not Ready (%s)", t.Namespace, n.externalSecret, reason), nil
		}
	}
	return "", nil
}

// targetTaken is the read-only fact TenantFacts.TargetTaken: the derived
// ExternalSecret name and the target Secret are free or this Tenant's own
// (its ExternalSecret carries an owner reference with the Tenant's UID; the
// Secret was produced by one of its ExternalSecrets, dbcontract.ProducedBy).
// Both are read live (a cache lagging behind another Tenant's executor
// must not let a write through); the Secret as metadata only, never its
// data (docs/decisions/0002).
func (r *TenantReconciler) targetTaken(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, n tenantNames, st *journal.State) (string, error) {
	var rd client.Reader = r.Client
	if r.APIReader != nil {
		rd = r.APIReader
	}
	var es, secret metav1.Object
	u := newExternalSecret()
	err := rd.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: n.externalSecret}, u)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", err
	default:
		es = u
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = rd.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: n.secret}, meta)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", err
	default:
		secret = meta
	}
	return dbcontract.TargetTaken(t.Namespace, n.externalSecret, n.secret, es, secret, string(t.UID), ownedExternalSecrets(st)), nil
}

// ownedExternalSecrets lists the ExternalSecrets this Tenant created or
// updated (the EnsureExternalSecret outcomes of its journal).
func ownedExternalSecrets(st *journal.State) []dbcontract.ESRef {
	if st == nil {
		return nil
	}
	var out []dbcontract.ESRef
	for _, o := range st.Outcomes {
		if o.Operation != dbcontract.OpEnsureExternalSecret || o.Result == nil || o.Result.Class != journal.Succeeded {
			continue
		}
		var p dbcontract.ProjectionOutcome
		if o.DecodePayload(&p) == nil && p.ES != nil && p.ES.UID != "" && !slices.Contains(out, *p.ES) {
			out = append(out, *p.ES)
		}
	}
	slices.SortFunc(out, func(a, b dbcontract.ESRef) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// reobserveDue reports whether the last intent of generation gen is an
// ObserveProjection that found the projection not yet synced.
func reobserveDue(st *journal.State, gen int64) bool {
	var last *journal.Record
	for _, in := range st.Intents {
		if in.Object.Generation == gen && (last == nil || in.Sequence > last.Sequence) {
			in := in
			last = &in
		}
	}
	if last == nil || last.Operation != dbcontract.OpObserveProjection {
		return false
	}
	o, ok := st.OutcomeOf(last.ID)
	return ok && o.Result != nil && o.Result.Class != journal.Succeeded && o.Result.Reason == databasev1alpha1.ReasonCredentialProjectionFailed
}

// projectionSynced reports whether the Tenant's ExternalSecret exists and
// reports Ready=True.
func (r *TenantReconciler) projectionSynced(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, n tenantNames) (bool, error) {
	es := newExternalSecret()
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: n.externalSecret}, es); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	conds, _, _ := unstructured.NestedSlice(es.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == string(metav1.ConditionTrue) {
			return true, nil
		}
	}
	return false, nil
}

// ensuredAt is when this process first observed the outcome of the last
// successful EnsureExternalSecret of generation gen (zero: none).
func ensuredAt(st *journal.State, gen int64) time.Time {
	var at time.Time
	var seq uint64
	for _, in := range st.Intents {
		if in.Operation != dbcontract.OpEnsureExternalSecret || in.Object.Generation != gen || in.Sequence < seq {
			continue
		}
		if o, ok := st.OutcomeOf(in.ID); ok && o.Result != nil && o.Result.Class == journal.Succeeded {
			at, seq = o.Time, in.Sequence
		}
	}
	return at
}
