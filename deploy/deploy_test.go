// Package deploy_test renders the kustomize overlays with the kustomize
// library (from the Go module proxy) and applies the result to a real
// apiserver with server-side dry-run.
package deploy_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

func render(t *testing.T, overlay string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

func TestOverlaysRenderAndDryRun(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
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
		for _, want := range []string{"Deployment/ayatori-manager", "StatefulSet/ayatori-nats", "ConfigMap/ayatori-nats-config",
			"ClusterRole/ayatori-manager", "Role/ayatori-manager", "Service/ayatori-manager-metrics", "CustomResourceDefinition/postgresqltenants.database.ayatori.ddupan.top"} {
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
			conf, _, _ := unstructured.NestedString(o.Object, "data", "nats.conf")
			if !strings.Contains(conf, "sync_interval: always") {
				t.Fatal("NATS is not configured with sync_interval: always")
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
