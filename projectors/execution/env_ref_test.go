package execution

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestEnvReferenceWithoutNameIsRefused: the CRD accepts a secretKeyRef or
// configMapKeyRef with an empty name (corev1's selector defaults it to "");
// such a Job gets a clear Accepted=False verdict, not a read error retried
// forever with no condition.
func TestEnvReferenceWithoutNameIsRefused(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "envref"}}); err != nil {
		t.Fatal(err)
	}
	r := &JobReconciler{Client: cp.Client, APIReader: cp.Client}
	for i, src := range []*executionv1alpha1.EnvVarSource{
		{SecretKeyRef: &corev1.SecretKeySelector{Key: "token"}},
		{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "value"}},
	} {
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "envref", GenerateName: "noname-"},
			Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "ayatori.test/succeed",
				Env: []executionv1alpha1.EnvVar{{Name: "X", ValueFrom: src}}}}}
		if err := cp.Client.Create(ctx, j); err != nil {
			t.Logf("case %d: the API server refuses it already: %v", i, err)
			continue
		}
		reason, msg, err := r.checkEnv(ctx, j)
		if err != nil || reason == "" {
			t.Fatalf("case %d: want a refusal, got reason %q msg %q err %v", i, reason, msg, err)
		}
	}
}
