package database_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	bao "github.com/openbao/openbao/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	esexec "git.ddupan.top/panxiao81/ayatori/executors/externalsecrets"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The Tenant's credential, ExternalSecret and Secret against out-of-band
// changes (issue 10 §3), on the full stack.

func kvPath(namespace, name string) string {
	return integration.TenantBasePath + "/" + namespace + "/" + name
}

// bumpPolicy changes spec.deletionPolicy: a new generation, so every step
// runs again (the "then any spec change" of the reports).
func bumpPolicy(t *testing.T, s *integration.Stack, namespace, name string, p databasev1alpha1.DeletionPolicy) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, cur); err != nil {
			return err
		}
		cur.Spec.DeletionPolicy = p
		return s.CP.Client.Update(context.Background(), cur)
	}); err != nil {
		t.Fatal(err)
	}
}

func getSecret(t *testing.T, s *integration.Stack, namespace, name string) (*corev1.Secret, bool) {
	t.Helper()
	sec := &corev1.Secret{}
	err := s.CP.Client.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, sec)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return sec, true
}

func getES(t *testing.T, s *integration.Stack, namespace, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	err := s.CP.Client.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, es)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return es, true
}

// forceSync makes ESO read OpenBao again now (an annotation change).
func forceSync(t *testing.T, s *integration.Stack, namespace, name string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		es, ok := getES(t, s, namespace, name)
		if !ok {
			return fmt.Errorf("ExternalSecret %s/%s does not exist", namespace, name)
		}
		ann := es.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["force-sync"] = time.Now().Format(time.RFC3339Nano)
		es.SetAnnotations(ann)
		return s.CP.Client.Update(context.Background(), es)
	}); err != nil {
		t.Fatal(err)
	}
}

// loginWith connects with the projected Secret's fields.
func loginWith(t *testing.T, s *integration.Stack, sec *corev1.Secret) error {
	t.Helper()
	ctx := context.Background()
	dsn := fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=%s sslrootcert=%s", sec.Data["hostaddr"], sec.Data["port"],
		sec.Data["database"], sec.Data["username"], sec.Data["password"], sec.Data["sslmode"], s.PG.CAFile)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// createdWrites counts WriteCredential outcomes that generated a password.
func createdWrites(t *testing.T, s *integration.Stack, uid types.UID) int {
	t.Helper()
	recs, err := journalStore(t, s).Read(context.Background(), string(uid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Type == journal.TypeOutcome && r.Operation == dbcontract.OpWriteCredential && strings.Contains(string(r.Payload), `"created":true`) {
			n++
		}
	}
	return n
}

// Issue 10 §3: the KV record is deleted out of band while the role exists,
// then the spec changes. Specification §6/§8.3: Conflict, never a second
// password, never a reset of the role's password; nothing is written and
// the condition says what to do. Restoring the record (same password,
// ownership metadata) as the runbook says makes the Tenant Ready again.
func TestTenantKVRecordLostNoSecondPassword(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "kvlost", "lostapp", nil)
	waitTenant(t, s, "kvlost", "lostapp", metav1.ConditionTrue, "Ready", 2*time.Minute)
	pw, _ := kvPassword(t, s, "kvlost", "lostapp")
	root, _ := s.Bao.Client(s.Bao.RootToken)
	kv := root.KVv2(integration.KVMount)
	md, err := kv.GetMetadata(ctx, kvPath("kvlost", "lostapp"))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := kv.Get(ctx, kvPath("kvlost", "lostapp"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.DeleteMetadata(ctx, kvPath("kvlost", "lostapp")); err != nil {
		t.Fatal(err)
	}
	bumpPolicy(t, s, "kvlost", "lostapp", databasev1alpha1.DeletionPolicyDelete)
	got := waitTenant(t, s, "kvlost", "lostapp", metav1.ConditionFalse, "Conflict", time.Minute)
	msg := readyMsg(got.Status.Conditions)
	for _, want := range []string{"kv/" + kvPath("kvlost", "lostapp"), "missing", "never generates a second password", "restore the record"} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition message lacks %q: %s", want, msg)
		}
	}
	time.Sleep(3 * time.Second) // a few Conflict re-checks (retry-max 3s)
	if _, err := kv.GetMetadata(ctx, kvPath("kvlost", "lostapp")); err == nil {
		t.Fatal("a KV record was written for a Tenant whose role holds the first password")
	}
	if n := createdWrites(t, s, tn.UID); n != 1 {
		t.Fatalf("%d password-generating writes in the journal, want 1", n)
	}
	// The role still has the first password: the application's Secret works.
	projected, ok := getSecret(t, s, "kvlost", "shared-lostapp-postgresql")
	if !ok || string(projected.Data["password"]) != pw {
		t.Fatal("the application's Secret changed")
	}
	if err := loginWith(t, s, projected); err != nil {
		t.Fatalf("the role's password was changed: %v", err)
	}
	// The runbook's recovery: restore the record with its ownership metadata.
	if err := kv.PutMetadata(ctx, kvPath("kvlost", "lostapp"), bao.KVMetadataPutInput{CustomMetadata: md.CustomMetadata}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, kvPath("kvlost", "lostapp"), sec.Data, bao.WithCheckAndSet(0)); err != nil {
		t.Fatal(err)
	}
	waitTenant(t, s, "kvlost", "lostapp", metav1.ConditionTrue, "Ready", time.Minute)
	if pw2, _ := kvPassword(t, s, "kvlost", "lostapp"); pw2 != pw {
		t.Fatal("the restored password was replaced")
	}
}

