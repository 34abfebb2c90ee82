package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// RBAC of the Instance projector (least privilege: admin Secrets are read
// only in the controller namespace, see docs/database/deployment.md).
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqlinstances,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqlinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqlinstances/finalizers,verbs=update
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqltenants,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=ayatori-system,resources=secrets,verbs=get;list;watch

// InstanceFinalizer is added when the controller starts managing an
// Instance; it is removed only when no Tenant references the Instance.
const InstanceFinalizer = "database.ayatori.ddupan.top/instance-protection"

// Field indexes used by the database projectors.
const (
	indexInstanceSecret = "spec.adminCredentialRef.name"
	indexTenantInstance = "spec.instanceRef"
)

// Event reasons (milestones and failures).
const (
	EventReady          = "Ready"
	EventNotReady       = "NotReady"
	EventIntentAppended = "IntentAppended"
	EventDeletionWait   = "WaitingForTenants"
)

// InstanceReconciler is the PostgreSQLInstance projector. It never touches
// PostgreSQL: it decides (DecideInstance), appends intents to the journal
// before anything happens, and folds outcomes into status.
type InstanceReconciler struct {
	Client client.Client
	// Journal is the operation journal.
	Journal *journal.Store
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Namespace is the controller namespace: the only one admin Secrets are read from.
	Namespace string
	Policy    InstancePolicy
	Clock     clock.PassiveClock
	// APIReader reads from the API server, bypassing the cache, to confirm
	// a lost status (nil: trust the cache).
	APIReader client.Reader
}

// SetupWithManager registers the projector, its indexes and watches.
// outcomes delivers a reconcile request per journal outcome of an Instance.
func (r *InstanceReconciler) SetupWithManager(mgr ctrl.Manager, outcomes <-chan reconcile.Request) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Policy == (InstancePolicy{}) {
		r.Policy = DefaultInstancePolicy
	}
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.PostgreSQLInstance{}, indexInstanceSecret, func(o client.Object) []string {
		return []string{o.(*v1alpha1.PostgreSQLInstance).Spec.AdminCredentialRef.Name}
	}); err != nil {
		return err
	}
	if err := indexTenantsByInstance(ctx, mgr); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("postgresqlinstance").
		// Every change, status included: a status written by anyone else is
		// re-derived at once (our own writes settle after one no-op pass).
		For(&v1alpha1.PostgreSQLInstance{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.instancesForSecret)).
		Watches(&v1alpha1.PostgreSQLTenant{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*v1alpha1.PostgreSQLTenant).Spec.InstanceRef}}}
		}))
	if outcomes != nil {
		b = b.WatchesRawSource(channelSource(outcomes))
	}
	return b.Complete(r)
}

func indexTenantsByInstance(ctx context.Context, mgr ctrl.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.PostgreSQLTenant{}, indexTenantInstance, func(o client.Object) []string {
		return []string{o.(*v1alpha1.PostgreSQLTenant).Spec.InstanceRef}
	})
	if err != nil && !isIndexConflict(err) {
		return err
	}
	return nil
}

func (r *InstanceReconciler) instancesForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.Namespace {
		return nil
	}
	var list v1alpha1.PostgreSQLInstanceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexInstanceSecret: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: i.Name}})
	}
	return out
}

// Reconcile runs one pass: finalizer first, then decide, append, project.
func (r *InstanceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	inst := &v1alpha1.PostgreSQLInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, inst); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !inst.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, inst)
	}
	if !controllerutil.ContainsFinalizer(inst, InstanceFinalizer) {
		patch := client.MergeFrom(inst.DeepCopy())
		controllerutil.AddFinalizer(inst, InstanceFinalizer)
		if err := r.Client.Patch(ctx, inst, patch); err != nil {
			return reconcile.Result{}, err
		}
	}
	spec := instanceSpecWithDefaults(inst.Spec)
	facts := InstanceFacts{Generation: inst.Generation, SpecErrors: ValidateInstanceSpec(spec), Status: inst.Status,
		Now: r.Clock.Now(), SecretName: spec.AdminCredentialRef.Name}
	secret := &corev1.Secret{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: spec.AdminCredentialRef.Name}, secret); {
	case err == nil:
		facts.Secret = SecretFact{Found: true, ResourceVersion: secret.ResourceVersion}
	case apierrors.IsNotFound(err):
	default:
		return reconcile.Result{}, err
	}
	recs, err := r.Journal.Read(ctx, string(inst.UID))
	if err != nil {
		r.project(ctx, inst, InstanceDecision{Phase: orPending(inst.Status.Phase),
			Ready: notReady(v1alpha1.ReasonDependencyUnavailable, "the operation journal is unavailable")})
		return reconcile.Result{}, fmt.Errorf("read journal: %w", err)
	}
	facts.Journal = journal.Fold(recs)
	d := DecideInstance(facts, r.Policy)
	if d.StatusLost {
		live := &v1alpha1.PostgreSQLInstance{}
		if behind, err := statusBehind(ctx, r.APIReader, req.NamespacedName, live, func() string { return string(live.Status.Phase) }); err != nil || behind {
			return reconcile.Result{Requeue: behind}, client.IgnoreNotFound(err)
		}
	}
	if d.Intent != nil {
		payload := dbcontract.InstanceIntent{
			Endpoint: dbcontract.Endpoint{Host: spec.Endpoint.Host, HostAddr: spec.Endpoint.HostAddr, Port: spec.Endpoint.Port,
				Database: spec.Endpoint.Database, SSLMode: string(spec.Endpoint.SSLMode)},
			AdminCredRef: dbcontract.AdminCredentialRef{SecretName: spec.AdminCredentialRef.Name, UsernameKey: spec.AdminCredentialRef.UsernameKey,
				PasswordKey: spec.AdminCredentialRef.PasswordKey, ResourceVersion: facts.Secret.ResourceVersion},
		}
		rec, err := journal.NewIntent(objectRef(inst), d.Intent.Operation, "", d.Intent.Attempt, payload)
		if err != nil {
			return reconcile.Result{}, err
		}
		res, err := r.Journal.Append(ctx, &rec, journal.ExpectLastSequence(facts.Journal.LastSequence))
		if errors.Is(err, journal.ErrConflict) {
			// Another replica decided first: re-read and decide again.
			return reconcile.Result{Requeue: true}, nil
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("append %s intent: %w", d.Intent.Operation, err)
		}
		if !res.Duplicate {
			log.V(1).Info("intent appended", "operation", d.Intent.Operation, "attempt", d.Intent.Attempt, "seq", res.Sequence)
		}
		announceIntent(r.Recorder, inst, d.Intent.Operation, d.Intent.Attempt, res)
	}
	if err := r.project(ctx, inst, d); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

