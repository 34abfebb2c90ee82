//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTenantUsedByAnApplication: an Instance and a Tenant become Ready on
// the in-cluster PostgreSQL; an application pod in the Tenant's namespace
// takes the projected Secret (ESO, from OpenBao) and connects with
// sslmode=verify-full through the Service DNS name, and a second pod, with
// no DNS at all, through hostaddr (the certificate names both).
func TestTenantUsedByAnApplication(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ensureInstance(ctx, t)
	apply(ctx, t, `apiVersion: v1
kind: Namespace
metadata: {name: e2e-app}
---
apiVersion: database.ayatori.ddupan.top/v1alpha1
kind: PostgreSQLTenant
metadata: {name: app, namespace: e2e-app}
spec:
  instanceRef: shared
  database: app
  loginRole: app
  extensions: [pgcrypto]
  deletionPolicy: Delete
`)
	waitFor(ctx, t, "e2e-app", "postgresqltenant/app", "condition=Ready", 4*time.Minute)
	secret := kubectl(ctx, t, "-n", "e2e-app", "get", "postgresqltenant", "app", "-o", "jsonpath={.status.credential.secretRef.name}")
	if secret == "" {
		t.Fatal("the Ready Tenant names no Secret in status.credential.secretRef")
	}
	// The CA the application trusts: the server's, as a platform admin
	// would publish it.
	kubectlIn(ctx, t, nil, "-n", "e2e-app", "create", "configmap", "postgres-ca", "--from-file=ca.crt="+writeTemp(t, "ca.crt", inst.postgresCA))

	env := fmt.Sprintf(`
    env:
    - {name: PGUSER, valueFrom: {secretKeyRef: {name: %[1]s, key: username}}}
    - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: %[1]s, key: password}}}
    - {name: PGDATABASE, valueFrom: {secretKeyRef: {name: %[1]s, key: database}}}
    - {name: PGHOST, valueFrom: {secretKeyRef: {name: %[1]s, key: host}}}
    - {name: PGHOSTADDR_VALUE, valueFrom: {secretKeyRef: {name: %[1]s, key: hostaddr}}}
    - {name: PGPORT, valueFrom: {secretKeyRef: {name: %[1]s, key: port}}}
    - {name: PGSSLMODE, valueFrom: {secretKeyRef: {name: %[1]s, key: sslmode}}}
    - {name: PGSSLROOTCERT, value: /ca/ca.crt}
    - {name: PGCONNECT_TIMEOUT, value: "10"}
    volumeMounts: [{name: ca, mountPath: /ca, readOnly: true}]
  volumes: [{name: ca, configMap: {name: postgres-ca}}]`, secret)
	pod := func(name, dns, script string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: e2e-app}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 100, seccompProfile: {type: RuntimeDefault}}%s
  containers:
  - name: app
    image: ayatori-test/postgres:15
    command: ["bash", "-c", %q]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}%s
`, name, dns, script, env)
	}
	query := `psql -XAtc "select current_user || ' ' || current_database() || ' ssl=' || ssl from pg_stat_ssl where pid = pg_backend_pid()"`
	// Through the Service DNS name.
	apply(ctx, t, pod("app-dns", "", `set -e; test "$PGSSLMODE" = verify-full; `+query))
	// Through hostaddr, with no name server reachable: the name is only
	// what the certificate is checked against.
	apply(ctx, t, pod("app-hostaddr", `
  dnsPolicy: None
  dnsConfig: {nameservers: ["192.0.2.53"], options: [{name: timeout, value: "1"}, {name: attempts, value: "1"}]}`,
		`if getent hosts "$PGHOST"; then echo "DNS answered: the test proves nothing"; exit 1; fi
set -e; PGHOSTADDR="$PGHOSTADDR_VALUE" `+query))
	// The password (generated once, in OpenBao, projected by ESO) and the
	// admin's appear nowhere Ayatori writes: not in either replica's log, not in an Event,
	// not in the Tenant.
	password := kubectl(ctx, t, "-n", "e2e-app", "get", "secret", secret, "-o", "jsonpath={.data.password}")
	if password == "" {
		t.Fatal("the projected Secret has no password")
	}
	decoded, err := base64.StdEncoding.DecodeString(password)
	if err != nil || len(decoded) < 16 {
		t.Fatalf("the projected password is not a generated secret (%d bytes, %v)", len(decoded), err)
	}
	for what, args := range map[string][]string{
		"manager logs": {"-n", controllerNS, "logs", "-l", "app.kubernetes.io/name=ayatori-manager", "--tail=-1", "--prefix"},
		"Events":       {"get", "events", "-A", "-o", "yaml"},
		"the Tenant":   {"-n", "e2e-app", "get", "postgresqltenant", "app", "-o", "yaml"},
		"the Instance": {"get", "postgresqlinstance", "shared", "-o", "yaml"},
	} {
		out := kubectl(ctx, t, args...)
		if strings.Contains(out, string(decoded)) {
			t.Errorf("the Tenant's password appears in %s", what)
		}
		if strings.Contains(out, inst.adminPassword) {
			t.Errorf("the Instance admin's password appears in %s", what)
		}
	}
	for _, name := range []string{"app-dns", "app-hostaddr"} {
		waitPodDone(ctx, t, "e2e-app", name)
		logs := kubectl(ctx, t, "-n", "e2e-app", "logs", name)
		if !strings.Contains(logs, "app app ssl=true") {
			t.Errorf("%s: the application did not connect as the Tenant's role over TLS: %q", name, logs)
		}
	}
}
