package database

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The projection target check: which ExternalSecret and target Secret are
// a Tenant's own. The projector runs it (metadata-only reads) before the
// first external write; executors/externalsecrets runs it again right
// before it creates the ExternalSecret, and uses ProducedBy before it
// deletes a target Secret.

// AnnotationRetained marks an ExternalSecret released by
// RetainExternalSecret: "<namespace>/<name> uid <uid>" of the Tenant.
const AnnotationRetained = "database.ayatori.ddupan.top/retained-from"

// RefOf returns the ESRef of an ExternalSecret read from the API.
func RefOf(o metav1.Object) ESRef {
	return ESRef{UID: string(o.GetUID()), Created: o.GetCreationTimestamp().Unix()}
}

// OwnedBy reports whether u has an owner reference with the UID uid.
func OwnedBy(u metav1.Object, uid string) bool {
	for _, o := range u.GetOwnerReferences() {
		if string(o.UID) == uid {
			return true
		}
	}
	return false
}

// DescribeOwner names what holds an object: the Tenant it was retained
// from, its first owner reference, or "no owner".
func DescribeOwner(o metav1.Object) string {
	if r := o.GetAnnotations()[AnnotationRetained]; r != "" {
		return "retained from Tenant " + r
	}
	for _, ref := range o.GetOwnerReferences() {
		return fmt.Sprintf("owned by %s %s uid %s", ref.Kind, ref.Name, ref.UID)
	}
	return "no owner"
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
		if !OwnedBy(es, tenantUID) {
			return fmt.Sprintf("ExternalSecret %s/%s exists and is not owned by this Tenant (%s)", namespace, esName, DescribeOwner(es))
		}
		ours = append(ours, RefOf(es))
	}
	if secret != nil && !ProducedBy(secret, ours) {
		return fmt.Sprintf("Secret %s/%s exists and was not produced by this Tenant's ExternalSecret (%s); Ayatori never writes or adopts a Secret it did not create",
			namespace, secretName, DescribeOwner(secret))
	}
	return ""
}