func orPending(p v1alpha1.InstancePhase) v1alpha1.InstancePhase {
	if p == "" {
		return v1alpha1.InstancePhasePending
	}
	return p
}

// project writes the decision into status (only when it changed) and emits
// Events on Ready transitions.
func (r *InstanceReconciler) project(ctx context.Context, inst *v1alpha1.PostgreSQLInstance, d InstanceDecision) error {
	before := inst.DeepCopy()
	inst.Status.Phase = d.Phase
	if d.PostgreSQLVersion != "" {
		inst.Status.PostgreSQLVersion = d.PostgreSQLVersion
	}
	if d.Conclusive {
		inst.Status.ObservedGeneration = inst.Generation
	}
	old := setReady(&inst.Status.Conditions, inst.Generation, d.Ready)
	a, b := before.Status, inst.Status
	if a.Phase == b.Phase && a.ObservedGeneration == b.ObservedGeneration && a.PostgreSQLVersion == b.PostgreSQLVersion &&
		equalConditions(a.Conditions, b.Conditions) {
		return nil
	}
	return patchStatus(ctx, r.Client, r.Recorder, inst, before, old, d.Ready)
}

// reconcileDelete stops provisioning (phase Deleting) and keeps the
// finalizer while any Tenant, deleting ones included, references the
// Instance; a failed reference check counts as "still referenced". Nothing
// external is deleted.
func (r *InstanceReconciler) reconcileDelete(ctx context.Context, inst *v1alpha1.PostgreSQLInstance) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(inst, InstanceFinalizer) {
		return reconcile.Result{}, nil
	}
	var tenants v1alpha1.PostgreSQLTenantList
	err := r.Client.List(ctx, &tenants, client.MatchingFields{indexTenantInstance: inst.Name})
	if err != nil {
		_ = r.project(ctx, inst, InstanceDecision{Phase: v1alpha1.InstancePhaseDeleting,
			Ready: reconciling("deleting: could not check for Tenants referencing this Instance; keeping the finalizer")})
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if n := len(tenants.Items); n > 0 {
		msg := fmt.Sprintf("deleting: waiting for %d PostgreSQLTenant(s) referencing this Instance (e.g. %s/%s)", n, tenants.Items[0].Namespace, tenants.Items[0].Name)
		if inst.Status.Phase != v1alpha1.InstancePhaseDeleting && r.Recorder != nil {
			r.Recorder.Eventf(inst, nil, corev1.EventTypeNormal, EventDeletionWait, "Delete", "%s", msg)
		}
		if err := r.project(ctx, inst, InstanceDecision{Phase: v1alpha1.InstancePhaseDeleting, Ready: reconciling(msg)}); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	patch := client.MergeFrom(inst.DeepCopy())
	controllerutil.RemoveFinalizer(inst, InstanceFinalizer)
	return reconcile.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, inst, patch))
}

// objectRef is the journal reference of an object.
func objectRef(o client.Object) journal.ObjectRef {
	gvk := o.GetObjectKind().GroupVersionKind()
	kind := gvk.Kind
	if kind == "" {
		switch o.(type) {
		case *v1alpha1.PostgreSQLInstance:
			kind = "PostgreSQLInstance"
		case *v1alpha1.PostgreSQLTenant:
			kind = "PostgreSQLTenant"
		}
	}
	return journal.ObjectRef{Group: v1alpha1.GroupVersion.Group, Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(),
		UID: string(o.GetUID()), Generation: o.GetGeneration()}
}
