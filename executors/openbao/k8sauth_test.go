package openbao_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bao "github.com/openbao/openbao/api/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/executors/openbao"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestKubernetesAuth: the OpenBao-compatible server validates the
// controller's ServiceAccount token against the real apiserver
// (TokenReview), and the controller can then write a credential; a token of
// another ServiceAccount is refused.
func TestKubernetesAuth(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ob := integration.StartOpenBao(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ayatori-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"ayatori-manager", "intruder"} {
		if _, err := cs.CoreV1().ServiceAccounts("ayatori-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The reviewer (OpenBao) needs TokenReview: system:auth-delegator.
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "openbao-tokenreview"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ayatori-manager", Namespace: "ayatori-system"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		exp := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts("ayatori-system").CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	managerToken := token("ayatori-manager")

	root, _ := ob.Client(ob.RootToken)
	if err := root.Sys().EnableAuthWithOptionsWithContext(ctx, "kubernetes", &authMount); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().WriteWithContext(ctx, "auth/kubernetes/config", map[string]any{
		"kubernetes_host":    cp.Config.Host,
		"kubernetes_ca_cert": string(cp.Config.CAData),
		"token_reviewer_jwt": managerToken,
	}); err != nil {
		t.Fatal(err)
	}
	policy := `path "kv/data/postgresql-tenants/*" { capabilities = ["create", "read", "update", "delete"] }
path "kv/metadata/postgresql-tenants/*" { capabilities = ["create", "read", "update", "delete", "list"] }`
	if err := root.Sys().PutPolicyWithContext(ctx, "ayatori-controller", policy); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().WriteWithContext(ctx, "auth/kubernetes/role/ayatori", map[string]any{
		"bound_service_account_names":      []string{"ayatori-manager"},
		"bound_service_account_namespaces": []string{"ayatori-system"},
		"policies":                         []string{"ayatori-controller"},
		"ttl":                              "1h",
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := openbao.NewClient(ob.Address, openbao.KubernetesAuth{Mount: "kubernetes", Role: "ayatori", TokenPath: write("manager", managerToken)}, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	s := &openbao.Store{Client: c}
	in := dbcontract.CredentialIntent{Mount: "kv", Path: "postgresql-tenants/app/app", InstanceUID: "i", Username: "app", Database: "app", Host: "h", HostAddr: "192.0.2.1", Port: 5432, SSLMode: "verify-full"}
	out, err := s.Write(ctx, in, openbao.Owner{InstanceUID: "i", TenantUID: "t", Namespace: "app", Name: "app"})
	if err != nil || !out.Created {
		t.Fatalf("write with Kubernetes auth: %+v %v", out, err)
	}
	// Outside the policy's base path: denied.
	other := in
	other.Path = "admin/postgresql"
	if _, err := s.Write(ctx, other, openbao.Owner{InstanceUID: "i", TenantUID: "t"}); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("write outside the base path: want denied, got %v", err)
	}
	// Another ServiceAccount's token is refused at login.
	ic, _ := openbao.NewClient(ob.Address, openbao.KubernetesAuth{Mount: "kubernetes", Role: "ayatori", TokenPath: write("intruder", token("intruder"))}, 10*time.Second, false)
	_, err = (&openbao.Store{Client: ic}).Write(ctx, in, openbao.Owner{InstanceUID: "i", TenantUID: "t", Namespace: "app", Name: "app"})
	if err == nil {
		t.Fatal("a token of another ServiceAccount logged in")
	}
	// The refusal says what failed: the Kubernetes auth login, the role, the
	// HTTP status (issue 10 §3), not "metadata read failed".
	var f *dbcontract.Failure
	if !errors.As(err, &f) || !strings.Contains(f.Message, "Kubernetes auth login") || !strings.Contains(f.Message, "role ayatori") ||
		!strings.Contains(f.Message, "HTTP 403") || strings.Contains(f.Message, "metadata read") {
		t.Fatalf("unbound ServiceAccount: want a Kubernetes auth login failure naming the role and status, got %v", err)
	}
	// A role that requires another audience refuses the token the same way.
	if _, err := root.Logical().WriteWithContext(ctx, "auth/kubernetes/role/aud", map[string]any{
		"bound_service_account_names":      []string{"ayatori-manager"},
		"bound_service_account_namespaces": []string{"ayatori-system"},
		"audience":                         "https://openbao.example",
		"policies":                         []string{"ayatori-controller"},
	}); err != nil {
		t.Fatal(err)
	}
	ac, _ := openbao.NewClient(ob.Address, openbao.KubernetesAuth{Mount: "kubernetes", Role: "aud", TokenPath: write("manager2", managerToken)}, 10*time.Second, false)
	_, err = (&openbao.Store{Client: ac}).Write(ctx, in, openbao.Owner{InstanceUID: "i", TenantUID: "t", Namespace: "app", Name: "app"})
	if !errors.As(err, &f) || !strings.Contains(f.Message, "Kubernetes auth login") || !strings.Contains(f.Message, "role aud") || !strings.Contains(f.Message, "HTTP ") {
		t.Fatalf("wrong audience: want a Kubernetes auth login failure naming the role and status, got %v", err)
	}
	if strings.Contains(f.Message, managerToken) {
		t.Fatal("the failure echoes the ServiceAccount token")
	}
}

var authMount = bao.EnableAuthOptions{Type: "kubernetes"}
