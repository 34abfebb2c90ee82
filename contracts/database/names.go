package database

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Names Ayatori derives for a Tenant's objects in Kubernetes. The
// projector validates them before the first external write; the
// ExternalSecret executor uses them.

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

// ValidateNames checks every name derived for a Tenant's ExternalSecret before
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
