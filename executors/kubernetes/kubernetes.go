// Package kubernetes is the Kubernetes execution adapter: it executes the
// journal intents of the execution domain (contracts/execution: Ensure,
// Observe, Cancel, Delete) for Ayatori Jobs (execution.ayatori.ddupan.top
// Job) by running one batch/v1 Job, the native Job, per Ayatori Job UID.
//
// Native Job identity: namespace = the Ayatori Job's namespace, name =
// execution.NativeJobName(UID), label execution.LabelJobUID = UID on the
// Job and its pod template, annotations execution.AnnotationJobName,
// execution.AnnotationJobNamespace and AnnotationCreationProof (the
// manager's signature over namespace, name and the Ayatori Job's UID).
// Names and labels can be copied by anyone who may create Jobs in the
// namespace, so an object with that name is this Job's only by proof: its
// UID is the one the journal recorded from the Ensure that created it
// (the intents carry the references), or, while none is recorded (a crash
// between the create and its outcome), it carries a valid creation proof.
// Anything else is not this Job's: every operation reports a Failed
// outcome with reason Conflict (Observation State NotFound: this Job has
// no execution) and never modifies or deletes it. Its pods are those it
// controls that run the template Ayatori built; a lookalike pod is ignored
// (and counted in the observation's message), and a completion the Job
// controller reports without one of Ayatori's pods succeeding is Failed.
//
// Native Job shape: backoffLimit 0, completions 1, parallelism 1, pod
// restartPolicy Never, the parameters' ServiceAccount (never "default"
// instead of a missing one), runtimeClassName, nodeSelector, tolerations and
// pod security context, enableServiceLinks false (the task's environment is
// exactly the one it declares), one container named "task" with the task's
// image, command, args, working directory and image pull secrets, the
// parameters' imagePullPolicy, the effective resources of the Ensure intent,
// and env literals as values, references as native secretKeyRef and
// configMapKeyRef (the kubelet resolves them; the executor never reads a
// Secret or ConfigMap). The native Job has no owner reference (the workload
// cluster may not be the management cluster, where the Ayatori Job lives),
// no activeDeadlineSeconds (the projector enforces the deadline with a
// Cancel counted from the observed start) and no ttlSecondsAfterFinished
// (Delete removes it once the projector is done with it).
//
// Operations:
//
//	Ensure   re-reads the Ayatori Job, its parameters and the
//	         ServiceAccount and refuses, creating nothing, when the Job
//	         is gone, recreated, being deleted or cancelled (Cancelled), its
//	         task no longer matches the intent's digest (TaskChanged), the
//	         parameters are gone or recreated (ParametersChanged), the
//	         ServiceAccount is missing (ServiceAccountNotFound) or the
//	         resources do not parse (InvalidResources); then creates it
//	         (Created true only when this create succeeded). Whenever the
//	         create does not succeed, it reads the native Job by name and
//	         reports one created before (Created false) instead of the
//	         refusal or the error.
//	Observe  reads the native Job and its pods (see observe).
//	Cancel   sets spec.suspend (merge patch with an optimistic lock): the
//	         Job controller deletes the active pods. Repeatable.
//	Delete   deletes the native Job (UID precondition, foreground), waits
//	         up to DeleteWait for a finished one to be gone (on one watch of
//	         its name when Workload can watch, else reads at 100 ms,
//	         doubling) and reports NotFound once it is, else Succeeded with
//	         State Stopping ("deletion in progress"): the projector asks
//	         again.
//
// Outcomes: a Succeeded outcome carries the Observation (Result.Message is
// "<State>: <Observation.Message>"; Result.Reason stays empty, so an observed
// failure never reads as the operation's failure). A refusal is a Failed outcome whose
// Observation has the state the executor knows (NotFound for every Ensure
// refusal: nothing was created). A definite API refusal (see classify.go)
// is a Failed outcome with a stable reason (Forbidden, InvalidSpec, ...) and
// an Observation only when the state is known; a transient API failure is
// returned as an error, and the journal redelivers the intent.
//
// The intent's references are informational: the executor always finds the
// execution by its name and UID label.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;create;patch;delete;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobs;kubernetesexecutionparameters,verbs=get;list;watch

