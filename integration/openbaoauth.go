package integration

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	openbaodeploy "git.ddupan.top/panxiao81/ayatori/deploy/openbao"
)

// reviewerServiceAccount is the ServiceAccount whose token OpenBao sends
// TokenReviews with (system:auth-delegator), in ControllerNamespace.
const reviewerServiceAccount = "openbao-token-reviewer"

// ConfigureOpenBao configures ob as deploy/ does (deploy/openbao Apply):
// Kubernetes auth against cp (a reviewer ServiceAccount's token), the
// manager's and the per-namespace reader's policies and roles, for KV
// mount KVMount and base path TenantBasePath.
func ConfigureOpenBao(ctx context.Context, cp *ControlPlane, ob *OpenBao) error {
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reviewerServiceAccount}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "openbao-token-reviewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: reviewerServiceAccount, Namespace: ControllerNamespace}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	exp := int64(24 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, reviewerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("reviewer token: %w", err)
	}
	root, err := ob.Client(ob.RootToken)
	if err != nil {
		return err
	}
	return openbaodeploy.Apply(ctx, root, openbaodeploy.Settings{KVMount: KVMount, BasePath: TenantBasePath,
		KubernetesHost: cp.Config.Host, KubernetesCA: string(cp.Config.CAData), ReviewerJWT: tr.Status.Token})
}
