package externalsecrets_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/executors/externalsecrets"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The executor's own suite: every operation of Handlers() against a real
// kube-apiserver, a real External Secrets Operator and a real KV v2 store,
// called as the journal consumer calls it (an intent record decoded from
// its wire form; the outcome must make a valid outcome record).

const (
	// syncTimeout bounds how long ESO may take to project a Secret.
	syncTimeout = 45 * time.Second
	// apiFailed is the message prefix of every classified API failure.
	apiFailed = "the Kubernetes API request failed: "
)

// tenant is one PostgreSQLTenant as the projector names it. No Tenant
// object exists: the executor reads only the intent record.
type tenant struct {
	obj journal.ObjectRef
	in  dbcontract.ProjectionIntent
	// version is the last WriteCredential version (the payload of
	// EnsureExternalSecret and ObserveProjection).
	version int
	// owned are the ExternalSecrets earlier EnsureExternalSecret outcomes
	// reported (the payload of EnsureExternalSecret and
	// DeleteExternalSecret), collected as the projector collects them.
	owned []dbcontract.ESRef
}

// newNamespace creates a namespace of its own for one test.
func (e *env) newNamespace(t *testing.T) string {
	t.Helper()
	ns := "eso-" + string(uuid.NewUUID())[:8]
	if err := e.cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func newTenant(ns, name string) *tenant {
	kvPath := integration.TenantBasePath + "/" + ns + "/" + name
	return &tenant{
		obj: journal.ObjectRef{Group: databasev1alpha1.GroupVersion.Group, Kind: "PostgreSQLTenant", Namespace: ns, Name: name,
			UID: string(uuid.NewUUID()), Generation: 1},
		in: dbcontract.ProjectionIntent{ExternalSecret: dbcontract.ExternalSecretName("shared", name), TargetSecretName: name + "-credentials",
			StoreName: integration.StoreName, RemoteKey: kvPath, OwnerAPIVersion: databasev1alpha1.GroupVersion.String(), OwnerKind: "PostgreSQLTenant"},
	}
}

// payload is the intent payload of op, filled as the projector fills it.
func (tn *tenant) payload(op string) dbcontract.ProjectionIntent {
	in := tn.in
	if op == dbcontract.OpEnsureExternalSecret || op == dbcontract.OpObserveProjection {
		in.CredentialVersion = tn.version
	}
	if op == dbcontract.OpEnsureExternalSecret || op == dbcontract.OpDeleteExternalSecret {
		in.OwnedES = append([]dbcontract.ESRef(nil), tn.owned...)
	}
	return in
}

var attempts = map[string]int{}

// intent builds the next attempt's intent record of op for the Tenant.
func (tn *tenant) intent(t *testing.T, op string) journal.Record {
	t.Helper()
	key := tn.obj.UID + "/" + op
	attempts[key]++
	rec, err := journal.NewIntent(tn.obj, op, "", attempts[key], tn.payload(op))
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	return rec
}

// deliver hands rec to the executor as the journal consumer does: decoded
// from its wire form, a nil error (the executor records every outcome, it
// never asks for a redelivery), and an outcome that makes a valid record
// with the payload type registered for the operation.
func deliver(t *testing.T, ex *externalsecrets.Executor, rec journal.Record) journal.Outcome {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := journal.DecodeRecord(data, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := ex.Handlers()[wire.Operation]
	if h == nil {
		t.Fatalf("no handler for %s", wire.Operation)
	}
	out, err := h(context.Background(), wire)
	if err != nil {
		t.Fatalf("%s returned an error (a redelivery) instead of an outcome: %v", wire.Operation, err)
	}
	o, err := journal.NewOutcome(wire, out.Result, out.Payload)
	if err == nil {
		err = o.Validate()
	}
	if err != nil {
		t.Fatalf("%s: the outcome is not a valid record: %v", wire.Operation, err)
	}
	return out
}

// run delivers a fresh attempt of op and, for a successful
// EnsureExternalSecret, remembers the ExternalSecret as the projector does.
// transient runs op and fails t unless the attempt failed transiently (the
// consumer redelivers it, docs/decisions/0007) with reason
// DependencyUnavailable and message msg; it returns nothing: no outcome is
// recorded.
func (tn *tenant) transient(t *testing.T, ex *externalsecrets.Executor, op, msg string) {
	t.Helper()
	rec := tn.intent(t, op)
	out, err := ex.Handlers()[op](context.Background(), rec)
	var f *journal.Failure
	if !errors.As(err, &f) || !f.Transient || f.Reason != string(dbcontract.ReasonDependencyUnavailable) || f.Message != msg {
		t.Fatalf("%s: %+v %v, want a transient DependencyUnavailable %q", op, out.Result, err, msg)
	}
}

func (tn *tenant) run(t *testing.T, ex *externalsecrets.Executor, op string) journal.Outcome {
	t.Helper()
	out := deliver(t, ex, tn.intent(t, op))
	tn.remember(out)
	return out
}

func (tn *tenant) remember(out journal.Outcome) {
	if p, ok := out.Payload.(dbcontract.ProjectionOutcome); ok && out.Result.Class == journal.Succeeded && p.ES != nil && !slices.Contains(tn.owned, *p.ES) {
		tn.owned = append(tn.owned, *p.ES)
	}
}

// succeeded fails t unless out is Succeeded and returns its payload.
func succeeded(t *testing.T, what string, out journal.Outcome) dbcontract.ProjectionOutcome {
	t.Helper()
	if out.Result.Class != journal.Succeeded || out.Result.Reason != "" {
		t.Fatalf("%s: %s/%s %q, want Succeeded", what, out.Result.Class, out.Result.Reason, out.Result.Message)
	}
	p, _ := out.Payload.(dbcontract.ProjectionOutcome)
	if p.Skipped != out.Result.Message {
		t.Fatalf("%s: message %q but skipped %q", what, out.Result.Message, p.Skipped)
	}
	return p
}

// done fails t unless out is Succeeded with nothing skipped.
func done(t *testing.T, what string, out journal.Outcome) dbcontract.ProjectionOutcome {
	t.Helper()
	p := succeeded(t, what, out)
	if p.Skipped != "" {
		t.Fatalf("%s: skipped %q", what, p.Skipped)
	}
	return p
}

// skipped fails t unless out is Succeeded with a Skipped explanation
// containing msg.
func skipped(t *testing.T, what string, out journal.Outcome, msg string) {
	t.Helper()
	p := succeeded(t, what, out)
	if p.Skipped == "" || !strings.Contains(p.Skipped, msg) || p.ES != nil {
		t.Fatalf("%s: skipped %q (es %v), want a skip saying %q", what, p.Skipped, p.ES, msg)
	}
}

// failed fails t unless out is Failed with reason and a message containing msg.
func failed[R ~string](t *testing.T, what string, out journal.Outcome, reason R, msg string) {
	t.Helper()
	if out.Result.Class != journal.Failed || out.Result.Reason != string(reason) || !strings.Contains(out.Result.Message, msg) || out.Payload != nil {
		t.Fatalf("%s: %s/%s %q (payload %v), want Failed/%s saying %q", what, out.Result.Class, out.Result.Reason, out.Result.Message, out.Payload, reason, msg)
	}
}

// apiFailure fails t unless out is the classified API failure with the
// StatusReason word alone: nothing of the API server's own message.
func apiFailure(t *testing.T, what string, out journal.Outcome, statusReason metav1.StatusReason) {
	t.Helper()
	failed(t, what, out, dbcontract.ReasonDependencyUnavailable, apiFailed)
	if out.Result.Message != apiFailed+string(statusReason) {
		t.Fatalf("%s: message %q, want %q", what, out.Result.Message, apiFailed+string(statusReason))
	}
}

// putCredential writes the Tenant's seven-key KV record (host varies per
// version) and sets the Tenant's credential version.
func (e *env) putCredential(t *testing.T, tn *tenant, host string) {
	t.Helper()
	data := map[string]any{"username": tn.obj.Name, "password": "CANARY-pw-" + tn.obj.UID[:8], "database": tn.obj.Name,
		"host": host, "hostaddr": "127.0.0.1", "port": "5432", "sslmode": "verify-full"}
	s, err := e.kv.Put(context.Background(), tn.in.RemoteKey, data)
	if err != nil {
		t.Fatal(err)
	}
	tn.version = s.VersionMetadata.Version
}

// getES reads an ExternalSecret (nil when absent).
func (e *env) getES(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	if err := e.cp.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	return u
}

// getSecret reads a Secret (nil when absent). The test reads data to prove
// ESO projected the KV record; the executor never does.
func (e *env) getSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := e.cp.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	return s
}

// esState is what the executor writes on an ExternalSecret: metadata and
// spec, not the status ESO owns.
func esState(u *unstructured.Unstructured) string {
	if u == nil {
		return "absent"
	}
	owners, _ := json.Marshal(u.GetOwnerReferences())
	spec, _ := json.Marshal(u.Object["spec"])
	labels, _ := json.Marshal(u.GetLabels())
	ann, _ := json.Marshal(u.GetAnnotations())
	return fmt.Sprintf("uid=%s labels=%s annotations=%s owners=%s spec=%s", u.GetUID(), labels, ann, owners, spec)
}

// state is the Tenant's ExternalSecret and target Secret down to their
// resourceVersions: equal states mean nothing was written in between.
func (e *env) state(t *testing.T, tn *tenant) string {
	t.Helper()
	es, s := e.getES(t, tn.obj.Namespace, tn.in.ExternalSecret), e.getSecret(t, tn.obj.Namespace, tn.in.TargetSecretName)
	out := "es=absent"
	if es != nil {
		out = "es=" + esState(es) + " rv=" + es.GetResourceVersion()
	}
	if s == nil {
		return out + " secret=absent"
	}
	return out + fmt.Sprintf(" secret=%s rv=%s", s.UID, s.ResourceVersion)
}

// waitSynced runs ObserveProjection until it succeeds: ESO projected the
// Tenant's current credential version.
func (e *env) waitSynced(t *testing.T, ex *externalsecrets.Executor, tn *tenant) {
	t.Helper()
	deadline := time.Now().Add(syncTimeout)
	for {
		out := tn.run(t, ex, dbcontract.OpObserveProjection)
		if out.Result.Class == journal.Succeeded {
			return
		}
		failed(t, "ObserveProjection while waiting", out, dbcontract.ReasonCredentialProjectionFailed, "")
		if time.Now().After(deadline) {
			t.Fatalf("ESO never projected %s/%s: %s\nESO log:\n%s", tn.obj.Namespace, tn.in.TargetSecretName, out.Result.Message, integration.Tail(e.eso.LogPath, 30))
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// waitSecret waits until the Tenant's target Secret satisfies ok.
func (e *env) waitSecret(t *testing.T, tn *tenant, what string, ok func(*corev1.Secret) bool) {
	t.Helper()
	deadline := time.Now().Add(syncTimeout)
	for {
		s := e.getSecret(t, tn.obj.Namespace, tn.in.TargetSecretName)
		if s != nil && ok(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target Secret %s/%s never had %s\nESO log:\n%s", tn.obj.Namespace, tn.in.TargetSecretName, what, integration.Tail(e.eso.LogPath, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settle waits until ESO wrote what it writes after a change: the Tenant's
// objects stay the same for a while.
func (e *env) settle(t *testing.T, tn *tenant) {
	t.Helper()
	deadline := time.Now().Add(syncTimeout)
	last := e.state(t, tn)
	for {
		time.Sleep(300 * time.Millisecond)
		cur := e.state(t, tn)
		if cur == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ESO kept writing %s/%s", tn.obj.Namespace, tn.in.ExternalSecret)
		}
		last = cur
	}
}

// synced sets up a Tenant whose ExternalSecret exists and whose Secret ESO
// projected from credential version 1.
func (e *env) synced(t *testing.T, ex *externalsecrets.Executor, ns, name string) *tenant {
	t.Helper()
	tn := newTenant(ns, name)
	e.putCredential(t, tn, "db.example")
	done(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
	e.waitSynced(t, ex, tn)
	return tn
}

// executor returns an executor with the admin client (the API server,
// no cache).
func (e *env) executor() *externalsecrets.Executor {
	return &externalsecrets.Executor{Client: e.cp.Client, Timeout: 20 * time.Second}
}

// createES creates an ExternalSecret that is not written by the executor
// (another Tenant's, a retained one, a hand-made one).
func (e *env) createES(t *testing.T, ns, name, target, remoteKey string, owners []metav1.OwnerReference, ann map[string]string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetOwnerReferences(owners)
	u.SetAnnotations(ann)
	u.Object["spec"] = map[string]any{
		"refreshInterval": "1h",
		"secretStoreRef":  map[string]any{"kind": "ClusterSecretStore", "name": integration.StoreName},
		"target":          map[string]any{"name": target, "creationPolicy": "Owner", "deletionPolicy": "Retain"},
		"data":            []any{map[string]any{"secretKey": "username", "remoteRef": map[string]any{"key": remoteKey, "property": "username"}}},
	}
	if err := e.cp.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// updateES changes an ExternalSecret as another writer would (retried
// when ESO wrote its status meanwhile).
func (e *env) updateES(t *testing.T, ns, name string, mutate func(*unstructured.Unstructured)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		es := e.getES(t, ns, name)
		mutate(es)
		return e.cp.Client.Update(context.Background(), es)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// createSecret creates a Secret the executor did not produce.
func (e *env) createSecret(t *testing.T, ns, name string, owners []metav1.OwnerReference) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: owners},
		Data: map[string][]byte{"token": []byte("foreign-" + name)}}
	if err := e.cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// tenantOwner is the owner reference of another Tenant.
func tenantOwner(name, uid string) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{APIVersion: databasev1alpha1.GroupVersion.String(), Kind: "PostgreSQLTenant", Name: name, UID: types.UID(uid), Controller: &t}}
}

// secretUnchanged fails t unless the Secret is still there with the same
// owners and data: neither deleted nor adopted. (ESO may add its
// reconcile.external-secrets.io/managed label to a Secret of a target
// name it watches, even one it cannot write; the executor never writes a
// Secret.)
func (e *env) secretUnchanged(t *testing.T, want *corev1.Secret, when string) {
	t.Helper()
	got := e.getSecret(t, want.Namespace, want.Name)
	if got == nil || got.UID != want.UID || !equalJSON(got.OwnerReferences, want.OwnerReferences) || !equalJSON(got.Data, want.Data) {
		b, _ := json.Marshal(got)
		t.Fatalf("%s: Secret %s/%s was deleted, adopted or written: %s", when, want.Namespace, want.Name, b)
	}
}

// esUnchanged fails t unless the ExternalSecret is still there with the
// metadata and spec it had.
func (e *env) esUnchanged(t *testing.T, want *unstructured.Unstructured, when string) {
	t.Helper()
	if got := esState(e.getES(t, want.GetNamespace(), want.GetName())); got != esState(want) {
		t.Fatalf("%s: ExternalSecret %s/%s changed:\n got %s\nwant %s", when, want.GetNamespace(), want.GetName(), got, esState(want))
	}
}

// racingReader reads from the API server and, once, right after the
// executor's first read of an object of kind, runs race: another writer
// acting between the executor's read and its write.
type racingReader struct {
	client.Reader
	kind   string
	race   func()
	ran    bool
	always bool // race after every read, not only the first
}

func (r *racingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	err := r.Reader.Get(ctx, key, obj, opts...)
	if (!r.ran || r.always) && kind == r.kind {
		r.ran = true
		r.race()
	}
	return err
}

func (e *env) racing(kind string, race func()) *externalsecrets.Executor {
	ex := e.executor()
	ex.Reader = &racingReader{Reader: e.cp.Client, kind: kind, race: race}
	return ex
}

// racingAlways is racing with a concurrent write after every read.
func (e *env) racingAlways(kind string, race func()) *externalsecrets.Executor {
	ex := e.executor()
	ex.Reader = &racingReader{Reader: e.cp.Client, kind: kind, race: race, always: true}
	return ex
}

// TestEnsureCreatesTheContractExternalSecret: the ExternalSecret has the
// owner reference, labels, annotations and spec the contract says, and
// the real ESO projects the real KV record through it.
func TestEnsureCreatesTheContractExternalSecret(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)
	tn := newTenant(ns, "shop")
	e.putCredential(t, tn, "db.example")
	rec := tn.intent(t, dbcontract.OpEnsureExternalSecret)
	out := deliver(t, ex, rec)
	tn.remember(out)
	p := done(t, "EnsureExternalSecret", out)
	es := e.getES(t, ns, tn.in.ExternalSecret)
	if es == nil {
		t.Fatal("no ExternalSecret")
	}
	if p.ES == nil || *p.ES != dbcontract.RefOf(es) || p.ES.UID == "" {
		t.Fatalf("outcome ES %v, want %v", p.ES, dbcontract.RefOf(es))
	}
	if got := es.GetLabels(); len(got) != 2 || got[externalsecrets.LabelManagedBy] != "ayatori" || got[externalsecrets.LabelTenant] != "shop" {
		t.Errorf("labels %v", got)
	}
	if got := es.GetAnnotations(); len(got) != 3 || got[externalsecrets.AnnotationTenant] != ns+"/shop" || got[externalsecrets.AnnotationCredentialVersion] != "1" ||
		got[externalsecrets.AnnotationResync] != rec.ID {
		t.Errorf("annotations %v", got)
	}
	owners := es.GetOwnerReferences()
	if len(owners) != 1 {
		t.Fatalf("owner references %v", owners)
	}
	o := owners[0]
	if o.APIVersion != "database.ayatori.ddupan.top/v1alpha1" || o.Kind != "PostgreSQLTenant" || o.Name != "shop" || string(o.UID) != tn.obj.UID ||
		o.Controller == nil || !*o.Controller || o.BlockOwnerDeletion == nil || !*o.BlockOwnerDeletion {
		t.Errorf("owner reference %+v", o)
	}
	spec, _ := es.Object["spec"].(map[string]any)
	target, _ := spec["target"].(map[string]any)
	if target["name"] != tn.in.TargetSecretName || target["creationPolicy"] != "Owner" || target["deletionPolicy"] != "Retain" {
		t.Errorf("target %v", target)
	}
	if store, _ := spec["secretStoreRef"].(map[string]any); store["kind"] != "ClusterSecretStore" || store["name"] != integration.StoreName {
		t.Errorf("secretStoreRef %v", store)
	}
	if spec["refreshInterval"] != "1h" {
		t.Errorf("refreshInterval %v", spec["refreshInterval"])
	}
	data, _ := spec["data"].([]any)
	var keys []string
	for _, d := range data {
		m, _ := d.(map[string]any)
		ref, _ := m["remoteRef"].(map[string]any)
		if ref["key"] != tn.in.RemoteKey || ref["property"] != m["secretKey"] {
			t.Errorf("data entry %v", m)
		}
		keys = append(keys, fmt.Sprint(m["secretKey"]))
	}
	if !slices.Equal(keys, dbcontract.Keys) {
		t.Errorf("data keys %v, want %v", keys, dbcontract.Keys)
	}
	if _, ok := spec["dataFrom"]; ok || len(spec) != 4 {
		t.Errorf("spec has other fields: %v", spec)
	}

	e.waitSynced(t, ex, tn)
	s := e.getSecret(t, ns, tn.in.TargetSecretName)
	if s == nil {
		t.Fatal("ObserveProjection succeeded without a target Secret")
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "ExternalSecret" || s.OwnerReferences[0].UID != es.GetUID() {
		t.Errorf("target Secret owners %v", s.OwnerReferences)
	}
	if s.Annotations[externalsecrets.AnnotationCredentialVersion] != "1" {
		t.Errorf("target Secret annotations %v", s.Annotations)
	}
	for _, k := range dbcontract.Keys {
		if len(s.Data[k]) == 0 {
			t.Errorf("target Secret has no %s", k)
		}
	}
	if string(s.Data["host"]) != "db.example" || string(s.Data["username"]) != "shop" {
		t.Errorf("target Secret was not projected from the KV record (host %q)", s.Data["host"])
	}

	// A Tenant name that is no valid label value gets the shortened form.
	long := newTenant(ns, strings.Repeat("l", 70))
	done(t, "EnsureExternalSecret (long name)", long.run(t, ex, dbcontract.OpEnsureExternalSecret))
	les := e.getES(t, ns, long.in.ExternalSecret)
	if got := les.GetLabels()[externalsecrets.LabelTenant]; got != dbcontract.LabelValue(long.obj.Name) || len(got) > 63 {
		t.Errorf("label of a long Tenant name: %q", got)
	}
	if got := les.GetAnnotations()[externalsecrets.AnnotationTenant]; got != ns+"/"+long.obj.Name {
		t.Errorf("annotation of a long Tenant name: %q", got)
	}
	if _, ok := les.GetAnnotations()[externalsecrets.AnnotationCredentialVersion]; ok {
		t.Error("a credential-version annotation without a credential version")
	}
}

// TestOperationsIdempotent: each operation delivered twice (the same
// intent record, as a redelivery) gives the same outcome and writes
// nothing the second time.
func TestOperationsIdempotent(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)

	tn := newTenant(ns, "twice")
	e.putCredential(t, tn, "db.example")
	rec := tn.intent(t, dbcontract.OpEnsureExternalSecret)
	first := deliver(t, ex, rec)
	tn.remember(first)
	p1 := done(t, "EnsureExternalSecret", first)
	es1 := esState(e.getES(t, ns, tn.in.ExternalSecret))
	p2 := done(t, "EnsureExternalSecret (redelivered)", deliver(t, ex, rec))
	if *p1.ES != *p2.ES {
		t.Fatalf("EnsureExternalSecret: ES %v, then %v", *p1.ES, *p2.ES)
	}
	if es2 := esState(e.getES(t, ns, tn.in.ExternalSecret)); es2 != es1 {
		t.Fatalf("the redelivered EnsureExternalSecret changed the ExternalSecret:\n%s\n%s", es1, es2)
	}
	e.waitSynced(t, ex, tn)

	// Settled: every operation twice, nothing written by the second run.
	for _, op := range []string{dbcontract.OpEnsureExternalSecret, dbcontract.OpObserveProjection} {
		rec := tn.intent(t, op)
		before := e.state(t, tn)
		o1 := deliver(t, ex, rec)
		mid := e.state(t, tn)
		o2 := deliver(t, ex, rec)
		after := e.state(t, tn)
		done(t, op, o1)
		done(t, op+" (redelivered)", o2)
		if !equalJSON(o1, o2) {
			t.Fatalf("%s: %+v, then %+v", op, o1, o2)
		}
		if before != mid || mid != after {
			t.Fatalf("%s on a projected Secret wrote something:\n%s\n%s\n%s", op, before, mid, after)
		}
	}
	rec = tn.intent(t, dbcontract.OpDeleteExternalSecret)
	done(t, "DeleteExternalSecret", deliver(t, ex, rec))
	if st := e.state(t, tn); st != "es=absent secret=absent" {
		t.Fatalf("after DeleteExternalSecret: %s", st)
	}
	done(t, "DeleteExternalSecret (redelivered)", deliver(t, ex, rec))
	if st := e.state(t, tn); st != "es=absent secret=absent" {
		t.Fatalf("after the redelivered DeleteExternalSecret: %s", st)
	}

	rt := e.synced(t, ex, ns, "kept")
	rec = rt.intent(t, dbcontract.OpRetainExternalSecret)
	done(t, "RetainExternalSecret", deliver(t, ex, rec))
	before := e.state(t, rt)
	done(t, "RetainExternalSecret (redelivered)", deliver(t, ex, rec))
	if after := e.state(t, rt); after != before {
		t.Fatalf("the redelivered RetainExternalSecret wrote something:\n%s\n%s", before, after)
	}
}

// TestEnsureFollowsCredentialVersion: a new credential version updates the
// same ExternalSecret; ObserveProjection succeeds only once ESO projected
// that version from the real KV record.
func TestEnsureFollowsCredentialVersion(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)
	tn := e.synced(t, ex, ns, "moves")
	es1 := e.getES(t, ns, tn.in.ExternalSecret)
	s1 := e.getSecret(t, ns, tn.in.TargetSecretName)

	e.putCredential(t, tn, "db2.example")
	if tn.version != 2 {
		t.Fatalf("KV version %d", tn.version)
	}
	// The Secret still carries version 1: not yet projected.
	failed(t, "ObserveProjection before EnsureExternalSecret", tn.run(t, ex, dbcontract.OpObserveProjection),
		dbcontract.ReasonCredentialProjectionFailed, `was not yet written from credential version 2 (it has "1")`)

	p := done(t, "EnsureExternalSecret (version 2)", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
	es2 := e.getES(t, ns, tn.in.ExternalSecret)
	if p.ES == nil || p.ES.UID != string(es1.GetUID()) || es2.GetUID() != es1.GetUID() {
		t.Fatalf("a new ExternalSecret (%v) instead of an update of %s", p.ES, es1.GetUID())
	}
	if got := es2.GetAnnotations()[externalsecrets.AnnotationCredentialVersion]; got != "2" {
		t.Fatalf("credential-version annotation %q", got)
	}
	if es2.GetResourceVersion() == es1.GetResourceVersion() {
		t.Fatal("the ExternalSecret was not updated")
	}
	if !equalJSON(es1.Object["spec"], es2.Object["spec"]) {
		t.Fatalf("the spec changed: %v -> %v", es1.Object["spec"], es2.Object["spec"])
	}
	e.waitSynced(t, ex, tn)
	s2 := e.getSecret(t, ns, tn.in.TargetSecretName)
	if s2.UID != s1.UID || string(s2.Data["host"]) != "db2.example" || s2.Annotations[externalsecrets.AnnotationCredentialVersion] != "2" {
		t.Fatalf("target Secret after version 2: uid %s (was %s), host %q, annotations %v", s2.UID, s1.UID, s2.Data["host"], s2.Annotations)
	}
}

// TestObserveReportsProjection: ObserveProjection fails with
// CredentialProjectionFailed until ESO projected the Secret, and says why.
func TestObserveReportsProjection(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)

	t.Run("no ExternalSecret", func(t *testing.T) {
		tn := newTenant(ns, "none")
		failed(t, "ObserveProjection", tn.run(t, ex, dbcontract.OpObserveProjection),
			dbcontract.ReasonCredentialProjectionFailed, "the ExternalSecret does not exist")
	})

	t.Run("KV record missing, then written", func(t *testing.T) {
		tn := newTenant(ns, "late")
		tn.version = 1
		done(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
		// ESO cannot read the record: Ready goes False, no Secret.
		deadline := time.Now().Add(syncTimeout)
		for {
			out := tn.run(t, ex, dbcontract.OpObserveProjection)
			failed(t, "ObserveProjection", out, dbcontract.ReasonCredentialProjectionFailed, "waiting for ESO to sync ExternalSecret "+tn.in.ExternalSecret+" (Ready=")
			if strings.Contains(out.Result.Message, "(Ready=False") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ESO never reported the missing record: %s", out.Result.Message)
			}
			time.Sleep(150 * time.Millisecond)
		}
		if s := e.getSecret(t, ns, tn.in.TargetSecretName); s != nil {
			t.Fatal("a target Secret without a KV record")
		}
		e.putCredential(t, tn, "db.example")
		// The Secret is missing: EnsureExternalSecret pokes ESO (resync
		// annotation) so it reads the record now, not after its back-off.
		rec := tn.intent(t, dbcontract.OpEnsureExternalSecret)
		done(t, "EnsureExternalSecret", deliver(t, ex, rec))
		if got := e.getES(t, ns, tn.in.ExternalSecret).GetAnnotations()[externalsecrets.AnnotationResync]; got != rec.ID {
			t.Fatalf("resync annotation %q, want %q", got, rec.ID)
		}
		e.waitSynced(t, ex, tn)
	})

	t.Run("ExternalSecret Ready, target Secret absent", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "ready")
		// An intent naming a Secret ESO has not written (the Ready
		// ExternalSecret projects another one).
		tn.in.TargetSecretName = "ready-elsewhere"
		failed(t, "ObserveProjection", tn.run(t, ex, dbcontract.OpObserveProjection),
			dbcontract.ReasonCredentialProjectionFailed, "the target Secret ready-elsewhere does not exist yet")
	})
}

// TestEnsureRefusesForeignTarget: an ExternalSecret or target Secret that
// is not this Tenant's is a Conflict and nothing is written.
func TestEnsureRefusesForeignTarget(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)

	t.Run("ExternalSecret of another Tenant", func(t *testing.T) {
		tn := newTenant(ns, "es-other")
		e.putCredential(t, tn, "db.example")
		other := string(uuid.NewUUID())
		es := e.createES(t, ns, tn.in.ExternalSecret, "other-target", "nowhere", tenantOwner("es-other", other), nil)
		failed(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict,
			fmt.Sprintf("ExternalSecret %s/%s exists and is not owned by this Tenant (owned by PostgreSQLTenant es-other uid %s)", ns, tn.in.ExternalSecret, other))
		e.esUnchanged(t, es, "after EnsureExternalSecret")
	})

	t.Run("ExternalSecret retained from an earlier Tenant", func(t *testing.T) {
		tn := newTenant(ns, "es-retained")
		retained := ns + "/es-retained uid " + string(uuid.NewUUID())
		es := e.createES(t, ns, tn.in.ExternalSecret, tn.in.TargetSecretName, "nowhere", nil, map[string]string{externalsecrets.AnnotationRetained: retained})
		failed(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict,
			"is not owned by this Tenant (retained from Tenant "+retained+")")
		e.esUnchanged(t, es, "after EnsureExternalSecret")
	})

	t.Run("Secret with no owner", func(t *testing.T) {
		tn := newTenant(ns, "s-plain")
		s := e.createSecret(t, ns, tn.in.TargetSecretName, nil)
		failed(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict,
			fmt.Sprintf("Secret %s/%s exists and was not produced by this Tenant's ExternalSecret (no owner)", ns, tn.in.TargetSecretName))
		if e.getES(t, ns, tn.in.ExternalSecret) != nil {
			t.Fatal("an ExternalSecret was created next to a foreign Secret")
		}
		e.secretUnchanged(t, s, "after EnsureExternalSecret")
	})

	t.Run("Secret of another ExternalSecret of the same name", func(t *testing.T) {
		tn := newTenant(ns, "s-other")
		yes := true
		s := e.createSecret(t, ns, tn.in.TargetSecretName, []metav1.OwnerReference{{APIVersion: "external-secrets.io/v1", Kind: "ExternalSecret",
			Name: tn.in.ExternalSecret, UID: uuid.NewUUID(), Controller: &yes}})
		failed(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict, "was not produced by this Tenant's ExternalSecret")
		if e.getES(t, ns, tn.in.ExternalSecret) != nil {
			t.Fatal("an ExternalSecret was created next to a foreign Secret")
		}
		e.secretUnchanged(t, s, "after EnsureExternalSecret")
	})
}

