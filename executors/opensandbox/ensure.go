package opensandbox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// idleEntrypoint keeps a sandbox alive while its command runs.
var idleEntrypoint = []string{"tail", "-f", "/dev/null"}

// Identity env vars (sandbox env and command envs).
const (
	EnvJobNamespace = "AYATORI_JOB_NAMESPACE"
	EnvJobName      = "AYATORI_JOB_NAME"
	EnvJobUID       = "AYATORI_JOB_UID"
)

// validEnsure refuses an Ensure payload this adapter can not run
// (nothing is created).
func validEnsure(rec journal.Record, in execution.EnsureIntent) error {
	if in.TaskDigest == "" || in.Adapter != execution.AdapterOpenSandbox || in.ParametersKind != ParametersKind || in.ParametersName == "" {
		return execution.Refused(journal.ReasonUndecodableIntent, "the Ensure payload lacks the task digest, or names another adapter or parameters kind", execution.StateNotFound)
	}
	if !labelValue.MatchString(rec.Object.UID) || rec.Object.Namespace == "" {
		return execution.Refused(journal.ReasonUndecodableIntent, "the intent's Job UID is not a metadata value or it names no namespace", execution.StateNotFound)
	}
	return nil
}

// ensure executes Ensure (see the package doc).
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in execution.EnsureIntent) (execution.Observation, error) {
	uid := rec.Object.UID
	b, err := e.backendOf(ctx, in.ParametersName, in.ParametersUID)
	if err != nil {
		// Nothing was looked up: the state is unknown (ResultUnknown for
		// the projector, which finds the execution by UID later).
		return execution.Observation{}, err
	}
	// 1. An execution created before (a crash after the create, a
	// redelivery): continue it.
	found, err := b.lc.findByUID(ctx, uid)
	if err != nil {
		return execution.Observation{}, err
	}
	if len(found) > 0 {
		return e.launch(ctx, b, rec, in, pick(found), false)
	}
	// 2. Nothing exists: check that the execution may still be created.
	job, err := e.admit(ctx, rec, in, b)
	if err != nil {
		return execution.Observation{}, err
	}
	req, err := e.build(ctx, rec, in, b, job)
	if err != nil {
		return execution.Observation{}, err
	}
	// 3. Create. An ambiguous answer is retried: the redelivery lists by
	// UID first, so a sandbox created meanwhile is never doubled.
	sb, err := b.lc.create(ctx, req)
	if err != nil {
		if classify(err).Transient {
			return execution.Observation{}, err
		}
		return execution.Observation{}, execution.NothingCreated(err)
	}
	// 4. Two deliveries of this Ensure at once (an AckWait expiry, two
	// replicas) may both have found nothing and created. A list after a
	// create shows that create, so of two such deliveries at least one
	// sees the other's sandbox; one that does removes its own and steps
	// back (transient: the redelivery continues with what survived). At
	// most one goes on to launch; both may step back.
	if err := b.stepBack(ctx, uid, sb); err != nil {
		return execution.Observation{}, err
	}
	return e.launch(ctx, b, rec, in, sb, true)
}

// stepBack lists the sandboxes of uid after sb was created for it: when
// another one exists, it deletes sb and returns a transient error (reason
// ReasonConcurrentEnsure). Any failure is transient too: sb exists, and
// the redelivery finds it by UID.
func (b *backend) stepBack(ctx context.Context, uid string, sb *sandbox) error {
	found, err := b.lc.findByUID(ctx, uid)
	if err != nil {
		return unavailable(err)
	}
	for _, o := range found {
		if o.ID == sb.ID {
			continue
		}
		if _, err := b.lc.delete(ctx, sb.ID); err != nil {
			return unavailable(err)
		}
		return &execution.Failure{Transient: true, Reason: ReasonConcurrentEnsure,
			Message: fmt.Sprintf("sandbox %s of this Job was created concurrently; the duplicate %s is removed", o.ID, sb.ID)}
	}
	return nil
}

