package v1alpha1_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestEveryFieldHasADescription: `kubectl explain` shows a description for
// every field of every CRD in deploy/crd/bases (all API groups).
func TestEveryFieldHasADescription(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(integration.RepoRoot(), "deploy", "crd", "bases", "*.yaml"))
	found := map[string]bool{}
	for _, f := range files {
		found[filepath.Base(f)] = true
	}
	for _, want := range []string{
		"database.ayatori.ddupan.top_postgresqlinstances.yaml",
		"database.ayatori.ddupan.top_postgresqltenants.yaml",
		"execution.ayatori.ddupan.top_jobs.yaml",
		"execution.ayatori.ddupan.top_jobclasses.yaml",
		"execution.ayatori.ddupan.top_kubernetesexecutionparameters.yaml",
		"execution.ayatori.ddupan.top_opensandboxexecutionparameters.yaml",
	} {
		if !found[want] {
			t.Errorf("deploy/crd/bases has no %s (found %v)", want, files)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			walk(t, crd.Name, v.Schema.OpenAPIV3Schema.Properties)
		}
	}
}

func walk(t *testing.T, path string, props map[string]apiextensionsv1.JSONSchemaProps) {
	for name, p := range props {
		here := path + "." + name
		if name != "apiVersion" && name != "kind" && name != "metadata" && strings.TrimSpace(p.Description) == "" {
			t.Errorf("%s has no description", here)
		}
		walk(t, here, p.Properties)
		if p.Items != nil && p.Items.Schema != nil {
			walk(t, here+"[]", p.Items.Schema.Properties)
		}
	}
}

// TestSamplesApplyCleanly applies deploy/samples to a real apiserver.
func TestSamplesApplyCleanly(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ayatori-system"}}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(integration.RepoRoot(), "deploy", "samples", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("samples: %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := cp.Client.Create(ctx, u); err != nil {
				t.Fatalf("%s: %s %s: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// TestSchemaValidation: the apiserver rejects bad input before any
// controller sees it.
func TestSchemaValidation(t *testing.T) {
	cp := integration.StartControlPlane(t, integration.ControlPlaneOptions{})
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	inst := func(mut func(*databasev1alpha1.PostgreSQLInstance)) error {
		i := &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{GenerateName: "i-"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
			Endpoint: databasev1alpha1.PostgreSQLEndpoint{Host: "db.home.arpa", HostAddr: "192.0.2.10"}, AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "admin"}}}
		mut(i)
		return cp.Client.Create(ctx, i)
	}
	tenant := func(name string, mut func(*databasev1alpha1.PostgreSQLTenant)) (*databasev1alpha1.PostgreSQLTenant, error) {
		tn := &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app"}, Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared"}}
		mut(tn)
		return tn, cp.Client.Create(ctx, tn)
	}
	bad := []struct {
		name string
		err  error
		want string
	}{
		{"hostaddr not an IP", inst(func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.HostAddr = "db.home.arpa" }), "hostaddr"},
		{"port 0", inst(func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Port = -1 }), "port"},
		{"port 70000", inst(func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Port = 70000 }), "port"},
		{"ssl mode", inst(func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.SSLMode = "prefer" }), "sslMode"},
		{"admin database upper case", inst(func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Database = "Postgres" }), "database"},
		{"bad host", inst(func(i *databasev1alpha1.PostgreSQLInstance) { i.Spec.Endpoint.Host = "bad host" }), "host"},
	}
	for _, tc := range []struct{ name, db, role string }{
		{"upper case", "NetBox", ""}, {"quote", `a"b`, ""}, {"semicolon", "a;b", ""}, {"space", "a b", ""},
		{"64 chars", strings.Repeat("a", 64), ""}, {"reserved db", "template1", ""}, {"reserved role", "", "pg_app"}, {"postgres role", "", "postgres"},
	} {
		_, err := tenant("t-"+strings.ReplaceAll(tc.name, " ", "-"), func(tn *databasev1alpha1.PostgreSQLTenant) {
			tn.Spec.Database, tn.Spec.LoginRole = tc.db, tc.role
		})
		bad = append(bad, struct {
			name string
			err  error
			want string
		}{"tenant " + tc.name, err, "spec"})
	}
	_, err := tenant(strings.Repeat("n", 60), func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.InstanceRef = strings.Repeat("i", 190) })
	bad = append(bad, struct {
		name string
		err  error
		want string
	}{"instanceRef+name > 241", err, "spec.instanceRef: Forbidden: spec.instanceRef and metadata.name together must not exceed 241"})
	for _, b := range bad {
		if b.err == nil || !strings.Contains(b.err.Error(), b.want) {
			t.Errorf("%s: want a validation error mentioning %q, got %v", b.name, b.want, b.err)
		}
		// Every message names the field it is about (a root-level CEL rule
		// without fieldPath reads "<nil>: Invalid value: ..."). The
		// apiserver's own note that CEL rules were skipped after a schema
		// error has no field, and cannot have one.
		const skippedNote = "<nil>: Invalid value: null: some validation rules were not checked"
		if b.err != nil && strings.Contains(strings.ReplaceAll(b.err.Error(), skippedNote, ""), "<nil>") {
			t.Errorf("%s: the message does not name the field: %v", b.name, b.err)
		}
	}

	// Immutability after provisioning started (status.phase past Pending).
	tn, err := tenant("immutable", func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"pg_trgm"} })
	if err != nil {
		t.Fatal(err)
	}
	// Before the first external write, everything may change.
	tn.Spec.Database = "renamed"
	if err := cp.Client.Update(ctx, tn); err != nil {
		t.Fatalf("edit before provisioning: %v", err)
	}
	tn.Status.Phase = databasev1alpha1.TenantPhasePlanned
	if err := cp.Client.Status().Update(ctx, tn); err != nil {
		t.Fatal(err)
	}
	// Each rejection names the field (fieldPath on the root-level rule):
	// "spec.database: Forbidden: ...", never "<nil>: Invalid value: ...".
	for _, tc := range []struct {
		name, field string
		mut         func(*databasev1alpha1.PostgreSQLTenant)
	}{
		{"database", "spec.database", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.Database = "other" }},
		{"database removed", "spec.database", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.Database = "" }},
		{"loginRole", "spec.loginRole", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.LoginRole = "other" }},
		{"instanceRef", "spec.instanceRef", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.InstanceRef = "other" }},
		{"secretName", "spec.credential.secretName", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.Credential.SecretName = "other" }},
		{"extension removal", "spec.extensions", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.Extensions = nil }},
		{"extension replaced", "spec.extensions", func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.Extensions = []string{"citext"} }},
	} {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			t.Fatal(err)
		}
		tc.mut(cur)
		err := cp.Client.Update(ctx, cur)
		if err == nil {
			t.Errorf("changing %s after provisioning started was accepted", tc.name)
			continue
		}
		if want := tc.field + ": Forbidden: " + tc.field; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "<nil>") {
			t.Errorf("changing %s: want a message naming the field (%q), got: %v", tc.name, want, err)
		}
	}
	for name, mut := range map[string]func(*databasev1alpha1.PostgreSQLTenant){
		"extension append": func(x *databasev1alpha1.PostgreSQLTenant) { x.Spec.Extensions = append(x.Spec.Extensions, "citext") },
		"deletionPolicy": func(x *databasev1alpha1.PostgreSQLTenant) {
			x.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
		},
	} {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			t.Fatal(err)
		}
		mut(cur)
		if err := cp.Client.Update(ctx, cur); err != nil {
			t.Errorf("%s after provisioning started was rejected: %v", name, err)
		}
	}
}
