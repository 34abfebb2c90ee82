// Package execution holds the projectors of the execution domain
// (execution.ayatori.ddupan.top): the JobClass controller and the pure
// rules that resolve a Job's class and resources (resolve.go). Source of
// truth: docs/execution/job-api.md and docs/execution/jobclass-api.md.
package execution

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
)

// ClassChoice is the outcome of choosing a Job's JobClass.
type ClassChoice struct {
	// Class is a deep copy of the chosen JobClass; nil when Reason != "".
	Class *executionv1alpha1.JobClass
	// Reason is "" or an api reason: ReasonNoDefaultJobClass,
	// ReasonAmbiguousDefaultJobClass, ReasonJobClassNotFound.
	Reason string
	// Message explains Reason for humans (class names only, no secrets).
	Message string
}

// ChooseJobClass picks the JobClass of job from classes (the cluster's
// JobClasses, e.g. a cache list). Order: job.Spec.JobClassName; else the
// namespace annotation executionv1alpha1.AnnotationDefaultJobClass (ns may
// be nil: no annotation); else the single class annotated
// AnnotationIsDefaultJobClass == "true". No default → NoDefaultJobClass;
// two or more → AmbiguousDefaultJobClass (never "newest wins"). A named
// class that is not in classes → JobClassNotFound. Classes with a
// deletionTimestamp count as absent. Inputs are not modified.
func ChooseJobClass(job *executionv1alpha1.Job, ns *corev1.Namespace, classes []executionv1alpha1.JobClass) ClassChoice {
	live := make([]*executionv1alpha1.JobClass, 0, len(classes))
	for i := range classes {
		if classes[i].DeletionTimestamp == nil {
			live = append(live, &classes[i])
		}
	}
	name, source := job.Spec.JobClassName, "spec.jobClassName"
	if name == "" && ns != nil && ns.Annotations[executionv1alpha1.AnnotationDefaultJobClass] != "" {
		name = ns.Annotations[executionv1alpha1.AnnotationDefaultJobClass]
		source = fmt.Sprintf("the annotation %s of namespace %s", executionv1alpha1.AnnotationDefaultJobClass, ns.Name)
	}
	if name != "" {
		for _, c := range live {
			if c.Name == name {
				return ClassChoice{Class: c.DeepCopy()}
			}
		}
		return ClassChoice{Reason: executionv1alpha1.ReasonJobClassNotFound,
			Message: fmt.Sprintf("JobClass %q (named by %s) does not exist", name, source)}
	}
	var defaults []*executionv1alpha1.JobClass
	for _, c := range live {
		if c.Annotations[executionv1alpha1.AnnotationIsDefaultJobClass] == "true" {
			defaults = append(defaults, c)
		}
	}
	switch len(defaults) {
	case 0:
		return ClassChoice{Reason: executionv1alpha1.ReasonNoDefaultJobClass,
			Message: fmt.Sprintf("the Job names no JobClass, its namespace has no %s annotation and no JobClass is annotated %s=true",
				executionv1alpha1.AnnotationDefaultJobClass, executionv1alpha1.AnnotationIsDefaultJobClass)}
	case 1:
		return ClassChoice{Class: defaults[0].DeepCopy()}
	default:
		names := make([]string, 0, len(defaults))
		for _, c := range defaults {
			names = append(names, c.Name)
		}
		sort.Strings(names)
		return ClassChoice{Reason: executionv1alpha1.ReasonAmbiguousDefaultJobClass,
			Message: fmt.Sprintf("%d JobClasses are annotated %s=true (%s); exactly one may be",
				len(names), executionv1alpha1.AnnotationIsDefaultJobClass, strings.Join(names, ", "))}
	}
}

// NamespaceAllowed reports whether ns's labels match
// class.Spec.AllowedNamespaces (nil selector: every namespace; a nil ns
// has no labels). The error is the selector's parse error (an invalid
// operator or value); the result is then false.
func NamespaceAllowed(class *executionv1alpha1.JobClass, ns *corev1.Namespace) (bool, error) {
	if class.Spec.AllowedNamespaces == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(class.Spec.AllowedNamespaces)
	if err != nil {
		return false, fmt.Errorf("JobClass %s: invalid allowedNamespaces: %w", class.Name, err)
	}
	var set labels.Set
	if ns != nil {
		set = ns.Labels
	}
	return sel.Matches(set), nil
}

// slot names one of the four quantities of an ExecutionResourceRequirements.
type slot struct {
	limit bool // limits (true) or requests
	cpu   bool // cpu (true) or memory
}

func (s slot) String() string {
	kind, res := "requests", "memory"
	if s.limit {
		kind = "limits"
	}
	if s.cpu {
		res = "cpu"
	}
	return kind + "." + res
}

// slots in the order messages list them.
var slots = []slot{{false, true}, {false, false}, {true, true}, {true, false}}

// at returns the address of slot s in r.
func at(r *executionv1alpha1.ExecutionResourceRequirements, s slot) **resource.Quantity {
	v := &r.Requests
	if s.limit {
		v = &r.Limits
	}
	if s.cpu {
		return &v.CPU
	}
	return &v.Memory
}

