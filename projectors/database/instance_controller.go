package database

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// RBAC of the Instance projector (least privilege: admin Secrets are read
// only in the controller namespace, see docs/database/deployment.md).
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqlinstances,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqlinstances/status,verbs=patch
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqltenants,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
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
	EventIntentAppended = journaled.EventIntentAppended
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

	// observed stamps journal records with the time this process first
	// saw them (set up by SetupWithManager; see journaled.Observations).
	observed *journaled.Observations
	own      journaled.OwnWrites
}

// SetupWithManager registers the projector, its indexes and watches.
// outcomes delivers a reconcile request per journal outcome of an Instance.
func (r *InstanceReconciler) SetupWithManager(mgr ctrl.Manager, outcomes <-chan reconcile.Request) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.observed = journaled.NewObservations(r.Clock)
	if r.Policy == (InstancePolicy{}) {
		r.Policy = DefaultInstancePolicy
	}
	if r.Policy.DeletionRecheck == 0 {
		r.Policy.DeletionRecheck = DefaultInstancePolicy.DeletionRecheck
	}
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &databasev1alpha1.PostgreSQLInstance{}, indexInstanceSecret, func(o client.Object) []string {
		return []string{o.(*databasev1alpha1.PostgreSQLInstance).Spec.AdminCredentialRef.Name}
	}); err != nil {
		return err
	}
	if err := indexTenantsByInstance(ctx, mgr); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("postgresqlinstance").
		// Every change, status included: a status written by anyone else is
		// re-derived at once; the event of this process's own last write is
		// dropped (journaled.OwnWrites: it would only start a no-op pass).
		For(&databasev1alpha1.PostgreSQLInstance{}, builder.WithPredicates(r.own.Predicate())).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.instancesForSecret)).
		// A Tenant matters to its Instance only by its existence and its
		// spec.instanceRef (a deleting Instance waits for its Tenants to be
		// gone): a Tenant's status writes do not wake the Instance.
		Watches(&databasev1alpha1.PostgreSQLTenant{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*databasev1alpha1.PostgreSQLTenant).Spec.InstanceRef}}}
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*databasev1alpha1.PostgreSQLTenant), e.ObjectNew.(*databasev1alpha1.PostgreSQLTenant)
			return o.Spec.InstanceRef != n.Spec.InstanceRef || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		}}))
	if outcomes != nil {
		b = b.WatchesRawSource(journaled.Source(outcomes))
	}
	return b.Complete(r)
}

func indexTenantsByInstance(ctx context.Context, mgr ctrl.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(ctx, &databasev1alpha1.PostgreSQLTenant{}, indexTenantInstance, func(o client.Object) []string {
		return []string{o.(*databasev1alpha1.PostgreSQLTenant).Spec.InstanceRef}
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
	var list databasev1alpha1.PostgreSQLInstanceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexInstanceSecret: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: i.Name}})
	}
	return out
}

// Reconcile runs one pass (the journaled skeleton with instanceKind).
func (r *InstanceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return journaled.Reconcile(ctx, req, journaled.Deps{Client: r.Client, APIReader: r.APIReader, Journal: r.Journal, Recorder: r.Recorder,
		Observed: r.observed, OwnWrites: &r.own},
		instanceKind{r})
}

// instanceKind is the Instance's part of the skeleton.
type instanceKind struct{ r *InstanceReconciler }

func (instanceKind) New() *databasev1alpha1.PostgreSQLInstance {
	return &databasev1alpha1.PostgreSQLInstance{}
}
func (instanceKind) Finalizer() string { return InstanceFinalizer }
func (instanceKind) StatusPhase(i *databasev1alpha1.PostgreSQLInstance) string {
	return string(i.Status.Phase)
}

// JournalUnavailable keeps the phase and reports the journal outage.
func (instanceKind) JournalUnavailable(i *databasev1alpha1.PostgreSQLInstance) InstanceDecision {
	return InstanceDecision{Phase: orPending(i.Status.Phase),
		Ready: notReady(databasev1alpha1.ReasonDependencyUnavailable, "the operation journal is unavailable")}
}

