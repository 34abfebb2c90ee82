// Package openbao holds the OpenBao configuration Ayatori ships: the
// manager's policy (manager.hcl), the per-namespace reader policy ESO logs
// in with (tenant-reader.hcl), the roles that bind them to ServiceAccounts,
// and the ClusterSecretStore (cluster-secret-store.yaml). Apply configures
// a server with exactly these; ayatori-bootstrap and the test harness use
// it, so the local stack runs what deploy/ ships.
package openbao

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	bao "github.com/openbao/openbao/api/v2"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

var (
	//go:embed manager.hcl
	managerHCL string
	//go:embed tenant-reader.hcl
	readerHCL string
	// StoreManifest is cluster-secret-store.yaml, the ClusterSecretStore
	// of deploy/ (its server address is the installation's).
	//go:embed cluster-secret-store.yaml
	StoreManifest string
)

// Names of what Apply writes.
const (
	ManagerPolicy, ManagerRole = "ayatori-manager", "ayatori-manager"
	ReaderPolicy, ReaderRole   = "ayatori-tenant-reader", "ayatori-tenant-reader"
	// ReaderServiceAccount is the ServiceAccount ESO logs in with in each
	// Tenant's namespace (Ayatori creates it).
	ReaderServiceAccount = dbcontract.ReaderServiceAccount
	// ReaderAudience is the audience of the reader's tokens: a token made
	// for anything else does not log in.
	ReaderAudience = "ayatori-openbao"
)

// Settings are what differs between installations.
type Settings struct {
	// KVMount and BasePath: --openbao-kv-mount, --openbao-tenant-base-path.
	KVMount, BasePath string
	// AuthMount is the Kubernetes auth mount (default "kubernetes").
	AuthMount string
	// KubernetesHost, KubernetesCA and ReviewerJWT configure the mount:
	// the API server OpenBao sends TokenReviews to, its CA (PEM) and a
	// token allowed to review (system:auth-delegator).
	KubernetesHost, KubernetesCA, ReviewerJWT string
	// ManagerNamespace and ManagerServiceAccount are the manager's
	// identity (default ayatori-system/ayatori-manager).
	ManagerNamespace, ManagerServiceAccount string
	// ReaderTTL is the reader tokens' lifetime (default 5m).
	ReaderTTL string
}

func (s *Settings) defaults() {
	if s.AuthMount == "" {
		s.AuthMount = "kubernetes"
	}
	if s.ManagerNamespace == "" {
		s.ManagerNamespace = "ayatori-system"
	}
	if s.ManagerServiceAccount == "" {
		s.ManagerServiceAccount = "ayatori-manager"
	}
	if s.ReaderTTL == "" {
		s.ReaderTTL = "5m"
	}
}

// Policies renders the two policies; accessor is the Kubernetes auth
// mount's accessor (the reader policy names the namespace its logins
// verified through it).
func Policies(s Settings, accessor string) (manager, reader string, err error) {
	render := func(text string) (string, error) {
		t, err := template.New("policy").Parse(text)
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		err = t.Execute(&b, map[string]string{"KVMount": strings.Trim(s.KVMount, "/"), "BasePath": strings.Trim(s.BasePath, "/"), "Accessor": accessor})
		return b.String(), err
	}
	if manager, err = render(managerHCL); err != nil {
		return "", "", err
	}
	reader, err = render(readerHCL)
	return manager, reader, err
}

// Apply configures c's server (a root or bootstrap token): the Kubernetes
// auth mount and its config, the two policies and the two roles. It is
// idempotent.
func Apply(ctx context.Context, c *bao.Client, s Settings) error {
	s.defaults()
	mounts, err := c.Sys().ListAuthWithContext(ctx)
	if err != nil {
		return fmt.Errorf("openbao: list auth mounts: %w", err)
	}
	m, ok := mounts[s.AuthMount+"/"]
	if !ok {
		if err := c.Sys().EnableAuthWithOptionsWithContext(ctx, s.AuthMount, &bao.EnableAuthOptions{Type: "kubernetes"}); err != nil {
			return fmt.Errorf("openbao: enable kubernetes auth: %w", err)
		}
		if mounts, err = c.Sys().ListAuthWithContext(ctx); err != nil {
			return fmt.Errorf("openbao: list auth mounts: %w", err)
		}
		m = mounts[s.AuthMount+"/"]
	}
	if m == nil || m.Type != "kubernetes" {
		return fmt.Errorf("openbao: auth mount %s is not a kubernetes auth mount", s.AuthMount)
	}
	if _, err := c.Logical().WriteWithContext(ctx, "auth/"+s.AuthMount+"/config", map[string]any{
		"kubernetes_host": s.KubernetesHost, "kubernetes_ca_cert": s.KubernetesCA, "token_reviewer_jwt": s.ReviewerJWT,
	}); err != nil {
		return fmt.Errorf("openbao: configure kubernetes auth: %w", err)
	}
	manager, reader, err := Policies(s, m.Accessor)
	if err != nil {
		return err
	}
	for name, p := range map[string]string{ManagerPolicy: manager, ReaderPolicy: reader} {
		if err := c.Sys().PutPolicyWithContext(ctx, name, p); err != nil {
			return fmt.Errorf("openbao: policy %s: %w", name, err)
		}
	}
	if _, err := c.Logical().WriteWithContext(ctx, "auth/"+s.AuthMount+"/role/"+ManagerRole, map[string]any{
		"bound_service_account_names": []string{s.ManagerServiceAccount}, "bound_service_account_namespaces": []string{s.ManagerNamespace},
		"policies": []string{ManagerPolicy}, "token_ttl": "1h", "token_max_ttl": "2h",
	}); err != nil {
		return fmt.Errorf("openbao: role %s: %w", ManagerRole, err)
	}
	if _, err := c.Logical().WriteWithContext(ctx, "auth/"+s.AuthMount+"/role/"+ReaderRole, map[string]any{
		"bound_service_account_names": []string{ReaderServiceAccount}, "bound_service_account_namespaces": []string{"*"},
		"audience": ReaderAudience, "policies": []string{ReaderPolicy}, "token_ttl": s.ReaderTTL, "token_max_ttl": s.ReaderTTL,
		"token_no_default_policy": true,
	}); err != nil {
		return fmt.Errorf("openbao: role %s: %w", ReaderRole, err)
	}
	return nil
}