// admit re-reads the Job and its class and returns the refusal that keeps
// Ensure from creating (or starting) the execution.
func (e *Executor) admit(ctx context.Context, rec journal.Record, in execution.EnsureIntent, b *backend) (*executionv1alpha1.Job, error) {
	refuse := func(reason, format string, args ...any) error {
		return &execution.Failure{Reason: reason, State: execution.StateNotFound, Message: fmt.Sprintf(format, args...)}
	}
	job := &executionv1alpha1.Job{}
	err := e.Management.Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: rec.Object.Name}, job)
	switch {
	case apierrors.IsNotFound(err):
		return nil, refuse(executionv1alpha1.ReasonCancelled, "the Job no longer exists; no execution was created")
	case err != nil:
		return nil, execution.NothingCreated(err)
	case string(job.UID) != rec.Object.UID:
		return nil, refuse(executionv1alpha1.ReasonCancelled, "the Job was recreated with another UID; no execution was created")
	case job.DeletionTimestamp != nil:
		return nil, refuse(executionv1alpha1.ReasonCancelled, "the Job is being deleted; no execution was created")
	case job.Spec.DesiredState == executionv1alpha1.JobDesiredStateCancelled:
		return nil, refuse(executionv1alpha1.ReasonCancelled, "the Job's desiredState is Cancelled; no execution was created")
	}
	if !execution.TaskMatches(job.Spec.Task, in.TaskDigest) {
		return nil, refuse(ReasonTaskChanged, "the Job's task does not match the digest of the Ensure intent; no execution was created")
	}
	class := &executionv1alpha1.JobClass{}
	err = e.Management.Get(ctx, types.NamespacedName{Name: in.JobClass}, class)
	switch {
	case apierrors.IsNotFound(err) || err == nil && string(class.UID) != in.JobClassUID:
		return nil, refuse(executionv1alpha1.ReasonJobClassNotFound, "JobClass %s the Job was accepted with no longer exists; no execution was created", in.JobClass)
	case err != nil:
		return nil, execution.NothingCreated(err)
	}
	if why := execution.ClassMismatch(class, in, executionv1alpha1.ControllerOpenSandbox); why != "" {
		return nil, refuse(executionv1alpha1.ReasonInvalidParametersReference, "%s; no execution was created", why)
	}
	if len(job.Spec.Task.Command) == 0 {
		return nil, refuse(ReasonCommandRequired, "the OpenSandbox adapter runs the task as a command in the sandbox and can not read the image's entrypoint: set task.command")
	}
	argv := append(append([]string{}, job.Spec.Task.Command...), job.Spec.Task.Args...)
	if n := len(e.Marker.Script(rec.Object.UID, argv, strings.Repeat("0", launchTokenLen))); n > MaxScriptBytes {
		return nil, refuse(ReasonCommandNotExecutable, "task.command and task.args make a %d-byte shell command; execd runs it as one bash -c argument, which Linux bounds at %d bytes; no execution was created", n, MaxScriptBytes)
	}
	if strings.ContainsRune(strings.Join(argv, ""), 0) || strings.ContainsRune(job.Spec.Task.WorkingDir, 0) {
		return nil, refuse(ReasonCommandNotExecutable, "task.command, task.args or task.workingDir contain a NUL byte, which no process argument or path can hold; no execution was created")
	}
	return job, nil
}

// build assembles the sandbox create request: image (and its pull
// credential), limits, pool, metadata and identity env.
func (e *Executor) build(ctx context.Context, rec journal.Record, in execution.EnsureIntent, b *backend, job *executionv1alpha1.Job) (createRequest, error) {
	p := b.params.Spec
	limits, err := resourceLimits(in.Resources, p.RequestMapping)
	if err != nil {
		return createRequest{}, err
	}
	auth, err := e.imageAuth(ctx, job, p.AllowImageAuth)
	if err != nil {
		return createRequest{}, err
	}
	md := map[string]string{
		LabelJobUID:       rec.Object.UID,
		LabelJobNamespace: rec.Object.Namespace,
		LabelManagedBy:    "ayatori",
	}
	if labelValue.MatchString(rec.Object.Name) {
		md[LabelJobName] = rec.Object.Name
	}
	if d := job.Spec.ActiveDeadlineSeconds; d != nil && *d > 0 {
		md[LabelDeadlineSeconds] = strconv.FormatInt(*d, 10)
	}
	req := createRequest{
		Image:          imageSpec{URI: job.Spec.Task.Image, Auth: auth},
		ResourceLimits: limits,
		Env:            identity(rec),
		Metadata:       md,
		Entrypoint:     idleEntrypoint,
	}
	if p.PoolRef != "" {
		req.Extensions = map[string]string{"poolRef": p.PoolRef}
	}
	return req, nil
}