// Issue 10 §3: a soft-deleted current KV version (kv delete) must not make
// ESO delete the application's Secret (target deletionPolicy Retain); the
// Tenant reports it (NotReady, the KV path, "undelete") and writes no
// second password; after an undelete it is Ready again.
func TestTenantKVVersionDeletedKeepsSecret(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "kvsoft", "softapp", nil)
	waitTenant(t, s, "kvsoft", "softapp", metav1.ConditionTrue, "Ready", 2*time.Minute)
	if es, ok := getES(t, s, "kvsoft", "shared-softapp-postgresql"); !ok {
		t.Fatal("no ExternalSecret")
	} else if p, _, _ := unstructured.NestedString(es.Object, "spec", "target", "deletionPolicy"); p != "Retain" {
		t.Fatalf("target deletionPolicy %q, want Retain", p)
	}
	pw, ver := kvPassword(t, s, "kvsoft", "softapp")
	root, _ := s.Bao.Client(s.Bao.RootToken)
	kv := root.KVv2(integration.KVMount)
	if err := kv.Delete(ctx, kvPath("kvsoft", "softapp")); err != nil {
		t.Fatal(err)
	}
	// ESO reads the deleted version now.
	forceSync(t, s, "kvsoft", "shared-softapp-postgresql")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		es, ok := getES(t, s, "kvsoft", "shared-softapp-postgresql")
		if !ok {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(es.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] == "False" {
				return true, nil
			}
		}
		_, exists := getSecret(t, s, "kvsoft", "shared-softapp-postgresql")
		return !exists, nil
	})
	if err != nil {
		t.Fatalf("ESO never noticed the deleted version\nESO log:\n%s", integration.Tail(s.ESO.LogPath, 10))
	}
	projected, ok := getSecret(t, s, "kvsoft", "shared-softapp-postgresql")
	if !ok {
		t.Fatal("ESO deleted the application's Secret because the KV version was soft-deleted")
	}
	if string(projected.Data["password"]) != pw {
		t.Fatal("the application's Secret changed")
	}
	bumpPolicy(t, s, "kvsoft", "softapp", databasev1alpha1.DeletionPolicyDelete)
	got := waitTenant(t, s, "kvsoft", "softapp", metav1.ConditionFalse, "Conflict", time.Minute)
	msg := readyMsg(got.Status.Conditions)
	for _, want := range []string{"kv/" + kvPath("kvsoft", "softapp"), "undelete", "deleted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition message lacks %q: %s", want, msg)
		}
	}
	if md, err := kv.GetMetadata(ctx, kvPath("kvsoft", "softapp")); err != nil || md.CurrentVersion != ver {
		t.Fatalf("a new version was written: %+v %v", md, err)
	}
	if n := createdWrites(t, s, tn.UID); n != 1 {
		t.Fatalf("%d password-generating writes, want 1", n)
	}
	if err := kv.Undelete(ctx, kvPath("kvsoft", "softapp"), []int{ver}); err != nil {
		t.Fatal(err)
	}
	waitTenant(t, s, "kvsoft", "softapp", metav1.ConditionTrue, "Ready", time.Minute)
	if pw2, ver2 := kvPassword(t, s, "kvsoft", "softapp"); pw2 != pw || ver2 != ver {
		t.Fatal("the credential changed across delete/undelete")
	}
}

