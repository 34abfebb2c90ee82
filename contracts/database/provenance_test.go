package database_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

var cfg = dbcontract.NameConfig{KVMount: "kv", BasePath: "postgresql-tenants", StoreName: "ayatori-openbao"}

func liveInstance() *databasev1alpha1.PostgreSQLInstance {
	return &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "shared", UID: "inst-1"},
		Spec: databasev1alpha1.PostgreSQLInstanceSpec{Endpoint: databasev1alpha1.PostgreSQLEndpoint{Host: "db.home.arpa", HostAddr: "10.0.0.5"},
			AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "admin"}}}
}

func liveTenant() *databasev1alpha1.PostgreSQLTenant {
	return &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "netbox", Name: "netbox", UID: "ten-1"},
		Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared", Extensions: []string{"pg_trgm"}, DeletionPolicy: databasev1alpha1.DeletionPolicyRetain}}
}

// intentFor builds the intent the projector would append for op.
func intentFor(t *testing.T, op string, ten *databasev1alpha1.PostgreSQLTenant, inst *databasev1alpha1.PostgreSQLInstance, edit func(any)) journal.Record {
	t.Helper()
	n := dbcontract.DeriveTenantNames(ten, cfg.BasePath)
	ep, ref := dbcontract.InstanceTarget(inst.Spec)
	var payload any
	switch {
	case op == dbcontract.OpWriteCredential || op == dbcontract.OpDestroyCredential:
		p := dbcontract.CredentialIntent{Mount: cfg.KVMount, Path: n.KVPath, InstanceUID: string(inst.UID), Username: n.Role, Database: n.Database,
			Host: ep.Host, HostAddr: ep.HostAddr, Port: ep.Port, SSLMode: ep.SSLMode}
		if edit != nil {
			edit(&p)
		}
		payload = p
	case strings.Contains(op, "ExternalSecret") || op == dbcontract.OpObserveProjection:
		p := dbcontract.ProjectionIntent{ExternalSecret: n.ExternalSecret, TargetSecretName: n.Secret, StoreName: cfg.StoreName, RemoteKey: n.KVPath,
			OwnerAPIVersion: databasev1alpha1.GroupVersion.String(), OwnerKind: "PostgreSQLTenant"}
		if edit != nil {
			edit(&p)
		}
		payload = p
	default:
		p := dbcontract.TenantIntent{Endpoint: ep, AdminCredRef: ref, InstanceUID: string(inst.UID), Database: n.Database, Role: n.Role,
			CredentialMount: cfg.KVMount, CredentialPath: n.KVPath, Extensions: []string{"pg_trgm"}}
		if edit != nil {
			edit(&p)
		}
		payload = p
	}
	rec, err := journal.NewIntent(journal.ObjectRef{Group: databasev1alpha1.GroupVersion.Group, Kind: "PostgreSQLTenant", Namespace: ten.Namespace, Name: ten.Name,
		UID: string(ten.UID), Generation: 1}, op, "", 1, payload)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestCheckIntent: an intent the projector would append passes; one whose
// endpoint, admin Secret, names, Instance or object state the live objects
// contradict is refused, with a message saying what differs.
func TestCheckIntent(t *testing.T) {
	deleting := func(policy databasev1alpha1.DeletionPolicy) *databasev1alpha1.PostgreSQLTenant {
		ten := liveTenant()
		now := metav1.Now()
		ten.DeletionTimestamp, ten.Spec.DeletionPolicy = &now, policy
		return ten
	}
	other := liveInstance()
	other.Name, other.UID = "other", "inst-2"
	cases := []struct {
		name    string
		op      string
		ten     *databasev1alpha1.PostgreSQLTenant // the live Tenant (nil: gone)
		inst    *databasev1alpha1.PostgreSQLInstance
		edit    func(any)
		refused string
	}{
		{"create role as decided", dbcontract.OpCreateRole, liveTenant(), liveInstance(), nil, ""},
		{"write credential as decided", dbcontract.OpWriteCredential, liveTenant(), liveInstance(), nil, ""},
		{"ExternalSecret as decided", dbcontract.OpEnsureExternalSecret, liveTenant(), liveInstance(), nil, ""},
		{"forged endpoint", dbcontract.OpVerifyLogin, liveTenant(), liveInstance(), func(p any) {
			p.(*dbcontract.TenantIntent).Endpoint.HostAddr = "127.0.0.1"
		}, "endpoint"},
		{"forged sslMode", dbcontract.OpVerifyLogin, liveTenant(), liveInstance(), func(p any) { p.(*dbcontract.TenantIntent).Endpoint.SSLMode = "disable" }, "endpoint"},
		{"forged admin Secret", dbcontract.OpCreateRole, liveTenant(), liveInstance(), func(p any) {
			p.(*dbcontract.TenantIntent).AdminCredRef.SecretName = "someone-elses"
		}, "admin credential reference"},
		{"another database", dbcontract.OpCreateDatabase, liveTenant(), liveInstance(), func(p any) { p.(*dbcontract.TenantIntent).Database = "victim" }, "database victim"},
		{"another extension", dbcontract.OpEnsureExtensions, liveTenant(), liveInstance(), func(p any) {
			p.(*dbcontract.TenantIntent).Extensions = []string{"adminpack", "pg_trgm"}
		}, "extensions"},
		{"an Instance the Tenant does not name", dbcontract.OpCreateRole, liveTenant(), other, func(p any) {
			p.(*dbcontract.TenantIntent).InstanceUID = "inst-2"
		}, "spec.instanceRef"},
		{"an unknown Instance", dbcontract.OpCreateRole, liveTenant(), nil, nil, "no PostgreSQLInstance"},
		{"credential of another path", dbcontract.OpDestroyCredential, deleting(databasev1alpha1.DeletionPolicyDelete), liveInstance(), func(p any) {
			p.(*dbcontract.CredentialIntent).Path = "postgresql-tenants/other/app"
		}, "credential record"},
		{"credential with another host", dbcontract.OpWriteCredential, liveTenant(), liveInstance(), func(p any) { p.(*dbcontract.CredentialIntent).Host = "evil" }, "endpoint"},
		{"ExternalSecret from another store", dbcontract.OpEnsureExternalSecret, liveTenant(), liveInstance(), func(p any) {
			p.(*dbcontract.ProjectionIntent).StoreName = "mallory"
		}, "store"},
		{"ExternalSecret of another key", dbcontract.OpEnsureExternalSecret, liveTenant(), liveInstance(), func(p any) {
			p.(*dbcontract.ProjectionIntent).RemoteKey = "postgresql-tenants/victim/victim"
		}, "not the one the Tenant's spec names"},
		{"drop a database of a Tenant not being deleted", dbcontract.OpDropDatabase, liveTenant(), liveInstance(), nil, "not being deleted"},
		{"drop a database of a Retain Tenant being deleted", dbcontract.OpDropDatabase, deleting(databasev1alpha1.DeletionPolicyRetain), liveInstance(), nil, "deletionPolicy is Retain"},
		{"destroy the credential of a Retain Tenant", dbcontract.OpDestroyCredential, deleting(databasev1alpha1.DeletionPolicyRetain), liveInstance(), nil, "deletionPolicy is Retain"},
		{"delete the ExternalSecret of a live Tenant", dbcontract.OpDeleteExternalSecret, liveTenant(), liveInstance(), nil, "not being deleted"},
		{"drop the database of a Delete Tenant being deleted", dbcontract.OpDropDatabase, deleting(databasev1alpha1.DeletionPolicyDelete), liveInstance(), nil, ""},
		{"retain of a live Tenant", dbcontract.OpRetainOwnership, liveTenant(), liveInstance(), nil, "not being deleted"},
		{"retain after the Tenant is gone", dbcontract.OpRetainOwnership, nil, liveInstance(), nil, ""},
		{"retain after the Tenant is gone, forged endpoint", dbcontract.OpRetainOwnership, nil, liveInstance(), func(p any) {
			p.(*dbcontract.TenantIntent).Endpoint.Host = "evil"
		}, "endpoint"},
		{"any other step of a gone Tenant", dbcontract.OpCreateRole, nil, liveInstance(), nil, "does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ten := tc.ten
			if ten == nil {
				ten = liveTenant()
			}
			inst := tc.inst
			if inst == nil {
				inst = liveInstance()
				inst.UID = "inst-gone"
			}
			rec := intentFor(t, tc.op, ten, inst, tc.edit)
			live := dbcontract.LiveObjects{Tenant: tc.ten, Instance: tc.inst}
			got := dbcontract.CheckIntent(rec, live, cfg)
			if tc.refused == "" && got != "" || tc.refused != "" && !strings.Contains(got, tc.refused) {
				t.Fatalf("CheckIntent = %q, want %q", got, tc.refused)
			}
		})
	}
}

