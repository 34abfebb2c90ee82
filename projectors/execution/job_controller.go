package execution

import (
	"context"
	"fmt"
	"strings"

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
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobclasses;kubernetesexecutionparameters;opensandboxexecutionparameters,verbs=get;list;watch
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
	// Controllers are the class controller names this manager runs an
	// adapter for (a class of another controller is not accepted here).
	Controllers []string
	// Workers is how many Jobs are reconciled at once (default 4; one Job
	// is never reconciled by two workers at once).
	Workers int

	observed *journaled.Observations
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
	if len(r.Controllers) == 0 {
		r.Controllers = []string{executionv1alpha1.ControllerKubernetes}
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
		For(&executionv1alpha1.Job{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&executionv1alpha1.JobClass{}, waiting).
		Watches(&executionv1alpha1.KubernetesExecutionParameters{}, waiting).
		Watches(&executionv1alpha1.OpenSandboxExecutionParameters{}, waiting).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.waitingJobs(ctx, o.GetName())
		}))
	if outcomes != nil {
		b = b.WatchesRawSource(journaled.Source(outcomes))
	}
	return b.Complete(r)
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
	return journaled.Reconcile(ctx, req, journaled.Deps{Client: r.Client, APIReader: r.APIReader, Journal: r.Journal, Recorder: r.Recorder,
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
	if j.DeletionTimestamp.IsZero() && !IsTerminal(&j.Status) {
		if j.Status.ResolvedJobClass == nil {
			res, err := r.resolve(ctx, j)
			if err != nil {
				return journaled.Plan[JobDecision]{}, err
			}
			f.Resolution = res
		} else if !meta.IsStatusConditionTrue(j.Status.Conditions, executionv1alpha1.JobConditionScheduled) {
			reason, msg, err := r.classReadiness(ctx, j.Status.ResolvedJobClass)
			if err != nil {
				return journaled.Plan[JobDecision]{}, err
			}
			f.ClassReason, f.ClassMessage = reason, msg
		}
	}
	d := DecideJob(j, h.Records, f, r.Policy)
	p := journaled.Plan[JobDecision]{Status: d, Requeue: d.Requeue, RequeueAfter: d.RequeueAfter, RemoveFinalizer: d.RemoveFinalizer}
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
	if c, ok := changed(executionv1alpha1.JobConditionAccepted); ok {
		typ := corev1.EventTypeNormal
		if c.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		rec.Eventf(j, nil, typ, c.Reason, "Accept", "%s", c.Message)
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
	if !contains(r.Controllers, class.Spec.ControllerName) {
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
	params, err := r.parameters(ctx, class.Spec.ParametersRef)
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
	if osp, ok := params.(*executionv1alpha1.OpenSandboxExecutionParameters); ok {
		if reason, msg := AdmitOpenSandbox(j, osp); reason != "" {
			return refuse(reason, "%s", msg)
		}
		if reason, msg := AdmitOpenSandboxResources(res, osp); reason != "" {
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
		Adapter:   adapterOf(class.Spec.ControllerName),
	}, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// parametersUID returns the UID of the parameters object ref names ("":
// not found, being deleted, or of a kind this manager does not know).
func (r *JobReconciler) parametersUID(ctx context.Context, ref executionv1alpha1.ParametersReference) (types.UID, error) {
	obj, err := r.parameters(ctx, ref)
	if err != nil || obj == nil {
		return "", err
	}
	return obj.GetUID(), nil
}

// parameters reads the parameters object ref names (nil: not found, being
// deleted, or of a kind this manager does not know).
func (r *JobReconciler) parameters(ctx context.Context, ref executionv1alpha1.ParametersReference) (client.Object, error) {
	newObj, ok := parametersKinds[ref.Kind]
	if ref.Group != executionv1alpha1.GroupVersion.Group || !ok {
		return nil, nil
	}
	obj := newObj()
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

// AdmitOpenSandbox checks a Job against the OpenSandbox parameters of its
// class (docs/execution/jobclass-api.md C11) before it is accepted: an env
// variable that references a Secret needs params.spec.allowSecretEnv,
// task.imagePullSecrets need params.spec.allowImageAuth (either would
// make the adapter send a Secret's content to OpenSandbox), and the task
// needs a command (the adapter runs it as a command in the sandbox and can
// not read the image's entrypoint). It returns "", "" when the Job is
// admitted, else executionv1alpha1.ReasonSecretEnvNotAllowed,
// ReasonImageAuthNotAllowed or ReasonCommandRequired and a message naming
// the variable or Secret and the parameters object, never a value. It
// reads nothing.
func AdmitOpenSandbox(j *executionv1alpha1.Job, params *executionv1alpha1.OpenSandboxExecutionParameters) (string, string) {
	task := j.Spec.Task
	if !params.Spec.AllowSecretEnv {
		for _, e := range task.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			return executionv1alpha1.ReasonSecretEnvNotAllowed, fmt.Sprintf(
				"env %s references Secret %s, but OpenSandboxExecutionParameters %s do not set allowSecretEnv (the adapter would send the Secret's value to OpenSandbox); the Job waits until they do",
				e.Name, e.ValueFrom.SecretKeyRef.Name, params.Name)
		}
	}
	if !params.Spec.AllowImageAuth && len(task.ImagePullSecrets) > 0 {
		names := make([]string, 0, len(task.ImagePullSecrets))
		for _, s := range task.ImagePullSecrets {
			names = append(names, s.Name)
		}
		return executionv1alpha1.ReasonImageAuthNotAllowed, fmt.Sprintf(
			"imagePullSecrets names Secret(s) %s, but OpenSandboxExecutionParameters %s do not set allowImageAuth (the adapter would send registry credentials to OpenSandbox); the Job waits until they do",
			strings.Join(names, ", "), params.Name)
	}
	if len(task.Command) == 0 {
		return executionv1alpha1.ReasonCommandRequired,
			"the OpenSandbox adapter runs the task as a command in the sandbox and can not read the image's entrypoint; set task.command"
	}
	return "", ""
}

// AdmitOpenSandboxResources checks a Job's effective resources against
// the requestMapping of its OpenSandbox parameters: under Native every set
// request must equal its limit, because the lifecycle API has only
// resourceLimits (executionv1alpha1.ReasonRequestMappingUnsupported otherwise);
// under AdmissionOnly requests only admit. It reads nothing.
func AdmitOpenSandboxResources(res executionv1alpha1.ExecutionResourceRequirements, params *executionv1alpha1.OpenSandboxExecutionParameters) (string, string) {
	if params.Spec.RequestMapping != executionv1alpha1.OpenSandboxRequestMappingNative {
		return "", ""
	}
	for _, p := range []struct {
		name     string
		req, lim *resource.Quantity
	}{{"cpu", res.Requests.CPU, res.Limits.CPU}, {"memory", res.Requests.Memory, res.Limits.Memory}} {
		if p.req == nil {
			continue
		}
		if p.lim == nil || p.req.Cmp(*p.lim) != 0 {
			return executionv1alpha1.ReasonRequestMappingUnsupported, fmt.Sprintf(
				"OpenSandboxExecutionParameters %s set requestMapping Native, but OpenSandbox has only resourceLimits: the effective %s request must equal its limit; the Job waits until the class or the parameters change",
				params.Name, p.name)
		}
	}
	return "", ""
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
	uid, err := r.parametersUID(ctx, rc.ParametersRef)
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
