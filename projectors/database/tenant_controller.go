package database

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// RBAC of the Tenant projector.
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqltenants,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqltenants/status,verbs=patch
// The ExternalSecret carries a controller reference to its Tenant with
// blockOwnerDeletion, which (under OwnerReferencesPermissionEnforcement)
// needs update on the owner's finalizers:
// +kubebuilder:rbac:groups=database.ayatori.ddupan.top,resources=postgresqltenants/finalizers,verbs=update
// +kubebuilder:rbac:groups=external-secrets.io,resources=externalsecrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;delete

// TenantFinalizer guards the Tenant's external resources.
const TenantFinalizer = "database.ayatori.ddupan.top/tenant-cleanup"

// TenantConfig is the deployment-level credential configuration
// (docs/database/deployment.md).
type TenantConfig struct {
	// KVMount and BasePath give the KV path <BasePath>/<namespace>/<name>.
	KVMount, BasePath string
	// ConsumerAddress is written into status.credential.openBaoURL.
	ConsumerAddress string
	// StoreName is the ClusterSecretStore of the ExternalSecrets.
	StoreName string
}

// TenantReconciler is the PostgreSQLTenant projector.
type TenantReconciler struct {
	Client   client.Client
	Journal  *journal.Store
	Recorder events.EventRecorder
	Config   TenantConfig
	Policy   TenantPolicy
	Clock    clock.PassiveClock
	// APIReader: see InstanceReconciler.APIReader.
	APIReader client.Reader
	// Workers is how many Tenants are reconciled at once (0: one). The
	// workqueue never hands one Tenant to two workers, and the journal's
	// per-UID expected sequence rejects a decision on a stale view.
	Workers int
	// NoIntentEvents: no IntentAppended Event per decided step (the
	// journal has every intent; at 1,000 Tenants the Events are about
	// 9,000 API writes). Failure and release Events are still emitted.
	NoIntentEvents bool

	// observed stamps journal records with the time this process first
	// saw them (set up by SetupWithManager; see journaled.Observations).
	observed *journaled.Observations
	own      journaled.OwnWrites
}

// SetupWithManager registers the projector and its watches.
func (r *TenantReconciler) SetupWithManager(mgr ctrl.Manager, outcomes <-chan reconcile.Request) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.observed = journaled.NewObservations(r.Clock)
	if r.Policy == (TenantPolicy{}) {
		r.Policy = DefaultTenantPolicy
	}
	if err := indexTenantsByInstance(context.Background(), mgr); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("postgresqltenant").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		// Every change, status included, except the event of this
		// process's own last write (journaled.OwnWrites: a no-op pass that
		// would hold the Tenant's key while the next outcome arrives).
		For(&databasev1alpha1.PostgreSQLTenant{}, builder.WithPredicates(r.own.Predicate())).
		Watches(&databasev1alpha1.PostgreSQLInstance{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var list databasev1alpha1.PostgreSQLTenantList
			if err := r.Client.List(ctx, &list, client.MatchingFields{indexTenantInstance: o.GetName()}); err != nil {
				return nil
			}
			out := make([]reconcile.Request, 0, len(list.Items))
			for _, t := range list.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
			}
			return out
		})).
		// The ExternalSecret the Tenant owns (a deleted or failing one is
		// repaired or reported at once; see projectionDrift).
		Watches(newExternalSecret(), handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &databasev1alpha1.PostgreSQLTenant{}))
	if outcomes != nil {
		b = b.WatchesRawSource(journaled.Source(outcomes))
	}
	return b.Complete(r)
}

var extensionPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// effective names of a Tenant (controller semantic defaults).
type tenantNames struct {
	database, role, externalSecret, secret, kvPath, url string
}

func (r *TenantReconciler) names(t *databasev1alpha1.PostgreSQLTenant) tenantNames {
	d := dbcontract.DeriveTenantNames(t, r.Config.BasePath)
	n := tenantNames{database: d.Database, role: d.Role, externalSecret: d.ExternalSecret, secret: d.Secret, kvPath: d.KVPath}
	n.url = strings.TrimSuffix(r.Config.ConsumerAddress, "/") + "/v1/" + strings.Trim(r.Config.KVMount, "/") + "/data/" + n.kvPath
	return n
}

