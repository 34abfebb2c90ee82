package execution

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// RBAC of the Job projector. Secrets and ConfigMaps are read (uncached)
// only to check that an env reference's key exists before the Job is
// accepted; their values are never kept, logged or written anywhere.
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobs/status,verbs=patch
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get

// KindJob is the Job's kind as journal object references name it.
const KindJob = "Job"

// NewOutcomeRouter routes the execution domain's outcomes to the Job
// projector (a manager Runnable; For(KindJob) is its channel).
func NewOutcomeRouter(j *journal.Store) *journaled.OutcomeRouter {
	return journaled.NewOutcomeRouter(j, execution.Domain, KindJob)
}

// JobReconciler is the Job projector: it resolves a Job's class, decides
// with DecideJob, appends the intent before anything happens and writes
// the status. It never talks to a backend.
type JobReconciler struct {
	Client client.Client
	// APIReader reads Secrets and ConfigMaps (uncached) for the env
	// reference check, and confirms a lost status.
	APIReader client.Reader
	Journal   *journal.Store
	Recorder  events.EventRecorder
	Policy    JobPolicy
	Clock     clock.PassiveClock
	// Adapters are the execution backends this manager runs (at least
	// one; a class of another controller is not accepted here): the
	// parameters kinds read and watched, each adapter's admission, and
	// the adapter an Ensure names.
	Adapters execution.Adapters
	// Workers is how many Jobs are reconciled at once (default 4; one Job
	// is never reconciled by two workers at once).
	Workers int
	// NoIntentEvents: no IntentAppended Event per decided step (the
	// journal has every intent); the condition changes still get theirs.
	NoIntentEvents bool

	observed *journaled.Observations
	// changes follows the executions passes wait on, for the adapters'
	// change feeds (nil: none set up).
	changes *executionChanges
}

// SetupWithManager registers the projector and its watches: Jobs, the
// classes, parameters and namespaces they resolve against, and the
// journal's outcomes.
func (r *JobReconciler) SetupWithManager(mgr ctrl.Manager, outcomes <-chan reconcile.Request) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.observed = journaled.NewObservations(r.Clock)
	if r.Policy == (JobPolicy{}) {
		r.Policy = DefaultJobPolicy
	}
	if err := r.Adapters.Validate(); err != nil {
		return fmt.Errorf("job projector: %w", err)
	}
	waiting := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.waitingJobs(ctx, "")
	})
	if r.Workers <= 0 {
		r.Workers = 4
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("job").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		// Not For: a Job whose deletion started goes first
		// (journaled.PriorityReleasing), as do the outcomes of its steps.
		Watches(&executionv1alpha1.Job{}, journaled.EnqueueReleasingFirst(),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&executionv1alpha1.JobClass{}, waiting).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.waitingJobs(ctx, o.GetName())
		}))
	for _, a := range r.Adapters {
		b = b.Watches(a.NewParameters(), waiting)
	}
	if outcomes != nil {
		b = b.WatchesRawSource(journaled.ReleasingFirst(outcomes, r.releasing))
	}
	r.changes = newExecutionChanges()
	for _, a := range r.Adapters {
		if a.Changes == nil {
			continue
		}
		src, err := a.Changes(r.changes.changed)
		if err != nil {
			return fmt.Errorf("job projector: change feed of adapter %s: %w", a.Name, err)
		}
		b = b.WatchesRawSource(src)
	}
	return b.Complete(r)
}

// releasing: the cached Job of req is being deleted (the order of the
// projector's work, journaled.PriorityReleasing).
func (r *JobReconciler) releasing(ctx context.Context, req reconcile.Request) bool {
	var j executionv1alpha1.Job
	return r.Client.Get(ctx, req.NamespacedName, &j) == nil && !j.DeletionTimestamp.IsZero()
}

// waitingJobs are the Jobs (of namespace ns, "" = all) that wait for a
// class, parameters or namespace change: not accepted, or accepted without
// an execution yet.
func (r *JobReconciler) waitingJobs(ctx context.Context, ns string) []reconcile.Request {
	var list executionv1alpha1.JobList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		j := &list.Items[i]
		if IsTerminal(&j.Status) || meta.IsStatusConditionTrue(j.Status.Conditions, executionv1alpha1.JobConditionScheduled) {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(j)})
	}
	return out
}

// Reconcile runs one pass (the journaled skeleton with jobKind).
func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	announce := r.Recorder
	if r.NoIntentEvents {
		announce = nil
	}
	return journaled.Reconcile(ctx, req, journaled.Deps{Client: r.Client, APIReader: r.APIReader, Journal: r.Journal, Recorder: announce,
		Observed: r.observed}, jobKind{r})
}

