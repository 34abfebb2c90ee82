// Package opensandbox is the OpenSandbox execution adapter: it executes the
// journal intents of the execution domain (contracts/execution: Ensure,
// Observe, Cancel, Delete) for Ayatori Jobs whose JobClass names an
// OpenSandboxExecutionParameters object, by running each Job as one
// command in one sandbox, through the published lifecycle API
// (/v1/sandboxes, header OPEN-SANDBOX-API-KEY) and the sandbox's execd API
// (/command, header X-EXECD-ACCESS-TOKEN from the sandbox endpoint).
//
// Identity: the sandbox's metadata carries execution.LabelJobUID = the Job
// UID (the idempotency key; Ensure lists sandboxes by it before creating
// one), LabelJobNamespace, LabelJobName (only when the name is a valid
// label value: ≤ 63 characters), LabelDeadlineSeconds when the Job has
// activeDeadlineSeconds, and app.kubernetes.io/managed-by=ayatori. The
// sandbox env carries AYATORI_JOB_NAMESPACE, AYATORI_JOB_NAME and
// AYATORI_JOB_UID (always, whatever fits in metadata); the command's env
// carries them too, over a task env var of the same name.
//
// Sandbox shape: the task's image (with image.auth from a
// kubernetes.io/dockerconfigjson pull Secret only when the parameters set
// allowImageAuth), entrypoint ["tail", "-f", "/dev/null"] (the sandbox
// idles; the task runs as an execd command), resourceLimits from the
// effective limits (cpu, memory), extensions.poolRef from the parameters,
// no timeout (the sandbox lives until Delete removes it).
//
// Command: task.command + task.args as one shell string (each word
// single-quoted, see Quote), wrapped by Marker.Script so that the task
// runs at most once per Job and records its exit code in the sandbox; cwd
// = task.workingDir; envs = the task env (Secret values only with
// allowSecretEnv); timeout = activeDeadlineSeconds (execd kills the
// command then: the deadline holds while the manager is down; the
// projector's own deadline Cancel follows); background (the stream is read
// up to its init event, which carries the command id). The command id is
// stored in the sandbox metadata (LabelCommandID) and reported as the
// Command reference.
//
// References (status.execution.references): {Sandbox, <sandbox id>} and
// {Command, <execd command id>}: stable across retries (Ensure finds the
// sandbox and its command before creating anything), never an endpoint,
// a token or a key.
//
// Results: the exit code comes from the marker's exit file only (see
// Marker); a command that ended without one is Cancelled when a Cancel was
// requested (LabelCancelRequested), Failed/DeadlineExceeded when it ran
// for its whole timeout, and ResultUnknown otherwise. A command execd no
// longer knows (execd restarted: its state is in memory) is judged by the
// marker alone: exit file → the result; marker without exit file →
// ResultUnknown (CommandStateLost) until the exit file appears or an
// administrator confirms the execution lost.
//
// Operations:
//
//	Ensure   finds the Job's sandbox by UID; creates it (after re-reading
//	         the Job, its task digest, the class and the parameters) only
//	         when there is none, then lists again and removes its own
//	         when a concurrent delivery created one too (transient);
//	         waits until it runs (ProvisionTimeout);
//	         then starts the command unless the metadata or the marker
//	         shows one started. An ambiguous create or launch is an error
//	         (redelivery finds what was created).
//	Observe  reads the sandbox, the command status and the marker.
//	Cancel   records LabelCancelRequested, then interrupts the command
//	         (DELETE /command); a sandbox without a known command is
//	         deleted instead. Repeatable.
//	Delete   deletes the sandbox; NotFound once it is gone.
//
// HTTP errors are classified by status code in classify.go. Nothing the
// APIs answer (bodies, messages) is copied into outcomes except sandbox
// state reasons; no Secret value, API key or token is ever logged,
// journaled or put into a status.
package opensandbox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=jobs;jobclasses;opensandboxexecutionparameters,verbs=get;list;watch

// Sandbox metadata keys (Kubernetes label rules).
const (
	LabelJobUID          = execution.LabelJobUID
	LabelJobNamespace    = "execution.ayatori.ddupan.top/job-namespace"
	LabelJobName         = "execution.ayatori.ddupan.top/job-name"
	LabelCommandID       = "execution.ayatori.ddupan.top/command-id"
	LabelLaunching       = "execution.ayatori.ddupan.top/launching"
	LabelCancelRequested = "execution.ayatori.ddupan.top/cancel-requested"
	LabelDeadlineSeconds = "execution.ayatori.ddupan.top/deadline-seconds"
	LabelManagedBy       = "app.kubernetes.io/managed-by"
)

