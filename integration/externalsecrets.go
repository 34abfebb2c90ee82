package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openbaodeploy "git.ddupan.top/panxiao81/ayatori/deploy/openbao"
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
	// Namespace is the controller namespace (default "ayatori-system").
	Namespace string
}

// ExternalSecrets is the External Secrets Operator controller running as a
// process against a ControlPlane, with the ClusterSecretStore deploy/ ships
// (deploy/openbao) at an OpenBao-compatible server configured as deploy/
// configures it (ConfigureOpenBao): ESO logs in per namespace with that
// namespace's ayatori-secrets-reader ServiceAccount and may read
// kv/data/postgresql-tenants/<namespace>/* only.
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
	c := cp.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := ConfigureOpenBao(ctx, cp, ob); err != nil {
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
			// Tenants created at once would wait in its queue.
			"--concurrent=8",
			"--store-requeue-interval=10s",
		},
		env: []string{"KUBECONFIG=" + cp.KubeconfigPath},
	})
	if err != nil {
		return nil, err
	}
	store := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(openbaodeploy.StoreManifest), &store.Object); err != nil {
		return nil, fmt.Errorf("deploy/openbao cluster-secret-store.yaml: %w", err)
	}
	if err := unstructured.SetNestedField(store.Object, ob.Address, "spec", "provider", "vault", "server"); err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedField(store.Object, KVMount, "spec", "provider", "vault", "path"); err != nil {
		return nil, err
	}
	store.SetGroupVersionKind(ClusterSecretStoreGVK)
	store.SetName(opts.StoreName)
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
