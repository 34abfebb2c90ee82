// Package externalsecrets is the External Secrets Operator executor of the
// database domain: it manages the Tenant's ExternalSecret (never a Secret
// with data) and observes that ESO projected the target Secret, checking
// only the Secret's existence (metadata), never its data.
package externalsecrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Operations executed here.
const (
	OpEnsureExternalSecret = "EnsureExternalSecret"
	OpObserveProjection    = "ObserveProjection"
	OpDeleteExternalSecret = "DeleteExternalSecret"
)

// ExternalSecretGVK is external-secrets.io/v1 ExternalSecret.
var ExternalSecretGVK = schema.GroupVersionKind{Group: "external-secrets.io", Version: "v1", Kind: "ExternalSecret"}

// Keys is the fixed seven-key credential contract (specification §8.3).
var Keys = []string{"username", "password", "database", "host", "hostaddr", "port", "sslmode"}

// ProjectionIntent is the payload of this executor's intents.
type ProjectionIntent struct {
	// ExternalSecret is the ExternalSecret name (<instanceRef>-<name>-postgresql).
	ExternalSecret string `json:"externalSecret"`
	// TargetSecretName is the Secret ESO writes.
	TargetSecretName string `json:"targetSecretName"`
	// StoreName is the ClusterSecretStore.
	StoreName string `json:"storeName"`
	// RemoteKey is the KV path relative to the store's mount.
	RemoteKey string `json:"remoteKey"`
	// OwnerAPIVersion/OwnerKind name the Tenant for the owner reference.
	OwnerAPIVersion string `json:"ownerAPIVersion"`
	OwnerKind       string `json:"ownerKind"`
}

func init() {
	for _, op := range []string{OpEnsureExternalSecret, OpObserveProjection, OpDeleteExternalSecret} {
		journal.RegisterPayload(op, journal.TypeIntent, ProjectionIntent{})
	}
}

// Executor manages ExternalSecrets with a Kubernetes client (reads go to
// the API server, not a cache).
type Executor struct {
	Client client.Client
	// Reader reads from the API server (no cache); defaults to Client.
	Reader  client.Reader
	Timeout time.Duration
}

func (e *Executor) reader() client.Reader {
	if e.Reader != nil {
		return e.Reader
	}
	return e.Client
}

// Handlers returns the journal handlers of this executor.
func (e *Executor) Handlers() map[string]journal.Handler {
	return map[string]journal.Handler{
		OpEnsureExternalSecret: e.op(e.ensure),
		OpObserveProjection:    e.op(e.observe),
		OpDeleteExternalSecret: e.op(e.delete),
	}
}

type failure struct{ reason, msg string }

func (f *failure) Error() string { return f.reason + ": " + f.msg }

func (e *Executor) op(fn func(ctx context.Context, rec journal.Record, in ProjectionIntent) error) journal.Handler {
	return func(ctx context.Context, rec journal.Record) (journal.Outcome, error) {
		var in ProjectionIntent
		if err := rec.DecodePayload(&in); err != nil || in.ExternalSecret == "" {
			return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: "InvalidSpec", Message: "undecodable " + rec.Operation + " payload"}}, nil
		}
		t := e.Timeout
		if t <= 0 {
			t = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		if err := fn(ctx, rec, in); err != nil {
			var f *failure
			if !errors.As(err, &f) {
				f = &failure{reason: "DependencyUnavailable", msg: "the Kubernetes API request failed: " + string(apierrors.ReasonForError(err))}
			}
			return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: f.reason, Message: f.msg}}, nil
		}
		return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}}, nil
	}
}

func ownedBy(u metav1.Object, uid string) bool {
	for _, o := range u.GetOwnerReferences() {
		if string(o.UID) == uid {
			return true
		}
	}
	return false
}