// Reference types in status.execution.references.
const (
	RefSandbox = "Sandbox"
	RefCommand = "Command"
)

// ParametersKind is the kind of the parameters object this adapter reads.
const ParametersKind = "OpenSandboxExecutionParameters"

// Reasons the executor decides itself (besides classify.go's).
const (
	ReasonTaskChanged                = "TaskChanged"
	ReasonInsecureEndpoint           = "InsecureEndpoint"
	ReasonExecdEndpointNotAllowed    = "ExecdEndpointNotAllowed"
	ReasonAPIKeySecretNotFound       = executionv1alpha1.ReasonAPIKeySecretNotFound
	ReasonSecretEnvNotAllowed        = executionv1alpha1.ReasonSecretEnvNotAllowed
	ReasonImageAuthNotAllowed        = executionv1alpha1.ReasonImageAuthNotAllowed
	ReasonImageAuthNotFound          = "ImageAuthNotFound"
	ReasonCommandRequired            = executionv1alpha1.ReasonCommandRequired
	ReasonCommandNotExecutable       = "CommandNotExecutable"
	ReasonRequestMappingUnsupported  = executionv1alpha1.ReasonRequestMappingUnsupported
	ReasonCommandStateLost           = "CommandStateLost"
	ReasonExitCodeNotRecorded        = "ExitCodeNotRecorded"
	ReasonUnknownSandboxState        = "UnknownSandboxState"
	ReasonSandboxProvisioningTimeout = "SandboxProvisioning"
	ReasonConcurrentEnsure           = "ConcurrentEnsure"
)

// Defaults.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultProvisionTimeout = 2 * time.Minute
	DefaultProbeTimeout     = 10 * time.Second
)

// Executor executes the execution domain's intents with OpenSandbox.
type Executor struct {
	// Management reads Ayatori Jobs, JobClasses, the parameters, and the
	// Secrets and ConfigMaps the executor needs (API key, env, image pull
	// Secrets). Uncached (client.New): rotations are read at once.
	Management client.Reader
	// HTTPClient is the base HTTP client (nil: a client with the system
	// roots). Its timeout, if any, bounds each request; its CheckRedirect
	// is replaced (redirects are never followed).
	HTTPClient *http.Client
	// Timeout bounds one operation (default DefaultTimeout); Ensure gets
	// ProvisionTimeout on top.
	Timeout time.Duration
	// ProbeTimeout bounds one JobClass probe (default the smaller of
	// Timeout and DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// ProvisionTimeout bounds how long Ensure waits for a new sandbox to
	// run before it gives up for this delivery (default
	// DefaultProvisionTimeout; the redelivery continues).
	ProvisionTimeout time.Duration
	// PollInterval is the first pause between reads of a provisioning
	// sandbox (default 200ms; doubles up to 2s).
	PollInterval time.Duration
	// Marker places the per-Job marker directory inside the sandbox
	// (default DefaultMarkerDir).
	Marker Marker
	// Now is the clock for provisioning waits (default time.Now).
	Now func() time.Time
	// SecretNamespace is the only namespace an apiKeySecretRef may name:
	// the controller namespace (empty: none, every class is refused).
	SecretNamespace string
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger
}

// Validate reports a missing Management client.
func (e *Executor) Validate() error {
	if e.Management == nil {
		return errors.New("executors/opensandbox: the Management client is required")
	}
	return nil
}

// timeout is Timeout or its default.
func (e *Executor) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return DefaultTimeout
}

// Register registers the handlers of execution.Operations on d under the
// backend name execution.AdapterOpenSandbox.
func (e *Executor) Register(d *journal.Dispatcher) error {
	if err := e.Validate(); err != nil {
		return err
	}
	return d.HandleAll(execution.AdapterOpenSandbox, e.Handlers())
}

// Handlers returns the journal handlers by operation.
func (e *Executor) Handlers() map[string]journal.Handler {
	t := e.timeout()
	b := &journal.Backend{Name: execution.AdapterOpenSandbox, Deadline: t, Log: e.Log,
		Classify: execution.Classifier(classify), Complete: execution.Complete(execution.AdapterOpenSandbox)}
	return map[string]journal.Handler{
		execution.OpEnsure:  journal.Execute(b, journal.Step[execution.EnsureIntent]{Run: execution.Observed(e.ensure), Validate: validEnsure, Deadline: t + e.provisionTimeout()}),
		execution.OpObserve: journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(e.observeOp), Validate: validExecution}),
		execution.OpCancel:  journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(e.cancel), Validate: validExecution}),
		execution.OpDelete:  journal.Execute(b, journal.Step[execution.ExecutionIntent]{Run: execution.Observed(e.delete), Validate: validExecution}),
	}
}