// maxTenantNameForEvents is the longest Tenant name whose Events can be
// stored: the Events API names an Event "<object name>.<UnixNano in hex>"
// (16 hex digits), and object names have at most 253 characters. The API
// accepts names up to 240 (with a one-character instanceRef).
const maxTenantNameForEvents = 253 - 1 - 16

// validateTenant checks the input before any side effect.
func validateTenant(t *databasev1alpha1.PostgreSQLTenant, n tenantNames) []string {
	var errs []string
	if err := ValidateDatabaseName(n.database); err != nil {
		errs = append(errs, err.Error())
	}
	if err := ValidateRoleName(n.role); err != nil {
		errs = append(errs, err.Error())
	}
	for _, x := range t.Spec.Extensions {
		if !extensionPattern.MatchString(x) {
			errs = append(errs, fmt.Sprintf("extension %q must match ^[a-z][a-z0-9_-]{0,62}$", x))
		}
	}
	if len(t.Spec.InstanceRef)+len(t.Name) > 241 {
		errs = append(errs, "spec.instanceRef and metadata.name together exceed 241 characters")
	}
	// Every Kubernetes name and label value derived from the Tenant must be
	// valid before the first external write.
	errs = append(errs, dbcontract.ValidateNames(n.externalSecret, n.secret, t.Name)...)
	if len(t.Name) > maxTenantNameForEvents {
		errs = append(errs, fmt.Sprintf("metadata.name has %d characters; at most %d leave room for the names of its Events (<name>.<16 hex digits>, at most 253): use a shorter name",
			len(t.Name), maxTenantNameForEvents))
	}
	return errs
}

// immutable compares the spec with what was already provisioned.
func immutable(t *databasev1alpha1.PostgreSQLTenant, n tenantNames, st *journal.State) []string {
	var errs []string
	s := t.Status
	if s.Database != "" && s.Database != n.database {
		errs = append(errs, fmt.Sprintf("spec.database is %s but %s was provisioned", n.database, s.Database))
	}
	if s.LoginRole != "" && s.LoginRole != n.role {
		errs = append(errs, fmt.Sprintf("spec.loginRole is %s but %s was provisioned", n.role, s.LoginRole))
	}
	if s.Credential.SecretRef.Name != "" && s.Credential.SecretRef.Name != n.secret {
		errs = append(errs, fmt.Sprintf("spec.credential.secretName is %s but %s was provisioned", n.secret, s.Credential.SecretRef.Name))
	}
	// Extensions may only grow: compare with the last successful install.
	var last *journal.Record
	for _, o := range st.Outcomes {
		if o.Operation == dbcontract.OpEnsureExtensions && o.Result.Class == journal.Succeeded && (last == nil || o.Sequence > last.Sequence) {
			o := o
			last = &o
		}
	}
	if last != nil {
		var out dbcontract.TenantOutcome
		if last.DecodePayload(&out) == nil {
			var removed []string
			for _, x := range out.Extensions {
				if !slices.Contains(t.Spec.Extensions, x) {
					removed = append(removed, x)
				}
			}
			if len(removed) > 0 {
				errs = append(errs, "extensions cannot be removed ("+strings.Join(removed, ", ")+"); nothing is ever dropped")
			}
		}
	}
	return errs
}

// Reconcile runs one pass (the journaled skeleton with tenantKind).
func (r *TenantReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	announce := r.Recorder
	if r.NoIntentEvents {
		announce = nil
	}
	return journaled.Reconcile(ctx, req, journaled.Deps{Client: r.Client, APIReader: r.APIReader, Journal: r.Journal, Recorder: announce,
		Observed: r.observed, OwnWrites: &r.own},
		tenantKind{r})
}

