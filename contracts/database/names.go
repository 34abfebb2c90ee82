package database

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
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

// MaxKVSegment is the longest KV path segment Ayatori derives. OpenBao's
// file storage keeps every path segment as an encoded file name: segments
// over 107 characters fail with HTTP 500 ("file name too long", measured
// on the test server). 100 keeps a margin and leaves every path that could
// be written before unchanged (a Tenant stuck earlier on another name
// limit keeps its record).
const MaxKVSegment = 100

// KVSegment is the Tenant name as the last KV path segment: the name itself
// up to MaxKVSegment characters, else its first 89 characters, "-" and 10
// hex digits of its SHA-256 (the full name is in the record's metadata).
func KVSegment(name string) string {
	if len(name) <= MaxKVSegment {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:MaxKVSegment-11], ".-") + "-" + hex.EncodeToString(sum[:])[:10]
}

// TenantNames are the effective names of a Tenant's objects: the
// database and role (spec, defaulting to metadata.name), its
// ExternalSecret and target Secret, and its KV path (relative to the KV
// mount). The projector builds every intent from them and the executors
// check every intent against them (CheckIntent).
type TenantNames struct {
	Database, Role, ExternalSecret, Secret, KVPath string
}

// DeriveTenantNames returns t's effective names; basePath is the manager's
// --openbao-tenant-base-path.
func DeriveTenantNames(t *databasev1alpha1.PostgreSQLTenant, basePath string) TenantNames {
	n := TenantNames{Database: t.Spec.Database, Role: t.Spec.LoginRole, Secret: t.Spec.Credential.SecretName}
	if n.Database == "" {
		n.Database = t.Name
	}
	if n.Role == "" {
		n.Role = t.Name
	}
	// The ExternalSecret name is shortened (hashed) where ESO needs it; the
	// default Secret name is always <instanceRef>-<name>-postgresql.
	n.ExternalSecret = ExternalSecretName(t.Spec.InstanceRef, t.Name)
	if n.Secret == "" {
		n.Secret = t.Spec.InstanceRef + "-" + t.Name + "-postgresql"
	}
	n.KVPath = strings.Trim(basePath, "/") + "/" + t.Namespace + "/" + KVSegment(t.Name)
	return n
}

// InstanceTarget is what an Instance's spec says the executors connect to
// and with which admin Secret, defaults applied (port 5432, database
// postgres, sslMode verify-full, keys username and password); the
// ResourceVersion of the reference is left empty.
func InstanceTarget(spec databasev1alpha1.PostgreSQLInstanceSpec) (Endpoint, AdminCredentialRef) {
	ep := Endpoint{Host: spec.Endpoint.Host, HostAddr: spec.Endpoint.HostAddr, Port: spec.Endpoint.Port,
		Database: spec.Endpoint.Database, SSLMode: string(spec.Endpoint.SSLMode)}
	if ep.Port == 0 {
		ep.Port = 5432
	}
	if ep.Database == "" {
		ep.Database = "postgres"
	}
	if ep.SSLMode == "" {
		ep.SSLMode = string(databasev1alpha1.SSLModeVerifyFull)
	}
	ref := AdminCredentialRef{SecretName: spec.AdminCredentialRef.Name, UsernameKey: spec.AdminCredentialRef.UsernameKey,
		PasswordKey: spec.AdminCredentialRef.PasswordKey}
	if ref.UsernameKey == "" {
		ref.UsernameKey = "username"
	}
	if ref.PasswordKey == "" {
		ref.PasswordKey = "password"
	}
	return ep, ref
}

// ReaderServiceAccount is the ServiceAccount ESO logs in to OpenBao with
// for a Tenant's ExternalSecret, in the Tenant's own namespace (referent
// authentication of the ClusterSecretStore): OpenBao lets it read that
// namespace's credential records only. The ExternalSecret executor creates
// it when it is missing.
const ReaderServiceAccount = "ayatori-secrets-reader"