// unavailable is the transient failure of a request that may be retried
// as it is: the redelivery finds what it may have created by UID.
func unavailable(err error) error {
	f := classify(err)
	f.Transient, f.Reason = true, executionv1alpha1.ReasonBackendUnavailable
	return f
}

func (e *Executor) provisionTimeout() time.Duration {
	if e.ProvisionTimeout > 0 {
		return e.ProvisionTimeout
	}
	return DefaultProvisionTimeout
}

func (e *Executor) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// httpClient is HTTPClient (or a client with the system roots) that never
// follows a redirect: a followed redirect would carry the API key, the
// execd token and request bodies (image pull credentials, Secret env) to
// whatever URL it names, http:// included. A 3xx answer is an
// UnexpectedResponse.
func (e *Executor) httpClient() *http.Client {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}, Proxy: http.ProxyFromEnvironment}}
	if e.HTTPClient != nil {
		cp := *e.HTTPClient
		c = &cp
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// backend is the OpenSandbox deployment of one parameters object.
type backend struct {
	params *executionv1alpha1.OpenSandboxExecutionParameters
	lc     *lifecycle
}

// backendOf reads the parameters object name (which must have UID uid
// when uid is not empty), its endpoint and API key.
func (e *Executor) backendOf(ctx context.Context, name, uid string) (*backend, error) {
	params := &executionv1alpha1.OpenSandboxExecutionParameters{}
	err := e.Management.Get(ctx, types.NamespacedName{Name: name}, params)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &execution.Failure{Reason: executionv1alpha1.ReasonParametersChanged,
			Message: fmt.Sprintf("%s %s no longer exists; the execution can not be reached", ParametersKind, name)}
	case err != nil:
		return nil, err
	case uid != "" && string(params.UID) != uid:
		return nil, &execution.Failure{Reason: executionv1alpha1.ReasonParametersChanged,
			Message: fmt.Sprintf("%s %s was recreated since the Job was accepted; the execution is not looked for through another object", ParametersKind, name)}
	}
	return e.backendFor(ctx, params)
}

// backendFor builds the client of params: endpoint (https unless
// allowInsecureHTTP, no credentials) and the API key read from its
// Secret now (rotation is followed on every operation).
func (e *Executor) backendFor(ctx context.Context, params *executionv1alpha1.OpenSandboxExecutionParameters) (*backend, error) {
	u, err := url.Parse(params.Spec.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, &execution.Failure{Reason: executionv1alpha1.ReasonInvalidParametersReference,
			Message: fmt.Sprintf("%s %s: the endpoint is not an http(s) URL without credentials, query or fragment", ParametersKind, params.Name)}
	}
	if u.Scheme == "http" && !params.Spec.AllowInsecureHTTP {
		return nil, &execution.Failure{Reason: ReasonInsecureEndpoint,
			Message: fmt.Sprintf("%s %s: the endpoint uses http:// and allowInsecureHTTP is not set", ParametersKind, params.Name)}
	}
	ref := params.Spec.APIKeySecretRef
	if ref.Namespace != e.SecretNamespace || e.SecretNamespace == "" {
		// The key goes to the endpoint the parameters name: whoever may
		// write parameters must not be able to send any namespace's
		// Secret there with the manager's rights.
		return nil, &execution.Failure{Reason: executionv1alpha1.ReasonInvalidParametersReference,
			Message: fmt.Sprintf("%s %s: apiKeySecretRef must name a Secret in the controller namespace %s, not %s", ParametersKind, params.Name, e.SecretNamespace, ref.Namespace)}
	}
	sec := &corev1.Secret{}
	err = e.Management.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &execution.Failure{Reason: ReasonAPIKeySecretNotFound, Message: fmt.Sprintf("the API key Secret %s/%s does not exist", ref.Namespace, ref.Name)}
	case err != nil:
		return nil, err
	}
	key := strings.TrimSpace(string(sec.Data[ref.Key]))
	if key == "" {
		return nil, &execution.Failure{Reason: ReasonAPIKeySecretNotFound, Message: fmt.Sprintf("the API key Secret %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key)}
	}
	return &backend{params: params, lc: &lifecycle{http: e.httpClient(), base: u, apiKey: key, insecure: params.Spec.AllowInsecureHTTP,
		execdHosts: params.Spec.ExecdHosts}}, nil
}

// Probe checks an OpenSandbox class's backend for JobClass Ready: the
// endpoint rules, the API key Secret, and a list of at most one sandbox
// (the API answers and takes the key). It never returns a secret or a
// response body.
func (e *Executor) Probe(ctx context.Context, params client.Object) (bool, string, string) {
	p, ok := params.(*executionv1alpha1.OpenSandboxExecutionParameters)
	if !ok {
		return false, executionv1alpha1.ReasonInvalidParametersReference, "not an OpenSandboxExecutionParameters object"
	}
	t := e.ProbeTimeout
	if t <= 0 {
		t = min(e.timeout(), DefaultProbeTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	b, err := e.backendFor(ctx, p)
	if err == nil {
		err = b.lc.probe(ctx)
	}
	if err == nil {
		return true, executionv1alpha1.ReasonBackendReachable, "the OpenSandbox lifecycle API answers and accepts the API key"
	}
	var r *execution.Failure
	if errors.As(err, &r) && !r.Transient {
		return false, r.Reason, r.Message
	}
	f := classify(err)
	switch f.Reason {
	case ReasonAPIKeyRejected, ReasonForbidden:
		return false, ReasonAPIKeyRejected, f.Message
	}
	return false, executionv1alpha1.ReasonBackendUnavailable, f.Message
}

// parametersOf names the parameters object of an Observe, Cancel or
// Delete intent: from the intent, else from the Job's status.
func (e *Executor) parametersOf(ctx context.Context, rec journal.Record, in execution.ExecutionIntent) (string, string, error) {
	if in.ParametersName != "" {
		return in.ParametersName, in.ParametersUID, nil
	}
	job := &executionv1alpha1.Job{}
	if err := e.Management.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}, job); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", &execution.Failure{Reason: journal.ReasonUndecodableIntent, Message: "the intent names no parameters and the Job is gone"}
		}
		return "", "", err
	}
	rc := job.Status.ResolvedJobClass
	if string(job.UID) != rec.Object.UID || rc == nil || rc.ParametersRef.Name == "" {
		return "", "", &execution.Failure{Reason: journal.ReasonUndecodableIntent, Message: "the intent names no parameters and the Job's status has none"}
	}
	return rc.ParametersRef.Name, string(rc.ParametersRef.UID), nil
}

