package integration_test

import (
	"context"
	"os"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestManagerKubeconfigIsTheShippedServiceAccount: the kubeconfig every
// stack runs its manager with authenticates as deploy/rbac's ServiceAccount
// (not an administrator), which has the shipped rules and nothing more.
func TestManagerKubeconfigIsTheShippedServiceAccount(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ctx := context.Background()
	path, err := cp.ManagerKubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := who.Status.UserInfo.Username, "system:serviceaccount:"+integration.ControllerNamespace+":"+integration.ManagerServiceAccount; got != want {
		t.Fatalf("the manager's kubeconfig authenticates as %q, want %q", got, want)
	}
	for _, c := range []struct {
		ns, group, resource, sub, verb string
		allowed                        bool
	}{
		{"app", "database.ayatori.ddupan.top", "postgresqltenants", "", "patch", true},
		{"app", "database.ayatori.ddupan.top", "postgresqltenants", "", "update", false},
		{"app", "", "secrets", "", "get", true},
		{"app", "", "secrets", "", "list", false},
		{integration.ControllerNamespace, "", "secrets", "", "list", true},
		{"app", "batch", "jobs", "", "create", true},
		{"app", "batch", "jobs", "", "watch", true}, // the Kubernetes adapter's change feed
		{"app", "batch", "jobs", "", "update", false},
		{"app", "", "pods", "", "create", false},
		{"app", "execution.ayatori.ddupan.top", "jobs", "status", "patch", true},
		{"app", "execution.ayatori.ddupan.top", "jobs", "", "confirm-backend-lost", false},
		{integration.ControllerNamespace, "coordination.k8s.io", "leases", "", "update", true},
	} {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.ns, Group: c.group, Resource: c.resource, Subresource: c.sub, Verb: c.verb}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.allowed {
			t.Errorf("%s %s/%s %s in %q: allowed %v, want %v", c.verb, c.group, c.resource, c.sub, c.ns, r.Status.Allowed, c.allowed)
		}
	}
}

// TestForbiddenRequestsFindsRefusals: a refusal in the manager's JSON log
// is found, other lines are not.
func TestForbiddenRequestsFindsRefusals(t *testing.T) {
	path := t.TempDir() + "/manager.log"
	log := `{"level":"info","msg":"starting manager"}
{"level":"error","msg":"Reconciler error","error":"jobs.batch \"ayatori-x\" is forbidden: User \"system:serviceaccount:ayatori-system:ayatori-manager\" cannot create resource \"jobs\" in API group \"batch\" in the namespace \"app\""}
{"level":"error","msg":"Reconciler error","error":"pods \"p\" is forbidden: User \"mallory\" cannot get resource \"pods\""}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := integration.ForbiddenRequests(path); len(got) != 1 || !strings.Contains(got[0], `cannot create resource`) {
		t.Fatalf("ForbiddenRequests = %q", got)
	}
}