func identity(rec journal.Record) map[string]string {
	return map[string]string{EnvJobNamespace: rec.Object.Namespace, EnvJobName: rec.Object.Name, EnvJobUID: rec.Object.UID}
}

// resourceLimits maps the effective resources: limits become
// resourceLimits (cpu, memory). Requests only admit under AdmissionOnly;
// under Native they must equal the limits, because the lifecycle API has
// no request field (anything else would silently lower a guarantee).
func resourceLimits(r execution.Resources, mapping executionv1alpha1.OpenSandboxRequestMapping) (map[string]string, error) {
	out := map[string]string{}
	if r.LimitsCPU != "" {
		out["cpu"] = r.LimitsCPU
	}
	if r.LimitsMemory != "" {
		out["memory"] = r.LimitsMemory
	}
	if mapping != executionv1alpha1.OpenSandboxRequestMappingNative {
		return out, nil
	}
	for _, pair := range [][3]string{{"cpu", r.RequestsCPU, r.LimitsCPU}, {"memory", r.RequestsMemory, r.LimitsMemory}} {
		if pair[1] == "" {
			continue
		}
		if !sameQuantity(pair[1], pair[2]) {
			return nil, &execution.Failure{Reason: ReasonRequestMappingUnsupported, State: execution.StateNotFound,
				Message: fmt.Sprintf("requestMapping Native: the %s request (%s) can not be expressed: OpenSandbox has only resourceLimits, so a request must equal its limit (%q); no execution was created", pair[0], pair[1], pair[2])}
		}
	}
	return out, nil
}

func sameQuantity(a, b string) bool {
	qa, err1 := resource.ParseQuantity(a)
	qb, err2 := resource.ParseQuantity(b)
	return err1 == nil && err2 == nil && qa.Cmp(qb) == 0
}

// launch waits until sb runs, then starts the Job's command unless one
// started before (metadata command id, or the marker).
func (e *Executor) launch(ctx context.Context, b *backend, rec journal.Record, in execution.EnsureIntent, sb *sandbox, created bool) (execution.Observation, error) {
	uid := rec.Object.UID
	sb, err := e.waitRunning(ctx, b, sb)
	if err != nil {
		return execution.Observation{}, err
	}
	if sb.Status.State != "Running" || sb.Metadata[LabelCommandID] != "" || sb.Metadata[LabelCancelRequested] == "true" {
		obs, err := e.observe(ctx, b, uid, sb, "")
		obs.Created = created && err == nil
		return obs, err
	}
	x, err := b.lc.execdOf(ctx, sb.ID)
	if err != nil {
		return execution.Observation{}, err
	}
	started, err := e.launchedBefore(ctx, x, uid, sb)
	if err != nil {
		return execution.Observation{}, err
	}
	if started {
		// An earlier delivery started the task and its command id was
		// lost (a crash or a cut stream before the metadata write).
		obs, err := e.observe(ctx, b, uid, sb, "")
		obs.Created = created && err == nil
		return obs, err
	}
	job, err := e.admit(ctx, rec, in, b)
	if err != nil {
		var r *execution.Failure
		if errors.As(err, &r) {
			// The sandbox exists: report it (the projector cancels or
			// retries; nothing runs in it).
			r.State, r.References = execution.StatePending, sandboxRefs(sb, "")
		}
		return execution.Observation{}, err
	}
	env, err := e.resolveEnv(ctx, job, b.params.Spec.AllowSecretEnv)
	if err != nil {
		var r *execution.Failure
		if errors.As(err, &r) {
			r.State, r.References = execution.StatePending, sandboxRefs(sb, "")
		}
		return execution.Observation{}, err
	}
	for k, v := range identity(rec) {
		env[k] = v
	}
	argv := append(append([]string{}, job.Spec.Task.Command...), job.Spec.Task.Args...)
	token := launchToken()
	cmd := runCommandRequest{Command: e.Marker.Script(uid, argv, token), Cwd: job.Spec.Task.WorkingDir, Background: true, Envs: env}
	if d := job.Spec.ActiveDeadlineSeconds; d != nil && *d > 0 {
		cmd.Timeout = *d * 1000
	}
	// Before the launch: a redelivery after a lost answer knows a command
	// may be on its way (and waits for its marker), and the token tells
	// the command that claims the marker from a copy that lost the claim.
	if err := b.lc.patchMetadata(ctx, sb.ID, map[string]string{LabelLaunching: token}); err != nil {
		return execution.Observation{}, err
	}
	id, err := x.run(ctx, cmd)
	if err != nil {
		return execution.Observation{}, err
	}
	// Best effort: the outcome's Command reference is the record; the
	// metadata copy survives a crash before the outcome is journaled.
	_ = b.lc.patchMetadata(ctx, sb.ID, map[string]string{LabelCommandID: id})
	return execution.Observation{State: execution.StateRunning, Created: created, References: sandboxRefs(sb, id), Message: "the command started"}, nil
}