// TestAdoptedSecret: a Secret created by someone else between the
// executor's check and its create is older than the ExternalSecret; ESO
// adopts it, but it is never this Tenant's: EnsureExternalSecret reports a
// Conflict and DeleteExternalSecret leaves it in place.
func TestAdoptedSecret(t *testing.T) {
	e := getEnv(t)
	ns := e.newNamespace(t)
	tn := newTenant(ns, "adopted")
	e.putCredential(t, tn, "db.example")
	var foreign *corev1.Secret
	ex := e.racing("Secret", func() {
		foreign = e.createSecret(t, ns, tn.in.TargetSecretName, nil)
		// Creation times have a resolution of one second.
		time.Sleep(time.Until(foreign.CreationTimestamp.Add(time.Second)) + 50*time.Millisecond)
	})
	done(t, "EnsureExternalSecret (racing)", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
	es := e.getES(t, ns, tn.in.ExternalSecret)
	e.waitSecret(t, tn, "ESO's adoption", func(s *corev1.Secret) bool {
		return s.UID == foreign.UID && len(s.OwnerReferences) == 1 && s.OwnerReferences[0].UID == es.GetUID()
	})
	ex = e.executor()
	failed(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict,
		fmt.Sprintf("Secret %s/%s exists and was not produced by this Tenant's ExternalSecret (owned by ExternalSecret %s uid %s)", ns, tn.in.TargetSecretName, tn.in.ExternalSecret, es.GetUID()))
	adopted := e.getSecret(t, ns, tn.in.TargetSecretName)
	skipped(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret), "was not produced by this Tenant's ExternalSecret")
	if e.getES(t, ns, tn.in.ExternalSecret) != nil {
		t.Fatal("DeleteExternalSecret left the Tenant's ExternalSecret")
	}
	e.secretUnchanged(t, adopted, "after DeleteExternalSecret")
}