// tenantKind is the Tenant's part of the skeleton.
type tenantKind struct{ r *TenantReconciler }

func (tenantKind) New() *databasev1alpha1.PostgreSQLTenant {
	return &databasev1alpha1.PostgreSQLTenant{}
}
func (tenantKind) Finalizer() string { return TenantFinalizer }
func (tenantKind) StatusPhase(t *databasev1alpha1.PostgreSQLTenant) string {
	return string(t.Status.Phase)
}

// tenantProjection is what Project writes: the decision and the names it
// is written under.
type tenantProjection struct {
	names    tenantNames
	decision TenantDecision
}

// Project writes the decision into status and emits Events.
func (k tenantKind) Project(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, p tenantProjection) error {
	return k.r.projectTenant(ctx, t, p.names, p.decision)
}

// Plan gathers the Tenant's facts (the Instance, the journal claim, the
// projection target and drift of what it owns in Kubernetes), decides with
// DecideTenant and builds the record to append.
func (k tenantKind) Plan(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, h journaled.History) (journaled.Plan[tenantProjection], error) {
	r := k.r
	type plan = journaled.Plan[tenantProjection]
	deleting := !t.DeletionTimestamp.IsZero()
	n := r.names(t)
	st := h.State
	facts := TenantFacts{Generation: t.Generation, Deleting: deleting, SpecPolicy: t.Spec.DeletionPolicy, Journal: st, Records: h.Records,
		Status: t.Status, Now: r.Clock.Now(), InputErrors: validateTenant(t, n), ImmutableErrors: immutable(t, n, st)}
	inst := &databasev1alpha1.PostgreSQLInstance{}
	ierr := r.Client.Get(ctx, types.NamespacedName{Name: t.Spec.InstanceRef}, inst)
	switch {
	case apierrors.IsNotFound(ierr):
		facts.InstanceProblem = fmt.Sprintf("PostgreSQLInstance %s does not exist", t.Spec.InstanceRef)
	case ierr != nil:
		return plan{}, ierr
	case !inst.DeletionTimestamp.IsZero():
		facts.InstanceProblem = fmt.Sprintf("PostgreSQLInstance %s is being deleted", t.Spec.InstanceRef)
	case !instanceReady(inst):
		facts.InstanceProblem = fmt.Sprintf("PostgreSQLInstance %s is not Ready", t.Spec.InstanceRef)
		c := meta.FindStatusCondition(inst.Status.Conditions, databasev1alpha1.ConditionReady)
		facts.InstanceProgressing = c == nil || c.Status == metav1.ConditionUnknown || c.ObservedGeneration != inst.Generation
	}
	if ierr == nil && !deleting {
		why, err := r.namespaceNotAllowed(ctx, inst, t.Namespace)
		if err != nil {
			return plan{}, err
		}
		facts.NamespaceNotAllowed = why
	}
	shown := n // the names status shows: what was provisioned, once it was
	if secret := provisionedSecret(st); secret != "" {
		if secret != n.secret {
			facts.ImmutableErrors = append(facts.ImmutableErrors, fmt.Sprintf("spec.credential.secretName is %s but %s was provisioned", n.secret, secret))
		}
		shown.secret = secret
	}
	if claimed := provisionedAs(st); claimed != nil {
		// What was provisioned is fixed (specification §6): compared with
		// the journal on every pass whatever the phase, so a changed field
		// is caught even after the status is lost or the CEL rules' Pending
		// window let the change through.
		facts.ImmutableErrors = append(facts.ImmutableErrors, provisionedChanges(claimed, n, inst, ierr)...)
		shown.database, shown.role = claimed.Database, claimed.Role
		if deleting && (ierr != nil || string(inst.UID) != claimed.InstanceUID) {
			// Delete and Retain run on the Instance the Tenant was
			// provisioned on, whatever spec.instanceRef says now.
			orig, err := r.instanceByUID(ctx, claimed.InstanceUID)
			if err != nil {
				return plan{}, err
			}
			if orig != nil {
				inst, ierr, facts.InstanceProblem = orig, nil, ""
			} else {
				ierr = apierrors.NewNotFound(databasev1alpha1.GroupVersion.WithResource("postgresqlinstances").GroupResource(), claimed.InstanceUID)
				facts.InstanceProblem = "the PostgreSQLInstance this Tenant was provisioned on (uid " + claimed.InstanceUID + ") no longer exists"
			}
		}
	}
	facts.InstanceMissing = ierr != nil
	d, err := r.decide(ctx, t, inst, n, facts)
	if err != nil {
		return plan{}, err
	}
	p := plan{Status: tenantProjection{names: shown, decision: d}, StatusLost: d.StatusLost, RequeueAfter: d.RequeueAfter}
	switch {
	case d.Note != "":
		var payload any
		if d.Note == dbcontract.NoteDeletionStarted {
			payload = dbcontract.DeletionNote{Policy: d.NotePolicy}
		}
		note, err := journal.NewNote(objectRef(t), d.Note, st.LastSequence, payload)
		if err != nil {
			return plan{}, err
		}
		p.Record, p.Requeue, p.RequeueAfter = &note, true, 0
		return p, nil
	case d.Intent != nil || len(d.Also) > 0:
		var recs []*journal.Record
		if d.Intent != nil {
			rec, err := r.intent(t, inst, n, d.Intent, st)
			if err != nil {
				return plan{}, err
			}
			recs = append(recs, &rec)
			for i := range d.Chain {
				next, err := r.intent(t, inst, n, &d.Chain[i], st)
				if err != nil {
					return plan{}, err
				}
				next.After = recs[len(recs)-1].ID
				recs = append(recs, &next)
			}
		}
		for i := range d.Also {
			rec, err := r.intent(t, inst, n, &d.Also[i], st)
			if err != nil {
				return plan{}, err
			}
			recs = append(recs, &rec)
		}
		p.Record, p.Chain = recs[0], recs[1:]
	}
	if d.RemoveFinalizer {
		p.RemoveFinalizer = true
		p.OnRelease = func() { reportLeftInPlace(r.Recorder, t, d.LeftInPlace) }
	}
	return p, nil
}