// TestCheckInstanceIntent: the Instance's own operations name its endpoint
// and admin Secret; a recreated Instance (another UID) is not it.
func TestCheckInstanceIntent(t *testing.T) {
	inst := liveInstance()
	ep, ref := dbcontract.InstanceTarget(inst.Spec)
	ref.ResourceVersion = "42"
	mk := func(ep dbcontract.Endpoint) journal.Record {
		rec, err := journal.NewIntent(journal.ObjectRef{Group: databasev1alpha1.GroupVersion.Group, Kind: "PostgreSQLInstance", Name: "shared", UID: "inst-1", Generation: 1},
			dbcontract.OpObserveInstance, "", 1, dbcontract.InstanceIntent{Endpoint: ep, AdminCredRef: ref})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if why := dbcontract.CheckIntent(mk(ep), dbcontract.LiveObjects{Instance: inst}, cfg); why != "" {
		t.Fatalf("as decided: %s", why)
	}
	evil := ep
	evil.Port = 6543
	if why := dbcontract.CheckIntent(mk(evil), dbcontract.LiveObjects{Instance: inst}, cfg); !strings.Contains(why, "endpoint") {
		t.Fatalf("forged port: %q", why)
	}
	recreated := liveInstance()
	recreated.UID = "inst-new"
	if why := dbcontract.CheckIntent(mk(ep), dbcontract.LiveObjects{Instance: recreated}, cfg); !strings.Contains(why, "does not exist") {
		t.Fatalf("recreated Instance: %q", why)
	}
}

// TestNamespaceAllowed: unset admits every namespace; names and a selector
// admit theirs; an empty allow-list admits none; the guard refuses a
// provisioning step of a Tenant outside it and lets its deletion run.
func TestNamespaceAllowed(t *testing.T) {
	inst := liveInstance()
	if ok, _ := dbcontract.NamespaceAllowed(inst, "anything", nil); !ok {
		t.Fatal("unset allow-list refused a namespace")
	}
	inst.Spec.AllowedNamespaces = &databasev1alpha1.AllowedNamespaces{Names: []string{"netbox"},
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "db"}}}
	for _, c := range []struct {
		ns     string
		labels map[string]string
		want   bool
	}{{"netbox", nil, true}, {"wiki", map[string]string{"team": "db"}, true}, {"wiki", map[string]string{"team": "web"}, false}, {"mallory", nil, false}} {
		if ok, why := dbcontract.NamespaceAllowed(inst, c.ns, c.labels); ok != c.want || !ok && !strings.Contains(why, "allowedNamespaces") {
			t.Errorf("%s %v: %v %q", c.ns, c.labels, ok, why)
		}
	}
	inst.Spec.AllowedNamespaces = &databasev1alpha1.AllowedNamespaces{}
	if ok, _ := dbcontract.NamespaceAllowed(inst, "netbox", nil); ok {
		t.Fatal("an empty allow-list admitted a namespace")
	}
	ten := liveTenant() // namespace netbox, now not allowed
	if why := dbcontract.CheckIntent(intentFor(t, dbcontract.OpCreateRole, ten, inst, nil), dbcontract.LiveObjects{Tenant: ten, Instance: inst}, cfg); !strings.Contains(why, "allowedNamespaces") {
		t.Fatalf("provisioning outside the allow-list: %q", why)
	}
	now := metav1.Now()
	ten.DeletionTimestamp, ten.Spec.DeletionPolicy = &now, databasev1alpha1.DeletionPolicyDelete
	if why := dbcontract.CheckIntent(intentFor(t, dbcontract.OpDropDatabase, ten, inst, nil), dbcontract.LiveObjects{Tenant: ten, Instance: inst}, cfg); why != "" {
		t.Fatalf("deletion outside the allow-list: %q", why)
	}
}
