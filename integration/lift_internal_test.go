package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestLiftNotReadyTaintsRetriesAConflict: kwok patches a fake node's status
// while the workload harness lifts its not-ready taint, so the harness's
// update can meet a moved resourceVersion (a CI run failed on it). The lift
// reads the node again and retries instead of failing the stack's start.
func TestLiftNotReadyTaintsRetriesAConflict(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
			{Key: "keep", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	updates := 0
	c := fake.NewClientBuilder().WithObjects(node).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			if updates == 1 {
				return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, obj.GetName(), nil)
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	if err := liftNotReadyTaints(context.Background(), c, "kwok-node-0"); err != nil {
		t.Fatalf("lift: %v", err)
	}
	got := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "kwok-node-0"}, got); err != nil {
		t.Fatal(err)
	}
	if updates != 2 || len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "keep" {
		t.Fatalf("updates=%d taints=%v; want 2 updates and only the kept taint", updates, got.Spec.Taints)
	}
}
