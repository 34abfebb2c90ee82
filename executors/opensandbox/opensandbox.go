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
	ReasonInvalidIntent              = "InvalidIntent"
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
}

// Register registers the handlers of execution.Operations on d under the
// backend name execution.AdapterOpenSandbox.
func (e *Executor) Register(d *journal.Dispatcher) error {
	if e.Management == nil {
		return errors.New("executors/opensandbox: the Management client is required")
	}
	return d.HandleAll(execution.AdapterOpenSandbox, e.Handlers())
}

// Handlers returns the journal handlers by operation.
func (e *Executor) Handlers() map[string]journal.Handler {
	return map[string]journal.Handler{
		execution.OpEnsure:  e.handler(e.ensure, true),
		execution.OpObserve: e.handler(e.observeOp, false),
		execution.OpCancel:  e.handler(e.cancel, false),
		execution.OpDelete:  e.handler(e.delete, false),
	}
}

// refusal is a Failed outcome the executor decided; State (when set) is
// the execution's state, reported in the outcome's Observation.
type refusal struct {
	Reason     string
	Message    string
	State      execution.State
	References []execution.Reference
}

func (r *refusal) Error() string { return r.Reason + ": " + r.Message }

// unknown is a ResultUnknown outcome: the executor reached the backend
// but can not prove the execution's state.
type unknown struct {
	Reason     string
	Message    string
	References []execution.Reference
}

func (u *unknown) Error() string { return u.Reason + ": " + u.Message }

type step func(ctx context.Context, rec journal.Record) (execution.Observation, error)

// handler turns a step into a journal.Handler: a Succeeded outcome
// carries the Observation; a refusal or a definite API failure is a
// Failed outcome (with an Observation when the state is known); an
// unknown is a ResultUnknown outcome; a transient failure is returned as
// an error (the journal redelivers the intent).
func (e *Executor) handler(fn step, ensure bool) journal.Handler {
	return func(ctx context.Context, rec journal.Record) (journal.Outcome, error) {
		t := e.Timeout
		if t <= 0 {
			t = DefaultTimeout
		}
		if ensure {
			t += e.provisionTimeout()
		}
		ctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		obs, err := fn(ctx, rec)
		if err == nil {
			obs.Adapter = execution.AdapterOpenSandbox
			return journal.Outcome{Result: journal.Result{Class: journal.Succeeded, Message: string(obs.State) + ": " + obs.Message}, Payload: obs}, nil
		}
		var r *refusal
		if errors.As(err, &r) {
			return failedOutcome(r.Reason, r.Message, r.State, r.References), nil
		}
		var u *unknown
		if errors.As(err, &u) {
			return journal.Outcome{Result: journal.Result{Class: journal.ResultUnknown, Reason: u.Reason, Message: u.Message},
				Payload: execution.Observation{Adapter: execution.AdapterOpenSandbox, References: u.References, Reason: u.Reason, Message: u.Message}}, nil
		}
		var te *transientError
		if errors.As(err, &te) {
			return journal.Outcome{}, te // a step's own transient reason
		}
		f := classify(err)
		if f.Transient {
			return journal.Outcome{}, &transientError{reason: f.Reason, err: err}
		}
		var st *stateError
		var state execution.State
		if errors.As(err, &st) {
			state = st.state
		}
		return failedOutcome(f.Reason, f.Message, state, nil), nil
	}
}

// transientError is a handler error the journal retries; Reason names the
// outcome once the budget is spent.
type transientError struct {
	reason string
	err    error
}

func (t *transientError) Error() string  { return t.err.Error() }
func (t *transientError) Unwrap() error  { return t.err }
func (t *transientError) Reason() string { return t.reason }

// stateError is an API error of a step that left the execution in a known
// state (for Ensure: nothing was created).
type stateError struct {
	state execution.State
	err   error
}

func (s *stateError) Error() string { return s.err.Error() }
func (s *stateError) Unwrap() error { return s.err }

func notCreated(err error) error {
	if err == nil {
		return nil
	}
	return &stateError{state: execution.StateNotFound, err: err}
}

