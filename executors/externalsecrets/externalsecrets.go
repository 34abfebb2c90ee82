// Package externalsecrets is the External Secrets Operator executor of the
// database domain: it manages the Tenant's ExternalSecret (never a Secret
// with data) and observes that ESO projected the target Secret from the
// current credential version, reading only the Secret's metadata, never its
// data (docs/decisions/0002).
package externalsecrets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Operations executed here.
const (
	OpEnsureExternalSecret = "EnsureExternalSecret"
	OpObserveProjection    = "ObserveProjection"
	OpDeleteExternalSecret = "DeleteExternalSecret"
	// OpRetainExternalSecret releases the ExternalSecret of a Tenant deleted
	// with deletionPolicy Retain: the owner reference to the Tenant is
	// removed (so a garbage collector never deletes it, and with it the
	// application's Secret) and the ExternalSecret is marked retained. It
	// keeps projecting the retained KV record; it is unmanaged from then on
	// (docs/decisions/0004-retained-externalsecret.md).
	OpRetainExternalSecret = "RetainExternalSecret"
)

// Labels and annotations Ayatori writes on the ExternalSecret (ESO copies
// them to the target Secret).
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelTenant is the Tenant's name as a label value: the name itself
	// when it is a valid label value (at most 63 characters), else a
	// shortened, hashed form (see LabelValue). The annotation has the full
	// namespace/name.
	LabelTenant      = "database.ayatori.ddupan.top/tenant"
	AnnotationTenant = "database.ayatori.ddupan.top/tenant"
	// AnnotationRetained marks an ExternalSecret released by
	// RetainExternalSecret: "<namespace>/<name> uid <uid>" of the Tenant.
	AnnotationRetained = "database.ayatori.ddupan.top/retained-from"
	// AnnotationResync is changed (to the intent ID) when the target
	// Secret is missing, so ESO writes it again at once.
	AnnotationResync = "database.ayatori.ddupan.top/resync"
	// AnnotationCredentialVersion is the KV version the ExternalSecret
	// should project.
	AnnotationCredentialVersion = "database.ayatori.ddupan.top/credential-version"
)

// LabelValue returns s when it is a valid label value, else its first 52
// characters, "-" and 10 hex digits of its SHA-256: always a valid label
// value for any Kubernetes object name (at most 253 characters).
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	prefix := s
	if len(prefix) > 52 {
		prefix = prefix[:52]
	}
	prefix = strings.TrimRightFunc(prefix, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') })
	if prefix == "" {
		return hex.EncodeToString(sum[:])[:10]
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// MaxExternalSecretName is the longest ExternalSecret name ESO can serve:
// ESO writes the target Secret with the field manager
// "externalsecrets.external-secrets.io/<ExternalSecret name>", and the API
// server refuses field managers longer than 128 characters.
const MaxExternalSecretName = 128 - len("externalsecrets.external-secrets.io/")

// ExternalSecretName is the Tenant's ExternalSecret name: the specified
// <instanceRef>-<name>-postgresql when it has at most
// MaxExternalSecretName characters, else its first characters, "-", 10 hex
// digits of the SHA-256 of instanceRef/name and "-postgresql" (exactly
// MaxExternalSecretName characters, a valid object name).
func ExternalSecretName(instanceRef, tenant string) string {
	n := instanceRef + "-" + tenant + "-postgresql"
	if len(n) <= MaxExternalSecretName {
		return n
	}
	sum := sha256.Sum256([]byte(instanceRef + "/" + tenant))
	suffix := "-" + hex.EncodeToString(sum[:])[:10] + "-postgresql"
	prefix := strings.TrimRight(n[:MaxExternalSecretName-len(suffix)], ".-")
	return prefix + suffix
}

// ValidateNames checks every name this executor derives for a Tenant before
// the first external write: the ExternalSecret and target Secret names, and
// the label values. It returns one message per problem.
func ValidateNames(externalSecret, targetSecret, tenantName string) []string {
	var errs []string
	for what, n := range map[string]string{"ExternalSecret name": externalSecret, "target Secret name": targetSecret} {
		for _, m := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, fmt.Sprintf("derived %s %q is not a valid object name: %s", what, n, m))
		}
	}
	if len(externalSecret) > MaxExternalSecretName {
		errs = append(errs, fmt.Sprintf("derived ExternalSecret name %q is longer than %d characters (ESO's field manager limit)", externalSecret, MaxExternalSecretName))
	}
	for _, m := range validation.IsValidLabelValue(LabelValue(tenantName)) {
		errs = append(errs, fmt.Sprintf("derived label value for %q is invalid: %s", tenantName, m))
	}
	return errs
}

// ExternalSecretGVK is external-secrets.io/v1 ExternalSecret.
var ExternalSecretGVK = schema.GroupVersionKind{Group: "external-secrets.io", Version: "v1", Kind: "ExternalSecret"}

