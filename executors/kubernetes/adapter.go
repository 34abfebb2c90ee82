package kubernetes

import (
	"context"
	"fmt"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// RBAC of what the projectors read through this adapter.
// +kubebuilder:rbac:groups=execution.ayatori.ddupan.top,resources=kubernetesexecutionparameters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch

// Adapter is the Kubernetes adapter (execution.Adapter): classes of
// executionv1alpha1.ControllerKubernetes with
// KubernetesExecutionParameters, every Job admitted (the native Job's own
// validation happens at Ensure), Ready while the parameters'
// runtimeClassName (if any) exists. No probe: the workload cluster is the
// manager's own API server or one the executor reaches per intent.
// newExecutor builds the executor (its workload client, proof keys) only in
// a process that runs it; the result must pass Validate.
func Adapter(newExecutor func() (*Executor, error)) execution.Adapter {
	return execution.Adapter{
		Name:           execution.AdapterKubernetes,
		ControllerName: executionv1alpha1.ControllerKubernetes,
		ParametersKind: ParametersKind,
		NewParameters:  func() client.Object { return &executionv1alpha1.KubernetesExecutionParameters{} },
		Ready:          runtimeClassReady,
		Watches:        []client.Object{&nodev1.RuntimeClass{}},
		NewHandlers: func() (map[string]journal.Handler, error) {
			e, err := newExecutor()
			if err != nil {
				return nil, err
			}
			if err := e.Validate(); err != nil {
				return nil, err
			}
			return e.Handlers(), nil
		},
	}
}

// runtimeClassReady: "" while params names no RuntimeClass or one that
// exists (read from c), else ReasonRuntimeClassNotFound.
func runtimeClassReady(ctx context.Context, c client.Reader, params client.Object) (string, string, error) {
	k, ok := params.(*executionv1alpha1.KubernetesExecutionParameters)
	if !ok {
		return executionv1alpha1.ReasonInvalidParametersReference, fmt.Sprintf("the class's parameters are a %T, not %s", params, ParametersKind), nil
	}
	if k.Spec.RuntimeClassName == "" {
		return "", "", nil
	}
	switch err := c.Get(ctx, types.NamespacedName{Name: k.Spec.RuntimeClassName}, &nodev1.RuntimeClass{}); {
	case apierrors.IsNotFound(err):
		return executionv1alpha1.ReasonRuntimeClassNotFound,
			fmt.Sprintf("RuntimeClass %s (runtimeClassName of %s %s) does not exist", k.Spec.RuntimeClassName, ParametersKind, k.Name), nil
	case err != nil:
		return "", "", err
	}
	return "", "", nil
}
