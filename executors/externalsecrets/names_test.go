package externalsecrets

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
	if errs := ValidateNames(strings.Repeat("a", 241)+"-postgresql", "app", strings.Repeat("a", 253)); len(errs) > 0 {
		t.Errorf("253-character names: %v", errs)
	}
	if errs := ValidateNames(strings.Repeat("a", 250)+"-postgresql", "app", "app"); len(errs) == 0 {
		t.Error("an ExternalSecret name over 253 characters was accepted")
	}
}