// execBackend is the backend of an Observe, Cancel or Delete intent.
func (e *Executor) execBackend(ctx context.Context, rec journal.Record, in execution.ExecutionIntent) (*backend, error) {
	name, uid, err := e.parametersOf(ctx, rec, in)
	if err != nil {
		return nil, err
	}
	return e.backendOf(ctx, name, uid)
}

// validExecution refuses an Observe, Cancel or Delete payload this
// adapter can not act on.
func validExecution(rec journal.Record, in execution.ExecutionIntent) error {
	if in.Adapter != "" && in.Adapter != execution.AdapterOpenSandbox {
		return &execution.Failure{Reason: journal.ReasonUndecodableIntent, Message: "the payload names another adapter"}
	}
	if !labelValue.MatchString(rec.Object.UID) {
		return &execution.Failure{Reason: journal.ReasonUndecodableIntent, Message: "the intent's Job UID is not a metadata value"}
	}
	return nil
}

// labelValue is the Kubernetes label value rule the lifecycle API applies
// to metadata values.
var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

func refOf(refs []execution.Reference, typ string) string {
	for _, r := range refs {
		if r.Type == typ {
			return r.ID
		}
	}
	return ""
}

// find returns the Job's sandbox: by the intent's Sandbox reference when
// it still carries the Job's UID, else by listing on the UID; nil only
// when both say there is none. Of several (never created by this executor, but a
// backend may list a terminated one), a non-terminal one wins.
func (b *backend) find(ctx context.Context, uid string, refs []execution.Reference) (*sandbox, error) {
	if id := refOf(refs, RefSandbox); id != "" {
		sb, err := b.lc.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if sb != nil && sb.Metadata[LabelJobUID] == uid {
			return sb, nil
		}
		// A 404 (or another Job's sandbox under that id) is confirmed by
		// the list on the UID: "gone" releases finalizers and ends Jobs,
		// so one answer is not enough.
	}
	found, err := b.lc.findByUID(ctx, uid)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return pick(found), nil
}

// pick chooses among the sandboxes carrying one Job UID: a live one
// first, else the first listed.
func pick(found []sandbox) *sandbox {
	for i := range found {
		if s := found[i].Status.State; s != "Terminated" && s != "Failed" {
			return &found[i]
		}
	}
	return &found[0]
}