// ensure creates or updates the ExternalSecret: the seven keys from the
// configured ClusterSecretStore, target Secret name, owner reference to
// the Tenant. An ExternalSecret of the same name not owned by this Tenant
// is a Conflict.
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in ProjectionIntent) error {
	data := make([]any, 0, len(Keys))
	for _, k := range Keys {
		data = append(data, map[string]any{"secretKey": k, "remoteRef": map[string]any{"key": in.RemoteKey, "property": k}})
	}
	spec := map[string]any{
		"refreshInterval": "1h",
		"secretStoreRef":  map[string]any{"kind": "ClusterSecretStore", "name": in.StoreName},
		"target":          map[string]any{"name": in.TargetSecretName, "creationPolicy": "Owner", "deletionPolicy": "Delete"},
		"data":            data,
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.ExternalSecret}, cur)
	if apierrors.IsNotFound(err) {
		es := &unstructured.Unstructured{}
		es.SetGroupVersionKind(ExternalSecretGVK)
		es.SetNamespace(rec.Object.Namespace)
		es.SetName(in.ExternalSecret)
		es.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "ayatori", "database.ayatori.ddupan.top/tenant": rec.Object.Name})
		t := true
		es.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: in.OwnerAPIVersion, Kind: in.OwnerKind, Name: rec.Object.Name,
			UID: types.UID(rec.Object.UID), Controller: &t, BlockOwnerDeletion: &t}})
		es.Object["spec"] = spec
		return e.Client.Create(ctx, es)
	}
	if err != nil {
		return err
	}
	if !ownedBy(cur, rec.Object.UID) {
		return &failure{reason: "Conflict", msg: fmt.Sprintf("ExternalSecret %s/%s exists and is not owned by this Tenant", rec.Object.Namespace, in.ExternalSecret)}
	}
	cur.Object["spec"] = spec
	return e.Client.Update(ctx, cur)
}

// observe reports success only when ESO says the ExternalSecret is Ready
// and the target Secret exists (metadata only; its data is never read).
func (e *Executor) observe(ctx context.Context, rec journal.Record, in ProjectionIntent) error {
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(ExternalSecretGVK)
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.ExternalSecret}, es); err != nil {
		if apierrors.IsNotFound(err) {
			return &failure{reason: "CredentialProjectionFailed", msg: "the ExternalSecret does not exist"}
		}
		return err
	}
	ready, msg := "", ""
	conds, _, _ := unstructured.NestedSlice(es.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			ready, _ = m["status"].(string)
			msg, _ = m["reason"].(string)
		}
	}
	if ready != "True" {
		detail := "Ready=" + orUnknown(ready)
		if msg != "" {
			detail += ", " + msg
		}
		return &failure{reason: "CredentialProjectionFailed", msg: fmt.Sprintf("waiting for ESO to sync ExternalSecret %s (%s)", in.ExternalSecret, detail)}
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.TargetSecretName}, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return &failure{reason: "CredentialProjectionFailed", msg: "the target Secret " + in.TargetSecretName + " does not exist yet"}
		}
		return err
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// delete removes the ExternalSecret (UID precondition, only if ours) and
// confirms the target Secret is gone. The target carries an owner
// reference to the ExternalSecret (creationPolicy Owner); the executor
// deletes it itself when it still exists, as the garbage collector would.
func (e *Executor) delete(ctx context.Context, rec journal.Record, in ProjectionIntent) error {
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.ExternalSecret}, es)
	var esUID types.UID
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case !ownedBy(es, rec.Object.UID):
		return &failure{reason: "Conflict", msg: "refusing to delete ExternalSecret " + in.ExternalSecret + ": not owned by this Tenant"}
	default:
		esUID = es.GetUID()
		uid := es.GetUID()
		if err := e.Client.Delete(ctx, es, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.TargetSecretName}, meta)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if esUID == "" || !ownedBy(meta, string(esUID)) {
		// Not produced by our ExternalSecret: leave it alone.
		owners := meta.GetOwnerReferences()
		for _, o := range owners {
			if o.Kind == "ExternalSecret" && o.Name == in.ExternalSecret {
				esUID = o.UID
			}
		}
		if esUID == "" {
			return nil
		}
	}
	uid := meta.GetUID()
	if err := e.Client.Delete(ctx, meta, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return err
	}
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.TargetSecretName}, meta); !apierrors.IsNotFound(err) {
		return &failure{reason: "CredentialProjectionFailed", msg: "the target Secret still exists after deletion"}
	}
	return nil
}