// Issue 10 §3: delete a Retain Tenant, recreate it with deletionPolicy
// Delete (Conflict, specification §11.1), delete that: the finalizer goes;
// the retained ExternalSecret, Secret, KV record, database and role are
// left in place and reported. The retained ExternalSecret is released
// from the Tenant (no owner reference left for a garbage collector) and
// keeps the application's Secret (docs/decisions/0004).
func TestTenantRetainedThenRecreatedWithDelete(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	first := newTenant(t, s, "again", "againapp", nil)
	waitTenant(t, s, "again", "againapp", metav1.ConditionTrue, "Ready", 2*time.Minute)
	pw, ver := kvPassword(t, s, "again", "againapp")
	if err := s.CP.Client.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, first)
	es, ok := getES(t, s, "again", "shared-againapp-postgresql")
	if !ok {
		t.Fatal("Retain deleted the ExternalSecret")
	}
	for _, o := range es.GetOwnerReferences() {
		if o.UID == first.UID {
			t.Fatal("the retained ExternalSecret still has an owner reference to the deleted Tenant (a garbage collector would delete it)")
		}
	}
	if !strings.Contains(es.GetAnnotations()[esexec.AnnotationRetained], string(first.UID)) {
		t.Fatalf("the retained ExternalSecret is not marked retained: %v", es.GetAnnotations())
	}
	second := newTenant(t, s, "again", "againapp", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.DeletionPolicy = databasev1alpha1.DeletionPolicyDelete
	})
	// The retained ExternalSecret takes the projection target: a Conflict
	// before the second Tenant claims or writes anything.
	waitTenantMessage(t, s, "again", "againapp", "Conflict", "retained from Tenant again/againapp")
	if err := s.CP.Client.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, second)
	// Everything of the first Tenant is still there, unchanged.
	if _, ok := getES(t, s, "again", "shared-againapp-postgresql"); !ok {
		t.Fatal("the retained ExternalSecret was deleted")
	}
	projected, ok := getSecret(t, s, "again", "shared-againapp-postgresql")
	if !ok {
		t.Fatal("the retained application Secret was deleted")
	}
	if err := loginWith(t, s, projected); err != nil {
		t.Fatalf("the retained credential no longer works: %v", err)
	}
	if pw2, ver2 := kvPassword(t, s, "again", "againapp"); pw2 != pw || ver2 != ver {
		t.Fatal("the retained KV record changed")
	}
	if superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'againapp'") != 1 ||
		superQuery[int64](t, s, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'againapp'") != 1 {
		t.Fatal("the retained database or role was dropped")
	}
	// The second Tenant never claimed anything (the Conflict came before
	// the claim): its deletion has nothing to clean up or to skip.
	recs, err := journalStore(t, s).Read(ctx, string(second.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Type == journal.TypeIntent && r.Operation != "CheckExtensions" {
			t.Errorf("the second Tenant journaled %s", r.Operation)
		}
	}
}

