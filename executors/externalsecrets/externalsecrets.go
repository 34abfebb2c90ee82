// Package externalsecrets is the External Secrets Operator executor of the
// database domain: it manages the Tenant's ExternalSecret (never a Secret
// with data) and observes that ESO projected the target Secret from the
// current credential version, reading only the Secret's metadata, never its
// data (docs/decisions/0002).
package externalsecrets

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Labels and annotations Ayatori writes on the ExternalSecret (ESO copies
// them to the target Secret).
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelTenant is the Tenant's name as a label value: the name itself
	// when it is a valid label value (at most 63 characters), else a
	// shortened, hashed form (see dbcontract.LabelValue). The annotation has the full
	// namespace/name.
	LabelTenant      = "database.ayatori.ddupan.top/tenant"
	AnnotationTenant = "database.ayatori.ddupan.top/tenant"
	// AnnotationRetained marks an ExternalSecret released by
	// RetainExternalSecret: "<namespace>/<name> uid <uid>" of the Tenant.
	AnnotationRetained = dbcontract.AnnotationRetained
	// AnnotationResync is the ID of the EnsureExternalSecret intent that
	// last found the target Secret missing (the create writes it too): a
	// new value makes ESO write the Secret again at once.
	AnnotationResync = "database.ayatori.ddupan.top/resync"
	// AnnotationCredentialVersion is the KV version the ExternalSecret
	// should project.
	AnnotationCredentialVersion = "database.ayatori.ddupan.top/credential-version"
)

// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create

// Executor manages ExternalSecrets with a Kubernetes client (reads go to
// the API server, not a cache).
type Executor struct {
	Client client.Client
	// Reader reads from the API server (no cache); defaults to Client.
	Reader client.Reader
	// Timeout bounds one operation (0: journal.DefaultDeadline).
	Timeout time.Duration
	// Log receives the executor skeleton's line per attempt.
	Log logr.Logger
}

// ensureReader creates the ServiceAccount ESO logs in to OpenBao with in
// namespace ns when it is missing (dbcontract.ReaderServiceAccount). It
// carries no right in Kubernetes; OpenBao lets it read ns's credential
// records only. One that exists is used as it is: whoever may create it
// may read the namespace's projected Secrets anyway.
func (e *Executor) ensureReader(ctx context.Context, ns string) error {
	sa := &metav1.PartialObjectMetadata{}
	sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: dbcontract.ReaderServiceAccount}, sa)
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return readerFailure(ns, false, err)
	}
	no := false
	err = e.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dbcontract.ReaderServiceAccount,
		Labels: map[string]string{LabelManagedBy: "ayatori"}}, AutomountServiceAccountToken: &no})
	if err == nil || isAlreadyExists(err) {
		return nil
	}
	return readerFailure(ns, true, err)
}

func (e *Executor) reader() client.Reader {
	if e.Reader != nil {
		return e.Reader
	}
	return e.Client
}

// BackendName is the name this executor registers its handlers under.
const BackendName = "externalsecrets"

// Handlers returns the journal handlers of this executor.
func (e *Executor) Handlers() map[string]journal.Handler {
	b := &journal.Backend{Name: BackendName, Deadline: e.Timeout, Log: e.Log,
		Classify: func(err error) *journal.Failure { return classify(err).JournalFailure() }}
	step := func(fn func(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) (*dbcontract.ProjectionOutcome, error)) journal.Handler {
		return journal.Execute(b, journal.Step[dbcontract.ProjectionIntent]{Run: onConflictRetry(fn), Validate: validProjection})
	}
	return map[string]journal.Handler{
		dbcontract.OpEnsureExternalSecret: step(e.ensure),
		dbcontract.OpObserveProjection:    step(noOutcome(e.observe)),
		dbcontract.OpDeleteExternalSecret: step(noOutcome(e.delete)),
		dbcontract.OpRetainExternalSecret: step(noOutcome(e.retain)),
	}
}

// validProjection refuses a payload that names no ExternalSecret.
func validProjection(_ journal.Record, in dbcontract.ProjectionIntent) error {
	if in.ExternalSecret == "" {
		return errors.New("no ExternalSecret name")
	}
	return nil
}

// skipped is a successful outcome that left a foreign object in place.
type skipped struct{ msg string }

func (s *skipped) Error() string { return s.msg }