// jobKind is the Job's part of the skeleton.
type jobKind struct{ r *JobReconciler }

func (jobKind) New() *executionv1alpha1.Job { return &executionv1alpha1.Job{} }
func (jobKind) Finalizer() string           { return executionv1alpha1.JobFinalizer }
func (jobKind) StatusPhase(j *executionv1alpha1.Job) string {
	if len(j.Status.Conditions) == 0 {
		return ""
	}
	return string(StateOf(j))
}

// Plan gathers the pass's facts and decides.
func (k jobKind) Plan(ctx context.Context, j *executionv1alpha1.Job, h journaled.History) (journaled.Plan[JobDecision], error) {
	r := k.r
	f := JobFacts{Now: r.Clock.Now()}
	pinned := j.Status.ResolvedJobClass
	if j.DeletionTimestamp.IsZero() && !IsTerminal(&j.Status) {
		if pinned == nil {
			res, err := r.resolve(ctx, j)
			if err != nil {
				return journaled.Plan[JobDecision]{}, err
			}
			f.Resolution = res
			if res != nil {
				pinned = res.Class
			}
			if res != nil && res.Reason == "" && res.Class != nil {
				// Accepted in this pass: the first Ensure can be decided
				// in it too, once the class's readiness is known.
				reason, msg, err := r.classReadiness(ctx, res.Class)
				if err != nil {
					return journaled.Plan[JobDecision]{}, err
				}
				f.ClassReason, f.ClassMessage, f.ClassChecked = reason, msg, true
			}
		} else if !meta.IsStatusConditionTrue(j.Status.Conditions, executionv1alpha1.JobConditionScheduled) {
			reason, msg, err := r.classReadiness(ctx, j.Status.ResolvedJobClass)
			if err != nil {
				return journaled.Plan[JobDecision]{}, err
			}
			f.ClassReason, f.ClassMessage = reason, msg
		}
	}
	if pinned != nil {
		if a, ok := r.Adapters.ForController(pinned.ControllerName); ok {
			f.Adapter = a.Name
		}
	}
	if r.changes != nil {
		key, uid := client.ObjectKeyFromObject(j), j.UID
		f.ExecutionChanged = func(ref execution.Reference, revision string) bool { return r.changes.Changed(key, uid, ref, revision) }
	}
	d := DecideJob(j, h.Records, f, r.Policy)
	if r.changes != nil && (d.RemoveFinalizer || IsTerminal(&d.Status)) {
		r.changes.Forget(j.UID)
	}
	p := journaled.Plan[JobDecision]{Status: d, Requeue: d.Requeue, RequeueAfter: d.RequeueAfter, RemoveFinalizer: d.RemoveFinalizer, StatusFirst: d.StatusFirst}
	ref := objectRef(j)
	switch {
	case d.Note != "":
		note, err := journal.NewNote(ref, d.Note, h.State.LastSequence, d.NotePayload)
		if err != nil {
			return p, err
		}
		p.Record = &note
	case d.Intent != nil:
		rec, err := journal.NewIntent(ref, d.Intent.Operation, d.Intent.Step,
			journaled.NextAttempt(h.State, d.Intent.Operation, j.Generation), d.Intent.Payload)
		if err != nil {
			return p, err
		}
		p.Record = &rec
		// A running Job is observed every few seconds: those intents are
		// in the journal, not in Events.
		p.Quiet = d.Intent.Operation == execution.OpObserve
	}
	return p, nil
}

func objectRef(j *executionv1alpha1.Job) journal.ObjectRef {
	return journal.ObjectRef{Group: executionv1alpha1.GroupVersion.Group, Kind: KindJob, Namespace: j.Namespace, Name: j.Name,
		UID: string(j.UID), Generation: j.Generation}
}

// Project writes the decided status (one optimistic write, none when
// nothing changed) and emits an Event when the Job is accepted, refused,
// or reaches its result.
func (k jobKind) Project(ctx context.Context, j *executionv1alpha1.Job, d JobDecision) error {
	if statusEqual(&j.Status, &d.Status) {
		return nil
	}
	if !j.DeletionTimestamp.IsZero() && statusEqual(withoutGenerations(&j.Status), withoutGenerations(&d.Status)) {
		// The API server raises a custom resource's generation when its
		// deletion starts: a Job on its way out gets no status write for
		// that alone (one API write per deleted Job less, issue 28).
		return nil
	}
	before := j.DeepCopy()
	old := j.Status.DeepCopy()
	j.Status = d.Status
	if err := journaled.PatchStatus(ctx, k.r.Client, j, before); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	k.announce(j, old, &d.Status)
	return nil
}

