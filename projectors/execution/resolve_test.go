package execution_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/projectors/execution"
)

func class(name string, isDefault bool, deleting bool) executionv1alpha1.JobClass {
	c := executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	if isDefault {
		c.Annotations = map[string]string{executionv1alpha1.AnnotationIsDefaultJobClass: "true"}
	}
	if deleting {
		now := metav1.Now()
		c.DeletionTimestamp = &now
	}
	return c
}

func TestChooseJobClass(t *testing.T) {
	nsWith := func(def string) *corev1.Namespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
		if def != "" {
			ns.Annotations = map[string]string{executionv1alpha1.AnnotationDefaultJobClass: def}
		}
		return ns
	}
	notTrue := class("maybe", false, false)
	notTrue.Annotations = map[string]string{executionv1alpha1.AnnotationIsDefaultJobClass: "True"}
	for _, tc := range []struct {
		name      string
		jobClass  string
		ns        *corev1.Namespace
		classes   []executionv1alpha1.JobClass
		want      string // chosen class name
		reason    string
		inMessage string
	}{
		{"explicit beats namespace and cluster default", "gold", nsWith("silver"),
			[]executionv1alpha1.JobClass{class("gold", false, false), class("silver", false, false), class("bronze", true, false)}, "gold", "", ""},
		{"explicit non-default class", "gold", nil, []executionv1alpha1.JobClass{class("gold", false, false)}, "gold", "", ""},
		{"explicit missing", "gold", nsWith("silver"), []executionv1alpha1.JobClass{class("silver", true, false)}, "",
			executionv1alpha1.ReasonJobClassNotFound, `"gold" (named by spec.jobClassName)`},
		{"explicit being deleted counts as absent", "gold", nil, []executionv1alpha1.JobClass{class("gold", false, true)}, "",
			executionv1alpha1.ReasonJobClassNotFound, "gold"},
		{"namespace default beats cluster default", "", nsWith("silver"),
			[]executionv1alpha1.JobClass{class("silver", false, false), class("bronze", true, false)}, "silver", "", ""},
		{"namespace default beats an ambiguous cluster default", "", nsWith("silver"),
			[]executionv1alpha1.JobClass{class("silver", false, false), class("a", true, false), class("b", true, false)}, "silver", "", ""},
		{"namespace default missing (no fallback to the cluster default)", "", nsWith("silver"),
			[]executionv1alpha1.JobClass{class("bronze", true, false)}, "", executionv1alpha1.ReasonJobClassNotFound, "namespace team"},
		{"empty namespace annotation ignored", "", nsWith(""), []executionv1alpha1.JobClass{class("bronze", true, false)}, "bronze", "", ""},
		{"single cluster default", "", nil, []executionv1alpha1.JobClass{class("x", false, false), class("bronze", true, false)}, "bronze", "", ""},
		{"no classes", "", nil, nil, "", executionv1alpha1.ReasonNoDefaultJobClass, "no JobClass is annotated"},
		{"no default among classes", "", nsWith(""), []executionv1alpha1.JobClass{class("x", false, false)}, "", executionv1alpha1.ReasonNoDefaultJobClass, ""},
		{"annotation must be exactly true", "", nil, []executionv1alpha1.JobClass{notTrue}, "", executionv1alpha1.ReasonNoDefaultJobClass, ""},
		{"two defaults are ambiguous", "", nil, []executionv1alpha1.JobClass{class("b", true, false), class("a", true, false)}, "",
			executionv1alpha1.ReasonAmbiguousDefaultJobClass, "2 JobClasses are annotated execution.ayatori.ddupan.top/is-default-job-class=true (a, b)"},
		{"three defaults are ambiguous", "", nil, []executionv1alpha1.JobClass{class("c", true, false), class("b", true, false), class("a", true, false)}, "",
			executionv1alpha1.ReasonAmbiguousDefaultJobClass, "(a, b, c)"},
		{"a deleting default does not count", "", nil, []executionv1alpha1.JobClass{class("old", true, true), class("new", true, false)}, "new", "", ""},
		{"only a deleting default", "", nil, []executionv1alpha1.JobClass{class("old", true, true)}, "", executionv1alpha1.ReasonNoDefaultJobClass, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "team"}, Spec: executionv1alpha1.JobSpec{JobClassName: tc.jobClass}}
			before := make([]executionv1alpha1.JobClass, len(tc.classes))
			for i := range tc.classes {
				tc.classes[i].DeepCopyInto(&before[i])
			}
			got := execution.ChooseJobClass(job, tc.ns, tc.classes)
			if got.Reason != tc.reason {
				t.Fatalf("reason = %q (%s), want %q", got.Reason, got.Message, tc.reason)
			}
			if tc.reason != "" {
				if got.Class != nil {
					t.Fatalf("class = %s with reason %s, want nil", got.Class.Name, got.Reason)
				}
				if !strings.Contains(got.Message, tc.inMessage) {
					t.Fatalf("message %q does not mention %q", got.Message, tc.inMessage)
				}
				return
			}
			if got.Class == nil || got.Class.Name != tc.want {
				t.Fatalf("class = %v, want %s", got.Class, tc.want)
			}
			// A copy, not a pointer into the caller's slice.
			got.Class.Name = "changed"
			if !reflect.DeepEqual(before, tc.classes) && len(before) > 0 {
				t.Fatal("ChooseJobClass returned a pointer into its input")
			}
		})
	}
}

