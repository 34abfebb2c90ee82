package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bao "github.com/openbao/openbao/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ESO API kinds used by the harness and the product (external-secrets.io/v1).
var (
	ExternalSecretGVK     = schema.GroupVersionKind{Group: "external-secrets.io", Version: "v1", Kind: "ExternalSecret"}
	ClusterSecretStoreGVK = schema.GroupVersionKind{Group: "external-secrets.io", Version: "v1", Kind: "ClusterSecretStore"}
)

// ExternalSecretsOptions tune the ESO controller.
type ExternalSecretsOptions struct {
	// StoreName is the ClusterSecretStore to create (default "ayatori-openbao").
	StoreName string
	// Namespace holds the Secret with the store's OpenBao token (default "ayatori-system").
	Namespace string
}

// ExternalSecrets is the External Secrets Operator controller running as a
// process against a ControlPlane, with a ClusterSecretStore for the vault
// provider at an OpenBao-compatible server (KV v2 mount "kv"). The store's
// token can only read kv/data/* and kv/metadata/*.
type ExternalSecrets struct {
	// StoreName is the Ready ClusterSecretStore.
	StoreName string
	// LogPath is the controller log.
	LogPath string

	dir   string
	proc  *process
	unreg func()
}

// NewExternalSecrets starts ESO and waits until its ClusterSecretStore is Ready.
// cp must have been started with ExternalSecretsCRDs.
func NewExternalSecrets(ctx context.Context, cp *ControlPlane, ob *OpenBao, opts ExternalSecretsOptions) (_ *ExternalSecrets, err error) {
	bin, err := ToolPath("external-secrets")
	if err != nil {
		return nil, err
	}
	if opts.StoreName == "" {
		opts.StoreName = "ayatori-openbao"
	}
	if opts.Namespace == "" {
		opts.Namespace = "ayatori-system"
	}
	dir, err := os.MkdirTemp("", "ayatori-eso-")
	if err != nil {
		return nil, err
	}
	e := &ExternalSecrets{StoreName: opts.StoreName, dir: dir, LogPath: filepath.Join(dir, "eso.log")}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	token, err := esoReadToken(ctx, ob)
	if err != nil {
		return nil, err
	}
	c := cp.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	tokenSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "eso-openbao-token", Namespace: opts.Namespace},
		StringData: map[string]string{"token": token},
	}
	if err := c.Create(ctx, tokenSecret); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	metricsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	e.unreg = registerCleanup(e.Close)
	e.proc, err = startProcess(processSpec{
		name: "external-secrets", path: bin, dir: dir, logPath: e.LogPath,
		args: []string{
			fmt.Sprintf("--metrics-addr=127.0.0.1:%d", metricsPort),
			"--enable-leader-election=false",
			"--loglevel=info",
			// ESO reconciles one ExternalSecret at a time by default: 100
			// Tenants created at once would wait in its queue (issue 17).
			"--concurrent=8",
			"--store-requeue-interval=10s",
		},
		env: []string{"KUBECONFIG=" + cp.KubeconfigPath},
	})
	if err != nil {
		return nil, err
	}
	store := &unstructured.Unstructured{}
	store.SetGroupVersionKind(ClusterSecretStoreGVK)
	store.SetName(opts.StoreName)
	store.Object["spec"] = map[string]any{
		"provider": map[string]any{
			"vault": map[string]any{
				"server":  ob.Address,
				"path":    KVMount,
				"version": "v2",
				"auth": map[string]any{
					"tokenSecretRef": map[string]any{"name": tokenSecret.Name, "namespace": opts.Namespace, "key": "token"},
				},
			},
		},
	}
	if err := c.Create(ctx, store); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	err = e.proc.waitReady(90*time.Second, func() error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(ClusterSecretStoreGVK)
		if err := c.Get(ctx, client.ObjectKey{Name: opts.StoreName}, got); err != nil {
			return err
		}
		if ConditionStatus(got, "Ready") != "True" {
			return fmt.Errorf("ClusterSecretStore %s not Ready yet", opts.StoreName)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// esoReadToken creates a policy that can only read the KV v2 mount and a
// token carrying it, the identity ESO uses for tenant credentials.
func esoReadToken(ctx context.Context, ob *OpenBao) (string, error) {
	c, err := ob.Client(ob.RootToken)
	if err != nil {
		return "", err
	}
	policy := fmt.Sprintf("path %q { capabilities = [\"read\"] }\npath %q { capabilities = [\"read\", \"list\"] }\n",
		KVMount+"/data/*", KVMount+"/metadata/*")
	if err := c.Sys().PutPolicyWithContext(ctx, "eso-read", policy); err != nil {
		return "", fmt.Errorf("put eso policy: %w", err)
	}
	sec, err := c.Auth().Token().CreateWithContext(ctx, &bao.TokenCreateRequest{Policies: []string{"eso-read"}, NoParent: true, TTL: "24h"})
	if err != nil {
		return "", fmt.Errorf("create eso token: %w", err)
	}
	return sec.Auth.ClientToken, nil
}

// ConditionStatus returns status.conditions[type].status of an unstructured
// object ("" when absent).
func ConditionStatus(u *unstructured.Unstructured, condType string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == condType {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// Close stops the controller and removes its files.
func (e *ExternalSecrets) Close() {
	if e.proc != nil {
		e.proc.stop(syscall.SIGTERM, 10*time.Second)
	}
	if e.unreg != nil {
		e.unreg()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}