// Reasons of Failed outcomes the executor decides itself (besides the API
// reasons of executionv1alpha1 and classify.go).
const (
	// ReasonConflict: an object with the native Job's name exists and does
	// not carry this Job's UID label; it is left untouched.
	ReasonConflict = "Conflict"
	// ReasonTaskChanged: the Job's task no longer has the intent's digest.
	ReasonTaskChanged = "TaskChanged"
)

// LabelManagedBy marks the native Jobs and their pods as Ayatori's.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// labelControllerUID is the label the Job controller puts on a Job's pods.
const labelControllerUID = "batch.kubernetes.io/controller-uid"

// AnnotationCreationProof on a native Job is the manager's proof that it
// created it for the Ayatori Job it names (journal.ObjectProof over its
// namespace, name and the Ayatori Job's UID).
const AnnotationCreationProof = "execution.ayatori.ddupan.top/creation-proof"

// ParametersKind is the kind of the parameters object this adapter reads.
const ParametersKind = "KubernetesExecutionParameters"

// DefaultTimeout bounds one operation's API requests.
const DefaultTimeout = 30 * time.Second

// DefaultDeleteWait is Executor.DeleteWait's default: enough for the
// garbage collector to remove a finished Job's pods and the Job, short
// enough that a running pod's grace period is left to a later Delete.
const DefaultDeleteWait = 2 * time.Second

// Executor executes the execution domain's intents with batch/v1 Jobs.
// Both clients must read from the API server (client.New, not a manager's
// cache): Ensure depends on seeing its own creates. Only Ensure's
// admission reads may go to a cache first (Cached).
type Executor struct {
	// Management reads the management cluster: Ayatori Jobs and
	// KubernetesExecutionParameters (its scheme must have the execution
	// API). Uncached.
	Management client.Reader
	// Cached, when set, is the manager's informer cache of the management
	// cluster: Ensure's admission reads the Ayatori Job and its JobClass
	// there first, and reads them again through Management only when
	// that admission refuses or a read fails. The Job's task is immutable
	// and its class is matched by UID; the parameters, whose spec goes
	// into the pod (ServiceAccount, runtime class, security context), are
	// always read fresh. A Job deleted or cancelled while the cache lags
	// gets an execution that its Cancel and Delete then remove, as when
	// the deletion comes right after the Ensure. Nil: every read is fresh.
	Cached client.Reader
	// Workload is the cluster the native Jobs run in (usually the same
	// cluster): batch/v1 Jobs, pods, ServiceAccounts. Uncached reads.
	// When it also implements client.WithWatch (client.NewWithWatch),
	// Delete waits for a finished native Job's removal on one watch of
	// its name instead of reading it again every 100 ms, doubling (it
	// falls back to those reads when the watch can not follow, e.g.
	// without the watch right on batch/v1 Jobs).
	Workload client.Client
	// Actor names this executor instance; it is the field manager of the
	// native Jobs' writes (default "ayatori-executor-kubernetes").
	Actor string
	// Proof signs and checks the creation proof of native Jobs (the
	// manager's journal keys). Required.
	Proof journal.ObjectProof
	// Timeout bounds one operation's API requests (default DefaultTimeout).
	Timeout time.Duration
	// DeleteWait is how long Delete waits, after its foreground delete of
	// a finished native Job, for it to be gone before it reports Stopping
	// (default DefaultDeleteWait; negative: no wait). A finished Job's pods
	// are already stopped, so one Delete is then enough: no second intent
	// after a retry back-off. A running Job is not waited for.
	DeleteWait time.Duration
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger
}

// Validate reports a missing client or proof key, and a Management client
// whose scheme (when it exposes one) lacks the execution API.
func (e *Executor) Validate() error {
	if e.Management == nil || e.Workload == nil {
		return errors.New("executors/kubernetes: Management and Workload clients are required")
	}
	if e.Proof.Signer == nil || e.Proof.Trust == nil {
		return errors.New("executors/kubernetes: the creation proof needs the journal signing key and trusted keys")
	}
	if m, ok := e.Management.(interface{ Scheme() *runtime.Scheme }); ok {
		for _, kind := range []string{"Job", ParametersKind} {
			if !m.Scheme().Recognizes(executionv1alpha1.GroupVersion.WithKind(kind)) {
				return fmt.Errorf("executors/kubernetes: the Management client's scheme lacks %s %s", executionv1alpha1.GroupVersion, kind)
			}
		}
	}
	return nil
}