// Keys is the fixed seven-key credential contract (specification §8.3).
var Keys = []string{"username", "password", "database", "host", "hostaddr", "port", "sslmode"}

// ProjectionIntent is the payload of this executor's intents.
type ProjectionIntent struct {
	// ExternalSecret is the ExternalSecret name (ExternalSecretName).
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
	// CredentialVersion is the KV version the last WriteCredential
	// produced (its connection fields follow the Instance). EnsureExternalSecret
	// writes it into an annotation of the ExternalSecret, so ESO reads
	// OpenBao again at once when it changes; ESO copies the annotation to
	// the target Secret when it syncs, and ObserveProjection succeeds only
	// when the Secret carries it: the Secret was then written from this
	// version or a later one. Only metadata is read (decision 0002).
	CredentialVersion int `json:"credentialVersion,omitempty"`
	// OwnedES are the ExternalSecrets this Tenant created earlier (from the
	// EnsureExternalSecret outcomes in its journal): a target Secret whose
	// owner is one of them, and which is not older than it, was produced
	// for this Tenant even when that ExternalSecret no longer exists.
	OwnedES []ESRef `json:"ownedES,omitempty"`
}

// ESRef identifies one ExternalSecret object a Tenant created: its UID and
// creation time (Unix seconds, the API's resolution).
type ESRef struct {
	UID     string `json:"uid"`
	Created int64  `json:"created"`
}

// ProjectionOutcome is the payload of EnsureExternalSecret,
// DeleteExternalSecret and RetainExternalSecret outcomes.
type ProjectionOutcome struct {
	// Skipped explains what was left in place (an object that is not this
	// Tenant's).
	Skipped string `json:"skipped,omitempty"`
	// ES is the ExternalSecret EnsureExternalSecret created or updated.
	ES *ESRef `json:"es,omitempty"`
}

// refOf returns the ESRef of an ExternalSecret read from the API.
func refOf(o metav1.Object) ESRef {
	return ESRef{UID: string(o.GetUID()), Created: o.GetCreationTimestamp().Unix()}
}

// ProducedBy reports whether the target Secret (metadata only) was written
// by one of the ExternalSecrets: it has an owner reference with the
// ExternalSecret's UID and was created no earlier than that ExternalSecret.
// A Secret older than the ExternalSecret existed before it: ESO
// (creationPolicy Owner) adopts such a Secret, sets itself as owner and
// replaces its data, so the owner reference alone proves nothing.
func ProducedBy(secret metav1.Object, ours []ESRef) bool {
	created := secret.GetCreationTimestamp().Unix()
	for _, o := range secret.GetOwnerReferences() {
		if o.Kind != ExternalSecretGVK.Kind {
			continue
		}
		for _, r := range ours {
			if r.UID != "" && string(o.UID) == r.UID && created >= r.Created {
				return true
			}
		}
	}
	return false
}

// TargetTaken is the check of the projection target before the first
// external write (and again right before the ExternalSecret is created):
// the ExternalSecret name must be free or taken by this Tenant's own
// ExternalSecret, and the target Secret must be absent or produced by one
// of this Tenant's ExternalSecrets. es and secret are nil when absent (the
// Secret is read as metadata only). It returns what takes the target, or
// "" when nothing does.
func TargetTaken(namespace, esName, secretName string, es, secret metav1.Object, tenantUID string, known []ESRef) string {
	ours := append([]ESRef(nil), known...)
	if es != nil {
		if !ownedBy(es, tenantUID) {
			return fmt.Sprintf("ExternalSecret %s/%s exists and is not owned by this Tenant (%s)", namespace, esName, describeOwner(es))
		}
		ours = append(ours, refOf(es))
	}
	if secret != nil && !ProducedBy(secret, ours) {
		return fmt.Sprintf("Secret %s/%s exists and was not produced by this Tenant's ExternalSecret (%s); Ayatori never writes or adopts a Secret it did not create",
			namespace, secretName, describeOwner(secret))
	}
	return ""
}

func init() {
	for _, op := range []string{OpEnsureExternalSecret, OpObserveProjection, OpDeleteExternalSecret, OpRetainExternalSecret} {
		journal.RegisterPayload(op, journal.TypeIntent, ProjectionIntent{})
	}
	journal.RegisterPayload(OpEnsureExternalSecret, journal.TypeOutcome, ProjectionOutcome{})
	journal.RegisterPayload(OpDeleteExternalSecret, journal.TypeOutcome, ProjectionOutcome{})
	journal.RegisterPayload(OpRetainExternalSecret, journal.TypeOutcome, ProjectionOutcome{})
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
		OpEnsureExternalSecret: e.opOut(e.ensure),
		OpObserveProjection:    e.op(e.observe),
		OpDeleteExternalSecret: e.op(e.delete),
		OpRetainExternalSecret: e.op(e.retain),
	}
}

