package database_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestTenantCrashAtEveryStep (criterion 6): for each intent type the
// manager is SIGKILLed after the intent is acked and executed but before
// its outcome, and again after the outcome before the ack and the status
// write. After a restart the Tenant is Ready with the same password (KV
// version 1), one registry record, one role, one database, and the
// journal's invariants hold.
func TestTenantCrashAtEveryStep(t *testing.T) {
	s := getStack(t)
	ops := []string{dbcontract.OpCheckExtensions, dbcontract.OpClaimOwnership, dbcontract.OpWriteCredential, dbcontract.OpCreateRole, dbcontract.OpCreateDatabase,
		dbcontract.OpEnsureExtensions, dbcontract.OpEnsureExternalSecret, dbcontract.OpObserveProjection, dbcontract.OpVerifyLogin}
	ns(t, s, "crash")
	ctx := context.Background()
	for i, op := range ops {
		for _, point := range []string{"executor-before-outcome", "executor-after-outcome"} {
			name := fmt.Sprintf("c%d%s", i, strings.Split(point, "-")[1][:1])
			t.Run(op+"/"+point, func(t *testing.T) {
				s.StopManager()
				if err := s.StartManagerEnv([]string{"AYATORI_FAILPOINTS=" + point + "=" + op}); err != nil {
					t.Fatal(err)
				}
				newTenant(t, s, "crash", name, func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Extensions = []string{"pg_trgm"} })
				if !s.WaitManagerExit(90 * time.Second) {
					t.Fatalf("the failpoint %s=%s never fired", point, op)
				}
				if err := s.StartManager(); err != nil {
					t.Fatal(err)
				}
				tn := waitTenant(t, s, "crash", name, metav1.ConditionTrue, "Ready", 2*time.Minute)
				if _, ver := kvPassword(t, s, "crash", name); ver != 1 {
					t.Fatalf("KV version %d: a second password was written", ver)
				}
				for what, sql := range map[string]string{
					"registry records": "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '" + string(tn.UID) + "'",
					"roles":            "SELECT count(*) FROM pg_roles WHERE rolname = '" + name + "'",
					"databases":        "SELECT count(*) FROM pg_database WHERE datname = '" + name + "'",
				} {
					if n := superQuery[int64](t, s, "postgres", sql); n != 1 {
						t.Fatalf("%d %s", n, what)
					}
				}
				recs, err := journalStore(t, s).Read(ctx, string(tn.UID))
				if err != nil {
					t.Fatal(err)
				}
				if v := journal.Verify(recs, nil); len(v) > 0 {
					t.Fatalf("journal invariants violated: %+v", v)
				}
			})
		}
	}
}

// TestTenantDeleteCrashAtEveryStep (criterion 13): the manager is killed at
// each step of the Delete path, before and after its outcome; after a
// restart the cleanup completes and nothing of the Tenant remains.
func TestTenantDeleteCrashAtEveryStep(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	ops := []string{dbcontract.OpDeleteExternalSecret, dbcontract.OpDisableLogin, dbcontract.OpDropDatabase, dbcontract.OpDropRole, dbcontract.OpDestroyCredential, dbcontract.OpReleaseOwnership}
	ns(t, s, "delcrash")
	for i, op := range ops {
		for _, point := range []string{"executor-before-outcome", "executor-after-outcome"} {
			name := fmt.Sprintf("d%d%s", i, strings.Split(point, "-")[1][:1])
			t.Run(op+"/"+point, func(t *testing.T) {
				tn := newTenant(t, s, "delcrash", name, func(tn *databasev1alpha1.PostgreSQLTenant) {
					tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
				})
				waitTenant(t, s, "delcrash", name, metav1.ConditionTrue, "Ready", 2*time.Minute)
				s.StopManager()
				if err := s.StartManagerEnv([]string{"AYATORI_FAILPOINTS=" + point + "=" + op}); err != nil {
					t.Fatal(err)
				}
				if err := s.CP.Client.Delete(ctx, tn); err != nil {
					t.Fatal(err)
				}
				if !s.WaitManagerExit(90 * time.Second) {
					t.Fatalf("the failpoint %s=%s never fired", point, op)
				}
				if err := s.StartManager(); err != nil {
					t.Fatal(err)
				}
				waitGone(t, s, tn)
				for what, sql := range map[string]string{
					"registry records": "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = '" + string(tn.UID) + "'",
					"roles":            "SELECT count(*) FROM pg_roles WHERE rolname = '" + name + "'",
					"databases":        "SELECT count(*) FROM pg_database WHERE datname = '" + name + "'",
				} {
					if n := superQuery[int64](t, s, "postgres", sql); n != 0 {
						t.Fatalf("%d %s left", n, what)
					}
				}
				root, _ := s.Bao.Client(s.Bao.RootToken)
				if _, err := root.KVv2("kv").GetMetadata(ctx, "postgresql-tenants/delcrash/"+name); err == nil {
					t.Fatal("the KV record is left")
				}
				recs, err := journalStore(t, s).Read(ctx, string(tn.UID))
				if err != nil {
					t.Fatal(err)
				}
				if v := journal.Verify(recs, nil); len(v) > 0 {
					t.Fatalf("journal invariants violated: %+v", v)
				}
			})
		}
	}
}