func TestNamespaceAllowed(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{"ayatori.ddupan.top/execution": "enabled", "tier": "b"}}}
	for _, tc := range []struct {
		name    string
		sel     *metav1.LabelSelector
		ns      *corev1.Namespace
		want    bool
		wantErr bool
	}{
		{"nil selector allows all", nil, ns, true, false},
		{"nil selector allows a nil namespace", nil, nil, true, false},
		{"empty selector allows all", &metav1.LabelSelector{}, ns, true, false},
		{"matchLabels match", &metav1.LabelSelector{MatchLabels: map[string]string{"ayatori.ddupan.top/execution": "enabled"}}, ns, true, false},
		{"matchLabels mismatch", &metav1.LabelSelector{MatchLabels: map[string]string{"ayatori.ddupan.top/execution": "disabled"}}, ns, false, false},
		{"matchLabels against a nil namespace", &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, nil, false, false},
		{"In expression", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}, ns, true, false},
		{"DoesNotExist expression", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}, ns, false, false},
		{"invalid operator", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}, ns, false, true},
		{"In without values", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}}, ns, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &executionv1alpha1.JobClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: executionv1alpha1.JobClassSpec{AllowedNamespaces: tc.sel}}
			got, err := execution.NamespaceAllowed(c, tc.ns)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("allowed = %v, want %v", got, tc.want)
			}
		})
	}
}

// rv builds ResourceValues from "cpu,memory" ("" leaves a value unset).
func rv(cpu, memory string) executionv1alpha1.ResourceValues {
	var v executionv1alpha1.ResourceValues
	if cpu != "" {
		q := resource.MustParse(cpu)
		v.CPU = &q
	}
	if memory != "" {
		q := resource.MustParse(memory)
		v.Memory = &q
	}
	return v
}

func req(reqCPU, reqMem, limCPU, limMem string) executionv1alpha1.ExecutionResourceRequirements {
	return executionv1alpha1.ExecutionResourceRequirements{Requests: rv(reqCPU, reqMem), Limits: rv(limCPU, limMem)}
}

// str prints r as "requests cpu/memory limits cpu/memory" ("-" for unset).
func str(r executionv1alpha1.ExecutionResourceRequirements) string {
	f := func(q *resource.Quantity) string {
		if q == nil {
			return "-"
		}
		return q.String()
	}
	return f(r.Requests.CPU) + "/" + f(r.Requests.Memory) + " " + f(r.Limits.CPU) + "/" + f(r.Limits.Memory)
}