// TestDeleteOwnership: DeleteExternalSecret deletes only what this Tenant
// produced and succeeds when it is already gone.
func TestDeleteOwnership(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)

	t.Run("nothing there", func(t *testing.T) {
		tn := newTenant(ns, "gone")
		done(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret))
		done(t, "DeleteExternalSecret again", tn.run(t, ex, dbcontract.OpDeleteExternalSecret))
	})

	t.Run("ExternalSecret and Secret of another Tenant", func(t *testing.T) {
		owner := e.synced(t, ex, ns, "holder")
		es := e.getES(t, ns, owner.in.ExternalSecret)
		s := e.getSecret(t, ns, owner.in.TargetSecretName)
		tn := newTenant(ns, "holder") // same name, another UID (deleted and recreated)
		skipped(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret),
			fmt.Sprintf("ExternalSecret %s/%s is not owned by this Tenant (owned by PostgreSQLTenant holder uid %s); it and its target Secret were left in place", ns, owner.in.ExternalSecret, owner.obj.UID))
		e.esUnchanged(t, es, "after DeleteExternalSecret")
		e.secretUnchanged(t, s, "after DeleteExternalSecret")
	})

	t.Run("Secret of an earlier ExternalSecret of the Tenant", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "earlier")
		// The ExternalSecret was deleted (no garbage collector here): its
		// Secret stays, produced by an ExternalSecret the journal knows.
		if err := e.cp.Client.Delete(context.Background(), e.getES(t, ns, tn.in.ExternalSecret)); err != nil {
			t.Fatal(err)
		}
		s := e.getSecret(t, ns, tn.in.TargetSecretName)
		owned := tn.owned
		tn.owned = nil
		skipped(t, "DeleteExternalSecret without the journal's ExternalSecrets", tn.run(t, ex, dbcontract.OpDeleteExternalSecret),
			fmt.Sprintf("Secret %s/%s was not produced by this Tenant's ExternalSecret (owned by ExternalSecret %s uid %s); left in place", ns, tn.in.TargetSecretName, tn.in.ExternalSecret, owned[0].UID))
		e.secretUnchanged(t, s, "after DeleteExternalSecret")
		tn.owned = owned
		done(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret))
		if e.getSecret(t, ns, tn.in.TargetSecretName) != nil {
			t.Fatal("the Secret the Tenant produced was not deleted")
		}
	})

	t.Run("Secret with no owner next to the Tenant's ExternalSecret", func(t *testing.T) {
		tn := newTenant(ns, "beside")
		tn.version = 1 // no KV record: ESO never writes the Secret
		done(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
		s := e.createSecret(t, ns, tn.in.TargetSecretName, nil)
		skipped(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret), "(no owner); left in place")
		if e.getES(t, ns, tn.in.ExternalSecret) != nil {
			t.Fatal("the Tenant's ExternalSecret was not deleted")
		}
		e.secretUnchanged(t, s, "after DeleteExternalSecret")
	})
}