// decide runs DecideTenant, reading each read-on-demand fact it asks for
// (at most once each) and deciding again, and returns its complete
// decision.
func (r *TenantReconciler) decide(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, inst *databasev1alpha1.PostgreSQLInstance, n tenantNames, facts TenantFacts) (TenantDecision, error) {
	facts.Read = 0
	for {
		d := DecideTenant(facts, r.Policy)
		if d.Need == 0 {
			return d, nil
		}
		if facts.Read&d.Need != 0 {
			return TenantDecision{}, fmt.Errorf("DecideTenant asked again for fact %d", d.Need)
		}
		facts.Read |= d.Need
		var err error
		switch d.Need {
		case FactTargetTaken:
			facts.TargetTaken, err = r.targetTaken(ctx, t, n, facts.Journal)
		case FactProjectionSynced:
			facts.ProjectionSynced, err = r.projectionSynced(ctx, t, n)
		case FactDrift:
			facts.Drift, err = r.projectionDrift(ctx, t, n)
			if changed := credentialDrift(facts.Journal, r.credentialIntent(inst, n)); err == nil && facts.Drift == "" && len(changed) > 0 {
				facts.Drift = "the Instance endpoint changed (" + strings.Join(changed, ", ") + "); the credential record and the Secret follow it"
			}
		default:
			return TenantDecision{}, fmt.Errorf("DecideTenant asked for an unknown fact %d", d.Need)
		}
		if err != nil {
			return TenantDecision{}, err
		}
	}
}