// Register registers the handlers of execution.Operations on d under the
// backend name execution.AdapterKubernetes. It fails as Validate does, or
// when an operation is registered twice.
func (e *Executor) Register(d *journal.Dispatcher) error {
	if err := e.Validate(); err != nil {
		return err
	}
	return d.HandleAll(execution.AdapterKubernetes, e.Handlers())
}

// Handlers returns the journal handlers by operation (execution.Operations).
func (e *Executor) Handlers() map[string]journal.Handler {
	b := &journal.Backend{Name: execution.AdapterKubernetes, Deadline: e.Timeout, Log: e.Log,
		Classify: execution.Classifier(classify), Complete: execution.Complete(execution.AdapterKubernetes)}
	return map[string]journal.Handler{
		execution.OpEnsure:  journal.Execute(b, journal.Step[execution.EnsureIntent]{Run: execution.Observed(e.ensure), Validate: validEnsure}),
		execution.OpObserve: journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(ignoring(e.observeOp))}),
		execution.OpCancel:  journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(ignoring(e.cancel))}),
		execution.OpDelete:  journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(ignoring(e.delete))}),
	}
}

func (e *Executor) fieldOwner() client.FieldOwner {
	if e.Actor != "" {
		return client.FieldOwner(e.Actor)
	}
	return client.FieldOwner("ayatori-executor-kubernetes")
}

// ignoring adapts a step that reads nothing from its payload (the
// intent's references are informational: see the package doc).
func ignoring(fn func(ctx context.Context, rec journal.Record) (execution.Observation, error)) func(context.Context, journal.Record, execution.ExecutionIntent) (execution.Observation, error) {
	return func(ctx context.Context, rec journal.Record, _ execution.ExecutionIntent) (execution.Observation, error) {
		return fn(ctx, rec)
	}
}

// validEnsure refuses an Ensure without a task digest or for another
// adapter (nothing is created).
func validEnsure(_ journal.Record, in execution.EnsureIntent) error {
	if in.TaskDigest == "" || (in.Adapter != "" && in.Adapter != execution.AdapterKubernetes) {
		return execution.Refused(journal.ReasonUndecodableIntent, "the Ensure payload lacks the task digest or names another adapter", execution.StateNotFound)
	}
	return nil
}

// native is where the native Job of rec's Job lives, and the UID of the
// one the journal says this Job's Ensure created ("": none recorded yet).
type native struct {
	ns, name, uid string
	created       string
}

func nativeOf(rec journal.Record) (native, error) {
	name, err := execution.NativeJobName(rec.Object.UID)
	if err != nil || rec.Object.Namespace == "" {
		return native{}, &execution.Failure{Reason: journal.ReasonUndecodableIntent, Message: "the intent's Job UID or namespace can not name a native Job"}
	}
	n := native{ns: rec.Object.Namespace, name: name, uid: rec.Object.UID}
	var refs struct {
		References []execution.Reference `json:"references"`
	}
	_ = rec.DecodePayload(&refs)
	for _, r := range refs.References {
		if r.Type == ReferenceTypeJob {
			n.created = r.ID
		}
	}
	return n, nil
}

// creationProof is what the native Job of n carries in
// AnnotationCreationProof: the manager's proof that it created it for this
// Job.
func (e *Executor) creationProof(n native) string {
	return e.CreationProof(n.ns, n.name, n.uid)
}

// CreationProof is the AnnotationCreationProof value of the native Job
// namespace/name made for the Ayatori Job with UID jobUID.
func (e *Executor) CreationProof(namespace, name, jobUID string) string {
	return e.Proof.Sign(proofPurpose, namespace+"/"+name+"/"+jobUID)
}

const proofPurpose = "kubernetes native Job"

