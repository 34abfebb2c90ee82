package database

import (
	"strconv"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
)

// Payloads of the Tenant operations and notes. Fields whose names mention
// a secret carry the tag `journal:"ref"`: they hold a path, name or
// version, never a value (see journal.RegisterPayload).

// TenantIntent is the payload of every Tenant operation of the PostgreSQL
// executor.
type TenantIntent struct {
	Endpoint     Endpoint           `json:"endpoint"`
	AdminCredRef AdminCredentialRef `json:"adminCredentialRef" journal:"ref"`
	InstanceUID  string             `json:"instanceUID"`
	Database     string             `json:"database"`
	Role         string             `json:"role"`
	// CredentialMount and CredentialPath locate the Tenant's KV v2 record.
	CredentialMount string   `json:"credentialMount" journal:"ref"`
	CredentialPath  string   `json:"credentialPath" journal:"ref"`
	Extensions      []string `json:"extensions,omitempty"`
}

// TenantOutcome is the payload of the PostgreSQL executor's Tenant outcomes.
type TenantOutcome struct {
	// DatabaseOID and RoleOID are the OIDs of the database and role
	// Ayatori created (recorded in the ownership registry).
	DatabaseOID uint32   `json:"databaseOID,omitempty"`
	RoleOID     uint32   `json:"roleOID,omitempty"`
	Extensions  []string `json:"extensions,omitempty"`
	// Skipped explains why nothing was done (e.g. "not owned").
	Skipped string `json:"skipped,omitempty"`
}

// CredentialIntent is the payload of WriteCredential / DestroyCredential
// intents. It names where the credential lives and what it describes; it
// has no field for the password.
type CredentialIntent struct {
	Mount       string `json:"mount"`
	Path        string `json:"path"`
	InstanceUID string `json:"instanceUID"`
	Username    string `json:"username"`
	Database    string `json:"database"`
	Host        string `json:"host"`
	HostAddr    string `json:"hostaddr"`
	Port        int32  `json:"port"`
	SSLMode     string `json:"sslmode"`
	// AlreadyIssued: the journal shows that this Tenant's password was
	// generated before or handed to PostgreSQL (a CreateRole was decided),
	// so a role may hold it. The record must then exist: an absent one is a
	// Conflict and nothing is written (specification §6, §8.3: never a
	// second password, never a reset of the role's password).
	AlreadyIssued bool `json:"alreadyIssued,omitempty"`
}

// ConnectionFields returns the six keys besides the password that a
// Tenant's record (and its projected Secret) must hold for in: they follow
// the Instance endpoint and the Tenant's names.
func ConnectionFields(in CredentialIntent) map[string]string {
	return map[string]string{"username": in.Username, "database": in.Database, "host": in.Host, "hostaddr": in.HostAddr,
		"port": strconv.Itoa(int(in.Port)), "sslmode": in.SSLMode}
}

// CredentialOutcome is the payload of a WriteCredential outcome: the KV path
// and version, and whether this write generated the password.
type CredentialOutcome struct {
	Path    string `json:"path"`
	Version int    `json:"version"`
	// Created is true only for the write that generated a new password;
	// the invariant "at most one password-creating write" reads it.
	Created bool `json:"created"`
	// Updated names the connection fields a new version (same password)
	// changed to follow the Instance (host, hostaddr, port, ...).
	Updated []string `json:"updated,omitempty"`
}

// DestroyOutcome is the payload of a DestroyCredential outcome.
type DestroyOutcome struct {
	// Skipped explains why nothing was destroyed (a record that is not
	// this Tenant's).
	Skipped string `json:"skipped,omitempty"`
}

// ProjectionIntent is the payload of the ExternalSecret executor's intents.
type ProjectionIntent struct {
	// ExternalSecret is the ExternalSecret name (ExternalSecretName).
	ExternalSecret string `json:"externalSecret" journal:"ref"`
	// TargetSecretName is the Secret ESO writes.
	TargetSecretName string `json:"targetSecretName" journal:"ref"`
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
	CredentialVersion int `json:"credentialVersion,omitempty" journal:"ref"`
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

// DeletionNote is the payload of a DeletionStarted note.
type DeletionNote struct {
	Policy databasev1alpha1.DeletionPolicy `json:"policy"`
}