// TestDeleteUIDPrecondition: an object replaced under the same name
// between the executor's read and its delete is not deleted.
func TestDeleteUIDPrecondition(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)
	ctx := context.Background()

	t.Run("ExternalSecret replaced", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "swap-es")
		s := e.getSecret(t, ns, tn.in.TargetSecretName)
		var other *unstructured.Unstructured
		racing := e.racing("ExternalSecret", func() {
			if err := e.cp.Client.Delete(ctx, e.getES(t, ns, tn.in.ExternalSecret)); err != nil {
				t.Error(err)
			}
			other = e.createES(t, ns, tn.in.ExternalSecret, "swap-es-other", "nowhere", tenantOwner("swap-es", string(uuid.NewUUID())), nil)
		})
		// The UID precondition makes the delete conflict; the operation
		// reads again and finds the new ExternalSecret: not this Tenant's.
		skipped(t, "DeleteExternalSecret (racing)", tn.run(t, racing, dbcontract.OpDeleteExternalSecret), "is not owned by this Tenant")
		e.esUnchanged(t, other, "after DeleteExternalSecret")
		e.secretUnchanged(t, s, "after DeleteExternalSecret")
		skipped(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret), "is not owned by this Tenant")
		e.esUnchanged(t, other, "after DeleteExternalSecret")
	})

	t.Run("Secret replaced", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "swap-s")
		var foreign *corev1.Secret
		racing := e.racing("Secret", func() {
			if err := e.cp.Client.Delete(ctx, e.getSecret(t, ns, tn.in.TargetSecretName)); err != nil {
				t.Error(err)
			}
			foreign = e.createSecret(t, ns, tn.in.TargetSecretName, nil)
		})
		// The Secret's UID precondition conflicts; read again, the new
		// Secret is not this Tenant's ExternalSecret's.
		skipped(t, "DeleteExternalSecret (racing)", tn.run(t, racing, dbcontract.OpDeleteExternalSecret), "(no owner); left in place")
		if e.getES(t, ns, tn.in.ExternalSecret) != nil {
			t.Fatal("the Tenant's ExternalSecret was not deleted")
		}
		e.secretUnchanged(t, foreign, "after DeleteExternalSecret")
		skipped(t, "DeleteExternalSecret", tn.run(t, ex, dbcontract.OpDeleteExternalSecret), "(no owner); left in place")
		e.secretUnchanged(t, foreign, "after DeleteExternalSecret")
	})

	t.Run("ExternalSecret deleted meanwhile", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "vanish")
		racing := e.racing("ExternalSecret", func() {
			if err := e.cp.Client.Delete(ctx, e.getES(t, ns, tn.in.ExternalSecret)); err != nil {
				t.Error(err)
			}
		})
		done(t, "DeleteExternalSecret (racing)", tn.run(t, racing, dbcontract.OpDeleteExternalSecret))
		if st := e.state(t, tn); st != "es=absent secret=absent" {
			t.Fatalf("after DeleteExternalSecret: %s", st)
		}
	})
}