// get reads the native Job: nil when there is none, a Conflict refusal
// when the object of that name is not this Job's. It is this Job's only by
// proof, never by its name or labels (anyone who may create Jobs in the
// namespace can copy those): the one whose UID the journal recorded from
// the Ensure that created it, or, while none is recorded (a crash between
// the create and its outcome), one that carries the manager's creation
// proof for this Job.
func (e *Executor) get(ctx context.Context, n native) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := e.Workload.Get(ctx, types.NamespacedName{Namespace: n.ns, Name: n.name}, job)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	foreign := func(why string) error {
		return &execution.Failure{Reason: ReasonConflict, State: execution.StateNotFound,
			Message: fmt.Sprintf("a batch/v1 Job %s/%s exists that Ayatori did not create for this Job (%s); it was left untouched", n.ns, n.name, why)}
	}
	switch {
	case job.Labels[execution.LabelJobUID] != n.uid:
		return nil, foreign("it lacks this Job's UID label")
	case n.created != "" && string(job.UID) != n.created:
		return nil, foreign("its UID is not the one this Job's Ensure created")
	case n.created == "" && !e.Proof.Verify(proofPurpose, n.ns+"/"+n.name+"/"+n.uid, job.Annotations[AnnotationCreationProof]):
		return nil, foreign("it has no valid creation proof")
	}
	return job, nil
}

// pods lists the pods of native Job job: those carrying the Job
// controller's label and this Job's UID label that job controls (its
// controller owner reference) and that run the template Ayatori built
// (the task container's image, command and arguments, the
// ServiceAccount). Anything else with those labels (a pod someone created
// to look like the task's) is left out and counted in ignored.
func (e *Executor) pods(ctx context.Context, job *batchv1.Job) (own []corev1.Pod, ignored int, err error) {
	var list corev1.PodList
	if err := e.Workload.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{
		labelControllerUID:    string(job.UID),
		execution.LabelJobUID: job.Labels[execution.LabelJobUID],
	}); err != nil {
		return nil, 0, err
	}
	for _, p := range list.Items {
		if ownedPod(job, &p) {
			own = append(own, p)
		} else {
			ignored++
		}
	}
	return own, ignored, nil
}

// ownedPod: pod is controlled by job and runs its template's task.
func ownedPod(job *batchv1.Job, pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != job.UID || ref.Kind != "Job" {
		return false
	}
	want := job.Spec.Template.Spec
	if pod.Spec.ServiceAccountName != want.ServiceAccountName || len(pod.Spec.Containers) != 1 || len(want.Containers) != 1 ||
		len(pod.Spec.InitContainers) != 0 || len(pod.Spec.EphemeralContainers) != 0 {
		return false
	}
	got, tmpl := pod.Spec.Containers[0], want.Containers[0]
	return got.Name == tmpl.Name && got.Image == tmpl.Image && slices.Equal(got.Command, tmpl.Command) && slices.Equal(got.Args, tmpl.Args)
}

// observeJob observes job (nil: NotFound) with its pods.
func (e *Executor) observeJob(ctx context.Context, job *batchv1.Job) (execution.Observation, error) {
	if job == nil {
		return observe(nil, nil), nil
	}
	pods, ignored, err := e.pods(ctx, job)
	if err != nil {
		return execution.Observation{}, err
	}
	o := observe(job, pods)
	if o.State == execution.StateSucceeded && !succeededOwnPod(pods) && (len(pods) > 0 || ignored > 0) {
		// The Job controller counts every pod it adopted: a completion
		// stands only on Ayatori's own pod (or on no pod left at all, as
		// after the pod garbage collector).
		o = execution.Observation{State: execution.StateFailed, Terminal: true, Adapter: execution.AdapterKubernetes, References: o.References,
			Reason: executionv1alpha1.ReasonBackendFailed, FinishTime: o.FinishTime,
			Message: "the native Job reports completion, but no pod it created from Ayatori's template succeeded (a pod someone else created may have completed it)"}
	}
	if ignored > 0 {
		o.Message = strings.TrimSpace(o.Message + fmt.Sprintf(" (%d pod(s) with this Job's labels that its native Job did not create from Ayatori's template were ignored)", ignored))
	}
	return o, nil
}

