//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// Fixed addresses of the dependencies (Services with a fixed ClusterIP in
// testdata/deps.yaml).
const (
	postgresHost     = "postgres.e2e-postgres.svc.cluster.local"
	postgresHostaddr = "10.96.100.10"
	openbaoAddress   = "http://10.96.100.20:8200"
	controllerNS     = "ayatori-system"
)

// install is what the suite set up, for the tests.
type install struct {
	// bin holds ayatori-bootstrap and ayatori-journal built from this tree.
	bin string
	// secrets is ayatori-bootstrap's output directory.
	secrets string
	// postgresCA is the PostgreSQL server's CA (PEM).
	postgresCA []byte
	// adminPassword is the Instance admin role's password.
	adminPassword string
}

var inst install

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// installAyatori installs the dependencies as pods, makes the trust
// material with ayatori-bootstrap, configures OpenBao with it and applies
// deploy/overlays/e2e with kubectl, as docs/database/deployment.md tells a
// user; then waits for NATS and both manager replicas.
func installAyatori(ctx context.Context, logf func(string, ...any)) error {
	root := integration.RepoRoot()
	work := filepath.Join(cluster.Dir, "install")
	inst.bin = filepath.Join(work, "bin")
	inst.secrets = filepath.Join(work, "ayatori-secrets")
	if err := os.MkdirAll(inst.bin, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-o", inst.bin+"/", "./cmd/ayatori-bootstrap", "./cmd/ayatori-journal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v: %s", err, out)
	}
	logf("ayatori-bootstrap and ayatori-journal built in %s", time.Since(t0).Round(time.Millisecond))

	// The dependencies' secrets, then the dependencies.
	ca, err := integration.NewCA("e2e-postgres-ca")
	if err != nil {
		return err
	}
	inst.postgresCA = ca.CertPEM
	serving, err := ca.Issue([]string{postgresHost, "postgres.e2e-postgres.svc"}, []string{postgresHostaddr}, 24*time.Hour, x509ServerAuth)
	if err != nil {
		return err
	}
	inst.adminPassword = "admin-" + randomHex(12)
	for _, ns := range []string{"e2e-postgres", "openbao", "external-secrets", controllerNS} {
		if _, err := cluster.Kubectl(ctx, nil, "create", "namespace", ns); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return err
		}
	}
	rootToken := "root-" + randomHex(12)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "postgres-tls", Namespace: "e2e-postgres"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "postgres-passwords", Namespace: "e2e-postgres"},
			Data: map[string][]byte{"superuser": []byte("super-" + randomHex(12)), "admin": []byte(inst.adminPassword)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "openbao-root", Namespace: "openbao"}, Data: map[string][]byte{"token": []byte(rootToken)}},
		// The Instance's admin credential, in the controller namespace.
		{ObjectMeta: metav1.ObjectMeta{Name: "shared-postgresql-admin", Namespace: controllerNS},
			Data: map[string][]byte{"username": []byte("ayatori_admin"), "password": []byte(inst.adminPassword)}},
	} {
		if err := cluster.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	// The public CA bundle the manager mounts (deploy/manager: postgresql-ca-bundle).
	if err := cluster.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "postgresql-ca-bundle", Namespace: controllerNS},
		Data: map[string]string{"ca.crt": string(ca.CertPEM)}}); err != nil {
		return err
	}
	t0 = time.Now()
	if _, err := cluster.Kubectl(ctx, nil, "apply", "--server-side", "-k", filepath.Join(integration.ToolDir("external-secrets"), "crds")); err != nil {
		return err
	}
	if _, err := cluster.Kubectl(ctx, nil, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"); err != nil {
		return err
	}
	deps, err := os.ReadFile("testdata/deps.yaml")
	if err != nil {
		return err
	}
	v := integration.Versions()
	deps = []byte(strings.NewReplacer(
		"TAG_OPENBAO", strings.TrimPrefix(v["VAULT_VERSION"], "v"),
		"TAG_ESO", strings.TrimPrefix(v["EXTERNAL_SECRETS_VERSION"], "v"),
	).Replace(string(deps)))
	if _, err := cluster.Kubectl(ctx, deps, "apply", "-f", "-"); err != nil {
		return err
	}
	if err := natsVolumes(ctx, 3); err != nil {
		return err
	}
	for _, d := range []string{"e2e-postgres/deployment/postgres", "openbao/deployment/openbao", "external-secrets/deployment/external-secrets"} {
		parts := strings.SplitN(d, "/", 2)
		if _, err := cluster.Kubectl(ctx, nil, "-n", parts[0], "rollout", "status", parts[1], "--timeout=180s"); err != nil {
			return fmt.Errorf("%w\n%s", err, podReport(ctx, parts[0]))
		}
	}
	logf("dependencies running (PostgreSQL 15 TLS, OpenBao, ESO) in %s", time.Since(t0).Round(time.Millisecond))

	// Bootstrap: the trust material (docs/database/deployment.md "Bootstrap").
	if out, err := runCmd(ctx, filepath.Join(inst.bin, "ayatori-bootstrap"), "--out", inst.secrets); err != nil {
		return fmt.Errorf("ayatori-bootstrap: %v: %s", err, out)
	}
	if _, err := cluster.Kubectl(ctx, nil, "apply", "-f", filepath.Join(inst.secrets, "secrets.yaml")); err != nil {
		return err
	}
	// OpenBao (docs/database/deployment.md "OpenBao"), from this host.
	if err := configureOpenBao(ctx, work, rootToken); err != nil {
		return err
	}
	t0 = time.Now()
	if _, err := cluster.Kubectl(ctx, nil, "apply", "-k", filepath.Join(root, "deploy", "overlays", "e2e")); err != nil {
		return err
	}
	if _, err := cluster.Kubectl(ctx, nil, "-n", controllerNS, "rollout", "status", "statefulset/ayatori-nats", "--timeout=180s"); err != nil {
		return fmt.Errorf("%w\n%s", err, podReport(ctx, controllerNS))
	}
	if _, err := cluster.Kubectl(ctx, nil, "-n", controllerNS, "rollout", "status", "deployment/ayatori-manager", "--timeout=180s"); err != nil {
		return fmt.Errorf("%w\n%s", err, podReport(ctx, controllerNS))
	}
	logf("kubectl apply -k deploy/overlays/e2e: NATS and two manager replicas ready in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

func configureOpenBao(ctx context.Context, work, rootToken string) error {
	for _, args := range [][]string{
		{"-n", controllerNS, "create", "serviceaccount", "openbao-token-reviewer"},
		{"create", "clusterrolebinding", "openbao-token-reviewer", "--clusterrole=system:auth-delegator", "--serviceaccount=" + controllerNS + ":openbao-token-reviewer"},
	} {
		if _, err := cluster.Kubectl(ctx, nil, args...); err != nil {
			return err
		}
	}
	jwt, err := cluster.Kubectl(ctx, nil, "-n", controllerNS, "create", "token", "openbao-token-reviewer", "--duration=24h")
	if err != nil {
		return err
	}
	files := map[string][]byte{"reviewer.jwt": jwt, "bootstrap.token": []byte(rootToken)}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o600); err != nil {
			return err
		}
	}
	out, err := runCmd(ctx, filepath.Join(inst.bin, "ayatori-bootstrap"), "openbao", "--address", openbaoAddress,
		"--token-file", filepath.Join(work, "bootstrap.token"),
		"--kv-mount", "secret", // the dev server's KV v2 mount, as the dev overlay says
		"--kubernetes-host", "https://"+integration.RealClusterAPIServerIP+":443",
		"--kubernetes-ca-file", cluster.CAFile, "--reviewer-jwt-file", filepath.Join(work, "reviewer.jwt"))
	if err != nil {
		return fmt.Errorf("ayatori-bootstrap openbao: %v: %s", err, out)
	}
	return nil
}