// TestRetainReleasesOwnership: RetainExternalSecret removes the Tenant's
// owner reference and marks the ExternalSecret retained; the Tenant no
// longer manages it.
func TestRetainReleasesOwnership(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)

	tn := e.synced(t, ex, ns, "keep")
	// Another owner the executor must keep.
	extra := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "holder", UID: uuid.NewUUID(), Controller: &[]bool{false}[0]}
	e.updateES(t, ns, tn.in.ExternalSecret, func(es *unstructured.Unstructured) {
		es.SetOwnerReferences(append(es.GetOwnerReferences(), extra))
	})
	es := e.getES(t, ns, tn.in.ExternalSecret)
	s := e.getSecret(t, ns, tn.in.TargetSecretName)
	done(t, "RetainExternalSecret", tn.run(t, ex, dbcontract.OpRetainExternalSecret))
	got := e.getES(t, ns, tn.in.ExternalSecret)
	if got == nil || got.GetUID() != es.GetUID() {
		t.Fatal("the ExternalSecret is gone")
	}
	if owners := got.GetOwnerReferences(); len(owners) != 1 || owners[0].UID != extra.UID {
		t.Fatalf("owner references after retain: %v", owners)
	}
	want := ns + "/keep uid " + tn.obj.UID
	if got.GetAnnotations()[externalsecrets.AnnotationRetained] != want {
		t.Fatalf("retained-from annotation %q, want %q", got.GetAnnotations()[externalsecrets.AnnotationRetained], want)
	}
	// The ExternalSecret keeps projecting: ESO copies the annotation to
	// the Secret it keeps.
	e.waitSecret(t, tn, "the retained-from annotation", func(s *corev1.Secret) bool {
		return s.Annotations[externalsecrets.AnnotationRetained] == want
	})
	e.settle(t, tn) // ESO writes the ExternalSecret's status after the Secret
	if !equalJSON(got.Object["spec"], es.Object["spec"]) {
		t.Fatal("the spec changed")
	}
	if cur := e.getSecret(t, ns, tn.in.TargetSecretName); cur == nil || cur.UID != s.UID || string(cur.Data["password"]) != string(s.Data["password"]) {
		t.Fatal("the application's Secret is gone or changed")
	}
	before := e.state(t, tn)
	done(t, "RetainExternalSecret again", tn.run(t, ex, dbcontract.OpRetainExternalSecret))
	if after := e.state(t, tn); after != before {
		t.Fatalf("a second RetainExternalSecret wrote something:\n%s\n%s", before, after)
	}
	// Released: the Tenant can neither manage nor delete it any more.
	failed(t, "EnsureExternalSecret after retain", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict,
		"is not owned by this Tenant (retained from Tenant "+ns+"/keep uid "+tn.obj.UID+")")
	skipped(t, "DeleteExternalSecret after retain", tn.run(t, ex, dbcontract.OpDeleteExternalSecret), "retained from Tenant")
	if after := e.state(t, tn); after != before {
		t.Fatalf("EnsureExternalSecret or DeleteExternalSecret touched the retained ExternalSecret:\n%s\n%s", before, after)
	}

	t.Run("absent", func(t *testing.T) {
		done(t, "RetainExternalSecret", newTenant(ns, "absent").run(t, ex, dbcontract.OpRetainExternalSecret))
	})
	t.Run("another Tenant's", func(t *testing.T) {
		other := newTenant(ns, "keep") // same name, another UID
		skipped(t, "RetainExternalSecret", other.run(t, ex, dbcontract.OpRetainExternalSecret), "is not owned by this Tenant (retained from Tenant "+ns+"/keep uid "+tn.obj.UID+"); left as it is")
		owned := e.synced(t, ex, ns, "owned")
		oes := e.getES(t, ns, owned.in.ExternalSecret)
		thief := newTenant(ns, "owned")
		skipped(t, "RetainExternalSecret", thief.run(t, ex, dbcontract.OpRetainExternalSecret), "is not owned by this Tenant (owned by PostgreSQLTenant owned uid "+owned.obj.UID+")")
		e.esUnchanged(t, oes, "after RetainExternalSecret")
	})
}

