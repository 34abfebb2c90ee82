package database

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TargetTaken: the ExternalSecret must be this Tenant's (owner UID), the
// Secret must be produced by one of its ExternalSecrets (owner UID, and not
// older than it: an older Secret was adopted by ESO), never judged by name.
func TestTargetTaken(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	obj := func(uid string, created time.Time, owners ...metav1.OwnerReference) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created), OwnerReferences: owners}
	}
	owner := func(kind, name, uid string) metav1.OwnerReference {
		return metav1.OwnerReference{Kind: kind, Name: name, UID: types.UID(uid)}
	}
	ourES := obj("es-1", t0, owner("PostgreSQLTenant", "app", "tenant-1"))
	retained := &metav1.ObjectMeta{UID: "es-old", CreationTimestamp: metav1.NewTime(t0), Annotations: map[string]string{AnnotationRetained: "ns/app uid tenant-0"}}
	cases := []struct {
		name   string
		es     *metav1.ObjectMeta
		secret *metav1.ObjectMeta
		known  []ESRef
		want   string
	}{
		{name: "nothing exists"},
		{name: "own ExternalSecret, no Secret yet", es: ourES},
		{name: "own ExternalSecret and the Secret it produced", es: ourES, secret: obj("s", t0, owner("ExternalSecret", "es", "es-1"))},
		{name: "produced a second later", es: ourES, secret: obj("s", t0.Add(time.Second), owner("ExternalSecret", "es", "es-1"))},
		{name: "ExternalSecret of another Tenant", es: obj("es-2", t0, owner("PostgreSQLTenant", "dup", "tenant-2")), want: "ExternalSecret ns/es exists and is not owned by this Tenant (owned by PostgreSQLTenant dup uid tenant-2)"},
		{name: "retained from an earlier Tenant of the same name", es: retained, want: "retained from Tenant ns/app uid tenant-0"},
		{name: "foreign Secret, no owner", secret: obj("s", t0), want: "Secret ns/target exists and was not produced by this Tenant's ExternalSecret (no owner)"},
		{name: "foreign Secret next to our ExternalSecret", es: ourES, secret: obj("s", t0.Add(time.Second)), want: "not produced"},
		{name: "Secret adopted by our ExternalSecret (older than it)", es: ourES, secret: obj("s", t0.Add(-time.Second), owner("ExternalSecret", "es", "es-1")), want: "not produced"},
		{name: "same ExternalSecret name, other UID", secret: obj("s", t0, owner("ExternalSecret", "es", "es-9")), want: "not produced"},
		{name: "our earlier ExternalSecret (journal) is gone, its Secret remains", secret: obj("s", t0, owner("ExternalSecret", "es", "es-0")),
			known: []ESRef{{UID: "es-0", Created: t0.Unix()}}},
		{name: "earlier ExternalSecret known, but the Secret is older", secret: obj("s", t0.Add(-time.Minute), owner("ExternalSecret", "es", "es-0")),
			known: []ESRef{{UID: "es-0", Created: t0.Unix()}}, want: "not produced"},
		{name: "owner of another kind with a known UID", secret: obj("s", t0, owner("Deployment", "x", "es-0")),
			known: []ESRef{{UID: "es-0", Created: t0.Unix()}}, want: "not produced"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var es, secret metav1.Object
			if c.es != nil {
				es = c.es
			}
			if c.secret != nil {
				secret = c.secret
			}
			got := TargetTaken("ns", "es", "target", es, secret, "tenant-1", c.known)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}
