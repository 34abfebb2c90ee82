package journaled_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/projectors/journaled"
)

// TestObjectConditionsCollector: objects are counted by condition status and
// reason with the oldest transition's age; a reason outside the API's list
// and a status outside True/False/Unknown are folded into "Other"; an object
// without the condition counts as reason "None". No label carries a name.
func TestObjectConditionsCollector(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	job := func(name string, status metav1.ConditionStatus, reason string, age time.Duration) client.Object {
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
		if reason != "" {
			j.Status.Conditions = []metav1.Condition{{Type: executionv1alpha1.JobConditionSucceeded, Status: status, Reason: reason,
				LastTransitionTime: metav1.NewTime(now.Add(-age))}}
		}
		return j
	}
	scheme := runtime.NewScheme()
	if err := executionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&executionv1alpha1.Job{}).WithObjects(
		job("a", metav1.ConditionUnknown, executionv1alpha1.ReasonResultUnknown, 10*time.Minute),
		job("b", metav1.ConditionUnknown, executionv1alpha1.ReasonResultUnknown, time.Minute),
		job("c", metav1.ConditionTrue, executionv1alpha1.ReasonCompleted, time.Hour),
		job("secret-canary-name", metav1.ConditionFalse, "MadeUpByHand", time.Second),
		job("d", "Maybe", executionv1alpha1.ReasonRunning, 0),
		job("e", "", "", 0),
	).Build()
	reg := prometheus.NewRegistry()
	reg.MustRegister(&journaled.ObjectConditions{Reader: c, Now: func() time.Time { return now }, MinInterval: -1, Kinds: []journaled.ConditionKind{{
		Domain: "execution", Kind: "Job", Condition: executionv1alpha1.JobConditionSucceeded,
		NewList:    func() client.ObjectList { return &executionv1alpha1.JobList{} },
		Conditions: func(o client.Object) []metav1.Condition { return o.(*executionv1alpha1.Job).Status.Conditions },
		Reasons:    []string{executionv1alpha1.ReasonResultUnknown, executionv1alpha1.ReasonCompleted, executionv1alpha1.ReasonRunning},
	}}})
	want := `
# HELP ayatori_objects Objects per kind by the status and reason of their main condition (Ready; Succeeded for a Job).
# TYPE ayatori_objects gauge
ayatori_objects{condition="Succeeded",domain="execution",kind="Job",reason="Completed",status="True"} 1
ayatori_objects{condition="Succeeded",domain="execution",kind="Job",reason="None",status=""} 1
ayatori_objects{condition="Succeeded",domain="execution",kind="Job",reason="Other",status="False"} 1
ayatori_objects{condition="Succeeded",domain="execution",kind="Job",reason="ResultUnknown",status="Unknown"} 2
ayatori_objects{condition="Succeeded",domain="execution",kind="Job",reason="Running",status="Other"} 1
# HELP ayatori_objects_condition_age_seconds_max Largest time since lastTransitionTime among the objects of a kind with this condition status and reason.
# TYPE ayatori_objects_condition_age_seconds_max gauge
ayatori_objects_condition_age_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="Completed",status="True"} 3600
ayatori_objects_condition_age_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="None",status=""} 0
ayatori_objects_condition_age_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="Other",status="False"} 1
ayatori_objects_condition_age_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="ResultUnknown",status="Unknown"} 600
ayatori_objects_condition_age_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="Running",status="Other"} 0
# HELP ayatori_objects_list_errors 1 when the last scrape could not list the kind from the cache (its other series are missing then).
# TYPE ayatori_objects_list_errors gauge
ayatori_objects_list_errors{domain="execution",kind="Job"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ayatori_objects", "ayatori_objects_condition_age_seconds_max", "ayatori_objects_list_errors"); err != nil {
		t.Fatal(err)
	}

	// Not-Ready age counts from the first scrape that saw the object so,
	// survives a change between non-True states, and is reset by True.
	now = now.Add(90 * time.Second)
	b := &executionv1alpha1.Job{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "b"}, b); err != nil {
		t.Fatal(err)
	}
	b.Status.Conditions[0].Reason = executionv1alpha1.ReasonRunning
	if err := c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	a := &executionv1alpha1.Job{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "a"}, a); err != nil {
		t.Fatal(err)
	}
	a.Status.Conditions[0].Status, a.Status.Conditions[0].Reason = metav1.ConditionTrue, executionv1alpha1.ReasonCompleted
	if err := c.Status().Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP ayatori_objects_not_ready_seconds_max Largest time an object of the group has been without its condition True, by its current status and reason: since the first scrape of this process that saw it so (its own clock; a status change between False and Unknown does not reset it, True does).
# TYPE ayatori_objects_not_ready_seconds_max gauge
ayatori_objects_not_ready_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="None",status=""} 90
ayatori_objects_not_ready_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="Other",status="False"} 90
ayatori_objects_not_ready_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="Running",status="Other"} 90
ayatori_objects_not_ready_seconds_max{condition="Succeeded",domain="execution",kind="Job",reason="Running",status="Unknown"} 90
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ayatori_objects_not_ready_seconds_max"); err != nil {
		t.Fatal(err)
	}
}