// TestFailureReasons: every failure the executor maps through classify
// reaches the contract's reason; API failures carry the StatusReason word
// and nothing of the API server's message.
func TestFailureReasons(t *testing.T) {
	e := getEnv(t)
	ex := e.executor()
	ns := e.newNamespace(t)
	ctx := context.Background()

	t.Run("undecodable payload", func(t *testing.T) {
		tn := newTenant(ns, "garbage")
		rec := tn.intent(t, dbcontract.OpEnsureExternalSecret)
		rec.Payload = json.RawMessage(`{"externalSecret": 7}`)
		failed(t, "EnsureExternalSecret", deliver(t, ex, rec), journal.ReasonUndecodableIntent, "the EnsureExternalSecret payload can not be decoded")
		tn.in = dbcontract.ProjectionIntent{}
		for _, op := range dbcontract.ExternalSecretsOperations {
			failed(t, op, tn.run(t, ex, op), journal.ReasonUndecodableIntent, "the "+op+" payload can not be decoded")
		}
	})

	t.Run("Forbidden", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "guarded")
		before := e.state(t, tn)
		nobody := e.executorAs(t, "nobody")
		for _, op := range dbcontract.ExternalSecretsOperations {
			apiFailure(t, op+" as a user with no rights", tn.run(t, nobody, op), metav1.StatusReasonForbidden)
		}
		// Read rights only: ObserveProjection works, every write is refused.
		e.grantRead(t, ns, "reader")
		reader := e.executorAs(t, "reader")
		done(t, "ObserveProjection as a reader", tn.run(t, reader, dbcontract.OpObserveProjection))
		for _, op := range []string{dbcontract.OpEnsureExternalSecret, dbcontract.OpDeleteExternalSecret, dbcontract.OpRetainExternalSecret} {
			apiFailure(t, op+" as a reader", tn.run(t, reader, op), metav1.StatusReasonForbidden)
		}
		if after := e.state(t, tn); after != before {
			t.Fatalf("a refused operation wrote something:\n%s\n%s", before, after)
		}
	})

	t.Run("reader ServiceAccount missing and not creatable", func(t *testing.T) {
		// ESO can not log in for a namespace without its reader
		// ServiceAccount: the failure names it, and no ExternalSecret is
		// created without it.
		ns := e.newNamespace(t)
		tn := newTenant(ns, "nosa")
		e.putCredential(t, tn, "localhost")
		e.grantRead(t, ns, "nosa-reader")
		out := tn.run(t, e.executorAs(t, "nosa-reader"), dbcontract.OpEnsureExternalSecret)
		want := "the ServiceAccount " + ns + "/" + dbcontract.ReaderServiceAccount + " (ESO's OpenBao login for this namespace) is missing and could not be created: Forbidden"
		failed(t, "EnsureExternalSecret without the reader ServiceAccount", out, dbcontract.ReasonDependencyUnavailable, want)
		if es := e.getES(t, ns, tn.in.ExternalSecret); es != nil {
			t.Fatal("an ExternalSecret was created without its namespace's reader ServiceAccount")
		}
		done(t, "EnsureExternalSecret (manager rights)", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
		sa := &corev1.ServiceAccount{}
		if err := e.cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: dbcontract.ReaderServiceAccount}, sa); err != nil {
			t.Fatalf("the reader ServiceAccount was not created: %v", err)
		}
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Fatal("the reader ServiceAccount automounts its token")
		}
	})

	t.Run("Conflict: concurrent update", func(t *testing.T) {
		// Another writer between the read and the update (a person, or
		// ESO writing the ExternalSecret's status after each sync) makes
		// the update conflict: the operation reads again and decides on
		// the fresh object, keeping the other writer's change; only a
		// conflict on every attempt is a (transient) failure.
		tn := e.synced(t, ex, ns, "busy")
		touch := func(key string) func() {
			n := 0
			return func() {
				n++
				e.updateES(t, ns, tn.in.ExternalSecret, func(es *unstructured.Unstructured) {
					ann := es.GetAnnotations()
					ann[key] = strconv.Itoa(n)
					es.SetAnnotations(ann)
				})
			}
		}
		done(t, "EnsureExternalSecret (one concurrent write)", tn.run(t, e.racing("ExternalSecret", touch("example.com/a")), dbcontract.OpEnsureExternalSecret))
		if got := e.getES(t, ns, tn.in.ExternalSecret).GetAnnotations()["example.com/a"]; got != "1" {
			t.Fatalf("EnsureExternalSecret dropped another writer's annotation (%q)", got)
		}
		tn.transient(t, e.racingAlways("ExternalSecret", touch("example.com/c")), dbcontract.OpEnsureExternalSecret, apiFailed+string(metav1.StatusReasonConflict))
		done(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
		tn.transient(t, e.racingAlways("ExternalSecret", touch("example.com/d")), dbcontract.OpRetainExternalSecret, apiFailed+string(metav1.StatusReasonConflict))
		if es := e.getES(t, ns, tn.in.ExternalSecret); !dbcontract.OwnedBy(es, tn.obj.UID) || es.GetAnnotations()[externalsecrets.AnnotationRetained] != "" {
			t.Fatal("a failed RetainExternalSecret released the ExternalSecret")
		}
		done(t, "RetainExternalSecret (one concurrent write)", tn.run(t, e.racing("ExternalSecret", touch("example.com/b")), dbcontract.OpRetainExternalSecret))
		if es := e.getES(t, ns, tn.in.ExternalSecret); dbcontract.OwnedBy(es, tn.obj.UID) || es.GetAnnotations()["example.com/b"] != "1" {
			t.Fatal("RetainExternalSecret did not release the ExternalSecret on fresh data, keeping the other writer's annotation")
		}
	})

	t.Run("AlreadyExists: created meanwhile", func(t *testing.T) {
		tn := newTenant(ns, "raced")
		other := string(uuid.NewUUID())
		racing := e.racing("Secret", func() {
			e.createES(t, ns, tn.in.ExternalSecret, "raced-other", "nowhere", tenantOwner("raced", other), nil)
		})
		apiFailure(t, "EnsureExternalSecret (racing)", tn.run(t, racing, dbcontract.OpEnsureExternalSecret), metav1.StatusReasonAlreadyExists)
		failed(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), dbcontract.ReasonConflict, "uid "+other)
	})

	t.Run("NotFound: deleted meanwhile", func(t *testing.T) {
		tn := e.synced(t, ex, ns, "dropped")
		old := e.getES(t, ns, tn.in.ExternalSecret)
		racing := e.racing("ExternalSecret", func() {
			if err := e.cp.Client.Delete(ctx, old); err != nil {
				t.Error(err)
			}
		})
		apiFailure(t, "EnsureExternalSecret (racing)", tn.run(t, racing, dbcontract.OpEnsureExternalSecret), metav1.StatusReasonNotFound)
		// The next attempt creates a new one; the Secret the old one
		// produced is the Tenant's (the journal knows the old one).
		p := done(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret))
		if p.ES == nil || p.ES.UID == string(old.GetUID()) {
			t.Fatalf("outcome ES %v", p.ES)
		}
	})

	t.Run("Invalid: rejected by the API server", func(t *testing.T) {
		tn := newTenant(ns, "invalid")
		tn.in.OwnerAPIVersion = ""
		apiFailure(t, "EnsureExternalSecret", tn.run(t, ex, dbcontract.OpEnsureExternalSecret), metav1.StatusReasonInvalid)
	})

	t.Run("API server unreachable", func(t *testing.T) {
		tn := newTenant(ns, "offline")
		down := e.unreachable(t)
		for _, op := range dbcontract.ExternalSecretsOperations {
			// No answer: redelivered, nothing recorded.
			tn.transient(t, down, op, "the Kubernetes API did not answer")
		}
	})
}