// observeOp executes Observe.
func (e *Executor) observeOp(ctx context.Context, rec journal.Record) (execution.Observation, error) {
	n, err := nativeOf(rec)
	if err != nil {
		return execution.Observation{}, err
	}
	job, err := e.get(ctx, n)
	if err != nil {
		return execution.Observation{}, err
	}
	return e.observeJob(ctx, job)
}

// cancel executes Cancel: spec.suspend=true unless the native Job finished,
// is suspended or is being deleted; then the fresh observation.
func (e *Executor) cancel(ctx context.Context, rec journal.Record) (execution.Observation, error) {
	n, err := nativeOf(rec)
	if err != nil {
		return execution.Observation{}, err
	}
	for attempt := 0; ; attempt++ {
		job, err := e.get(ctx, n)
		if err != nil || job == nil {
			return observe(nil, nil), err
		}
		if finished(job) || (job.Spec.Suspend != nil && *job.Spec.Suspend) || job.DeletionTimestamp != nil {
			return e.observeJob(ctx, job)
		}
		orig := job.DeepCopy()
		suspend := true
		job.Spec.Suspend = &suspend
		err = e.Workload.Patch(ctx, job, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), e.fieldOwner())
		switch {
		case err == nil:
			return e.observeJob(ctx, job)
		case isNotFound(err):
			return observe(nil, nil), nil
		case isConflict(err) && attempt < 3:
			continue // changed since the read: read again
		default:
			return execution.Observation{}, err
		}
	}
}

// finished: the native Job has a Complete or Failed condition.
func finished(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobComplete) != nil || jobCondition(job, batchv1.JobFailed) != nil
}

// delete executes Delete: a foreground delete with the native Job's UID as
// precondition, then fresh reads until it is gone or DeleteWait passed.
func (e *Executor) delete(ctx context.Context, rec journal.Record) (execution.Observation, error) {
	n, err := nativeOf(rec)
	if err != nil {
		return execution.Observation{}, err
	}
	job, err := e.get(ctx, n)
	if err != nil || job == nil {
		return observe(nil, nil), err
	}
	// Only a finished Job is waited for: its pods are stopped, so the
	// garbage collector removes it at once; a running one's pods have
	// their grace period (a later Delete reads the rest).
	wait := e.DeleteWait
	if wait == 0 {
		wait = DefaultDeleteWait
	}
	if !finished(job) {
		wait = 0
	}
	if job.DeletionTimestamp == nil {
		uid := job.UID
		err := e.Workload.Delete(ctx, job, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationForeground))
		switch {
		case isNotFound(err):
			return observe(nil, nil), nil
		case err != nil:
			// A Conflict (the UID precondition failed: another object took
			// the name) is transient: the redelivery reads it again.
			return execution.Observation{}, err
		}
	}
	deadline := time.Now().Add(wait)
	if w, ok := e.Workload.(client.WithWatch); ok && wait > 0 {
		gone, last, err := waitGone(ctx, w, job, deadline)
		switch {
		case err != nil:
			return execution.Observation{}, err
		case gone:
			return observe(nil, nil), nil
		case last != nil:
			return execution.Observation{State: execution.StateStopping, References: references(last), Revision: last.ResourceVersion, Message: "deletion in progress"}, nil
		}
		// The watch could not follow the Job: poll for the time left.
	}
	// The read above (or the delete's answer) is this instant: the first
	// fresh read comes after the first pause, not right away.
	for pause := 100 * time.Millisecond; ; pause *= 2 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return execution.Observation{}, ctx.Err()
		case <-time.After(min(pause, left)):
		}
		job, err = e.get(ctx, n)
		if err != nil || job == nil {
			return observe(nil, nil), err
		}
	}
	return execution.Observation{State: execution.StateStopping, References: references(job), Revision: job.ResourceVersion, Message: "deletion in progress"}, nil
}

