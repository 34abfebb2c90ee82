package database_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// ageOut simulates journal retention (MaxAge with DiscardOld) for one UID:
// every journal record of it is purged. Its checkpoint (a stream without
// age limit) stays.
func ageOut(t *testing.T, s *integration.Stack, uid string) {
	t.Helper()
	ctx := context.Background()
	nc, err := s.ConnectNATS(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := integration.AgeOutJournal(ctx, nc, uid); err != nil {
		t.Fatal(err)
	}
	if recs, err := journalStore(t, s).Read(ctx, uid); err != nil || len(recs) != 0 {
		t.Fatalf("after retention: %d records, %v", len(recs), err)
	}
}

// waitCheckpointed waits until the UID's records are all folded into its
// checkpoint (the projector writes one on its first idle pass).
func waitCheckpointed(t *testing.T, s *integration.Stack, uid string) {
	t.Helper()
	st := journalStore(t, s)
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, err := st.ReadView(ctx, uid)
		return err == nil && v.Through > 0 && v.Tail == 0, nil
	})
	if err != nil {
		t.Fatalf("no checkpoint covers the journal of %s", uid)
	}
}

// Issue 12, fault 1: an object's correctness never depends on records
// retention may remove. A Delete Tenant whose journal aged out still
// deletes everything it provisioned (before checkpoints, claimedEver() was
// false and the finalizer went without any cleanup).
func TestTenantDeleteAfterJournalRetention(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "aged", "aged", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	waitTenant(t, s, "aged", "aged", metav1.ConditionTrue, "Ready", 2*time.Minute)
	waitCheckpointed(t, s, string(tn.UID))
	ageOut(t, s, string(tn.UID))
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, tn)
	if n := superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'aged'") +
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'aged'") +
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)); n != 0 {
		t.Fatalf("Delete after retention left %d PostgreSQL objects", n)
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	if _, err := root.KVv2("kv").GetMetadata(ctx, "postgresql-tenants/aged/aged"); err == nil {
		t.Fatal("Delete after retention left the KV record")
	}
	// The object is gone: so is its checkpoint.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, err := journalStore(t, s).ReadView(ctx, string(tn.UID))
		return err == nil && v.Through == 0, nil
	})
	if err != nil {
		t.Fatal("the checkpoint of a deleted Tenant was not dropped")
	}
}

// Issue 12, fault 1: a Ready Tenant whose journal aged out still re-checks
// and stays Ready; the re-check's intents get new IDs (before, the next
// attempt was computed from a count, its ID existed already, Append
// answered Duplicate and the Tenant sat at Unknown for good).
func TestTenantRecheckAfterJournalRetention(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "aged", "recheck", nil)
	waitTenant(t, s, "aged", "recheck", metav1.ConditionTrue, "Ready", 2*time.Minute)
	waitCheckpointed(t, s, string(tn.UID))
	ageOut(t, s, string(tn.UID))
	// A wiped status forces a re-check of every step.
	wipeStatus(t, s, "aged", "recheck")
	st := journalStore(t, s)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		recs, err := st.Read(ctx, string(tn.UID))
		if err != nil {
			return false, nil
		}
		for _, r := range recs {
			if r.Type == journal.TypeOutcome && r.Operation == "VerifyLogin" && r.Result.Class == journal.Succeeded {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		v, _ := st.ReadView(ctx, string(tn.UID))
		cur := &databasev1alpha1.PostgreSQLTenant{}
		_ = s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur)
		t.Fatalf("no re-check ran after the journal aged out\nstatus: %+v\nview (through %d, tail %d):\n%s\nmanager log tail:\n%s",
			cur.Status, v.Through, v.Tail, describe(v.Records), integration.Tail(s.ManagerLog, 25))
	}
	waitTenant(t, s, "aged", "recheck", metav1.ConditionTrue, "Ready", time.Minute)
}

func describe(recs []journal.Record) string {
	out := ""
	for _, r := range recs {
		res := ""
		if r.Result != nil {
			res = r.Result.String()
		}
		out += fmt.Sprintf("  %d %s %s g%d a%d %s\n", r.Sequence, r.Type, r.Operation, r.Object.Generation, r.Attempt, res)
	}
	return out
}

// Issue 12, fault 4: what was provisioned is pinned once the first
// external write happened, whatever the phase. With the status wiped (the
// CEL rules then let spec changes through) a changed secretName is an
// ImmutableField error, the status keeps the provisioned Secret name, and
// the phase never returns to Pending.
func TestTenantIdentityPinnedAfterStatusLoss(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "pin", "pinned", nil)
	ready := waitTenant(t, s, "pin", "pinned", metav1.ConditionTrue, "Ready", 2*time.Minute)
	provisioned := ready.Status.Credential.SecretRef.Name
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			return err
		}
		cur.Status = databasev1alpha1.PostgreSQLTenantStatus{}
		if err := s.CP.Client.Status().Update(ctx, cur); err != nil {
			return err
		}
		cur.Spec.Credential.SecretName = "somewhere-else"
		return s.CP.Client.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	got := waitTenant(t, s, "pin", "pinned", metav1.ConditionFalse, "ImmutableField", time.Minute)
	if got.Status.Credential.SecretRef.Name != provisioned || got.Status.Phase == databasev1alpha1.TenantPhasePending {
		t.Fatalf("status %+v: want secretRef %s and a phase past Pending", got.Status, provisioned)
	}
	if !strings.Contains(readyMsg(got.Status.Conditions), "secretName") {
		t.Fatalf("message %q does not name secretName", readyMsg(got.Status.Conditions))
	}
}

// Issue 12, fault 6: a Retain Tenant deleted while PostgreSQL is down goes
// at once (Retain never holds the CR), and its RetainOwnership — which no
// projector can retry once the CR is gone — is retried by the executor
// until PostgreSQL is back: the registry row ends unmanaged.
func TestTenantRetainWhilePostgreSQLDown(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "keep-down", "keptdown", nil)
	waitTenant(t, s, "keep-down", "keptdown", metav1.ConditionTrue, "Ready", 2*time.Minute)
	s.PG.Stop()
	restarted := false
	defer func() {
		if !restarted {
			_ = s.PG.Start(ctx)
		}
	}()
	if err := s.CP.Client.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, tn)
	time.Sleep(4 * time.Second) // several failed deliveries while PostgreSQL is down
	if err := s.PG.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		return !superQuery[bool](t, s, "postgres", "SELECT managed FROM postgresql_tenant_operator.tenant_ownership WHERE tenant_uid = $1", string(tn.UID)), nil
	})
	if err != nil {
		v, _ := journalStore(t, s).ReadView(ctx, string(tn.UID))
		t.Fatalf("the registry row stayed managed after PostgreSQL came back\njournal:\n%s", describe(v.Records))
	}
}
