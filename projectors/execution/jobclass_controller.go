package execution

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// RBAC of the JobClass controller and the parameters protection.
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobclasses,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobclasses/status,verbs=patch
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Field indexes of the execution projectors (registered by
// JobClassReconciler.SetupWithManager; a second registration of the same
// index by another controller of the manager is tolerated).
const (
	// IndexJobResolvedClassUID indexes Jobs by status.resolvedJobClass.uid.
	IndexJobResolvedClassUID = "status.resolvedJobClass.uid"
	// IndexJobClassParameters indexes JobClasses by their parametersRef as
	// ParametersKey(group, kind, name).
	IndexJobClassParameters = "spec.parametersRef"
)

// Event reasons of the JobClass controller beyond the condition reasons
// (which are also emitted as Event reasons on every transition).
const (
	// EventDeletionBlocked: a JobClass or parameters object is being
	// deleted and is still referenced; its finalizer stays.
	EventDeletionBlocked = "DeletionBlocked"
	// EventFinalizerRemoved: nothing references the object any more; its
	// protection finalizer was removed.
	EventFinalizerRemoved = "FinalizerRemoved"
)

// ParametersKey is the IndexJobClassParameters key of a parameters
// object: "group/kind/name".
func ParametersKey(group, kind, name string) string { return group + "/" + kind + "/" + name }

// JobClassReconciler keeps JobClass status (Accepted, Ready,
// observedGeneration) and the protection finalizers of JobClasses
// (executionv1alpha1.JobClassFinalizer, kept while a non-terminal Job was
// accepted with the class's UID) and of the parameters objects
// (executionv1alpha1.ParametersFinalizer, kept while a JobClass references
// them by group/kind/name). It knows no backend: the Adapters it is given
// say which controller names and parameters kinds it accepts, and decide
// Ready through their Ready and Probe.
type JobClassReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, bypassing the cache; it
	// re-checks references before a protection finalizer is removed (nil:
	// Client is used).
	APIReader client.Reader
	// Recorder emits Events on condition transitions and blocked deletions.
	Recorder events.EventRecorder
	// Adapters are the execution backends this manager runs (at least
	// one): a class is Accepted only for an adapter's controllerName with
	// that adapter's parameters kind, and Ready by the adapter's Ready and
	// Probe.
	Adapters execution.Adapters
	// ProbeInterval is how often a class whose adapter has a probe is
	// probed again, so that a backend recovering or an API key rotated in
	// its Secret is noticed without a Secret watch (default
	// DefaultProbeInterval).
	ProbeInterval time.Duration
}

// DefaultProbeInterval is JobClassReconciler.ProbeInterval's default.
const DefaultProbeInterval = 30 * time.Second

// SetupWithManager registers the indexes, the JobClass controller and one
// protection controller per parameters kind.
func (r *JobClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
	if err := r.Adapters.Validate(); err != nil {
		return fmt.Errorf("jobclass projector: %w", err)
	}
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &executionv1alpha1.Job{}, IndexJobResolvedClassUID, func(o client.Object) []string {
		if rc := o.(*executionv1alpha1.Job).Status.ResolvedJobClass; rc != nil && rc.UID != "" {
			return []string{string(rc.UID)}
		}
		return nil
	}); err != nil && !indexAlreadyRegistered(err) {
		return err
	}
	if err := idx.IndexField(ctx, &executionv1alpha1.JobClass{}, IndexJobClassParameters, func(o client.Object) []string {
		p := o.(*executionv1alpha1.JobClass).Spec.ParametersRef
		return []string{ParametersKey(p.Group, p.Kind, p.Name)}
	}); err != nil && !indexAlreadyRegistered(err) {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("jobclass").
		For(&executionv1alpha1.JobClass{}).
		Watches(&executionv1alpha1.Job{}, handler.EnqueueRequestsFromMapFunc(r.deletingClassOfJob))
	watched := map[string]bool{} // Go type and, for unstructured objects, GroupVersionKind
	for _, a := range r.Adapters {
		b = b.Watches(a.NewParameters(), handler.EnqueueRequestsFromMapFunc(r.classesOfParameters(a.ParametersGroupName(), a.ParametersKind)))
		for _, w := range a.Watches {
			if k := fmt.Sprintf("%s %s", reflect.TypeOf(w), w.GetObjectKind().GroupVersionKind()); !watched[k] {
				watched[k] = true
				b = b.Watches(w, handler.EnqueueRequestsFromMapFunc(r.allClasses))
			}
		}
	}
	if err := b.Complete(r); err != nil {
		return err
	}
	for _, a := range r.Adapters {
		p := &parametersProtection{r: r, group: a.ParametersGroupName(), kind: a.ParametersKind, newObj: a.NewParameters}
		err := ctrl.NewControllerManagedBy(mgr).
			Named(strings.ToLower(a.ParametersKind)+"-protection").
			For(a.NewParameters()).
			Watches(&executionv1alpha1.JobClass{}, handler.EnqueueRequestsFromMapFunc(p.parametersOfClass)).
			Complete(p)
		if err != nil {
			return err
		}
	}
	return nil
}