// waitGone follows native Job job, which Delete just deleted, on one watch
// of its name (from the resourceVersion job was read at) until the API
// server reports its removal (gone) or deadline passes (last: the latest
// state seen). The watch is the API server's own stream of that name, not
// a cache selected by labels, and the removal counts only for job's UID.
// last is nil, with no error, when the watch could not follow the Job (it
// could not start, for example without the watch right, or it ended before
// the deadline, or the resourceVersion had expired): the caller reads again
// instead. err is the context's error when ctx ends.
func waitGone(ctx context.Context, w client.WithWatch, job *batchv1.Job, deadline time.Time) (gone bool, last *batchv1.Job, err error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	wi, err := w.Watch(wctx, &batchv1.JobList{}, client.InNamespace(job.Namespace),
		client.MatchingFields{"metadata.name": job.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: job.ResourceVersion}})
	if err != nil {
		return false, nil, ctx.Err()
	}
	defer wi.Stop()
	last = job
	timedOut := func() (bool, *batchv1.Job, error) {
		if ctx.Err() != nil {
			return false, nil, ctx.Err()
		}
		return false, last, nil
	}
	for {
		select {
		case <-wctx.Done():
			return timedOut()
		case ev, open := <-wi.ResultChan():
			switch {
			case !open && wctx.Err() != nil:
				// Closed because the deadline passed (or ctx ended).
				return timedOut()
			case !open:
				return false, nil, nil
			}
			j, ok := ev.Object.(*batchv1.Job)
			switch {
			case ev.Type == watch.Error || !ok:
				return false, nil, nil
			case j.UID != job.UID:
				// Another object that took the name: not this one.
			case ev.Type == watch.Deleted:
				return true, nil, nil
			default:
				last = j
			}
		}
	}
}

// ensure executes Ensure (see the package doc). The create comes first:
// a new execution costs no read of the native Job before it (issue 28).
// Whenever the create does not succeed (the name is taken, the admission
// refuses, the API refuses or does not answer), the native Job is read by
// name, and one created before (a crash after the create, a redelivery, a
// Job cancelled since) is reported instead: a refusal says "no execution
// was created" only when none exists.
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in execution.EnsureIntent) (execution.Observation, error) {
	n, err := nativeOf(rec)
	if err != nil {
		return execution.Observation{}, err
	}
	o, err := e.create(ctx, rec, in, n)
	if err == nil {
		return o, nil
	}
	job, gerr := e.get(ctx, n)
	switch {
	case gerr != nil:
		return execution.Observation{}, gerr
	case job != nil:
		return e.observeJob(ctx, job)
	case isAlreadyExists(err):
		return execution.Observation{}, errors.New("the native Job existed at create and is gone now")
	}
	return execution.Observation{}, err
}

// create admits the execution (the Ayatori Job, its class, parameters and
// ServiceAccount) and creates the native Job n: Created true when this
// create succeeded. Errors: the admission's refusal, the create's
// AlreadyExists or transient error as is, any other API refusal as
// execution.NothingCreated.
func (e *Executor) create(ctx context.Context, rec journal.Record, in execution.EnsureIntent, n native) (execution.Observation, error) {
	aj, params, err := e.admit(ctx, rec, in)
	if err != nil {
		return execution.Observation{}, err
	}
	job, err := buildJob(n, rec.Object.Name, aj, params, in.Resources)
	if err != nil {
		return execution.Observation{}, err
	}
	job.Annotations[AnnotationCreationProof] = e.creationProof(n)
	err = e.Workload.Create(ctx, job, e.fieldOwner())
	switch {
	case err == nil:
		o := observe(job, nil)
		o.Created = true
		return o, nil
	case isAlreadyExists(err) || classify(err).Transient:
		// Taken (by a concurrent delivery of this intent, or by someone
		// else), or ambiguous: ensure reads the name.
		return execution.Observation{}, err
	default:
		return execution.Observation{}, execution.NothingCreated(err)
	}
}

// admit re-reads the Ayatori Job, the parameters and the ServiceAccount
// and returns the refusal that keeps Ensure from creating the execution:
// on Cached first when set, then, unless that admitted, on Management.
func (e *Executor) admit(ctx context.Context, rec journal.Record, in execution.EnsureIntent) (*executionv1alpha1.Job, *executionv1alpha1.KubernetesExecutionParameters, error) {
	if e.Cached != nil {
		if aj, params, err := e.admitOn(ctx, e.Cached, rec, in); err == nil {
			return aj, params, nil
		}
	}
	return e.admitOn(ctx, e.Management, rec, in)
}