// Plan reads the admin Secret (controller namespace only) and, while
// deleting, the Tenants referencing the Instance; DecideInstance decides.
func (k instanceKind) Plan(ctx context.Context, inst *databasev1alpha1.PostgreSQLInstance, h journaled.History) (journaled.Plan[InstanceDecision], error) {
	r := k.r
	spec := instanceSpecWithDefaults(inst.Spec)
	facts := InstanceFacts{Generation: inst.Generation, SpecErrors: ValidateInstanceSpec(spec), Status: inst.Status,
		Now: r.Clock.Now(), SecretName: spec.AdminCredentialRef.Name, Journal: h.State, Deleting: !inst.DeletionTimestamp.IsZero()}
	if facts.Deleting {
		var tenants databasev1alpha1.PostgreSQLTenantList
		if err := r.Client.List(ctx, &tenants, client.MatchingFields{indexTenantInstance: inst.Name}); err != nil {
			facts.ReferencesUnknown = true
		}
		for _, t := range tenants.Items {
			facts.ReferencedBy = append(facts.ReferencedBy, t.Namespace+"/"+t.Name)
		}
	} else {
		secret := &corev1.Secret{}
		switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: spec.AdminCredentialRef.Name}, secret); {
		case err == nil:
			facts.Secret = SecretFact{Found: true, ResourceVersion: secret.ResourceVersion}
		case apierrors.IsNotFound(err):
		default:
			return journaled.Plan[InstanceDecision]{}, err
		}
	}
	d := DecideInstance(facts, r.Policy)
	p := journaled.Plan[InstanceDecision]{Status: d, RequeueAfter: d.RequeueAfter, StatusLost: d.StatusLost, RemoveFinalizer: d.RemoveFinalizer}
	if d.Intent != nil {
		payload := dbcontract.InstanceIntent{
			Endpoint: dbcontract.Endpoint{Host: spec.Endpoint.Host, HostAddr: spec.Endpoint.HostAddr, Port: spec.Endpoint.Port,
				Database: spec.Endpoint.Database, SSLMode: string(spec.Endpoint.SSLMode)},
			AdminCredRef: dbcontract.AdminCredentialRef{SecretName: spec.AdminCredentialRef.Name, UsernameKey: spec.AdminCredentialRef.UsernameKey,
				PasswordKey: spec.AdminCredentialRef.PasswordKey, ResourceVersion: facts.Secret.ResourceVersion},
		}
		rec, err := journal.NewIntent(objectRef(inst), d.Intent.Operation, "", d.Intent.Attempt, payload)
		if err != nil {
			return p, err
		}
		p.Record = &rec
	}
	return p, nil
}

func orPending(p databasev1alpha1.InstancePhase) databasev1alpha1.InstancePhase {
	if p == "" {
		return databasev1alpha1.InstancePhasePending
	}
	return p
}

// Project writes the decision into status (only when it changed) and emits
// Events on Ready transitions, and WaitingForTenants when deletion starts
// waiting.
func (k instanceKind) Project(ctx context.Context, inst *databasev1alpha1.PostgreSQLInstance, d InstanceDecision) error {
	r := k.r
	before := inst.DeepCopy()
	if d.WaitingForTenants && before.Status.Phase != databasev1alpha1.InstancePhaseDeleting && r.Recorder != nil {
		r.Recorder.Eventf(inst, nil, corev1.EventTypeNormal, EventDeletionWait, "Delete", "%s", d.Ready.Message)
	}
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
		journaled.EqualConditions(a.Conditions, b.Conditions) {
		return nil
	}
	return client.IgnoreNotFound(patchStatus(ctx, r.Client, r.Recorder, inst, before, old, d.Ready))
}

// objectRef is the journal reference of an object.
func objectRef(o client.Object) journal.ObjectRef {
	gvk := o.GetObjectKind().GroupVersionKind()
	kind := gvk.Kind
	if kind == "" {
		switch o.(type) {
		case *databasev1alpha1.PostgreSQLInstance:
			kind = KindInstance
		case *databasev1alpha1.PostgreSQLTenant:
			kind = KindTenant
		}
	}
	return journal.ObjectRef{Group: databasev1alpha1.GroupVersion.Group, Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(),
		UID: string(o.GetUID()), Generation: o.GetGeneration()}
}
