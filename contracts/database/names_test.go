package database

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Every label value derived from a Tenant name the API accepts (a DNS
// subdomain of up to 253 characters) is a valid label value; short names
// are kept as they are; different long names give different values.
func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 63)
	cases := []string{"app", long, long + "b", strings.Repeat("a.b-c", 50) + "abc", strings.Repeat("x", 253),
		strings.Repeat("a", 51) + "-" + strings.Repeat("b", 100), strings.Repeat("a", 52) + "." + strings.Repeat("b", 100)}
	seen := map[string]string{}
	for _, n := range cases {
		if len(n) > 253 {
			t.Fatalf("test name too long: %d", len(n))
		}
		v := LabelValue(n)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("LabelValue(%d chars) = %q: %v", len(n), v, errs)
		}
		if len(n) <= 63 && v != n {
			t.Errorf("a valid label value was changed: %q -> %q", n, v)
		}
		if prev, ok := seen[v]; ok && prev != n {
			t.Errorf("%q and %q give the same label value %q", prev, n, v)
		}
		seen[v] = n
	}
	if errs := ValidateNames(ExternalSecretName("shared", strings.Repeat("a", 235)), strings.Repeat("s", 253), strings.Repeat("a", 253)); len(errs) > 0 {
		t.Errorf("longest names: %v", errs)
	}
	if errs := ValidateNames(strings.Repeat("a", 250)+"-postgresql", "app", "app"); len(errs) == 0 {
		t.Error("an ExternalSecret name over 253 characters was accepted")
	}
}

// The ExternalSecret name stays <instanceRef>-<name>-postgresql up to ESO's
// limit and is a shortened, distinct, valid name beyond it.
func TestExternalSecretName(t *testing.T) {
	if got := ExternalSecretName("shared", "app"); got != "shared-app-postgresql" {
		t.Fatalf("short name changed: %s", got)
	}
	exact := strings.Repeat("b", MaxExternalSecretName-len("shared--postgresql"))
	if got := ExternalSecretName("shared", exact); got != "shared-"+exact+"-postgresql" {
		t.Fatalf("a name of exactly %d characters changed: %s", MaxExternalSecretName, got)
	}
	seen := map[string]bool{}
	for _, c := range [][2]string{{"shared", strings.Repeat("m.", 116) + "235"}, {"shared", strings.Repeat("m.", 116) + "236"},
		{strings.Repeat("i", 173) + "-inst", strings.Repeat("q", 60) + "-63"}, {strings.Repeat("i", 80) + ".x", strings.Repeat("q", 100)}} {
		n := ExternalSecretName(c[0], c[1])
		if len(n) > MaxExternalSecretName || len(validation.IsDNS1123Subdomain(n)) > 0 || !strings.HasSuffix(n, "-postgresql") {
			t.Errorf("ExternalSecretName(%d, %d chars) = %q (%d chars): %v", len(c[0]), len(c[1]), n, len(n), validation.IsDNS1123Subdomain(n))
		}
		if seen[n] {
			t.Errorf("duplicate %s", n)
		}
		seen[n] = true
		if len("externalsecrets.external-secrets.io/"+n) > 128 {
			t.Errorf("ESO's field manager for %s is over 128 characters", n)
		}
	}
}