func sandboxRefs(sb *sandbox, commandID string) []execution.Reference {
	refs := []execution.Reference{{Type: RefSandbox, ID: sb.ID}}
	if commandID != "" {
		refs = append(refs, execution.Reference{Type: RefCommand, ID: commandID})
	}
	return refs
}

// notFound is the observation of a Job without a sandbox.
var notFound = execution.Observation{State: execution.StateNotFound, Message: "no sandbox carries the Job's UID"}

// locate resolves the backend of an Observe, Cancel or Delete intent and
// the Job's sandbox on it (nil: there is none).
func (e *Executor) locate(ctx context.Context, rec journal.Record, in execution.ExecutionIntent) (*backend, *sandbox, error) {
	b, err := e.execBackend(ctx, rec, in)
	if err != nil {
		return nil, nil, err
	}
	sb, err := b.find(ctx, rec.Object.UID, in.References)
	return b, sb, err
}

// unknownState: err is a ResultUnknown failure (the state can not be
// proven).
func unknownState(err error) bool {
	var f *execution.Failure
	return errors.As(err, &f) && f.Unknown
}

// observeOp executes Observe.
func (e *Executor) observeOp(ctx context.Context, rec journal.Record, in execution.ExecutionIntent) (execution.Observation, error) {
	b, sb, err := e.locate(ctx, rec, in)
	if err != nil || sb == nil {
		return notFound, err
	}
	return e.observe(ctx, b, rec.Object.UID, sb, refOf(in.References, RefCommand))
}

// cancel executes Cancel (see the package doc).
func (e *Executor) cancel(ctx context.Context, rec journal.Record, in execution.ExecutionIntent) (execution.Observation, error) {
	b, sb, err := e.locate(ctx, rec, in)
	if err != nil || sb == nil {
		return notFound, err
	}
	uid := rec.Object.UID
	obs, err := e.observe(ctx, b, uid, sb, refOf(in.References, RefCommand))
	unknown := unknownState(err)
	if err != nil && !unknown {
		return execution.Observation{}, err
	}
	if err == nil && obs.State.Stopped() {
		return obs, nil
	}
	if sb.Metadata[LabelCancelRequested] != "true" {
		if err := b.lc.patchMetadata(ctx, sb.ID, map[string]string{LabelCancelRequested: "true"}); err != nil {
			return execution.Observation{}, err
		}
	}
	id := commandIDOf(sb, refOf(in.References, RefCommand))
	if id != "" && sb.Status.State == "Running" && !unknown {
		x, err := b.lc.execdOf(ctx, sb.ID)
		if err != nil {
			return execution.Observation{}, err
		}
		if err := x.interrupt(ctx, id); err != nil {
			return execution.Observation{}, err
		}
	} else {
		// No command to interrupt (still provisioning, or its id or
		// state is lost): stopping the sandbox stops everything in it.
		if _, err := b.lc.delete(ctx, sb.ID); err != nil {
			return execution.Observation{}, err
		}
	}
	fresh, err := b.find(ctx, uid, sandboxRefs(sb, ""))
	if err != nil {
		return execution.Observation{}, err
	}
	if fresh == nil {
		return execution.Observation{State: execution.StateNotFound, Message: "the sandbox was deleted to stop the execution"}, nil
	}
	obs, err = e.observe(ctx, b, uid, fresh, id)
	if unknownState(err) || (err == nil && !obs.State.Stopped()) {
		return execution.Observation{State: execution.StateStopping, References: sandboxRefs(fresh, id), Message: "stop requested"}, nil
	}
	return obs, err
}

// delete executes Delete.
func (e *Executor) delete(ctx context.Context, rec journal.Record, in execution.ExecutionIntent) (execution.Observation, error) {
	b, sb, err := e.locate(ctx, rec, in)
	if err != nil || sb == nil {
		return notFound, err
	}
	uid := rec.Object.UID
	if _, err := b.lc.delete(ctx, sb.ID); err != nil {
		return execution.Observation{}, err
	}
	fresh, err := b.find(ctx, uid, sandboxRefs(sb, ""))
	if err != nil {
		return execution.Observation{}, err
	}
	if fresh == nil {
		return execution.Observation{State: execution.StateNotFound, Message: "the sandbox is deleted"}, nil
	}
	return execution.Observation{State: execution.StateStopping, References: sandboxRefs(fresh, commandIDOf(fresh, "")), Message: "deletion in progress"}, nil
}

func commandIDOf(sb *sandbox, fromIntent string) string {
	if fromIntent != "" {
		return fromIntent
	}
	return sb.Metadata[LabelCommandID]
}