// Issue 10 §3: the longest names the API accepts work end to end (every
// derived ExternalSecret/Secret name, label and annotation is valid), and
// longer ones are refused at admission with a clear message.
func TestTenantLongestNames(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	// A 64-character name with explicit database and login role (the
	// reported case: the label value was over 63 characters).
	name64 := strings.Repeat("n", 60) + "-064"
	newTenant(t, s, "longnames", name64, func(tn *databasev1alpha1.PostgreSQLTenant) { tn.Spec.Database, tn.Spec.LoginRole = "long64", "long64" })
	// The longest name with this instanceRef (6 + 235 = 241), a 253-character target Secret.
	name235 := strings.Repeat("m.", 116) + "235"
	secret253 := strings.Repeat("s", 253)
	newTenant(t, s, "longnames", name235, func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.Database, tn.Spec.LoginRole = "long235", "long235"
		tn.Spec.Credential.SecretName = secret253
	})
	// A long instanceRef: a second Instance on the same server whose name
	// leaves 64 characters for the Tenant name.
	instName := strings.Repeat("i", 173) + "-inst"
	if err := s.CP.Client.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: instName}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}); err != nil {
		t.Fatal(err)
	}
	name63 := strings.Repeat("q", 60) + "-63"
	newTenant(t, s, "longnames", name63, func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.InstanceRef = instName
		tn.Spec.Database, tn.Spec.LoginRole = "longinst", "longinst"
	})
	if len(instName)+len(name63) != 241 || len(name235) != 235 {
		t.Fatalf("test names: %d %d", len(instName)+len(name63), len(name235))
	}
	root, _ := s.Bao.Client(s.Bao.RootToken)
	for _, c := range []struct{ name, secret string }{{name64, "shared-" + name64 + "-postgresql"}, {name235, secret253}, {name63, instName + "-" + name63 + "-postgresql"}} {
		tn := waitTenant(t, s, "longnames", c.name, metav1.ConditionTrue, "Ready", 3*time.Minute)
		// The KV path keeps names up to 100 characters (OpenBao's file
		// storage fails on path segments over 107); the record's metadata
		// has the full name.
		path := strings.TrimPrefix(tn.Status.Credential.OpenBaoURL, s.Bao.Address+"/v1/kv/data/")
		seg := path[strings.LastIndex(path, "/")+1:]
		if (len(c.name) <= 100 && seg != c.name) || len(seg) > 100 {
			t.Fatalf("KV path segment for a %d-character name: %q", len(c.name), seg)
		}
		md, err := root.KVv2(integration.KVMount).GetMetadata(ctx, path)
		if err != nil || md.CustomMetadata["ayatori.ddupan.top/tenant"] != "longnames/"+c.name {
			t.Fatalf("KV record at %s: %v %v", path, md, err)
		}
		projected, ok := getSecret(t, s, "longnames", c.secret)
		if !ok {
			t.Fatalf("no projected Secret %s", c.secret)
		}
		if err := loginWith(t, s, projected); err != nil {
			t.Fatalf("login with the Secret of %d-character Tenant: %v", len(c.name), err)
		}
	}
	// A name the API accepts but whose Events could not be stored (over 236
	// characters, possible with a short instanceRef): InvalidSpec before any
	// journal record or external write.
	name237 := strings.Repeat("e", 237)
	long := newTenant(t, s, "longnames", name237, func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.InstanceRef = "x"
		tn.Spec.Database, tn.Spec.LoginRole = "long237", "long237"
	})
	got := waitTenant(t, s, "longnames", name237, metav1.ConditionFalse, "InvalidSpec", time.Minute)
	if msg := readyMsg(got.Status.Conditions); !strings.Contains(msg, "Events") || !strings.Contains(msg, "236") {
		t.Fatalf("message %q", msg)
	}
	if recs, err := journalStore(t, s).Read(ctx, string(long.UID)); err != nil || len(recs) != 0 {
		t.Fatalf("%d journal records for an invalid Tenant (%v)", len(recs), err)
	}
	// Over the limit: refused at admission, nothing created.
	name253 := strings.Repeat("z", 253)
	err := s.CP.Client.Create(ctx, &databasev1alpha1.PostgreSQLTenant{ObjectMeta: metav1.ObjectMeta{Namespace: "longnames", Name: name253},
		Spec: databasev1alpha1.PostgreSQLTenantSpec{InstanceRef: "shared", Database: "long253", LoginRole: "long253"}})
	if err == nil || !strings.Contains(err.Error(), "241") {
		t.Fatalf("a 253-character Tenant name with instanceRef shared: want refusal naming the 241-character limit, got %v", err)
	}
}