// launchTokenLen is the length of a launch token (hex).
const launchTokenLen = 32

// launchToken is a fresh random launch token (a metadata value).
func launchToken() string {
	b := make([]byte, launchTokenLen/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LaunchSettle is how long Ensure waits for the marker of a command an
// earlier delivery sent without getting its answer (LabelLaunching set,
// no command id) before it launches again.
const LaunchSettle = 3 * time.Second

// launchedBefore reports whether the Job's task started under an earlier
// command: its marker exists. When an earlier delivery sent a command and
// lost the answer (a cut stream, a timeout), the marker is awaited for
// LaunchSettle, so a command execd received but had not started yet is
// not sent twice. (One execd did not start within LaunchSettle would be
// sent again; the claim keeps that copy from running the task.)
func (e *Executor) launchedBefore(ctx context.Context, x *execd, uid string, sb *sandbox) (bool, error) {
	deadline := e.now().Add(LaunchSettle)
	for {
		started, err := x.exists(ctx, e.Marker.Path(uid))
		if err != nil || started || sb.Metadata[LabelLaunching] == "" || !e.now().Before(deadline) {
			return started, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitRunning polls sb until it leaves Pending (or ProvisionTimeout).
func (e *Executor) waitRunning(ctx context.Context, b *backend, sb *sandbox) (*sandbox, error) {
	pause := e.PollInterval
	if pause <= 0 {
		pause = 200 * time.Millisecond
	}
	deadline := e.now().Add(e.provisionTimeout())
	for sb.Status.State == "Pending" || sb.Status.State == "" {
		if !e.now().Before(deadline) {
			return nil, &execution.Failure{Transient: true, Reason: ReasonSandboxProvisioningTimeout,
				Message: fmt.Sprintf("sandbox %s still provisioning after %s", sb.ID, e.provisionTimeout())}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
		fresh, err := b.lc.get(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		if fresh == nil {
			return nil, &execution.Failure{Unknown: true, Reason: executionv1alpha1.ReasonBackendLost, References: sandboxRefs(sb, ""),
				Message: "the sandbox disappeared while it was provisioned"}
		}
		sb = fresh
	}
	return sb, nil
}

// resolveEnv resolves the task env: literals, ConfigMap keys, and Secret
// keys only when allowSecret. Values never leave the returned map.
func (e *Executor) resolveEnv(ctx context.Context, job *executionv1alpha1.Job, allowSecret bool) (map[string]string, error) {
	out := map[string]string{}
	refuse := func(reason, format string, args ...any) error {
		return &execution.Failure{Reason: reason, State: execution.StateNotFound, Message: fmt.Sprintf(format, args...)}
	}
	for _, v := range job.Spec.Task.Env {
		switch {
		case v.Value != nil:
			out[v.Name] = *v.Value
		case v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil:
			ref := v.ValueFrom.SecretKeyRef
			if !allowSecret {
				return nil, refuse(ReasonSecretEnvNotAllowed, "env %s references Secret %s and the class's parameters do not set allowSecretEnv; no command was started", v.Name, ref.Name)
			}
			sec := &corev1.Secret{}
			err := e.Management.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}, sec)
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			val, ok := sec.Data[ref.Key]
			if err != nil || !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, refuse(executionv1alpha1.ReasonEnvReferenceNotFound, "env %s: Secret %s has no key %s", v.Name, ref.Name, ref.Key)
			}
			out[v.Name] = string(val)
		case v.ValueFrom != nil && v.ValueFrom.ConfigMapKeyRef != nil:
			ref := v.ValueFrom.ConfigMapKeyRef
			cm := &corev1.ConfigMap{}
			err := e.Management.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}, cm)
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			val, ok := cm.Data[ref.Key]
			if !ok && err == nil {
				if bin, okb := cm.BinaryData[ref.Key]; okb {
					val, ok = string(bin), true
				}
			}
			if err != nil || !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, refuse(executionv1alpha1.ReasonEnvReferenceNotFound, "env %s: ConfigMap %s has no key %s", v.Name, ref.Name, ref.Key)
			}
			out[v.Name] = val
		}
	}
	return out, nil
}

// imageAuth picks the image's registry credential from the task's
// kubernetes.io/dockerconfigjson pull Secrets (in order; the first entry
// matching the image's registry wins). No pull Secrets: an anonymous pull.
// Pull Secrets without allowImageAuth, a missing or malformed Secret, or
// none matching the registry: a refusal, never an anonymous pull.
func (e *Executor) imageAuth(ctx context.Context, job *executionv1alpha1.Job, allow bool) (*imageAuth, error) {
	secrets := job.Spec.Task.ImagePullSecrets
	if len(secrets) == 0 {
		return nil, nil
	}
	refuse := func(reason, format string, args ...any) error {
		return &execution.Failure{Reason: reason, State: execution.StateNotFound, Message: fmt.Sprintf(format, args...)}
	}
	if !allow {
		return nil, refuse(ReasonImageAuthNotAllowed, "the task has imagePullSecrets and the class's parameters do not set allowImageAuth; no execution was created")
	}
	registry := registryOf(job.Spec.Task.Image)
	for _, ref := range secrets {
		sec := &corev1.Secret{}
		err := e.Management.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}, sec)
		switch {
		case apierrors.IsNotFound(err):
			return nil, refuse(ReasonImageAuthNotFound, "image pull Secret %s does not exist; no execution was created", ref.Name)
		case err != nil:
			return nil, execution.NothingCreated(err)
		case sec.Type != corev1.SecretTypeDockerConfigJson:
			return nil, refuse(ReasonImageAuthNotFound, "image pull Secret %s is not of type %s; no execution was created", ref.Name, corev1.SecretTypeDockerConfigJson)
		}
		var cfg struct {
			Auths map[string]struct {
				Username string `json:"username"`
				Password string `json:"password"`
				Auth     string `json:"auth"`
			} `json:"auths"`
		}
		if json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &cfg) != nil {
			return nil, refuse(ReasonImageAuthNotFound, "image pull Secret %s does not hold a valid %s; no execution was created", ref.Name, corev1.DockerConfigJsonKey)
		}
		for host, a := range cfg.Auths {
			if normalizeRegistry(host) != registry {
				continue
			}
			user, pass := a.Username, a.Password
			if user == "" && a.Auth != "" {
				dec, err := base64.StdEncoding.DecodeString(a.Auth)
				if err != nil {
					return nil, refuse(ReasonImageAuthNotFound, "image pull Secret %s: the entry for %s has an undecodable auth; no execution was created", ref.Name, registry)
				}
				user, pass, _ = strings.Cut(string(dec), ":")
			}
			if user == "" {
				return nil, refuse(ReasonImageAuthNotFound, "image pull Secret %s: the entry for %s has no username; no execution was created", ref.Name, registry)
			}
			return &imageAuth{Username: user, Password: pass}, nil
		}
	}
	return nil, refuse(ReasonImageAuthNotFound, "no imagePullSecret has an entry for registry %s; no execution was created (never an anonymous pull)", registry)
}

// registryOf is the registry host of an image reference ("docker.io" for
// Docker Hub short names).
func registryOf(image string) string {
	first, rest, ok := strings.Cut(image, "/")
	if !ok || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return "docker.io"
	}
	_ = rest
	return normalizeRegistry(first)
}

// normalizeRegistry reduces a dockerconfigjson auths key (a host, a URL
// such as https://index.docker.io/v1/) to a registry host.
func normalizeRegistry(s string) string {
	s = strings.ToLower(s)
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	s, _, _ = strings.Cut(s, "/")
	switch s {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	}
	return s
}
