package database

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
)

// NamespaceAllowed reports whether Tenants of namespace ns (with the
// namespace's labels) may use inst (spec.allowedNamespaces; unset: every
// namespace). When not, the message says why; an invalid selector allows
// nothing.
func NamespaceAllowed(inst *databasev1alpha1.PostgreSQLInstance, ns string, nsLabels map[string]string) (bool, string) {
	a := inst.Spec.AllowedNamespaces
	if a == nil {
		return true, ""
	}
	if slices.Contains(a.Names, ns) {
		return true, ""
	}
	if a.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(a.Selector)
		if err != nil {
			return false, fmt.Sprintf("PostgreSQLInstance %s has an invalid spec.allowedNamespaces.selector: %v", inst.Name, err)
		}
		if sel.Matches(labels.Set(nsLabels)) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("namespace %s is not in PostgreSQLInstance %s's spec.allowedNamespaces (ask its administrator to add it)", ns, inst.Name)
}