type failure struct{ reason, msg string }

func (f *failure) Error() string { return f.reason + ": " + f.msg }

// skipped is a successful outcome that left a foreign object in place.
type skipped struct{ msg string }

func (s *skipped) Error() string { return s.msg }

func (e *Executor) op(fn func(ctx context.Context, rec journal.Record, in ProjectionIntent) error) journal.Handler {
	return e.opOut(func(ctx context.Context, rec journal.Record, in ProjectionIntent) (*ProjectionOutcome, error) {
		return nil, fn(ctx, rec, in)
	})
}

// opOut is op for steps whose success carries an outcome payload.
func (e *Executor) opOut(fn func(ctx context.Context, rec journal.Record, in ProjectionIntent) (*ProjectionOutcome, error)) journal.Handler {
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
		out, err := fn(ctx, rec, in)
		if err != nil {
			var sk *skipped
			if errors.As(err, &sk) {
				return journal.Outcome{Result: journal.Result{Class: journal.Succeeded, Message: sk.msg}, Payload: ProjectionOutcome{Skipped: sk.msg}}, nil
			}
			var f *failure
			if !errors.As(err, &f) {
				f = &failure{reason: "DependencyUnavailable", msg: "the Kubernetes API request failed: " + string(apierrors.ReasonForError(err))}
			}
			return journal.Outcome{Result: journal.Result{Class: journal.Failed, Reason: f.reason, Message: f.msg}}, nil
		}
		if out != nil {
			return journal.Outcome{Result: journal.Result{Class: journal.Succeeded}, Payload: *out}, nil
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
// the Tenant. The projection target is re-checked right before the write
// (TargetTaken): an ExternalSecret of the same name not owned by this
// Tenant, or a target Secret this Tenant's ExternalSecrets did not produce,
// is a Conflict and nothing is written (ESO, creationPolicy Owner, would
// adopt such a Secret and replace its data).
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in ProjectionIntent) (*ProjectionOutcome, error) {
	data := make([]any, 0, len(Keys))
	for _, k := range Keys {
		data = append(data, map[string]any{"secretKey": k, "remoteRef": map[string]any{"key": in.RemoteKey, "property": k}})
	}
	spec := map[string]any{
		"refreshInterval": "1h",
		"secretStoreRef":  map[string]any{"kind": "ClusterSecretStore", "name": in.StoreName},
		// Retain: a deleted or destroyed KV version must never make ESO
		// delete the application's Secret; the Tenant reports it instead.
		"target": map[string]any{"name": in.TargetSecretName, "creationPolicy": "Owner", "deletionPolicy": "Retain"},
		"data":   data,
	}
	ns := rec.Object.Namespace
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.ExternalSecret}, cur)
	var existing metav1.Object
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		existing = cur
	}
	// The target Secret, metadata only (never its data).
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	var secret metav1.Object
	err = e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.TargetSecretName}, meta)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		secret = meta
	}
	if taken := TargetTaken(ns, in.ExternalSecret, in.TargetSecretName, existing, secret, rec.Object.UID, in.OwnedES); taken != "" {
		return nil, &failure{reason: "Conflict", msg: taken}
	}
	if existing == nil {
		es := &unstructured.Unstructured{}
		es.SetGroupVersionKind(ExternalSecretGVK)
		es.SetNamespace(ns)
		es.SetName(in.ExternalSecret)
		es.SetLabels(map[string]string{LabelManagedBy: "ayatori", LabelTenant: LabelValue(rec.Object.Name)})
		ann := map[string]string{AnnotationTenant: ns + "/" + rec.Object.Name}
		if in.CredentialVersion > 0 {
			ann[AnnotationCredentialVersion] = strconv.Itoa(in.CredentialVersion)
		}
		es.SetAnnotations(ann)
		t := true
		es.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: in.OwnerAPIVersion, Kind: in.OwnerKind, Name: rec.Object.Name,
			UID: types.UID(rec.Object.UID), Controller: &t, BlockOwnerDeletion: &t}})
		es.Object["spec"] = spec
		if err := e.Client.Create(ctx, es); err != nil {
			return nil, err
		}
		ref := refOf(es)
		return &ProjectionOutcome{ES: &ref}, nil
	}
	lbl, ann := cur.GetLabels(), cur.GetAnnotations()
	if lbl == nil {
		lbl = map[string]string{}
	}
	if ann == nil {
		ann = map[string]string{}
	}
	lbl[LabelManagedBy], lbl[LabelTenant] = "ayatori", LabelValue(rec.Object.Name)
	ann[AnnotationTenant] = ns + "/" + rec.Object.Name
	if in.CredentialVersion > 0 {
		ann[AnnotationCredentialVersion] = strconv.Itoa(in.CredentialVersion)
	}
	if secret == nil {
		// A target Secret deleted by hand: an annotation change makes ESO
		// read OpenBao and write the Secret now, not at the next refresh.
		ann[AnnotationResync] = rec.ID
	}
	cur.SetLabels(lbl)
	cur.SetAnnotations(ann)
	cur.Object["spec"] = spec
	if err := e.Client.Update(ctx, cur); err != nil {
		return nil, err
	}
	ref := refOf(cur)
	return &ProjectionOutcome{ES: &ref}, nil
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
	if in.CredentialVersion > 0 {
		if got := meta.GetAnnotations()[AnnotationCredentialVersion]; got != strconv.Itoa(in.CredentialVersion) {
			return &failure{reason: "CredentialProjectionFailed", msg: fmt.Sprintf("the Secret %s was not yet written from credential version %d (it has %q); waiting for ESO",
				in.TargetSecretName, in.CredentialVersion, got)}
		}
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
// its target Secret. Objects that are not this Tenant's (an ExternalSecret
// retained by an earlier Tenant of the same name, a foreign one, a Secret
// produced by such an ExternalSecret, a Secret that existed before this
// Tenant's ExternalSecret and was adopted by ESO) are left in place and
// reported: they never hold the finalizer (specification §11). The target
// carries an owner reference to the ExternalSecret (creationPolicy Owner);
// the executor deletes it itself, as the garbage collector would, only when
// ProducedBy proves it was written by one of this Tenant's ExternalSecrets
// (by UID and creation time, never by name).
func (e *Executor) delete(ctx context.Context, rec journal.Record, in ProjectionIntent) error {
	ns := rec.Object.Namespace
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.ExternalSecret}, es)
	ours := append([]ESRef(nil), in.OwnedES...)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case !ownedBy(es, rec.Object.UID):
		return &skipped{msg: fmt.Sprintf("ExternalSecret %s/%s is not owned by this Tenant (%s); it and its target Secret were left in place", ns, in.ExternalSecret, describeOwner(es))}
	default:
		ours = append(ours, refOf(es))
		esUID := es.GetUID()
		if err := e.Client.Delete(ctx, es, client.Preconditions{UID: &esUID}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.TargetSecretName}, meta)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ProducedBy(meta, ours) {
		return &skipped{msg: fmt.Sprintf("Secret %s/%s was not produced by this Tenant's ExternalSecret (%s); left in place", ns, in.TargetSecretName, describeOwner(meta))}
	}
	uid := meta.GetUID()
	if err := e.Client.Delete(ctx, meta, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return err
	}
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.TargetSecretName}, meta); !apierrors.IsNotFound(err) {
		return &failure{reason: "CredentialProjectionFailed", msg: "the target Secret still exists after deletion"}
	}
	return nil
}