func failedOutcome(reason, msg string, state execution.State, refs []execution.Reference) journal.Outcome {
	out := journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: reason, Message: msg}}
	if state != "" {
		out.Payload = execution.Observation{State: state, Adapter: execution.AdapterOpenSandbox, Reason: reason, Message: msg, References: refs}
	}
	return out
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
		return nil, &refusal{Reason: executionv1alpha1.ReasonParametersChanged,
			Message: fmt.Sprintf("%s %s no longer exists; the execution can not be reached", ParametersKind, name)}
	case err != nil:
		return nil, err
	case uid != "" && string(params.UID) != uid:
		return nil, &refusal{Reason: executionv1alpha1.ReasonParametersChanged,
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
		return nil, &refusal{Reason: executionv1alpha1.ReasonInvalidParametersReference,
			Message: fmt.Sprintf("%s %s: the endpoint is not an http(s) URL without credentials, query or fragment", ParametersKind, params.Name)}
	}
	if u.Scheme == "http" && !params.Spec.AllowInsecureHTTP {
		return nil, &refusal{Reason: ReasonInsecureEndpoint,
			Message: fmt.Sprintf("%s %s: the endpoint uses http:// and allowInsecureHTTP is not set", ParametersKind, params.Name)}
	}
	ref := params.Spec.APIKeySecretRef
	if ref.Namespace != e.SecretNamespace || e.SecretNamespace == "" {
		// The key goes to the endpoint the parameters name: whoever may
		// write parameters must not be able to send any namespace's
		// Secret there with the manager's rights.
		return nil, &refusal{Reason: executionv1alpha1.ReasonInvalidParametersReference,
			Message: fmt.Sprintf("%s %s: apiKeySecretRef must name a Secret in the controller namespace %s, not %s", ParametersKind, params.Name, e.SecretNamespace, ref.Namespace)}
	}
	sec := &corev1.Secret{}
	err = e.Management.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &refusal{Reason: ReasonAPIKeySecretNotFound, Message: fmt.Sprintf("the API key Secret %s/%s does not exist", ref.Namespace, ref.Name)}
	case err != nil:
		return nil, err
	}
	key := strings.TrimSpace(string(sec.Data[ref.Key]))
	if key == "" {
		return nil, &refusal{Reason: ReasonAPIKeySecretNotFound, Message: fmt.Sprintf("the API key Secret %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key)}
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
	t := e.Timeout
	if t <= 0 {
		t = DefaultTimeout
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
	var r *refusal
	if errors.As(err, &r) {
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
			return "", "", &refusal{Reason: ReasonInvalidIntent, Message: "the intent names no parameters and the Job is gone"}
		}
		return "", "", err
	}
	rc := job.Status.ResolvedJobClass
	if string(job.UID) != rec.Object.UID || rc == nil || rc.ParametersRef.Name == "" {
		return "", "", &refusal{Reason: ReasonInvalidIntent, Message: "the intent names no parameters and the Job's status has none"}
	}
	return rc.ParametersRef.Name, string(rc.ParametersRef.UID), nil
}

// execBackend is the backend of an Observe, Cancel or Delete intent.
func (e *Executor) execBackend(ctx context.Context, rec journal.Record) (*backend, execution.ExecutionIntent, error) {
	var in execution.ExecutionIntent
	if err := rec.DecodePayload(&in); err != nil || (in.Adapter != "" && in.Adapter != execution.AdapterOpenSandbox) {
		return nil, in, &refusal{Reason: ReasonInvalidIntent, Message: "the payload can not be decoded or names another adapter"}
	}
	if !labelValue.MatchString(rec.Object.UID) {
		return nil, in, &refusal{Reason: ReasonInvalidIntent, Message: "the intent's Job UID is not a metadata value"}
	}
	name, uid, err := e.parametersOf(ctx, rec, in)
	if err != nil {
		return nil, in, err
	}
	b, err := e.backendOf(ctx, name, uid)
	return b, in, err
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
func (e *Executor) locate(ctx context.Context, rec journal.Record) (*backend, execution.ExecutionIntent, *sandbox, error) {
	b, in, err := e.execBackend(ctx, rec)
	if err != nil {
		return nil, in, nil, err
	}
	sb, err := b.find(ctx, rec.Object.UID, in.References)
	return b, in, sb, err
}

// observeOp executes Observe.
func (e *Executor) observeOp(ctx context.Context, rec journal.Record) (execution.Observation, error) {
	b, in, sb, err := e.locate(ctx, rec)
	if err != nil || sb == nil {
		return notFound, err
	}
	return e.observe(ctx, b, rec.Object.UID, sb, refOf(in.References, RefCommand))
}

// cancel executes Cancel (see the package doc).
func (e *Executor) cancel(ctx context.Context, rec journal.Record) (execution.Observation, error) {
	b, in, sb, err := e.locate(ctx, rec)
	if err != nil || sb == nil {
		return notFound, err
	}
	uid := rec.Object.UID
	obs, err := e.observe(ctx, b, uid, sb, refOf(in.References, RefCommand))
	var u *unknown
	if err != nil && !errors.As(err, &u) {
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
	if id != "" && sb.Status.State == "Running" && u == nil {
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
	if errors.As(err, &u) || (err == nil && !obs.State.Stopped()) {
		return execution.Observation{State: execution.StateStopping, References: sandboxRefs(fresh, id), Message: "stop requested"}, nil
	}
	return obs, err
}

// delete executes Delete.
func (e *Executor) delete(ctx context.Context, rec journal.Record) (execution.Observation, error) {
	b, _, sb, err := e.locate(ctx, rec)
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