// deletingClassOfJob maps a Job to the class it was accepted with, only
// while that class is being deleted (the only time a Job matters to it).
func (r *JobClassReconciler) deletingClassOfJob(ctx context.Context, o client.Object) []reconcile.Request {
	rc := o.(*executionv1alpha1.Job).Status.ResolvedJobClass
	if rc == nil || rc.Name == "" {
		return nil
	}
	c := &executionv1alpha1.JobClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: rc.Name}, c); err != nil || c.DeletionTimestamp == nil || c.UID != rc.UID {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: rc.Name}}}
}

// allClasses enqueues every JobClass (a change of an object an adapter's
// Ready reads: the class count is small and the check is a cache read).
func (r *JobClassReconciler) allClasses(ctx context.Context, _ client.Object) []reconcile.Request {
	var list executionv1alpha1.JobClassList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
	}
	return out
}

func (r *JobClassReconciler) classesOfParameters(group, kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list executionv1alpha1.JobClassList
		key := ParametersKey(group, kind, o.GetName())
		if err := r.Client.List(ctx, &list, client.MatchingFields{IndexJobClassParameters: key}); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, c := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
		}
		return out
	}
}

// Reconcile runs one pass over a JobClass: finalizer first, then the
// deletion path or the status conditions (one status write, only when
// something changed). A class whose parameters kind has a probe is
// reconciled again after ProbeInterval.
func (r *JobClassReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	class := &executionv1alpha1.JobClass{}
	if err := r.Client.Get(ctx, req.NamespacedName, class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if class.DeletionTimestamp != nil {
		return reconcile.Result{}, r.reconcileDelete(ctx, class)
	}
	if !controllerutil.ContainsFinalizer(class, executionv1alpha1.JobClassFinalizer) {
		patch := client.MergeFromWithOptions(class.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(class, executionv1alpha1.JobClassFinalizer)
		if err := r.Client.Patch(ctx, class, patch); err != nil {
			return reconcile.Result{}, err
		}
	}
	accepted, ready, probed, err := r.evaluate(ctx, class)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writeStatus(ctx, class, accepted, ready); err != nil {
		return reconcile.Result{}, err
	}
	if probed {
		// Nothing watches the backend or the API key's Secret: look again.
		return reconcile.Result{RequeueAfter: r.probeInterval()}, nil
	}
	return reconcile.Result{}, nil
}

func (r *JobClassReconciler) probeInterval() time.Duration {
	if r.ProbeInterval > 0 {
		return r.ProbeInterval
	}
	return DefaultProbeInterval
}

// evaluate computes the Accepted and Ready conditions of class (without
// observedGeneration and transition times). probed: the class is
// Accepted and its adapter has a probe (called when the adapter's Ready
// leaves the class Ready), so it is to be probed again.
func (r *JobClassReconciler) evaluate(ctx context.Context, class *executionv1alpha1.JobClass) (accepted, ready metav1.Condition, probed bool, err error) {
	accepted = metav1.Condition{Type: executionv1alpha1.JobClassConditionAccepted}
	ready = metav1.Condition{Type: executionv1alpha1.JobClassConditionReady}
	notAccepted := func(reason, format string, args ...any) (metav1.Condition, metav1.Condition, bool, error) {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, reason, fmt.Sprintf(format, args...)
		ready.Status, ready.Reason = metav1.ConditionFalse, executionv1alpha1.ReasonJobClassNotAccepted
		ready.Message = "the class is not accepted (" + reason + ")"
		return accepted, ready, false, nil
	}
	spec := class.Spec
	ref := spec.ParametersRef
	adapter, ok := r.Adapters.ForController(spec.ControllerName)
	if !ok {
		return notAccepted(executionv1alpha1.ReasonUnsupportedController, "no controller of this manager owns controllerName %s", spec.ControllerName)
	}
	if ref.Group != adapter.ParametersGroupName() || ref.Kind != adapter.ParametersKind {
		return notAccepted(executionv1alpha1.ReasonInvalidParametersReference,
			"controller %s does not support parameters %s %s (supported: %s in group %s)",
			spec.ControllerName, ref.Kind, ref.Group, adapter.ParametersKind, adapter.ParametersGroupName())
	}
	params := adapter.NewParameters()
	switch err := r.Client.Get(ctx, types.NamespacedName{Name: ref.Name}, params); {
	case apierrors.IsNotFound(err):
		return notAccepted(executionv1alpha1.ReasonParametersNotFound, "%s %s does not exist", ref.Kind, ref.Name)
	case err != nil:
		return accepted, ready, false, err
	}
	if reason, msg := CheckResourcePolicy(spec.Resources); reason != "" {
		return notAccepted(reason, "%s", msg)
	}
	accepted.Status, accepted.Reason = metav1.ConditionTrue, executionv1alpha1.ReasonAccepted
	accepted.Message = fmt.Sprintf("controller %s accepts the class with %s %s (uid %s)", spec.ControllerName, ref.Kind, ref.Name, params.GetUID())

	ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, executionv1alpha1.ReasonBackendReachable, "the class can take new executions"
	if adapter.Ready != nil {
		reason, msg, err := adapter.Ready(ctx, r.Client, params)
		if err != nil {
			return accepted, ready, false, err
		}
		if reason != "" {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, reason, msg
		}
	}
	if probe := adapter.Probe; probe != nil {
		if ready.Status != metav1.ConditionTrue {
			return accepted, ready, true, nil
		}
		if ok, reason, msg := probe(ctx, params); !ok {
			if reason == "" {
				reason = executionv1alpha1.ReasonBackendUnavailable
			}
			if msg == "" {
				msg = fmt.Sprintf("the backend of %s %s can not take new executions", ref.Kind, ref.Name)
			}
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, reason, msg
		}
		return accepted, ready, true, nil
	}
	return accepted, ready, false, nil
}

// writeStatus sets the conditions and observedGeneration, writes status
// once when anything changed, and emits an Event per changed condition.
func (r *JobClassReconciler) writeStatus(ctx context.Context, class *executionv1alpha1.JobClass, conds ...metav1.Condition) error {
	before := class.DeepCopy()
	var transitions []metav1.Condition
	for _, c := range conds {
		c.ObservedGeneration = class.Generation
		// A copy: SetStatusCondition updates the condition in place.
		var old *metav1.Condition
		if o := meta.FindStatusCondition(class.Status.Conditions, c.Type); o != nil {
			cp := *o
			old = &cp
		}
		if meta.SetStatusCondition(&class.Status.Conditions, c) && (old == nil || old.Status != c.Status || old.Reason != c.Reason) {
			transitions = append(transitions, c)
		}
	}
	class.Status.ObservedGeneration = class.Generation
	if equalStatus(before.Status, class.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, class, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	for _, c := range transitions {
		typ := corev1.EventTypeNormal
		if c.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		r.event(class, typ, c.Reason, c.Type, "%s=%s: %s", c.Type, c.Status, c.Message)
	}
	return nil
}

func equalStatus(a, b executionv1alpha1.JobClassStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range a.Conditions {
		o := meta.FindStatusCondition(b.Conditions, c.Type)
		if o == nil || *o != c {
			return false
		}
	}
	return true
}

// reconcileDelete removes the class's finalizer once no non-terminal Job
// was accepted with its UID (checked in the cache, then confirmed on the
// API server); otherwise it keeps the finalizer and says why in Ready.
func (r *JobClassReconciler) reconcileDelete(ctx context.Context, class *executionv1alpha1.JobClass) error {
	if !controllerutil.ContainsFinalizer(class, executionv1alpha1.JobClassFinalizer) {
		return nil
	}
	var cached executionv1alpha1.JobList
	if err := r.Client.List(ctx, &cached, client.MatchingFields{IndexJobResolvedClassUID: string(class.UID)}); err != nil {
		return err
	}
	blocking := blockingJobs(cached.Items, class.UID)
	if len(blocking) == 0 {
		// Confirm on the API server before the destructive step: the
		// cache may lag behind a Job that was just accepted.
		var fresh executionv1alpha1.JobList
		if err := r.APIReader.List(ctx, &fresh); err != nil {
			return err
		}
		blocking = blockingJobs(fresh.Items, class.UID)
	}
	if len(blocking) > 0 {
		shown := blocking
		if len(shown) > 5 {
			shown = shown[:5]
		}
		msg := fmt.Sprintf("deletion waits for %d non-terminal Job(s) accepted with this class: %s", len(blocking), strings.Join(shown, ", "))
		prev := meta.FindStatusCondition(class.Status.Conditions, executionv1alpha1.JobClassConditionReady)
		if prev == nil || prev.Reason != executionv1alpha1.ReasonJobClassDeleting || prev.Message != msg {
			r.event(class, corev1.EventTypeWarning, EventDeletionBlocked, "Delete", "%s", msg)
		}
		ready := metav1.Condition{Type: executionv1alpha1.JobClassConditionReady, Status: metav1.ConditionFalse,
			Reason: executionv1alpha1.ReasonJobClassDeleting, Message: msg}
		accepted := metav1.Condition{Type: executionv1alpha1.JobClassConditionAccepted}
		if old := meta.FindStatusCondition(class.Status.Conditions, accepted.Type); old != nil {
			accepted = *old
		} else {
			accepted = metav1.Condition{Type: accepted.Type, Status: metav1.ConditionUnknown, Reason: executionv1alpha1.ReasonJobClassDeleting, Message: "the class is being deleted"}
		}
		return r.writeStatus(ctx, class, accepted, ready)
	}
	patch := client.MergeFromWithOptions(class.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(class, executionv1alpha1.JobClassFinalizer)
	if err := r.Client.Patch(ctx, class, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.event(class, corev1.EventTypeNormal, EventFinalizerRemoved, "Delete", "no non-terminal Job references the class; finalizer %s removed", executionv1alpha1.JobClassFinalizer)
	return nil
}

// blockingJobs lists "namespace/name" of the Jobs accepted with class UID
// uid whose Succeeded condition is neither True nor False (sorted).
func blockingJobs(jobs []executionv1alpha1.Job, uid types.UID) []string {
	var out []string
	for _, j := range jobs {
		rc := j.Status.ResolvedJobClass
		if rc == nil || rc.UID != uid {
			continue
		}
		if s := meta.FindStatusCondition(j.Status.Conditions, executionv1alpha1.JobConditionSucceeded); s != nil && s.Status != metav1.ConditionUnknown {
			continue
		}
		out = append(out, j.Namespace+"/"+j.Name)
	}
	sort.Strings(out)
	return out
}

func (r *JobClassReconciler) event(obj client.Object, typ, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, typ, reason, action, format, args...)
	}
}

// parametersProtection keeps executionv1alpha1.ParametersFinalizer on the
// parameters objects of one kind while a JobClass references them.
type parametersProtection struct {
	r           *JobClassReconciler
	group, kind string
	newObj      func() client.Object
}

func (p *parametersProtection) parametersOfClass(_ context.Context, o client.Object) []reconcile.Request {
	ref := o.(*executionv1alpha1.JobClass).Spec.ParametersRef
	if ref.Group != p.group || ref.Kind != p.kind {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ref.Name}}}
}

// Reconcile adds the finalizer while a JobClass references the object and
// removes it once none does (confirmed on the API server).
func (p *parametersProtection) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r := p.r
	obj := p.newObj()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	key := ParametersKey(p.group, p.kind, obj.GetName())
	var cached executionv1alpha1.JobClassList
	if err := r.Client.List(ctx, &cached, client.MatchingFields{IndexJobClassParameters: key}); err != nil {
		return reconcile.Result{}, err
	}
	refs := classNames(cached.Items, key)
	has := controllerutil.ContainsFinalizer(obj, executionv1alpha1.ParametersFinalizer)
	if len(refs) == 0 && has {
		var fresh executionv1alpha1.JobClassList
		if err := r.APIReader.List(ctx, &fresh); err != nil {
			return reconcile.Result{}, err
		}
		refs = classNames(fresh.Items, key)
	}
	switch {
	case len(refs) > 0 && !has:
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(obj, executionv1alpha1.ParametersFinalizer)
		return reconcile.Result{}, r.Client.Patch(ctx, obj, patch)
	case len(refs) > 0 && obj.GetDeletionTimestamp() != nil:
		r.event(obj, corev1.EventTypeWarning, EventDeletionBlocked, "Delete", "deletion waits for the JobClass(es) referencing it: %s", strings.Join(refs, ", "))
	case len(refs) == 0 && has:
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(obj, executionv1alpha1.ParametersFinalizer)
		if err := r.Client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if obj.GetDeletionTimestamp() != nil {
			r.event(obj, corev1.EventTypeNormal, EventFinalizerRemoved, "Delete", "no JobClass references it; finalizer %s removed", executionv1alpha1.ParametersFinalizer)
		}
	}
	return reconcile.Result{}, nil
}

func classNames(classes []executionv1alpha1.JobClass, key string) []string {
	var out []string
	for _, c := range classes {
		ref := c.Spec.ParametersRef
		if ParametersKey(ref.Group, ref.Kind, ref.Name) == key {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// indexAlreadyRegistered: the field index exists already (another
// controller of this manager registered it first). A text match because
// client-go's threadSafeMap.AddIndexers returns an untyped
// fmt.Errorf("indexer conflict: ...") that controller-runtime passes
// through; it only decides whether setup fails.
func indexAlreadyRegistered(err error) bool {
	return strings.Contains(err.Error(), "indexer conflict")
}
