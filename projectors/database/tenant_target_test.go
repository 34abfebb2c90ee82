package database_test

// The projection target (the target Secret and the derived ExternalSecret
// name) is checked before the first external write: a Secret or an
// ExternalSecret that is not this Tenant's is a Conflict, nothing is
// claimed or written, and deletion never touches it. Reported by the
// hostile tests TestBreakTargetSecretNameTakesOverForeignSecret and
// TestBreakDerivedNameCollisionAfterWrites.

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// assertNothingWritten checks that a Tenant left no trace outside
// Kubernetes: no registry row, no KV record, no role, no database, no
// ExternalSecret, and no journaled write intent (only CheckExtensions).
func assertNothingWritten(t *testing.T, s *integration.Stack, tn *databasev1alpha1.PostgreSQLTenant, database, role, externalSecret string, esMustBeAbsent bool) {
	t.Helper()
	ctx := context.Background()
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '"+string(tn.UID)+"'"); n != 0 {
		t.Errorf("registry rows for %s/%s: %d, want 0", tn.Namespace, tn.Name, n)
	}
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = '"+role+"'"); n != 0 {
		t.Errorf("role %s was created", role)
	}
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = '"+database+"'"); n != 0 {
		t.Errorf("database %s was created", database)
	}
	root, err := s.Bao.Client(s.Bao.RootToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.KVv2(integration.KVMount).GetMetadata(ctx, kvPath(tn.Namespace, tn.Name)); err == nil {
		t.Errorf("KV record %s was written", kvPath(tn.Namespace, tn.Name))
	}
	if esMustBeAbsent {
		if _, ok := getES(t, s, tn.Namespace, externalSecret); ok {
			t.Errorf("ExternalSecret %s/%s was created", tn.Namespace, externalSecret)
		}
	}
	recs, err := journalStore(t, s).Read(ctx, string(tn.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Type == journal.TypeIntent && r.Operation != "CheckExtensions" {
			t.Errorf("journaled intent %s: a write was decided", r.Operation)
		}
	}
}

// secretUnchanged fails unless the Secret still exists with exactly the
// data, owners and resourceVersion it had.
func secretUnchanged(t *testing.T, s *integration.Stack, want *corev1.Secret, when string) {
	t.Helper()
	got, ok := getSecret(t, s, want.Namespace, want.Name)
	if !ok {
		t.Fatalf("%s: the foreign Secret %s/%s is gone", when, want.Namespace, want.Name)
	}
	if !reflect.DeepEqual(got.Data, want.Data) || len(got.OwnerReferences) != len(want.OwnerReferences) || got.ResourceVersion != want.ResourceVersion {
		keys := make([]string, 0, len(got.Data))
		for k := range got.Data {
			keys = append(keys, k)
		}
		t.Errorf("%s: the foreign Secret %s/%s changed (keys %v, owners %v, resourceVersion %s -> %s)",
			when, want.Namespace, want.Name, keys, got.OwnerReferences, want.ResourceVersion, got.ResourceVersion)
	}
}

// A Tenant whose spec.credential.secretName names an existing Secret it
// did not produce (an application's API key; the Instance's admin
// credential in the controller namespace) is a Conflict before any write;
// the Secret is untouched, also by the Tenant's deletion (Delete policy).
func TestTenantForeignTargetSecretIsConflict(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	cases := []struct{ namespace, name, secret string }{
		{"fgn-secret", "fgnclobber", "payments-api-key"},
		// The admin credential Secret of Instance "shared".
		{integration.ControllerNamespace, "fgnadmin", "shared-admin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns(t, s, c.namespace)
			if c.secret == "payments-api-key" {
				if err := s.CP.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.secret},
					StringData: map[string]string{"api_key": "keep-me-precious"}}); err != nil {
					t.Fatal(err)
				}
			}
			before, ok := getSecret(t, s, c.namespace, c.secret)
			if !ok {
				t.Fatalf("Secret %s/%s missing", c.namespace, c.secret)
			}
			tn := newTenant(t, s, c.namespace, c.name, func(tn *databasev1alpha1.PostgreSQLTenant) {
				tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
				tn.Spec.Credential.SecretName = c.secret
			})
			waitTenantMessage(t, s, c.namespace, c.name, databasev1alpha1.ReasonConflict, "Secret "+c.namespace+"/"+c.secret)
			// ESO would act within a second or two if an ExternalSecret existed.
			time.Sleep(3 * time.Second)
			secretUnchanged(t, s, before, "after create")
			assertNothingWritten(t, s, tn, c.name, c.name, dbcontract.ExternalSecretName("shared", c.name), true)
			if err := s.CP.Client.Delete(ctx, tn); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s, tn)
			secretUnchanged(t, s, before, "after delete")
		})
	}
}