func TestEffectiveResources(t *testing.T) {
	policy := executionv1alpha1.ExecutionResourcePolicy{
		Defaults: req("250m", "256Mi", "1", "1Gi"),
		Minimum:  req("100m", "64Mi", "", ""),
		Maximum:  req("", "", "2", "128Mi"),
	}
	noMax := policy
	noMax.Maximum = executionv1alpha1.ExecutionResourceRequirements{}
	for _, tc := range []struct {
		name      string
		spec      executionv1alpha1.ExecutionResourceRequirements
		policy    executionv1alpha1.ExecutionResourcePolicy
		want      string
		inMessage []string // "" reason when empty
	}{
		{"empty policy keeps the spec", req("1", "", "", ""), executionv1alpha1.ExecutionResourcePolicy{}, "1/- -/-", nil},
		{"defaults fill everything", req("", "", "", ""), noMax, "250m/256Mi 1/1Gi", nil},
		{"job values win over defaults", req("500m", "", "", "512Mi"), noMax, "500m/256Mi 1/512Mi", nil},
		{"limit equal to the maximum allowed", req("", "64Mi", "2", "128Mi"), policy, "250m/64Mi 2/128Mi", nil},
		{"memory 134217728 equals the 128Mi maximum", req("", "64Mi", "", "134217728"), policy, "250m/64Mi 1/134217728", nil},
		{"cpu 1m above the maximum", req("", "64Mi", "2001m", "128Mi"), policy, "250m/64Mi 2001m/128Mi",
			[]string{"limits.cpu 2001m is above the class maximum 2"}},
		{"memory 1 byte above the maximum", req("", "64Mi", "", "134217729"), policy, "250m/64Mi 1/134217729",
			[]string{"limits.memory 134217729 is above the class maximum 128Mi"}},
		{"default above the maximum is caught", req("", "", "", ""), policy, "250m/256Mi 1/1Gi",
			[]string{"limits.memory 1Gi is above the class maximum 128Mi"}},
		{"request equal to the minimum allowed", req("100m", "64Mi", "", "64Mi"), policy, "100m/64Mi 1/64Mi", nil},
		{"request 1m below the minimum", req("99m", "64Mi", "", "64Mi"), policy, "99m/64Mi 1/64Mi",
			[]string{"requests.cpu 99m is below the class minimum 100m"}},
		{"request above its limit", req("2", "", "1", ""), noMax, "2/256Mi 1/1Gi",
			[]string{"requests.cpu 2 exceeds limits.cpu 1"}},
		{"default request above the job's limit", req("", "", "200m", "128Mi"), noMax, "250m/256Mi 200m/128Mi",
			[]string{"requests.cpu 250m exceeds limits.cpu 200m", "requests.memory 256Mi exceeds limits.memory 128Mi"}},
		{"equal request and limit in other units", req("1000m", "128Mi", "1", "134217728"), executionv1alpha1.ExecutionResourcePolicy{}, "1/128Mi 1/134217728", nil},
		{"unset limit fails a maximum (unbounded)", req("", "", "", ""), executionv1alpha1.ExecutionResourcePolicy{Maximum: req("", "", "4", "")}, "-/- -/-",
			[]string{"limits.cpu is unset (unbounded) but the class maximum is 4"}},
		{"unset request passes a maximum", req("", "", "1", ""), executionv1alpha1.ExecutionResourcePolicy{Maximum: req("2", "", "", "")}, "-/- 1/-", nil},
		{"unset request fails a minimum (zero)", req("", "", "", ""), executionv1alpha1.ExecutionResourcePolicy{Minimum: req("", "64Mi", "", "")}, "-/- -/-",
			[]string{"requests.memory is unset (zero) but the class minimum is 64Mi"}},
		{"unset limit passes a minimum", req("", "", "", ""), executionv1alpha1.ExecutionResourcePolicy{Minimum: req("", "", "1", "")}, "-/- -/-", nil},
		{"every violation is listed", req("50m", "", "3", ""), policy, "50m/256Mi 3/1Gi",
			[]string{"requests.cpu 50m is below the class minimum 100m", "limits.cpu 3 is above the class maximum 2", "limits.memory 1Gi is above the class maximum 128Mi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, pol := *tc.spec.DeepCopy(), *tc.policy.DeepCopy()
			got, reason, msg := execution.EffectiveResources(tc.spec, tc.policy)
			if !reflect.DeepEqual(spec, tc.spec) || !reflect.DeepEqual(pol, tc.policy) {
				t.Fatal("EffectiveResources modified its input")
			}
			if s := str(got); s != tc.want {
				t.Errorf("effective = %s, want %s", s, tc.want)
			}
			if len(tc.inMessage) == 0 {
				if reason != "" {
					t.Fatalf("reason = %s (%s), want none", reason, msg)
				}
				return
			}
			if reason != executionv1alpha1.ReasonInvalidResources {
				t.Fatalf("reason = %q, want InvalidResources", reason)
			}
			for _, m := range tc.inMessage {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not mention %q", msg, m)
				}
			}
			// The result shares no quantity with the inputs.
			if got.Requests.CPU != nil && (got.Requests.CPU == tc.spec.Requests.CPU || got.Requests.CPU == tc.policy.Defaults.Requests.CPU) {
				t.Error("the result aliases an input quantity")
			}
		})
	}
	t.Run("result does not alias the defaults", func(t *testing.T) {
		got, _, _ := execution.EffectiveResources(executionv1alpha1.ExecutionResourceRequirements{}, noMax)
		got.Requests.CPU.Add(resource.MustParse("1"))
		if noMax.Defaults.Requests.CPU.String() != "250m" {
			t.Fatalf("defaults changed to %s", noMax.Defaults.Requests.CPU)
		}
	})
}

func TestCheckResourcePolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    executionv1alpha1.ExecutionResourcePolicy
		inMessage []string
	}{
		{"empty", executionv1alpha1.ExecutionResourcePolicy{}, nil},
		{"consistent", executionv1alpha1.ExecutionResourcePolicy{Defaults: req("250m", "256Mi", "1", "1Gi"), Minimum: req("100m", "64Mi", "", ""), Maximum: req("", "", "8", "16Gi")}, nil},
		{"min equal to max", executionv1alpha1.ExecutionResourcePolicy{Minimum: req("1", "", "", ""), Maximum: req("1000m", "", "", "")}, nil},
		{"default equal to the bounds (128Mi and 134217728)", executionv1alpha1.ExecutionResourcePolicy{Defaults: req("", "", "", "128Mi"), Minimum: req("", "", "", "134217728"), Maximum: req("", "", "", "128Mi")}, nil},
		{"min above max", executionv1alpha1.ExecutionResourcePolicy{Minimum: req("", "", "2", ""), Maximum: req("", "", "1999m", "")},
			[]string{"minimum.limits.cpu 2 exceeds maximum.limits.cpu 1999m"}},
		{"default below min", executionv1alpha1.ExecutionResourcePolicy{Defaults: req("", "63Mi", "", ""), Minimum: req("", "64Mi", "", "")},
			[]string{"defaults.requests.memory 63Mi is below minimum.requests.memory 64Mi"}},
		{"default above max", executionv1alpha1.ExecutionResourcePolicy{Defaults: req("", "", "", "134217729"), Maximum: req("", "", "", "128Mi")},
			[]string{"defaults.limits.memory 134217729 is above maximum.limits.memory 128Mi"}},
		{"default request above default limit", executionv1alpha1.ExecutionResourcePolicy{Defaults: req("2", "", "500m", "")},
			[]string{"defaults.requests.cpu 2 exceeds defaults.limits.cpu 500m"}},
		{"minimum request above maximum limit", executionv1alpha1.ExecutionResourcePolicy{Minimum: req("", "2Gi", "", ""), Maximum: req("", "", "", "1Gi")},
			[]string{"minimum.requests.memory 2Gi exceeds maximum.limits.memory 1Gi"}},
		{"several", executionv1alpha1.ExecutionResourcePolicy{Defaults: req("3", "", "", ""), Minimum: req("4", "", "", ""), Maximum: req("2", "", "", "")},
			[]string{"minimum.requests.cpu 4 exceeds maximum.requests.cpu 2", "defaults.requests.cpu 3 is below minimum.requests.cpu 4", "defaults.requests.cpu 3 is above maximum.requests.cpu 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := *tc.policy.DeepCopy()
			reason, msg := execution.CheckResourcePolicy(tc.policy)
			if !reflect.DeepEqual(pol, tc.policy) {
				t.Fatal("CheckResourcePolicy modified its input")
			}
			if len(tc.inMessage) == 0 {
				if reason != "" || msg != "" {
					t.Fatalf("got %s (%s), want consistent", reason, msg)
				}
				return
			}
			if reason != executionv1alpha1.ReasonInvalidResourcePolicy {
				t.Fatalf("reason = %q, want InvalidResourcePolicy", reason)
			}
			for _, m := range tc.inMessage {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not mention %q", msg, m)
				}
			}
		})
	}
}