// natsVolumes makes n persistent volumes on the node's disk for the NATS
// StatefulSet's claims (the cluster has no dynamic provisioner); their
// directories belong to the NATS pods' user (hostPath volumes get no
// fsGroup).
func natsVolumes(ctx context.Context, n int) error {
	for i := 0; i < n; i++ {
		dir := filepath.Join(cluster.Dir, "volumes", fmt.Sprintf("nats-%d", i))
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		if err := os.Chown(dir, 1000, 1000); err != nil {
			return err
		}
		pv := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: e2e-nats-%d, labels: {ayatori-e2e/volume: nats}}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: %q, type: Directory}
`, i, dir)
		if _, err := cluster.Kubectl(ctx, []byte(pv), "apply", "-f", "-"); err != nil {
			return err
		}
	}
	return nil
}

// podReport describes the pods of namespace ns for a failure message: the
// list, each pod's events and the last log lines of its containers (and of
// their previous run).
func podReport(ctx context.Context, ns string) string {
	var b strings.Builder
	out, _ := cluster.Kubectl(ctx, nil, "-n", ns, "get", "pods", "-o", "wide")
	b.Write(out)
	names, _ := cluster.Kubectl(ctx, nil, "-n", ns, "get", "pods", "-o", "name")
	for _, pod := range strings.Fields(string(names)) {
		out, _ := cluster.Kubectl(ctx, nil, "-n", ns, "describe", pod)
		lines := strings.Split(string(out), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", pod, strings.Join(lines, "\n"))
		for _, prev := range []string{"--previous=false", "--previous=true"} {
			out, _ := cluster.Kubectl(ctx, nil, "-n", ns, "logs", pod, "--all-containers", "--tail=20", prev)
			fmt.Fprintf(&b, "--- logs %s %s ---\n%s\n", pod, prev, out)
		}
	}
	return b.String()
}
