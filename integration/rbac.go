package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ManagerServiceAccount is the manager's ServiceAccount in
// ControllerNamespace, as deploy/rbac names it.
const ManagerServiceAccount = "ayatori-manager"

// managerTokenSeconds is the lifetime of the manager's token in a test
// stack (longer than any test run; a deployment mounts a projected,
// rotated token instead).
const managerTokenSeconds = 48 * 3600

// Kustomize renders the kustomization in dir (relative to the repository
// root, e.g. "deploy/rbac") as `kustomize build` does.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(RepoRoot(), dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// ApplyKustomization creates every object dir renders (Kustomize) on cp;
// one that exists already is left as it is.
func (cp *ControlPlane) ApplyKustomization(ctx context.Context, dir string) error {
	objs, err := Kustomize(dir)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := cp.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: create %s %s: %w", dir, o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// ManagerKubeconfig returns a kubeconfig file for the manager with exactly
// the rights deploy/ ships: it applies deploy/rbac (the ServiceAccount
// ayatori-manager in ControllerNamespace, its ClusterRole, Role and
// bindings) and writes a kubeconfig with a token of that ServiceAccount
// (TokenRequest, 48 h). Every stack runs its manager with it, so a rule
// the code needs and deploy/rbac lacks fails a test. The file is made
// once per control plane.
func (cp *ControlPlane) ManagerKubeconfig(ctx context.Context) (string, error) {
	cp.managerKC.Do(func() { cp.managerKCPath, cp.managerKCErr = cp.writeManagerKubeconfig(ctx) })
	return cp.managerKCPath, cp.managerKCErr
}

func (cp *ControlPlane) writeManagerKubeconfig(ctx context.Context) (string, error) {
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if err := cp.ApplyKustomization(ctx, "deploy/rbac"); err != nil {
		return "", err
	}
	if err := waitManagerRBAC(ctx, cs); err != nil {
		return "", err
	}
	exp := int64(managerTokenSeconds)
	tr, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, ManagerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", ControllerNamespace, ManagerServiceAccount, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	kc.AuthInfos[ManagerServiceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["manager"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: ManagerServiceAccount, Namespace: ControllerNamespace}
	kc.CurrentContext = "manager"
	path := filepath.Join(cp.dir, "manager.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", err
	}
	// The same token, as a projected ServiceAccount token file: the
	// manager's OpenBao Kubernetes auth login (role ayatori-manager).
	cp.managerTokenPath = filepath.Join(cp.dir, "manager.token")
	return path, os.WriteFile(cp.managerTokenPath, []byte(tr.Status.Token), 0o600)
}

// waitManagerRBAC waits (30 s at most) until the API server's RBAC
// authorizer, whose cache trails the bindings just applied, grants the
// manager's ServiceAccount one verb of every rule of deploy/rbac's
// ClusterRole and Role: a manager started earlier logs refusals a stack's
// "forbidden" check would take for a missing rule.
func waitManagerRBAC(ctx context.Context, cs kubernetes.Interface) error {
	type rbacCheck struct {
		ns   string
		rule rbacv1.PolicyRule
	}
	var checks []rbacCheck
	cr, err := cs.RbacV1().ClusterRoles().Get(ctx, ManagerServiceAccount, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, r := range cr.Rules {
		checks = append(checks, rbacCheck{"", r})
	}
	role, err := cs.RbacV1().Roles(ControllerNamespace).Get(ctx, ManagerServiceAccount, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, r := range role.Rules {
		checks = append(checks, rbacCheck{ControllerNamespace, r})
	}
	user := "system:serviceaccount:" + ControllerNamespace + ":" + ManagerServiceAccount
	allowed := func() error {
		for _, c := range checks {
			r := c.rule
			if len(r.APIGroups) == 0 || len(r.Resources) == 0 || len(r.Verbs) == 0 {
				continue // a non-resource rule
			}
			resource, sub, _ := strings.Cut(r.Resources[0], "/")
			attrs := &authorizationv1.ResourceAttributes{Namespace: c.ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: resource, Subresource: sub}
			if len(r.ResourceNames) > 0 {
				attrs.Name = r.ResourceNames[0]
			}
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ControllerNamespace, "system:authenticated"},
					ResourceAttributes: attrs}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return fmt.Errorf("RBAC does not yet grant %s %s %s.%s in %q", user, attrs.Verb, resource, attrs.Group, c.ns)
			}
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := allowed()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("manager RBAC not in force: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ManagerTokenPath is the file holding the manager ServiceAccount's token
// (what a pod finds at /var/run/secrets/kubernetes.io/serviceaccount/token),
// for --openbao-service-account-token-path; it exists once
// ManagerKubeconfig returned.
func (cp *ControlPlane) ManagerTokenPath() string { return cp.managerTokenPath }

// managerKubeconfigOnce holds ManagerKubeconfig's result per control plane.
type managerKubeconfigOnce struct {
	managerKC        sync.Once
	managerKCPath    string
	managerKCErr     error
	managerTokenPath string
}

// ForbiddenRequests returns the lines of a manager log that report an API
// request the manager's RBAC refused (`... is forbidden: User
// "system:serviceaccount:ayatori-system:ayatori-manager" cannot ...`), at
// most 5: a rule the code needs and deploy/rbac lacks shows here even where
// the manager retries quietly (Events, for one).
func ForbiddenRequests(logPath string) []string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	var out []string
	who := "system:serviceaccount:" + ControllerNamespace + ":" + ManagerServiceAccount
	for _, line := range strings.Split(string(b), "\n") {
		// The log is JSON: the quotes around the user are escaped.
		if strings.Contains(line, "forbidden") && strings.Contains(line, who) && strings.Contains(line, " cannot ") {
			if len(line) > 400 {
				line = line[:400] + "..."
			}
			if out = append(out, line); len(out) == 5 {
				break
			}
		}
	}
	return out
}