// noOutcome adapts a step whose success carries no payload.
func noOutcome(fn func(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) error) func(context.Context, journal.Record, dbcontract.ProjectionIntent) (*dbcontract.ProjectionOutcome, error) {
	return func(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) (*dbcontract.ProjectionOutcome, error) {
		return nil, fn(ctx, rec, in)
	}
}

// onConflictRetry runs fn again from its reads when another writer
// changed the object between its read and its update (ESO writes the
// ExternalSecret's status after every sync; a person), a few times,
// before the conflict is the attempt's failure; a skipped step is a
// successful outcome that says what it left in place.
func onConflictRetry(fn func(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) (*dbcontract.ProjectionOutcome, error)) func(context.Context, journal.Record, dbcontract.ProjectionIntent) (journal.Outcome, error) {
	return func(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) (journal.Outcome, error) {
		var out *dbcontract.ProjectionOutcome
		err := retry.RetryOnConflict(retry.DefaultRetry, func() (err error) {
			out, err = fn(ctx, rec, in)
			return err
		})
		var sk *skipped
		switch {
		case errors.As(err, &sk):
			return journal.Outcome{Result: journal.Result{Message: sk.msg}, Payload: dbcontract.ProjectionOutcome{Skipped: sk.msg}}, nil
		case err != nil:
			return journal.Outcome{}, err
		case out != nil:
			return journal.Outcome{Payload: *out}, nil
		}
		return journal.Outcome{}, nil
	}
}

// ensure creates or updates the ExternalSecret: the seven keys from the
// configured ClusterSecretStore, target Secret name, owner reference to
// the Tenant. The projection target is re-checked right before the write
// (dbcontract.TargetTaken): an ExternalSecret of the same name not owned by
// this Tenant, or a target Secret this Tenant's ExternalSecrets did not
// produce, is a Conflict and nothing is written (ESO, creationPolicy Owner, would
// adopt such a Secret and replace its data).
func (e *Executor) ensure(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) (*dbcontract.ProjectionOutcome, error) {
	data := make([]any, 0, len(dbcontract.Keys))
	for _, k := range dbcontract.Keys {
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
	cur.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.ExternalSecret}, cur)
	var existing metav1.Object
	switch {
	case isNotFound(err):
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
	case isNotFound(err):
	case err != nil:
		return nil, err
	default:
		secret = meta
	}
	if taken := dbcontract.TargetTaken(ns, in.ExternalSecret, in.TargetSecretName, existing, secret, rec.Object.UID, in.OwnedES); taken != "" {
		return nil, &dbcontract.Failure{Reason: dbcontract.ReasonConflict, Message: taken}
	}
	if err := e.ensureReader(ctx, ns); err != nil {
		return nil, err
	}
	if existing == nil {
		es := &unstructured.Unstructured{}
		es.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
		es.SetNamespace(ns)
		es.SetName(in.ExternalSecret)
		es.SetLabels(map[string]string{LabelManagedBy: "ayatori", LabelTenant: dbcontract.LabelValue(rec.Object.Name)})
		// AnnotationResync as the update below writes it for a missing
		// Secret (a new ExternalSecret has none yet): a redelivery of this
		// intent that finds ESO has not written the Secret yet then
		// changes nothing.
		ann := map[string]string{AnnotationTenant: ns + "/" + rec.Object.Name, AnnotationResync: rec.ID}
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
		ref := dbcontract.RefOf(es)
		return &dbcontract.ProjectionOutcome{ES: &ref}, nil
	}
	lbl, ann := cur.GetLabels(), cur.GetAnnotations()
	if lbl == nil {
		lbl = map[string]string{}
	}
	if ann == nil {
		ann = map[string]string{}
	}
	lbl[LabelManagedBy], lbl[LabelTenant] = "ayatori", dbcontract.LabelValue(rec.Object.Name)
	ann[AnnotationTenant] = ns + "/" + rec.Object.Name
	if in.CredentialVersion > 0 {
		ann[AnnotationCredentialVersion] = strconv.Itoa(in.CredentialVersion)
	}
	if secret == nil {
		// A target Secret deleted by hand, or never written (ESO failed
		// and backs off): an annotation change makes ESO read OpenBao and
		// write the Secret now, not at the next refresh. The value is the
		// intent's ID, the one the create above writes too, so the same
		// intent delivered again writes nothing.
		ann[AnnotationResync] = rec.ID
	}
	cur.SetLabels(lbl)
	cur.SetAnnotations(ann)
	cur.Object["spec"] = spec
	if err := e.Client.Update(ctx, cur); err != nil {
		return nil, err
	}
	ref := dbcontract.RefOf(cur)
	return &dbcontract.ProjectionOutcome{ES: &ref}, nil
}