// describeOwner names who an object belongs to, for skip reports.
func describeOwner(o metav1.Object) string {
	if r := o.GetAnnotations()[AnnotationRetained]; r != "" {
		return "retained from Tenant " + r
	}
	for _, ref := range o.GetOwnerReferences() {
		return fmt.Sprintf("owned by %s %s uid %s", ref.Kind, ref.Name, ref.UID)
	}
	return "no owner"
}

// retain releases this Tenant's ExternalSecret at Retain deletion: the
// owner reference to the Tenant goes, the retained-from annotation is set.
// The ExternalSecret and the application's Secret stay and keep following
// the retained KV record. Absent or not ours: nothing to do (reported).
func (e *Executor) retain(ctx context.Context, rec journal.Record, in ProjectionIntent) error {
	ns := rec.Object.Namespace
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.ExternalSecret}, es)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case !ownedBy(es, rec.Object.UID):
		if es.GetAnnotations()[AnnotationRetained] != "" && strings.HasSuffix(es.GetAnnotations()[AnnotationRetained], " uid "+rec.Object.UID) {
			return nil // released by an earlier attempt
		}
		return &skipped{msg: fmt.Sprintf("ExternalSecret %s/%s is not owned by this Tenant (%s); left as it is", ns, in.ExternalSecret, describeOwner(es))}
	}
	var keep []metav1.OwnerReference
	for _, o := range es.GetOwnerReferences() {
		if string(o.UID) != rec.Object.UID {
			keep = append(keep, o)
		}
	}
	es.SetOwnerReferences(keep)
	ann := es.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationRetained] = ns + "/" + rec.Object.Name + " uid " + rec.Object.UID
	es.SetAnnotations(ann)
	// Update carries the resourceVersion read above: a concurrent change
	// makes it fail and the step is retried on fresh data.
	return e.Client.Update(ctx, es)
}