// Issue 10 §3: the ExternalSecret or the target Secret deleted by hand is
// repaired (or reported) at once, not at the next periodic re-check (1 h in
// this stack).
func TestTenantOwnedObjectsRepaired(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	tn := newTenant(t, s, "repair", "repairapp", nil)
	waitTenant(t, s, "repair", "repairapp", metav1.ConditionTrue, "Ready", 2*time.Minute)
	const name = "shared-repairapp-postgresql"
	es, _ := getES(t, s, "repair", name)
	if err := s.CP.Client.Delete(ctx, es); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		again, ok := getES(t, s, "repair", name)
		if !ok || again.GetUID() == es.GetUID() {
			return false, nil
		}
		for _, o := range again.GetOwnerReferences() {
			if o.UID == tn.UID {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the deleted ExternalSecret was not recreated\nmanager log tail:\n%s", integration.Tail(s.ManagerLog, 20))
	}
	waitTenant(t, s, "repair", "repairapp", metav1.ConditionTrue, "Ready", time.Minute)
	sec, ok := getSecret(t, s, "repair", name)
	if !ok {
		t.Fatal("no target Secret")
	}
	if err := s.CP.Client.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		again, ok := getSecret(t, s, "repair", name)
		return ok && again.UID != sec.UID, nil
	})
	if err != nil {
		t.Fatalf("the deleted Secret was not written again\nmanager log tail:\n%s\nESO log:\n%s", integration.Tail(s.ManagerLog, 20), integration.Tail(s.ESO.LogPath, 10))
	}
	waitTenant(t, s, "repair", "repairapp", metav1.ConditionTrue, "Ready", time.Minute)
	again, _ := getSecret(t, s, "repair", name)
	if err := loginWith(t, s, again); err != nil {
		t.Fatalf("the rewritten Secret does not log in: %v", err)
	}
}