// executorAs returns an executor whose client acts as user (impersonated;
// the user has the RBAC rights granted to it, nothing else).
func (e *env) executorAs(t *testing.T, user string) *externalsecrets.Executor {
	t.Helper()
	cfg := rest.CopyConfig(e.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: e.cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &externalsecrets.Executor{Client: c, Timeout: 10 * time.Second}
}

// grantRead lets user get ExternalSecrets and Secrets in ns and waits
// until the authorizer applies it.
func (e *env) grantRead(t *testing.T, ns, user string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{dbcontract.ExternalSecretGVK.Group}, Resources: []string{"externalsecrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets", "serviceaccounts"}, Verbs: []string{"get"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	if err := e.cp.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := e.cp.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	c := e.executorAs(t, user).Client
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "probe"}, u)
		if client.IgnoreNotFound(err) == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read grant never applied: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unreachable returns an executor whose API server does not answer.
func (e *env) unreachable(t *testing.T) *externalsecrets.Executor {
	t.Helper()
	port, err := integration.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(e.cp.Config)
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(dbcontract.ExternalSecretGVK, meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace)
	c, err := client.New(cfg, client.Options{Scheme: e.cp.Scheme, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	return &externalsecrets.Executor{Client: c, Timeout: 5 * time.Second}
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
