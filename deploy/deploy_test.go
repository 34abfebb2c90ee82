//go:build !unit

// Real servers only (no test runs under -short): left out of the unit
// loop's build (make test-unit: -tags unit), which then links no binary
// that would run nothing.

// Package deploy_test renders the kustomize overlays with the kustomize
// library (from the Go module proxy) and applies the result to a real
// apiserver with server-side dry-run.
package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/internal/bootstrap"
)

func TestOverlaysRenderAndDryRun(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{ExternalSecretsCRDs: true})
	ctx := context.Background()
	var kinds []string
	for _, overlay := range []string{"overlays/dev", "overlays/prod"} {
		objs := render(t, overlay)
		kinds = kinds[:0]
		for _, o := range objs {
			kinds = append(kinds, o.GetKind()+"/"+o.GetName())
			switch o.GetKind() {
			case "Namespace":
				// Dry-run needs the namespace to exist.
				err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: o2meta(o)})
				if client.IgnoreAlreadyExists(err) != nil {
					t.Fatal(err)
				}
				continue
			case "CustomResourceDefinition":
				// The project's CRDs are installed already; dry-run an update-equivalent create under another name.
				var crd apiextensionsv1.CustomResourceDefinition
				if err := runtimeConvert(o, &crd); err != nil {
					t.Fatal(err)
				}
			}
			if err := cp.Client.Create(ctx, o, client.DryRunAll); err != nil && !strings.Contains(err.Error(), "already exists") {
				t.Errorf("%s: server-side dry-run of %s %s/%s: %v", overlay, o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
		for _, want := range []string{"Deployment/ayatori-manager", "StatefulSet/ayatori-nats", "ConfigMap/ayatori-nats-config", "NetworkPolicy/ayatori-nats",
			"ClusterSecretStore/ayatori-openbao", "ValidatingAdmissionPolicy/ayatori-task-pods", "ValidatingAdmissionPolicy/ayatori-job-references",
			"Service/ayatori-nats-headless", "PodDisruptionBudget/ayatori-nats",
			"ClusterRole/ayatori-manager", "Role/ayatori-manager", "Service/ayatori-manager-metrics", "CustomResourceDefinition/postgresqltenants.database.ayatori.ddupan.top",
			"CustomResourceDefinition/postgresqlinstances.database.ayatori.ddupan.top",
			"CustomResourceDefinition/jobs.execution.ayatori.ddupan.top", "CustomResourceDefinition/jobclasses.execution.ayatori.ddupan.top",
			"CustomResourceDefinition/kubernetesexecutionparameters.execution.ayatori.ddupan.top",
			"CustomResourceDefinition/opensandboxexecutionparameters.execution.ayatori.ddupan.top"} {
			if !strings.Contains(strings.Join(kinds, " "), want) {
				t.Errorf("%s renders no %s", overlay, want)
			}
		}
	}
	// dev and prod differ only in configuration: the same kinds and names.
	dev, prod := render(t, "overlays/dev"), render(t, "overlays/prod")
	if len(dev) != len(prod) {
		t.Fatalf("dev renders %d objects, prod %d", len(dev), len(prod))
	}
	for _, o := range render(t, "overlays/prod") {
		if o.GetKind() == "ConfigMap" && o.GetName() == "ayatori-nats-config" {
			for _, name := range []string{"nats.conf", "nats-cluster.conf"} {
				conf, _, _ := unstructured.NestedString(o.Object, "data", name)
				if !strings.Contains(conf, "sync_interval: always") {
					t.Fatalf("NATS (%s) is not configured with sync_interval: always", name)
				}
			}
		}
		if o.GetKind() == "Role" {
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			if o.GetNamespace() != "ayatori-system" || len(rules) == 0 {
				t.Fatalf("the Secret-reading Role is not limited to the controller namespace: %s", o.GetNamespace())
			}
		}
	}
}