func get(r *executionv1alpha1.ExecutionResourceRequirements, s slot) *resource.Quantity {
	return *at(r, s)
}

// pair is the request and limit slot of the same resource.
func pairs() [][2]slot {
	return [][2]slot{{{false, true}, {true, true}}, {{false, false}, {true, false}}}
}

// EffectiveResources fills the unset requests and limits of spec from
// policy.Defaults (deep copies; inputs are not modified), then checks each
// value against policy.Minimum and policy.Maximum and every request ≤ its
// limit. An unset request counts as zero (it reserves nothing, so it fails
// a minimum); an unset limit counts as unbounded (it fails a maximum). The
// filled requirements are returned even when a check fails. The second and
// third results are "" when every check passes, else
// executionv1alpha1.ReasonInvalidResources and a message naming each
// violated field with both quantities, e.g. "limits.cpu 2 is above the
// class maximum 1".
func EffectiveResources(spec executionv1alpha1.ExecutionResourceRequirements, policy executionv1alpha1.ExecutionResourcePolicy) (executionv1alpha1.ExecutionResourceRequirements, string, string) {
	// Quantity.Cmp and String cache into their receiver: work on copies
	// only, so shared (informer cache) inputs are never written.
	out := *spec.DeepCopy()
	policy = *policy.DeepCopy()
	for _, s := range slots {
		if p := at(&out, s); *p == nil {
			if d := get(&policy.Defaults, s); d != nil {
				c := d.DeepCopy()
				*p = &c
			}
		}
	}
	var problems []string
	for _, s := range slots {
		v := get(&out, s)
		if minimum := get(&policy.Minimum, s); minimum != nil {
			switch {
			case v == nil && !s.limit && !minimum.IsZero():
				problems = append(problems, fmt.Sprintf("%s is unset (zero) but the class minimum is %s", s, minimum))
			case v != nil && v.Cmp(*minimum) < 0:
				problems = append(problems, fmt.Sprintf("%s %s is below the class minimum %s", s, v, minimum))
			}
		}
		if maximum := get(&policy.Maximum, s); maximum != nil {
			switch {
			case v == nil && s.limit:
				problems = append(problems, fmt.Sprintf("%s is unset (unbounded) but the class maximum is %s", s, maximum))
			case v != nil && v.Cmp(*maximum) > 0:
				problems = append(problems, fmt.Sprintf("%s %s is above the class maximum %s", s, v, maximum))
			}
		}
	}
	for _, p := range pairs() {
		req, lim := get(&out, p[0]), get(&out, p[1])
		if req != nil && lim != nil && req.Cmp(*lim) > 0 {
			problems = append(problems, fmt.Sprintf("%s %s exceeds %s %s", p[0], req, p[1], lim))
		}
	}
	if len(problems) > 0 {
		return out, executionv1alpha1.ReasonInvalidResources, strings.Join(problems, "; ")
	}
	return out, "", ""
}

// CheckResourcePolicy reports whether a class's resource policy can be
// met at all. It returns executionv1alpha1.ReasonInvalidResourcePolicy and
// a message naming each contradiction with both quantities when a minimum
// exceeds its maximum, a default lies outside [minimum, maximum], a
// default request exceeds the default limit, or a minimum request exceeds
// the maximum limit of the same resource; "", "" when the policy is
// consistent. p is not modified.
func CheckResourcePolicy(p executionv1alpha1.ExecutionResourcePolicy) (string, string) {
	p = *p.DeepCopy() // Cmp and String write caches into their receiver
	var problems []string
	for _, s := range slots {
		minimum, maximum, def := get(&p.Minimum, s), get(&p.Maximum, s), get(&p.Defaults, s)
		if minimum != nil && maximum != nil && minimum.Cmp(*maximum) > 0 {
			problems = append(problems, fmt.Sprintf("minimum.%s %s exceeds maximum.%s %s", s, minimum, s, maximum))
		}
		if def != nil && minimum != nil && def.Cmp(*minimum) < 0 {
			problems = append(problems, fmt.Sprintf("defaults.%s %s is below minimum.%s %s", s, def, s, minimum))
		}
		if def != nil && maximum != nil && def.Cmp(*maximum) > 0 {
			problems = append(problems, fmt.Sprintf("defaults.%s %s is above maximum.%s %s", s, def, s, maximum))
		}
	}
	for _, pr := range pairs() {
		if req, lim := get(&p.Defaults, pr[0]), get(&p.Defaults, pr[1]); req != nil && lim != nil && req.Cmp(*lim) > 0 {
			problems = append(problems, fmt.Sprintf("defaults.%s %s exceeds defaults.%s %s", pr[0], req, pr[1], lim))
		}
		if req, lim := get(&p.Minimum, pr[0]), get(&p.Maximum, pr[1]); req != nil && lim != nil && req.Cmp(*lim) > 0 {
			problems = append(problems, fmt.Sprintf("minimum.%s %s exceeds maximum.%s %s", pr[0], req, pr[1], lim))
		}
	}
	if len(problems) > 0 {
		return executionv1alpha1.ReasonInvalidResourcePolicy, strings.Join(problems, "; ")
	}
	return "", ""
}
