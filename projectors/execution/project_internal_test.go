package execution

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// A Job on its way out gets no status write when only the generation the
// API server raised at its deletion would change; any other change is
// still written.
func TestProjectSkipsGenerationOnlyWriteWhileDeleting(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := executionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	status := func(gen int64, reason string) executionv1alpha1.JobStatus {
		st := executionv1alpha1.JobStatus{ObservedGeneration: gen}
		journaled.SetCondition(&st.Conditions, executionv1alpha1.JobConditionSucceeded, gen, journaled.Condition{Status: metav1.ConditionTrue, Reason: reason, Message: reason})
		return st
	}
	for _, tc := range []struct {
		name      string
		deleting  bool
		reason    string
		wantWrite bool
	}{
		{"deleting, generation only", true, executionv1alpha1.ReasonCompleted, false},
		{"deleting, another reason", true, "Other", true},
		{"live, generation only", false, executionv1alpha1.ReasonCompleted, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", Generation: 2, Finalizers: []string{executionv1alpha1.JobFinalizer}},
				Status: status(1, executionv1alpha1.ReasonCompleted)}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(j).WithStatusSubresource(j).Build()
			if tc.deleting {
				if err := c.Delete(ctx, j); err != nil {
					t.Fatal(err)
				}
			}
			live := &executionv1alpha1.Job{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(j), live); err != nil {
				t.Fatal(err)
			}
			rv := live.ResourceVersion
			k := jobKind{r: &JobReconciler{Client: c}}
			if err := k.Project(ctx, live, JobDecision{Status: status(2, tc.reason)}); err != nil {
				t.Fatal(err)
			}
			if wrote := live.ResourceVersion != rv; wrote != tc.wantWrite {
				t.Fatalf("status written %v, want %v", wrote, tc.wantWrite)
			}
		})
	}
}