// TestProdJournalCluster: the prod overlay runs the journal on three NATS
// servers with routes to each other (one PVC each, one per node,
// sync_interval always) and the manager with every server's URL and
// --journal-replicas=3, as TestTenantsOnR3Cluster runs it. Every rendered
// nats.conf passes the pinned nats-server's own configuration check.
func TestProdJournalCluster(t *testing.T) {
	integration.Servers(t)
	natsServer, err := integration.ToolPath("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	for _, overlay := range []string{"overlays/dev", "overlays/prod"} {
		prod := overlay == "overlays/prod"
		var conf string
		var files map[string]any
		var args, natsArgs []string
		for _, o := range render(t, overlay) {
			switch {
			case o.GetKind() == "ConfigMap" && o.GetName() == "ayatori-nats-config":
				files, _, _ = unstructured.NestedMap(o.Object, "data")
			case o.GetKind() == "StatefulSet" && o.GetName() == "ayatori-nats":
				// kustomize renders ints as int, which the Nested* copies refuse.
				replicas, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
				svc, _, _ := unstructured.NestedString(o.Object, "spec", "serviceName")
				claims, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "volumeClaimTemplates")
				policy, _, _ := unstructured.NestedString(o.Object, "spec", "podManagementPolicy")
				want := map[bool]int{false: 1, true: 3}[prod]
				if fmt.Sprint(replicas) != fmt.Sprint(want) || svc != "ayatori-nats-headless" || len(claims.([]any)) != 1 || policy != "Parallel" {
					t.Errorf("%s: NATS StatefulSet replicas %v (want %d), serviceName %q, claim templates %v, podManagementPolicy %q",
						overlay, replicas, want, svc, claims, policy)
				}
				_, anti, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
				if prod && !anti {
					t.Errorf("%s: the NATS servers may share a node", overlay)
				}
				cs, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
				for _, a := range cs.([]any)[0].(map[string]any)["args"].([]any) {
					natsArgs = append(natsArgs, a.(string))
				}
			case o.GetKind() == "Deployment" && o.GetName() == "ayatori-manager":
				cs, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
				for _, a := range cs.([]any)[0].(map[string]any)["args"].([]any) {
					args = append(args, a.(string))
				}
			}
		}
		if len(natsArgs) != 2 || natsArgs[0] != "--config" || !strings.HasPrefix(natsArgs[1], "/etc/nats/conf/") {
			t.Fatalf("%s: the NATS servers run %v", overlay, natsArgs)
		}
		conf, _ = files[strings.TrimPrefix(natsArgs[1], "/etc/nats/conf/")].(string)
		if !strings.Contains(conf, `include "auth.conf"`) || !strings.Contains(conf, "tls {") {
			t.Errorf("%s: the NATS configuration has no auth.conf or no TLS:\n%s", overlay, conf)
		}
		joined := strings.Join(args, " ")
		if !strings.Contains(conf, "sync_interval: always") {
			t.Errorf("%s: NATS is not configured with sync_interval: always", overlay)
		}
		if prod {
			for i := 0; i < 3; i++ {
				route := fmt.Sprintf("nats://ayatori-nats-%d.ayatori-nats-headless:6222", i)
				client := fmt.Sprintf("tls://ayatori-nats-%d.ayatori-nats-headless:4222", i)
				if !strings.Contains(conf, route) || !strings.Contains(joined, client) {
					t.Errorf("%s: server %d missing from the routes or the manager's --nats-url", overlay, i)
				}
			}
			if strings.Count(joined, "--nats-url=") != 1 || !strings.Contains(joined, "--postgresql-ca-bundle-path=") {
				t.Errorf("%s: the --nats-url patch replaced the wrong argument: %s", overlay, joined)
			}
			if !strings.Contains(conf, "cluster {") || !strings.Contains(joined, "--journal-replicas=3") {
				t.Errorf("%s: no cluster block or no --journal-replicas=3 (args %s)", overlay, joined)
			}
		} else if strings.Contains(conf, "cluster {") || strings.Contains(joined, "--journal-replicas") {
			t.Errorf("%s: dev runs one server with an R1 journal", overlay)
		}
		// The pinned nats-server checks the files the pods run, with the
		// trust material ayatori-bootstrap makes in the Secrets' place.
		dir := t.TempDir()
		m, err := bootstrap.NewNATS(bootstrap.ClusterNames("ayatori-system"), nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"tls.crt": m.ServerCert, "tls.key": m.ServerKey, "ca.crt": m.CACert} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for name, v := range files {
			text := strings.ReplaceAll(v.(string), "/etc/nats/tls/", dir+"/")
			text = strings.ReplaceAll(text, `"/data/jetstream"`, `"`+filepath.Join(dir, "js")+`"`)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, strings.TrimPrefix(natsArgs[1], "/etc/nats/conf/"))
		cmd := exec.Command(natsServer, "-t", "-c", path)
		cmd.Env = append(os.Environ(), "SERVER_NAME=ayatori-nats-0", "AYATORI_NATS_MANAGER_NKEY="+m.ManagerPublic, "AYATORI_NATS_READER_NKEY="+m.ReaderPublic)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: nats-server -t rejects nats.conf: %v\n%s\n%s", overlay, err, out, conf)
		}
	}
}