// provisionedAs returns the intent of the last successful ClaimOwnership
// (nil: nothing was ever claimed): the Instance, database, role and
// credential path the Tenant's external objects were created under.
func provisionedAs(st *journal.State) *dbcontract.TenantIntent {
	var last *journal.Record
	for _, in := range st.Intents {
		if in.Operation != dbcontract.OpClaimOwnership || (last != nil && in.Sequence < last.Sequence) {
			continue
		}
		if o, ok := st.OutcomeOf(in.ID); ok && o.Result != nil && o.Result.Class == journal.Succeeded {
			in := in
			last = &in
		}
	}
	if last == nil {
		return nil
	}
	var p dbcontract.TenantIntent
	if last.DecodePayload(&p) != nil {
		return nil
	}
	return &p
}

// provisionedSecret is the target Secret name of the last successful
// EnsureExternalSecret ("": none yet): the projection target is fixed
// from then on.
func provisionedSecret(st *journal.State) string {
	var last *journal.Record
	for _, in := range st.Intents {
		if in.Operation != dbcontract.OpEnsureExternalSecret || (last != nil && in.Sequence < last.Sequence) {
			continue
		}
		if o, ok := st.OutcomeOf(in.ID); ok && o.Result != nil && o.Result.Class == journal.Succeeded {
			in := in
			last = &in
		}
	}
	var p dbcontract.ProjectionIntent
	if last == nil || last.DecodePayload(&p) != nil {
		return ""
	}
	return p.TargetSecretName
}

// provisionedChanges lists the fields that differ from what was claimed.
func provisionedChanges(claimed *dbcontract.TenantIntent, n tenantNames, inst *databasev1alpha1.PostgreSQLInstance, ierr error) []string {
	var errs []string
	if ierr == nil && string(inst.UID) != claimed.InstanceUID {
		errs = append(errs, fmt.Sprintf("spec.instanceRef names PostgreSQLInstance %s (uid %s), but this Tenant was provisioned on the Instance with uid %s", inst.Name, inst.UID, claimed.InstanceUID))
	}
	if claimed.Database != n.database {
		errs = append(errs, fmt.Sprintf("spec.database is %s but %s was provisioned", n.database, claimed.Database))
	}
	if claimed.Role != n.role {
		errs = append(errs, fmt.Sprintf("spec.loginRole is %s but %s was provisioned", n.role, claimed.Role))
	}
	return errs
}

// namespaceNotAllowed says why ns may not use inst ("" when it may): its
// spec.allowedNamespaces, with the namespace's labels read only when a
// selector needs them.
func (r *TenantReconciler) namespaceNotAllowed(ctx context.Context, inst *databasev1alpha1.PostgreSQLInstance, ns string) (string, error) {
	var nsLabels map[string]string
	if a := inst.Spec.AllowedNamespaces; a != nil && a.Selector != nil && !slices.Contains(a.Names, ns) {
		n := &corev1.Namespace{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: ns}, n); err != nil {
			return "", client.IgnoreNotFound(err)
		}
		nsLabels = n.Labels
	}
	_, why := dbcontract.NamespaceAllowed(inst, ns, nsLabels)
	return why, nil
}

