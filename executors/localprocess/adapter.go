package localprocess

import (
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// ParametersGVK is the parameters kind's group, version and kind.
var ParametersGVK = schema.GroupVersionKind{Group: ParametersGroup, Version: "v1alpha1", Kind: ParametersKind}

// Adapter is the local-process adapter (execution.Adapter): classes of
// ControllerName with LocalProcessExecutionParameters (read as
// unstructured objects), Admit, no Ready check and no probe (the backend is
// this host), executed by e's handlers.
func (e *Executor) Adapter() execution.Adapter {
	return execution.Adapter{
		Name:            Name,
		ControllerName:  ControllerName,
		ParametersGroup: ParametersGroup,
		ParametersKind:  ParametersKind,
		NewParameters: func() client.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(ParametersGVK)
			return u
		},
		Admit: Admit,
		NewHandlers: func() (map[string]journal.Handler, error) {
			if err := e.Validate(); err != nil {
				return nil, err
			}
			return e.Handlers(), nil
		},
	}
}

// Admit refuses, before a Job is accepted, what this adapter can not run:
// env that is not a literal value (the adapter reads no Secret or
// ConfigMap), image pull Secrets (there is no image), a task without a
// command (there is no entrypoint) or whose command is not an absolute
// path (nothing is looked up in a PATH), and effective resources (a local
// process can not honour a request or a limit). Messages name the field,
// never a value. It reads nothing.
func Admit(j *executionv1alpha1.Job, _ client.Object, res executionv1alpha1.ExecutionResourceRequirements) (string, string) {
	task := j.Spec.Task
	for _, v := range task.Env {
		if v.Value == nil {
			return ReasonEnvNotLiteral, fmt.Sprintf("env %s is not a literal value; the local-process adapter passes literal values only", v.Name)
		}
	}
	if len(task.ImagePullSecrets) > 0 {
		return executionv1alpha1.ReasonImageAuthNotAllowed, "the local-process adapter pulls no image; remove imagePullSecrets"
	}
	if len(task.Command) == 0 {
		return executionv1alpha1.ReasonCommandRequired, "the local-process adapter runs task.command and has no image entrypoint; set task.command"
	}
	if !filepath.IsAbs(task.Command[0]) {
		return ReasonCommandNotAbsolute, "task.command[0] must be an absolute path; the local-process adapter looks nothing up in a PATH"
	}
	if res != (executionv1alpha1.ExecutionResourceRequirements{}) {
		return ReasonResourcesUnsupported, "the Job's effective resources set a request or a limit, which the local-process adapter can not honour"
	}
	return "", ""
}
