//go:build !unit

// Real servers only (no test runs under -short): left out of the unit
// loop's build (make test-unit: -tags unit), which then links no binary
// that would run nothing.

package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestAdmissionPolicies applies deploy/admission to a real API server and
// checks each policy as the identities it tells apart (impersonated, each
// with the RBAC a namespace user or the component has): a namespace user
// may not create a pod with the Job controller's or Ayatori's labels, nor a
// batch Job with Ayatori's UID label, nor confirm a lost execution; the Job
// controller, the manager's ServiceAccount and an operator may.
func TestAdmissionPolicies(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ctx := context.Background()
	for _, o := range render(t, "admission") {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	const ns = "team"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// RBAC: the namespace user may do everything with pods, Jobs and
	// Ayatori Jobs in the namespace; the components have what they need.
	grant := func(name string, subject rbacv1.Subject, rules []rbacv1.PolicyRule) {
		t.Helper()
		if err := cp.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}); err != nil {
			t.Fatal(err)
		}
		if err := cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: []rbacv1.Subject{subject}}); err != nil {
			t.Fatal(err)
		}
	}
	all := []rbacv1.PolicyRule{{APIGroups: []string{"", "batch", executionv1alpha1.GroupVersion.Group}, Resources: []string{"pods", "jobs"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}
	user := func(n string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n}
	}
	grant("test-mallory", user("mallory"), all)
	grant("test-job-controller", user("system:serviceaccount:kube-system:job-controller"), all)
	grant("test-manager", user("system:serviceaccount:ayatori-system:ayatori-manager"), all)
	grant("test-operator-base", user("olga"), all)
	if err := cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ayatori-job-operator"},
		Subjects: []rbacv1.Subject{user("olga")}}); err != nil {
		t.Fatal(err)
	}
	as := func(name string) client.Client {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
		c, err := client.New(cfg, client.Options{Scheme: cp.Client.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mallory, jobController, manager, olga := as("mallory"), as("system:serviceaccount:kube-system:job-controller"),
		as("system:serviceaccount:ayatori-system:ayatori-manager"), as("olga")
	// The requests deny repeats are dry runs: admission runs, nothing is
	// stored. A create the policy let through before it was in force
	// would otherwise make every later try AlreadyExists.
	malloryDry, olgaDry := client.NewDryRunClient(mallory), client.NewDryRunClient(olga)
	// waitAllowed waits until the API server's RBAC authorizer (its cache
	// trails the bindings just created) lets user do verb on the resource,
	// so neither an RBAC refusal passes for a policy's nor an allow fails
	// on it.
	waitAllowed := func(user, verb, group, resource, name string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Name: name}}}
			if err := cp.Client.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("RBAC never let %s %s %s/%s %s", user, verb, group, resource, name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, u := range []string{"mallory", "system:serviceaccount:kube-system:job-controller", "system:serviceaccount:ayatori-system:ayatori-manager", "olga"} {
		waitAllowed(u, "create", "", "pods", "")
		waitAllowed(u, "create", "batch", "jobs", "")
		waitAllowed(u, "update", executionv1alpha1.GroupVersion.Group, "jobs", "")
	}
	waitAllowed("olga", "confirm-backend-lost", executionv1alpha1.GroupVersion.Group, "jobs", "lost")
	// deny waits until the policy is in force (policies compile
	// asynchronously), then requires the request to be refused.
	deny := func(what string, do func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := do()
			// Only a policy's refusal counts (an RBAC one is not the
			// policy's work).
			if (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				t.Logf("%s: %v", what, err)
				// The user reads the policy's message, never the CEL
				// fallback (a messageExpression that cannot be evaluated,
				// e.g. one using the authorizer, falls back to it: found
				// by make e2e, issue 26).
				if strings.Contains(err.Error(), "failed expression:") {
					t.Errorf("%s: refused without the policy's message: %v", what, err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not refused: %v", what, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	allow := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "task", Image: "x"}}}}
	}
	for _, label := range []string{"batch.kubernetes.io/controller-uid", "controller-uid", execution.LabelJobUID} {
		deny("a user's pod labelled "+label, func() error {
			return malloryDry.Create(ctx, pod("forged-"+strings.ReplaceAll(label, "/", "-"), map[string]string{label: "x"}))
		})
	}
	allow("a user's unlabelled pod", mallory.Create(ctx, pod("plain", nil)))
	deny("a user adding the label to their pod", func() error {
		p := &corev1.Pod{}
		if err := mallory.Get(ctx, types.NamespacedName{Namespace: ns, Name: "plain"}, p); err != nil {
			return err
		}
		p.Labels = map[string]string{execution.LabelJobUID: "x"}
		return malloryDry.Update(ctx, p)
	})
	allow("the Job controller's pod", jobController.Create(ctx, pod("task", map[string]string{"batch.kubernetes.io/controller-uid": "u", execution.LabelJobUID: "x"})))

	job := func(name string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{execution.LabelJobUID: "x"}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "task", Image: "x"}}}}}}
	}
	deny("a user's batch Job with Ayatori's label", func() error { return malloryDry.Create(ctx, job("ayatori-forged")) })
	allow("the manager's native Job", manager.Create(ctx, job("ayatori-real")))
	// Others may still update it when the label stays (the Job
	// controller's writes, the garbage collector's finalizers).
	real := &batchv1.Job{}
	allow("read", cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ayatori-real"}, real))
	real.Annotations = map[string]string{"touched": "yes"}
	allow("an update that keeps the label", jobController.Update(ctx, real))

	aj := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost"},
		Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "x"}}}
	allow("a user's Ayatori Job", mallory.Create(ctx, aj))
	confirm := func(c client.Client, by string) error {
		cur := &executionv1alpha1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(aj), cur); err != nil {
			return err
		}
		cur.Annotations = map[string]string{executionv1alpha1.AnnotationBackendLost: string(cur.UID)}
		if by != "" {
			cur.Annotations[executionv1alpha1.AnnotationConfirmedBy] = by
		}
		return c.Update(ctx, cur)
	}
	// References: mallory may read Secret "readable" only.
	if err := cp.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-one"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, ResourceNames: []string{"readable"}, Verbs: []string{"get"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-one"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-one"}, Subjects: []rbacv1.Subject{user("mallory")}}); err != nil {
		t.Fatal(err)
	}
	waitAllowed("mallory", "get", "", "secrets", "readable")
	waitAllowed("mallory", "get", "", "configmaps", "readable")
	withRefs := func(name, secret, configMap, pull string) *executionv1alpha1.Job {
		j := &executionv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: executionv1alpha1.JobSpec{Task: executionv1alpha1.TaskSpec{Image: "x"}}}
		if secret != "" {
			j.Spec.Task.Env = append(j.Spec.Task.Env, executionv1alpha1.EnvVar{Name: "S", ValueFrom: &executionv1alpha1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "k"}}})
		}
		if configMap != "" {
			j.Spec.Task.Env = append(j.Spec.Task.Env, executionv1alpha1.EnvVar{Name: "C", ValueFrom: &executionv1alpha1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}, Key: "k"}}})
		}
		if pull != "" {
			j.Spec.Task.ImagePullSecrets = []corev1.LocalObjectReference{{Name: pull}}
		}
		return j
	}
	deny("a Job with env from a Secret its author may not read", func() error { return malloryDry.Create(ctx, withRefs("env-secret", "tenant-password", "", "")) })
	deny("a Job with env from a ConfigMap its author may not read", func() error { return malloryDry.Create(ctx, withRefs("env-cm", "", "private", "")) })
	deny("a Job with a pull Secret its author may not read", func() error { return malloryDry.Create(ctx, withRefs("pull", "", "", "registry")) })
	allow("a Job with references its author may read", mallory.Create(ctx, withRefs("readable", "readable", "readable", "readable")))

	deny("a user confirming a lost execution", func() error { return confirm(malloryDry, "mallory") })
	deny("an operator confirming in someone else's name", func() error { return confirm(olgaDry, "mallory") })
	deny("an operator confirming without saying who", func() error { return confirm(olgaDry, "") })
	allow("an operator confirming", confirm(olga, "olga"))
}
