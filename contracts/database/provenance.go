package database

import (
	"fmt"
	"slices"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// An executor acts on an intent only when two things hold: the record's
// proof of origin verifies (the journal checks it), and its parameters are
// what the live objects say now (CheckIntent, run by the domain's guard
// before every handler). The second check bounds what a stolen signing key
// could do: an intent can name only the endpoint and admin Secret of a
// registered Instance, the names the Tenant's spec derives, and a
// destructive step only of a Tenant that is being deleted with
// deletionPolicy Delete.

// LiveObjects are what the guard read from the API for one intent (from
// the cache, and from the API server before a refusal).
type LiveObjects struct {
	// Instance is, for an Instance operation, the PostgreSQLInstance of the
	// record's name; for a Tenant operation, the one with the intent's
	// InstanceUID (nil: none).
	Instance *databasev1alpha1.PostgreSQLInstance
	// Tenant is, for a Tenant operation, the PostgreSQLTenant of the
	// record's namespace and name (nil: none).
	Tenant *databasev1alpha1.PostgreSQLTenant
	// NamespaceLabels are the labels of the Tenant's namespace (read when
	// the Instance's spec.allowedNamespaces has a selector).
	NamespaceLabels map[string]string
}

// NameConfig is the manager configuration the Tenant's names derive from
// (--openbao-kv-mount, --openbao-tenant-base-path,
// --external-secret-store-name).
type NameConfig struct {
	KVMount, BasePath, StoreName string
}

// destructive operations run only for a Tenant being deleted with
// deletionPolicy Delete; retaining ones for a Tenant being deleted, or
// gone.
var (
	destructiveOperations = []string{OpDeleteExternalSecret, OpDisableLogin, OpDropDatabase, OpDropRole, OpDestroyCredential, OpReleaseOwnership}
	retainOperations      = []string{OpRetainOwnership, OpRetainExternalSecret}
)

// CheckIntent compares a trusted intent of the domain with the live
// objects and returns why it must not run ("" when it may). It reads only
// its arguments.
func CheckIntent(rec journal.Record, live LiveObjects, cfg NameConfig) string {
	switch rec.Object.Kind {
	case "PostgreSQLInstance":
		return checkInstanceIntent(rec, live.Instance)
	case "PostgreSQLTenant":
		return checkTenantIntent(rec, live, cfg)
	}
	return fmt.Sprintf("no %s operation on kind %q", Domain, rec.Object.Kind)
}

func checkInstanceIntent(rec journal.Record, inst *databasev1alpha1.PostgreSQLInstance) string {
	if inst == nil || string(inst.UID) != rec.Object.UID {
		return fmt.Sprintf("the PostgreSQLInstance %s with uid %s does not exist", rec.Object.Name, rec.Object.UID)
	}
	var in InstanceIntent
	if err := rec.DecodePayload(&in); err != nil {
		return "the payload does not decode"
	}
	return targetMismatch(inst, in.Endpoint, in.AdminCredRef)
}

// targetMismatch compares an intent's endpoint and admin Secret reference
// with the Instance's spec.
func targetMismatch(inst *databasev1alpha1.PostgreSQLInstance, ep Endpoint, ref AdminCredentialRef) string {
	wantEP, wantRef := InstanceTarget(inst.Spec)
	if ep != wantEP {
		return fmt.Sprintf("the intent's endpoint %s:%d (hostaddr %q, database %s, sslMode %s) is not PostgreSQLInstance %s's", ep.Host, ep.Port,
			ep.HostAddr, ep.Database, ep.SSLMode, inst.Name)
	}
	ref.ResourceVersion = ""
	if ref != wantRef {
		return fmt.Sprintf("the intent's admin credential reference (Secret %s) is not PostgreSQLInstance %s's", ref.SecretName, inst.Name)
	}
	return ""
}

func checkTenantIntent(rec journal.Record, live LiveObjects, cfg NameConfig) string {
	t := live.Tenant
	gone := t == nil || string(t.UID) != rec.Object.UID
	switch {
	case gone && !slices.Contains(retainOperations, rec.Operation):
		return fmt.Sprintf("the PostgreSQLTenant %s/%s with uid %s does not exist", rec.Object.Namespace, rec.Object.Name, rec.Object.UID)
	case slices.Contains(destructiveOperations, rec.Operation) && t.DeletionTimestamp == nil:
		return fmt.Sprintf("%s of a PostgreSQLTenant that is not being deleted", rec.Operation)
	case slices.Contains(destructiveOperations, rec.Operation) && t.Spec.DeletionPolicy != databasev1alpha1.DeletionPolicyDelete:
		return fmt.Sprintf("%s of a PostgreSQLTenant whose deletionPolicy is %s", rec.Operation, t.Spec.DeletionPolicy)
	case !gone && slices.Contains(retainOperations, rec.Operation) && t.DeletionTimestamp == nil:
		return fmt.Sprintf("%s of a PostgreSQLTenant that is not being deleted", rec.Operation)
	}
	var names TenantNames
	if !gone {
		names = DeriveTenantNames(t, cfg.BasePath)
	}
	switch {
	case slices.Contains(OpenBaoOperations, rec.Operation):
		var in CredentialIntent
		if err := rec.DecodePayload(&in); err != nil {
			return "the payload does not decode"
		}
		if why := tenantInstance(live, t, gone, in.InstanceUID); why != "" {
			return why
		}
		ep, _ := InstanceTarget(live.Instance.Spec)
		if in.Host != ep.Host || in.HostAddr != ep.HostAddr || in.Port != ep.Port || in.SSLMode != ep.SSLMode {
			return fmt.Sprintf("the credential's endpoint is not PostgreSQLInstance %s's", live.Instance.Name)
		}
		if !gone && (in.Mount != cfg.KVMount || in.Path != names.KVPath || in.Username != names.Role || in.Database != names.Database) {
			return fmt.Sprintf("the credential record %s/%s (role %s, database %s) is not the one the Tenant's spec names", in.Mount, in.Path, in.Username, in.Database)
		}
	case slices.Contains(ExternalSecretsOperations, rec.Operation):
		var in ProjectionIntent
		if err := rec.DecodePayload(&in); err != nil {
			return "the payload does not decode"
		}
		if in.StoreName != cfg.StoreName || in.OwnerAPIVersion != databasev1alpha1.GroupVersion.String() || in.OwnerKind != "PostgreSQLTenant" {
			return fmt.Sprintf("the ExternalSecret would project from store %q for %s %s, not the manager's", in.StoreName, in.OwnerAPIVersion, in.OwnerKind)
		}
		if !gone && (in.ExternalSecret != names.ExternalSecret || in.TargetSecretName != names.Secret || in.RemoteKey != names.KVPath) {
			return fmt.Sprintf("the ExternalSecret %s (Secret %s, key %s) is not the one the Tenant's spec names", in.ExternalSecret, in.TargetSecretName, in.RemoteKey)
		}
	default:
		var in TenantIntent
		if err := rec.DecodePayload(&in); err != nil {
			return "the payload does not decode"
		}
		if why := tenantInstance(live, t, gone, in.InstanceUID); why != "" {
			return why
		}
		if why := targetMismatch(live.Instance, in.Endpoint, in.AdminCredRef); why != "" {
			return why
		}
		if gone {
			return ""
		}
		if in.Database != names.Database || in.Role != names.Role || in.CredentialMount != cfg.KVMount || in.CredentialPath != names.KVPath {
			return fmt.Sprintf("database %s, role %s, credential %s/%s are not what the Tenant's spec names", in.Database, in.Role, in.CredentialMount, in.CredentialPath)
		}
		want := slices.Clone(t.Spec.Extensions)
		slices.Sort(want)
		if !slices.Equal(in.Extensions, want) && !(len(in.Extensions) == 0 && len(want) == 0) {
			return fmt.Sprintf("extensions %v are not the Tenant's %v", in.Extensions, want)
		}
	}
	return ""
}

// tenantInstance checks the Instance an intent of Tenant t runs on: it
// exists with the intent's UID and, unless the Tenant is being deleted or
// gone (deletion runs on the Instance it was provisioned on, whatever
// spec.instanceRef says now, and whatever its allow-list says), it is the
// one spec.instanceRef names and admits the Tenant's namespace.
func tenantInstance(live LiveObjects, t *databasev1alpha1.PostgreSQLTenant, gone bool, instanceUID string) string {
	inst := live.Instance
	if inst == nil || string(inst.UID) != instanceUID {
		return fmt.Sprintf("no PostgreSQLInstance has uid %s", instanceUID)
	}
	if gone || t.DeletionTimestamp != nil {
		return ""
	}
	if inst.Name != t.Spec.InstanceRef {
		return fmt.Sprintf("PostgreSQLInstance %s is not the Tenant's spec.instanceRef %s", inst.Name, t.Spec.InstanceRef)
	}
	if ok, why := NamespaceAllowed(inst, t.Namespace, live.NamespaceLabels); !ok {
		return why
	}
	return ""
}

// IntentInstanceUID returns the Instance UID a Tenant intent names ("" for
// the ExternalSecret operations, which name none): the guard reads that
// Instance for CheckIntent.
func IntentInstanceUID(rec journal.Record) string {
	switch {
	case slices.Contains(ExternalSecretsOperations, rec.Operation):
		return ""
	case slices.Contains(OpenBaoOperations, rec.Operation):
		var in CredentialIntent
		_ = rec.DecodePayload(&in)
		return in.InstanceUID
	}
	var in TenantIntent
	_ = rec.DecodePayload(&in)
	return in.InstanceUID
}
