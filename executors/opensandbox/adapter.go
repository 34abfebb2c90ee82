package opensandbox

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// RBAC of what the projectors read through this adapter.
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=opensandboxexecutionparameters,verbs=get;list;watch;patch

// Adapter is the OpenSandbox adapter (execution.Adapter): classes of
// executionv1alpha1.ControllerOpenSandbox with
// OpenSandboxExecutionParameters, admitted by Admit, probed by e.Probe
// (endpoint rules, API key, one list call), executed by e's handlers.
// e is only configuration: building the adapter connects to nothing.
func (e *Executor) Adapter() execution.Adapter {
	return execution.Adapter{
		Name:           execution.AdapterOpenSandbox,
		ControllerName: executionv1alpha1.ControllerOpenSandbox,
		ParametersKind: ParametersKind,
		NewParameters:  func() client.Object { return &executionv1alpha1.OpenSandboxExecutionParameters{} },
		Admit:          Admit,
		Probe:          e.Probe,
		NewHandlers: func() (map[string]journal.Handler, error) {
			if err := e.Validate(); err != nil {
				return nil, err
			}
			return e.Handlers(), nil
		},
	}
}

// Admit is the OpenSandbox adapter's admission (execution.Adapter.Admit):
// AdmitTask, then AdmitResources. params must be an
// *OpenSandboxExecutionParameters (anything else is refused with
// ReasonInvalidParametersReference).
func Admit(j *executionv1alpha1.Job, params client.Object, res executionv1alpha1.ExecutionResourceRequirements) (string, string) {
	p, ok := params.(*executionv1alpha1.OpenSandboxExecutionParameters)
	if !ok {
		return executionv1alpha1.ReasonInvalidParametersReference, fmt.Sprintf("the class's parameters are a %T, not OpenSandboxExecutionParameters", params)
	}
	if reason, msg := AdmitTask(j, p); reason != "" {
		return reason, msg
	}
	return AdmitResources(res, p)
}

// AdmitTask checks a Job against the OpenSandbox parameters of its class
// (docs/execution/jobclass-api.md C11) before it is accepted: an env
// variable that references a Secret needs params.spec.allowSecretEnv,
// task.imagePullSecrets need params.spec.allowImageAuth (either would
// make the adapter send a Secret's content to OpenSandbox), and the task
// needs a command (the adapter runs it as a command in the sandbox and can
// not read the image's entrypoint). It returns "", "" when the Job is
// admitted, else executionv1alpha1.ReasonSecretEnvNotAllowed,
// ReasonImageAuthNotAllowed or ReasonCommandRequired and a message naming
// the variable or Secret and the parameters object, never a value. It
// reads nothing.
func AdmitTask(j *executionv1alpha1.Job, params *executionv1alpha1.OpenSandboxExecutionParameters) (string, string) {
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

// AdmitResources checks a Job's effective resources against the
// requestMapping of its OpenSandbox parameters: under Native every set
// request must equal its limit, because the lifecycle API has only
// resourceLimits (executionv1alpha1.ReasonRequestMappingUnsupported
// otherwise); under AdmissionOnly requests only admit. It reads nothing.
func AdmitResources(res executionv1alpha1.ExecutionResourceRequirements, params *executionv1alpha1.OpenSandboxExecutionParameters) (string, string) {
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