// observe reports success only when ESO says the ExternalSecret is Ready
// and the target Secret exists (metadata only; its data is never read).
func (e *Executor) observe(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) error {
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.ExternalSecret}, es); err != nil {
		if isNotFound(err) {
			return &dbcontract.Failure{Reason: dbcontract.ReasonCredentialProjectionFailed, Message: "the ExternalSecret does not exist"}
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
		return &dbcontract.Failure{Reason: dbcontract.ReasonCredentialProjectionFailed, Message: fmt.Sprintf("waiting for ESO to sync ExternalSecret %s (%s)", in.ExternalSecret, detail)}
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: rec.Object.Namespace, Name: in.TargetSecretName}, meta); err != nil {
		if isNotFound(err) {
			return &dbcontract.Failure{Reason: dbcontract.ReasonCredentialProjectionFailed, Message: "the target Secret " + in.TargetSecretName + " does not exist yet"}
		}
		return err
	}
	if in.CredentialVersion > 0 {
		if got := meta.GetAnnotations()[AnnotationCredentialVersion]; got != strconv.Itoa(in.CredentialVersion) {
			return &dbcontract.Failure{Reason: dbcontract.ReasonCredentialProjectionFailed, Message: fmt.Sprintf("the Secret %s was not yet written from credential version %d (it has %q); waiting for ESO",
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
// dbcontract.ProducedBy proves it was written by one of this Tenant's
// ExternalSecrets (by UID and creation time, never by name).
func (e *Executor) delete(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) error {
	ns := rec.Object.Namespace
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.ExternalSecret}, es)
	ours := append([]dbcontract.ESRef(nil), in.OwnedES...)
	switch {
	case isNotFound(err):
	case err != nil:
		return err
	case !dbcontract.OwnedBy(es, rec.Object.UID):
		return &skipped{msg: fmt.Sprintf("ExternalSecret %s/%s is not owned by this Tenant (%s); it and its target Secret were left in place", ns, in.ExternalSecret, dbcontract.DescribeOwner(es))}
	default:
		ours = append(ours, dbcontract.RefOf(es))
		esUID := es.GetUID()
		if err := e.Client.Delete(ctx, es, client.Preconditions{UID: &esUID}); ignoreNotFound(err) != nil {
			return err
		}
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.TargetSecretName}, meta)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !dbcontract.ProducedBy(meta, ours) {
		return &skipped{msg: fmt.Sprintf("Secret %s/%s was not produced by this Tenant's ExternalSecret (%s); left in place", ns, in.TargetSecretName, dbcontract.DescribeOwner(meta))}
	}
	uid := meta.GetUID()
	if err := e.Client.Delete(ctx, meta, client.Preconditions{UID: &uid}); ignoreNotFound(err) != nil {
		return err
	}
	if err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.TargetSecretName}, meta); !isNotFound(err) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonCredentialProjectionFailed, Message: "the target Secret still exists after deletion"}
	}
	return nil
}

// retain releases this Tenant's ExternalSecret at Retain deletion: the
// owner reference to the Tenant goes, the retained-from annotation is set.
// The ExternalSecret and the application's Secret stay and keep following
// the retained KV record. Absent or not ours: nothing to do (reported).
func (e *Executor) retain(ctx context.Context, rec journal.Record, in dbcontract.ProjectionIntent) error {
	ns := rec.Object.Namespace
	es := &unstructured.Unstructured{}
	es.SetGroupVersionKind(dbcontract.ExternalSecretGVK)
	err := e.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: in.ExternalSecret}, es)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return err
	case !dbcontract.OwnedBy(es, rec.Object.UID):
		if es.GetAnnotations()[AnnotationRetained] != "" && strings.HasSuffix(es.GetAnnotations()[AnnotationRetained], " uid "+rec.Object.UID) {
			return nil // released by an earlier attempt
		}
		return &skipped{msg: fmt.Sprintf("ExternalSecret %s/%s is not owned by this Tenant (%s); left as it is", ns, in.ExternalSecret, dbcontract.DescribeOwner(es))}
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