// tcpProxy forwards a new 127.0.0.1 port to target (PostgreSQL negotiates
// TLS inside its protocol, so the certificate still verifies) until the
// test ends.
func tcpProxy(t *testing.T, target string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// Issue 10 §3: the Instance endpoint changes (here the port): the KV record
// gets a new version with the new port and the same password, ESO projects
// it, and the Tenant is Ready only once the Secret's connection fields match.
func TestTenantFollowsInstanceEndpoint(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	if err := s.CP.Client.Create(ctx, &databasev1alpha1.PostgreSQLInstance{ObjectMeta: metav1.ObjectMeta{Name: "moving"}, Spec: databasev1alpha1.PostgreSQLInstanceSpec{
		Endpoint:           databasev1alpha1.PostgreSQLEndpoint{Host: "localhost", HostAddr: "127.0.0.1", Port: int32(s.PG.Port)},
		AdminCredentialRef: databasev1alpha1.AdminCredentialReference{Name: "shared-admin"}}}); err != nil {
		t.Fatal(err)
	}
	tn := newTenant(t, s, "moving", "app", func(tn *databasev1alpha1.PostgreSQLTenant) {
		tn.Spec.InstanceRef = "moving"
		tn.Spec.Database, tn.Spec.LoginRole = "movingapp", "movingapp"
	})
	waitTenant(t, s, "moving", "app", metav1.ConditionTrue, "Ready", 2*time.Minute)
	pw, ver := kvPassword(t, s, "moving", "app")
	port := tcpProxy(t, fmt.Sprintf("127.0.0.1:%d", s.PG.Port))
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inst := &databasev1alpha1.PostgreSQLInstance{}
		if err := s.CP.Client.Get(ctx, types.NamespacedName{Name: "moving"}, inst); err != nil {
			return err
		}
		inst.Spec.Endpoint.Port = int32(port)
		return s.CP.Client.Update(ctx, inst)
	}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(port)
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		root, _ := s.Bao.Client(s.Bao.RootToken)
		sec, err := root.KVv2(integration.KVMount).Get(ctx, kvPath("moving", "app"))
		if err != nil || sec.Data["port"] != want {
			return false, nil
		}
		projected, ok := getSecret(t, s, "moving", "moving-app-postgresql")
		if !ok || string(projected.Data["port"]) != want {
			return false, nil
		}
		cur := &databasev1alpha1.PostgreSQLTenant{}
		if err := s.CP.Client.Get(ctx, client.ObjectKeyFromObject(tn), cur); err != nil {
			return false, nil
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == "Ready" && c.Status == metav1.ConditionTrue && c.ObservedGeneration == cur.Generation {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the KV record / Secret never followed the new port %s\nmanager log tail:\n%s", want, integration.Tail(s.ManagerLog, 25))
	}
	pw2, ver2 := kvPassword(t, s, "moving", "app")
	if pw2 != pw || ver2 != ver+1 {
		t.Fatalf("want the same password in version %d, got version %d (same password: %v)", ver+1, ver2, pw2 == pw)
	}
	if n := createdWrites(t, s, tn.UID); n != 1 {
		t.Fatalf("%d password-generating writes, want 1", n)
	}
	projected, _ := getSecret(t, s, "moving", "moving-app-postgresql")
	if err := loginWith(t, s, projected); err != nil {
		t.Fatalf("login through the new port with the projected Secret: %v", err)
	}
}

// The manager killed at RetainExternalSecret (before and after its
// outcome): after a restart the Tenant goes and its ExternalSecret is
// released (no owner reference to it, marked retained), the Secret kept.
func TestTenantRetainCrash(t *testing.T) {
	s := getStack(t)
	ctx := context.Background()
	ns(t, s, "retcrash")
	for i, point := range []string{"executor-before-outcome", "executor-after-outcome"} {
		name := fmt.Sprintf("retcrash%d", i)
		t.Run(point, func(t *testing.T) {
			tn := newTenant(t, s, "retcrash", name, nil)
			waitTenant(t, s, "retcrash", name, metav1.ConditionTrue, "Ready", 2*time.Minute)
			s.StopManager()
			if err := s.StartManagerEnv([]string{"AYATORI_FAILPOINTS=" + point + "=" + dbcontract.OpRetainExternalSecret}); err != nil {
				t.Fatal(err)
			}
			if err := s.CP.Client.Delete(ctx, tn); err != nil {
				t.Fatal(err)
			}
			if !s.WaitManagerExit(90 * time.Second) {
				t.Fatalf("the failpoint %s never fired", point)
			}
			if err := s.StartManager(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s, tn)
			es, ok := getES(t, s, "retcrash", "shared-"+name+"-postgresql")
			if !ok {
				t.Fatal("the retained ExternalSecret is gone")
			}
			for _, o := range es.GetOwnerReferences() {
				if o.UID == tn.UID {
					t.Fatal("the retained ExternalSecret still points at the deleted Tenant")
				}
			}
			if _, ok := getSecret(t, s, "retcrash", "shared-"+name+"-postgresql"); !ok {
				t.Fatal("the retained Secret is gone")
			}
		})
	}
}