// instanceByUID finds an Instance by UID (nil: none has it).
func (r *TenantReconciler) instanceByUID(ctx context.Context, uid string) (*databasev1alpha1.PostgreSQLInstance, error) {
	var list databasev1alpha1.PostgreSQLInstanceList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if string(list.Items[i].UID) == uid {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

func instanceReady(i *databasev1alpha1.PostgreSQLInstance) bool {
	c := meta.FindStatusCondition(i.Status.Conditions, databasev1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && i.Status.ObservedGeneration == i.Generation
}

// intent builds the intent record of a planned step, with the payload of
// the executor that runs it.
func (r *TenantReconciler) intent(t *databasev1alpha1.PostgreSQLTenant, inst *databasev1alpha1.PostgreSQLInstance, n tenantNames, p *PlannedIntent, st *journal.State) (journal.Record, error) {
	spec := instanceSpecWithDefaults(inst.Spec)
	ep := dbcontract.Endpoint{Host: spec.Endpoint.Host, HostAddr: spec.Endpoint.HostAddr, Port: spec.Endpoint.Port,
		Database: spec.Endpoint.Database, SSLMode: string(spec.Endpoint.SSLMode)}
	var payload any
	cred := r.credentialIntent(inst, n)
	switch p.Operation {
	case dbcontract.OpWriteCredential, dbcontract.OpDestroyCredential:
		cred.AlreadyIssued = passwordIssued(st)
		payload = cred
	case dbcontract.OpEnsureExternalSecret, dbcontract.OpObserveProjection, dbcontract.OpDeleteExternalSecret, dbcontract.OpRetainExternalSecret:
		pi := dbcontract.ProjectionIntent{ExternalSecret: n.externalSecret, TargetSecretName: n.secret, StoreName: r.Config.StoreName,
			RemoteKey: n.kvPath, OwnerAPIVersion: databasev1alpha1.GroupVersion.String(), OwnerKind: "PostgreSQLTenant"}
		if p.Operation == dbcontract.OpEnsureExternalSecret || p.Operation == dbcontract.OpObserveProjection {
			_, pi.CredentialVersion = lastCredential(st)
		}
		if p.Operation == dbcontract.OpEnsureExternalSecret || p.Operation == dbcontract.OpDeleteExternalSecret {
			pi.OwnedES = ownedExternalSecrets(st)
		}
		payload = pi
	default:
		exts := append([]string(nil), t.Spec.Extensions...)
		slices.Sort(exts)
		payload = dbcontract.TenantIntent{Endpoint: ep, InstanceUID: string(inst.UID), Database: n.database, Role: n.role,
			CredentialMount: r.Config.KVMount, CredentialPath: n.kvPath, Extensions: exts,
			AdminCredRef: dbcontract.AdminCredentialRef{SecretName: spec.AdminCredentialRef.Name, UsernameKey: spec.AdminCredentialRef.UsernameKey,
				PasswordKey: spec.AdminCredentialRef.PasswordKey}}
	}
	return journal.NewIntent(objectRef(t), p.Operation, "", p.Attempt, payload)
}

// credentialIntent is the credential record the Tenant should have now.
func (r *TenantReconciler) credentialIntent(inst *databasev1alpha1.PostgreSQLInstance, n tenantNames) dbcontract.CredentialIntent {
	spec := instanceSpecWithDefaults(inst.Spec)
	return dbcontract.CredentialIntent{Mount: r.Config.KVMount, Path: n.kvPath, InstanceUID: string(inst.UID), Username: n.role,
		Database: n.database, Host: spec.Endpoint.Host, HostAddr: spec.Endpoint.HostAddr, Port: spec.Endpoint.Port, SSLMode: string(spec.Endpoint.SSLMode)}
}

// projectTenant writes the decision into status and emits Events.
func (r *TenantReconciler) projectTenant(ctx context.Context, t *databasev1alpha1.PostgreSQLTenant, n tenantNames, d TenantDecision) error {
	before := t.DeepCopy()
	t.Status.Phase = d.Phase
	if d.Phase != databasev1alpha1.TenantPhasePending || t.Status.Database != "" {
		t.Status.Database, t.Status.LoginRole = n.database, n.role
		t.Status.Credential.SecretRef.Name = n.secret
		t.Status.Credential.OpenBaoURL = n.url
	}
	if d.DatabaseOID != 0 {
		t.Status.DatabaseOID = d.DatabaseOID
	}
	if d.Conclusive {
		t.Status.ObservedGeneration = t.Generation
	}
	old := setReady(&t.Status.Conditions, t.Generation, d.Ready)
	a, b := before.Status, t.Status
	if a.Phase == b.Phase && a.ObservedGeneration == b.ObservedGeneration && a.Database == b.Database && a.LoginRole == b.LoginRole &&
		a.DatabaseOID == b.DatabaseOID && a.Credential == b.Credential && journaled.EqualConditions(a.Conditions, b.Conditions) {
		return nil
	}
	return client.IgnoreNotFound(patchStatus(ctx, r.Client, r.Recorder, t, before, old, d.Ready))
}