// Tenant "tgt-dup" on Instance "shared" and Tenant "dup" on Instance
// "shared-tgt" derive one ExternalSecret (and Secret) name,
// shared-tgt-dup-postgresql. The second is a Conflict before its claim,
// KV record, role and database; the first keeps working, also after the
// second is deleted (Delete policy).
func TestTenantDerivedNameCollisionBeforeWrites(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	secondSharedInstance(t, s, "shared-tgt")
	const namespace = "tgt-names"
	first := newTenant(t, s, namespace, "tgt-dup", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.Database, tn.Spec.LoginRole = "tgt_dup_first", "tgt_dup_first"
	})
	waitTenant(t, s, namespace, "tgt-dup", metav1.ConditionTrue, "Ready", 2*time.Minute)
	esName := dbcontract.ExternalSecretName("shared", "tgt-dup")
	if esName != dbcontract.ExternalSecretName("shared-tgt", "dup") {
		t.Fatal("the names do not collide; the test is wrong")
	}
	secretBefore, ok := getSecret(t, s, namespace, esName)
	if !ok {
		t.Fatal("the first Tenant's Secret is missing")
	}
	second := newTenant(t, s, namespace, "dup", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.InstanceRef = "shared-tgt"
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
		tn.Spec.Database, tn.Spec.LoginRole = "tgt_dup_second", "tgt_dup_second"
	})
	waitTenantMessage(t, s, namespace, "dup", databasev1alpha1.ReasonConflict, "ExternalSecret "+namespace+"/"+esName)
	assertNothingWritten(t, s, second, "tgt_dup_second", "tgt_dup_second", esName, false)
	es, ok := getES(t, s, namespace, esName)
	if !ok {
		t.Fatal("the first Tenant's ExternalSecret is gone")
	}
	if refs := es.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != first.UID {
		t.Fatalf("the ExternalSecret's owners changed: %v", refs)
	}
	if err := s.CP.Client.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, second)
	if _, ok := getES(t, s, namespace, esName); !ok {
		t.Fatal("deleting the second Tenant deleted the first Tenant's ExternalSecret")
	}
	if sec, ok := getSecret(t, s, namespace, esName); !ok || sec.UID != secretBefore.UID {
		t.Fatal("deleting the second Tenant deleted the first Tenant's Secret")
	}
	if c := waitTenant(t, s, namespace, "tgt-dup", metav1.ConditionTrue, "Ready", time.Minute); c == nil {
		t.Fatal("the first Tenant is no longer Ready")
	}
}

// secondSharedInstance creates another Instance on the same server with the
// same admin Secret and waits for it to be Ready.
func secondSharedInstance(t *testing.T, s *integration.Stack, name string) {
	t.Helper()
	ctx := context.Background()
	if err := s.CP.Client.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		i := &databasev1alpha1.PostgreSQLInstance{}
		return s.CP.Client.Get(ctx, types.NamespacedName{Name: name}, i) == nil && i.Status.Phase == databasev1alpha1.InstancePhaseReady, nil
	}); err != nil {
		t.Fatalf("Instance %s never Ready", name)
	}
}