// withoutGenerations is a copy of st without its observed generations
// (the status's and each condition's).
func withoutGenerations(st *executionv1alpha1.JobStatus) *executionv1alpha1.JobStatus {
	c := st.DeepCopy()
	c.ObservedGeneration = 0
	for i := range c.Conditions {
		c.Conditions[i].ObservedGeneration = 0
	}
	return c
}

func statusEqual(a, b *executionv1alpha1.JobStatus) bool {
	if !journaled.EqualConditions(a.Conditions, b.Conditions) {
		return false
	}
	x, y := a.DeepCopy(), b.DeepCopy()
	x.Conditions, y.Conditions = nil, nil
	return equality.Semantic.DeepEqual(x, y)
}

// announce emits Events for condition changes users act on.
func (k jobKind) announce(j *executionv1alpha1.Job, old, cur *executionv1alpha1.JobStatus) {
	rec := k.r.Recorder
	if rec == nil {
		return
	}
	changed := func(typ string) (*metav1.Condition, bool) {
		c := meta.FindStatusCondition(cur.Conditions, typ)
		if c == nil {
			return nil, false
		}
		o := meta.FindStatusCondition(old.Conditions, typ)
		return c, o == nil || o.Status != c.Status || o.Reason != c.Reason
	}
	if c, ok := changed(executionv1alpha1.JobConditionAccepted); ok && c.Status != metav1.ConditionTrue {
		// A refusal is a Warning; an acceptance has no Event of its own
		// (one API write per Job less, issue 28): Scheduled follows it,
		// BackendCreated or a Warning saying why not.
		rec.Eventf(j, nil, corev1.EventTypeWarning, c.Reason, "Accept", "%s", c.Message)
	}
	if c, ok := changed(executionv1alpha1.JobConditionScheduled); ok && c.Reason != executionv1alpha1.ReasonNotScheduled {
		typ := corev1.EventTypeNormal
		if c.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		rec.Eventf(j, nil, typ, c.Reason, "Schedule", "%s", c.Message)
	}
	if c, ok := changed(executionv1alpha1.JobConditionSucceeded); ok {
		switch {
		case c.Status == metav1.ConditionTrue:
			rec.Eventf(j, nil, corev1.EventTypeNormal, c.Reason, "Finish", "%s", c.Message)
		case c.Status == metav1.ConditionFalse || c.Reason == executionv1alpha1.ReasonResultUnknown:
			rec.Eventf(j, nil, corev1.EventTypeWarning, c.Reason, "Finish", "%s", c.Message)
		case c.Reason == executionv1alpha1.ReasonRunning:
			rec.Eventf(j, nil, corev1.EventTypeNormal, c.Reason, "Start", "%s", c.Message)
		}
	}
}

// resolve reads what acceptance depends on and returns the verdict. An
// error is a failed read (retried), never a verdict.
func (r *JobReconciler) resolve(ctx context.Context, j *executionv1alpha1.Job) (*Resolution, error) {
	refuse := func(reason, format string, args ...any) (*Resolution, error) {
		return &Resolution{Reason: reason, Message: fmt.Sprintf(format, args...)}, nil
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: j.Namespace}, &ns); err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", j.Namespace, err)
	}
	var classes executionv1alpha1.JobClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return nil, fmt.Errorf("list JobClasses: %w", err)
	}
	choice := ChooseJobClass(j, &ns, classes.Items)
	if choice.Reason != "" {
		return refuse(choice.Reason, "%s", choice.Message)
	}
	class := choice.Class
	adapter, ok := r.Adapters.ForController(class.Spec.ControllerName)
	if !ok {
		return refuse(executionv1alpha1.ReasonJobClassNotAccepted, "JobClass %s belongs to controller %s, which this manager does not run", class.Name, class.Spec.ControllerName)
	}
	if c := meta.FindStatusCondition(class.Status.Conditions, executionv1alpha1.JobClassConditionAccepted); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != class.Generation {
		why := "its controller has not accepted it yet"
		if c != nil && c.Status == metav1.ConditionFalse {
			why = c.Reason + ": " + c.Message
		}
		return refuse(executionv1alpha1.ReasonJobClassNotAccepted, "JobClass %s is not accepted (%s)", class.Name, why)
	}
	allowed, err := NamespaceAllowed(class, &ns)
	if err != nil || !allowed {
		return refuse(executionv1alpha1.ReasonNamespaceNotAllowed, "JobClass %s does not allow namespace %s (allowedNamespaces)", class.Name, j.Namespace)
	}
	params, err := r.parameters(ctx, class.Spec.ControllerName, class.Spec.ParametersRef)
	if err != nil {
		return nil, err
	}
	if params == nil {
		return refuse(executionv1alpha1.ReasonJobClassNotAccepted, "JobClass %s: parameters %s %s not found", class.Name, class.Spec.ParametersRef.Kind, class.Spec.ParametersRef.Name)
	}
	res, reason, msg := EffectiveResources(j.Spec.Resources, class.Spec.Resources)
	if reason != "" {
		return refuse(reason, "%s", msg)
	}
	// The adapter's own rules come before the env check: a Secret the
	// parameters do not let the adapter send is not even read.
	if adapter.Admit != nil {
		if reason, msg := adapter.Admit(j, params, res); reason != "" {
			return refuse(reason, "%s", msg)
		}
	}
	if reason, msg, err := r.checkEnv(ctx, j); err != nil || reason != "" {
		if err != nil {
			return nil, err
		}
		return refuse(reason, "%s", msg)
	}
	pref := class.Spec.ParametersRef
	pref.UID = params.GetUID()
	return &Resolution{
		Class:     &executionv1alpha1.ResolvedJobClassReference{Name: class.Name, UID: class.UID, ControllerName: class.Spec.ControllerName, ParametersRef: pref},
		Resources: res,
	}, nil
}