// admitOn is admit with the management cluster read through mgmt.
func (e *Executor) admitOn(ctx context.Context, mgmt client.Reader, rec journal.Record, in execution.EnsureIntent) (*executionv1alpha1.Job, *executionv1alpha1.KubernetesExecutionParameters, error) {
	cancelled := func(msg string) error {
		return &execution.Failure{Reason: executionv1alpha1.ReasonCancelled, State: execution.StateNotFound, Message: msg}
	}
	aj := &executionv1alpha1.Job{}
	err := mgmt.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}, aj)
	switch {
	case isNotFound(err):
		return nil, nil, cancelled("the Job no longer exists; no execution was created")
	case err != nil:
		return nil, nil, execution.NothingCreated(err)
	case string(aj.UID) != rec.Object.UID:
		return nil, nil, cancelled("the Job was recreated with another UID; no execution was created")
	case aj.DeletionTimestamp != nil:
		return nil, nil, cancelled("the Job is being deleted; no execution was created")
	case aj.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled:
		return nil, nil, cancelled("the Job's desiredState is Cancelled; no execution was created")
	}
	if !execution.TaskMatches(aj.Spec.Task, in.TaskDigest) {
		return nil, nil, &execution.Failure{Reason: ReasonTaskChanged, State: execution.StateNotFound,
			Message: "the Job's task does not match the digest of the Ensure intent; no execution was created"}
	}
	class := &executionv1alpha1.JobClass{}
	err = mgmt.Get(ctx, types.NamespacedName{Name: in.JobClass}, class)
	switch {
	case isNotFound(err) || err == nil && string(class.UID) != in.JobClassUID:
		// The class the Job was accepted with is gone (or was recreated):
		// never run under another class's policy.
		return nil, nil, &execution.Failure{Reason: executionv1alpha1.ReasonJobClassNotFound, State: execution.StateNotFound,
			Message: fmt.Sprintf("JobClass %s the Job was accepted with no longer exists; no execution was created", in.JobClass)}
	case err != nil:
		return nil, nil, execution.NothingCreated(err)
	}
	if why := execution.ClassMismatch(class, in, executionv1alpha1.ControllerKubernetes); why != "" {
		return nil, nil, &execution.Failure{Reason: executionv1alpha1.ReasonInvalidParametersReference, State: execution.StateNotFound,
			Message: why + "; no execution was created"}
	}
	if in.ParametersKind != ParametersKind || in.ParametersName == "" {
		return nil, nil, &execution.Failure{Reason: executionv1alpha1.ReasonInvalidParametersReference, State: execution.StateNotFound,
			Message: fmt.Sprintf("the Kubernetes adapter reads %s parameters, not %q", ParametersKind, in.ParametersKind)}
	}
	params := &executionv1alpha1.KubernetesExecutionParameters{}
	err = e.Management.Get(ctx, types.NamespacedName{Name: in.ParametersName}, params)
	switch {
	case isNotFound(err):
		return nil, nil, &execution.Failure{Reason: executionv1alpha1.ReasonParametersChanged, State: execution.StateNotFound,
			Message: fmt.Sprintf("%s %s no longer exists; no execution was created", ParametersKind, in.ParametersName)}
	case err != nil:
		return nil, nil, execution.NothingCreated(err)
	case string(params.UID) != in.ParametersUID:
		return nil, nil, &execution.Failure{Reason: executionv1alpha1.ReasonParametersChanged, State: execution.StateNotFound,
			Message: fmt.Sprintf("%s %s was recreated since the Job was accepted; no execution was created", ParametersKind, in.ParametersName)}
	}
	sa := &corev1.ServiceAccount{}
	err = e.Workload.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: params.Spec.ServiceAccountName}, sa)
	switch {
	case isNotFound(err):
		return nil, nil, &execution.Failure{Reason: executionv1alpha1.ReasonServiceAccountNotFound, State: execution.StateNotFound,
			Message: fmt.Sprintf("ServiceAccount %s/%s does not exist; no execution was created", rec.Object.Namespace, params.Spec.ServiceAccountName)}
	case err != nil:
		return nil, nil, execution.NothingCreated(err)
	}
	return aj, params, nil
}