// parametersUID returns the UID of the parameters object ref names ("":
// not found, being deleted, or not of the kind of controller's adapter).
func (r *JobReconciler) parametersUID(ctx context.Context, controller string, ref executionv1alpha1.ParametersReference) (types.UID, error) {
	obj, err := r.parameters(ctx, controller, ref)
	if err != nil || obj == nil {
		return "", err
	}
	return obj.GetUID(), nil
}

// parameters reads the parameters object ref names (nil: not found, being
// deleted, or not of the kind of controller's adapter).
func (r *JobReconciler) parameters(ctx context.Context, controller string, ref executionv1alpha1.ParametersReference) (client.Object, error) {
	a, ok := r.Adapters.ForKind(ref.Group, ref.Kind)
	if !ok || a.ControllerName != controller {
		return nil, nil
	}
	obj := a.NewParameters()
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ref.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s %s: %w", ref.Kind, ref.Name, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil, nil
	}
	return obj, nil
}

// checkEnv checks that every non-optional Secret/ConfigMap key an env
// variable references exists. Values are read only to test the key's
// presence and dropped at once; messages name objects and keys, never
// values.
func (r *JobReconciler) checkEnv(ctx context.Context, j *executionv1alpha1.Job) (string, string, error) {
	if reason, msg := invalidReferences(j); reason != "" {
		return reason, msg, nil
	}
	for _, e := range j.Spec.Task.Env {
		if e.ValueFrom == nil {
			continue
		}
		var kind, name, key string
		var optional bool
		var has func() (bool, error)
		switch {
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			kind, name, key, optional = "Secret", ref.Name, ref.Key, ref.Optional != nil && *ref.Optional
			has = func() (bool, error) {
				var s corev1.Secret
				if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: name}, &s); err != nil {
					return false, err
				}
				_, ok := s.Data[key]
				if !ok {
					_, ok = s.StringData[key]
				}
				return ok, nil
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			kind, name, key, optional = "ConfigMap", ref.Name, ref.Key, ref.Optional != nil && *ref.Optional
			has = func() (bool, error) {
				var c corev1.ConfigMap
				if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: name}, &c); err != nil {
					return false, err
				}
				_, ok := c.Data[key]
				if !ok {
					_, ok = c.BinaryData[key]
				}
				return ok, nil
			}
		default:
			continue
		}
		ok, err := has()
		switch {
		case apierrors.IsNotFound(err):
			if !optional {
				return executionv1alpha1.ReasonEnvReferenceNotFound, fmt.Sprintf("env %s: %s %s/%s not found; the Job waits for it", e.Name, kind, j.Namespace, name), nil
			}
		case err != nil:
			return "", "", fmt.Errorf("read %s %s/%s for env %s: %w", kind, j.Namespace, name, e.Name, err)
		case !ok && !optional:
			return executionv1alpha1.ReasonEnvReferenceNotFound, fmt.Sprintf("env %s: %s %s/%s has no key %q; the Job waits for it", e.Name, kind, j.Namespace, name, key), nil
		}
	}
	return "", "", nil
}

// invalidReferences refuses references the schema accepts but no object
// can satisfy (an empty or malformed Secret/ConfigMap name, a malformed
// key): they are never read (a read of an empty name is an error, not a
// NotFound) and would make the native Job invalid even when optional.
func invalidReferences(j *executionv1alpha1.Job) (string, string) {
	bad := func(format string, args ...any) (string, string) {
		return executionv1alpha1.ReasonInvalidEnvReference, fmt.Sprintf(format, args...) + "; recreate the Job with a valid reference"
	}
	for i, s := range j.Spec.Task.ImagePullSecrets {
		if len(validation.IsDNS1123Subdomain(s.Name)) > 0 {
			return bad("imagePullSecrets[%d]: %q is not a valid Secret name", i, s.Name)
		}
	}
	for _, e := range j.Spec.Task.Env {
		if e.ValueFrom == nil {
			continue
		}
		var kind, name, key string
		switch {
		case e.ValueFrom.SecretKeyRef != nil:
			kind, name, key = "Secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.ConfigMapKeyRef != nil:
			kind, name, key = "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key
		default:
			continue
		}
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return bad("env %s: %q is not a valid %s name", e.Name, name, kind)
		}
		if len(validation.IsConfigMapKey(key)) > 0 {
			return bad("env %s: %q is not a valid %s key", e.Name, key, kind)
		}
	}
	return "", ""
}

// classReadiness says why no new execution may start for the pinned
// class ("" when it may): the class or its parameters are gone or were
// recreated with another UID (never adopted), or the class is not Ready.
func (r *JobReconciler) classReadiness(ctx context.Context, rc *executionv1alpha1.ResolvedJobClassReference) (string, string, error) {
	if _, ok := r.Adapters.ForController(rc.ControllerName); !ok {
		return executionv1alpha1.ReasonClassNotReady, fmt.Sprintf("no adapter of this manager runs controller %s of JobClass %s; the Job waits for a manager that does", rc.ControllerName, rc.Name), nil
	}
	var class executionv1alpha1.JobClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: rc.Name}, &class); err != nil {
		if apierrors.IsNotFound(err) {
			return executionv1alpha1.ReasonJobClassNotFound, fmt.Sprintf("JobClass %s (UID %s) the Job was accepted with is gone; it is never replaced by another class", rc.Name, rc.UID), nil
		}
		return "", "", err
	}
	if class.UID != rc.UID {
		return executionv1alpha1.ReasonJobClassNotFound, fmt.Sprintf("JobClass %s was recreated (UID %s, accepted with %s); the Job does not adopt it", rc.Name, class.UID, rc.UID), nil
	}
	uid, err := r.parametersUID(ctx, rc.ControllerName, rc.ParametersRef)
	if err != nil {
		return "", "", err
	}
	if uid != rc.ParametersRef.UID {
		return executionv1alpha1.ReasonParametersChanged, fmt.Sprintf("%s %s the Job was accepted with is gone or was recreated; the Job does not adopt another", rc.ParametersRef.Kind, rc.ParametersRef.Name), nil
	}
	if c := meta.FindStatusCondition(class.Status.Conditions, executionv1alpha1.JobClassConditionReady); c != nil && c.Status == metav1.ConditionFalse {
		return executionv1alpha1.ReasonClassNotReady, fmt.Sprintf("JobClass %s is not ready (%s: %s)", class.Name, c.Reason, c.Message), nil
	}
	return "", "", nil
}

// quantity renders q ("" when unset).
func quantity(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	return q.String()
}

// StateOf derives a Job's presentation state from its durable facts
// (docs/execution/job-api.md "State machine"; never stored).
func StateOf(j *executionv1alpha1.Job) string {
	if !j.DeletionTimestamp.IsZero() {
		return "Deleting"
	}
	s := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionSucceeded)
	if s != nil {
		switch s.Status {
		case metav1.ConditionTrue:
			return "Succeeded"
		case metav1.ConditionFalse:
			if s.Reason == executionv1alpha1.ReasonCancelled {
				return "Cancelled"
			}
			return "Failed"
		}
	}
	switch {
	case j.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled:
		return "Cancelling"
	case s != nil && s.Reason == executionv1alpha1.ReasonResultUnknown:
		return "ResultUnknown"
	case j.Status.StartTime != nil:
		return "Running"
	case meta.IsStatusConditionTrue(j.Status.Conditions, executionv1alpha1.JobConditionScheduled):
		return "Starting"
	case meta.IsStatusConditionTrue(j.Status.Conditions, executionv1alpha1.JobConditionAccepted):
		return "Scheduling"
	}
	return "Resolving"
}
