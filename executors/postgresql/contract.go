// Package postgresql is the PostgreSQL executor of the database domain: it
// executes journal intents against a registered PostgreSQL server with one
// connection pool per Instance, TLS verify-full by default, SQLSTATE-based
// error classification, and the ownership registry (tern migrations).
//
// contract.go is the executor's contract with the projector: operation
// names and the typed, secret-free journal payloads.
package postgresql

import "git.ddupan.top/panxiao81/ayatori/journal"

// Operations executed here.
const (
	// OpObserveInstance: connect with the admin credentials, read the
	// server version, check the admin role's privileges and the registry.
	OpObserveInstance = "ObserveInstance"
	// OpBootstrapRegistry: create or migrate the ownership registry schema
	// under an advisory lock, then read it back.
	OpBootstrapRegistry = "BootstrapRegistry"
)

// RegistrySchema is the schema holding the ownership registry.
const RegistrySchema = "postgresql_tenant_operator"

// RegistryState is what an observation found of the registry.
type RegistryState string

// Registry states.
const (
	RegistryAbsent         RegistryState = "Absent"
	RegistryNeedsMigration RegistryState = "NeedsMigration"
	RegistryUsable         RegistryState = "Usable"
)

// Endpoint is the connection target an intent was decided for (a copy of
// the Instance spec at decision time). It carries no credential.
type Endpoint struct {
	Host     string `json:"host"`
	HostAddr string `json:"hostaddr"`
	Port     int32  `json:"port"`
	Database string `json:"database"`
	SSLMode  string `json:"sslMode"`
}

// AdminCredentialRef names the admin Secret (always in the controller
// namespace) and its keys; never the values.
type AdminCredentialRef struct {
	SecretName  string `json:"secretName"`
	UsernameKey string `json:"usernameKey"`
	PasswordKey string `json:"passwordKey"`
	// ResourceVersion of the Secret when the intent was decided; outcomes
	// report the one they actually used, so stale observations are detected.
	ResourceVersion string `json:"resourceVersion"`
}

// InstanceIntent is the payload of ObserveInstance and BootstrapRegistry intents.
type InstanceIntent struct {
	Endpoint     Endpoint           `json:"endpoint"`
	AdminCredRef AdminCredentialRef `json:"adminCredentialRef"`
}

// ObserveOutcome is the payload of an ObserveInstance outcome.
type ObserveOutcome struct {
	ServerVersion   string        `json:"serverVersion,omitempty"`
	Registry        RegistryState `json:"registry,omitempty"`
	RegistryVersion int32         `json:"registryVersion,omitempty"`
	// ResourceVersion of the admin Secret the observation used.
	SecretResourceVersion string `json:"secretResourceVersion,omitempty"`
	// MissingPrivileges lists what the admin role lacks (Failed/InsufficientPrivileges).
	MissingPrivileges []string `json:"missingPrivileges,omitempty"`
}

// BootstrapOutcome is the payload of a BootstrapRegistry outcome.
type BootstrapOutcome struct {
	RegistryVersion       int32  `json:"registryVersion"`
	MigrationsApplied     int32  `json:"migrationsApplied"`
	SecretResourceVersion string `json:"secretResourceVersion,omitempty"`
}

func init() {
	journal.RegisterPayload(OpObserveInstance, journal.TypeIntent, InstanceIntent{})
	journal.RegisterPayload(OpBootstrapRegistry, journal.TypeIntent, InstanceIntent{})
	journal.RegisterPayload(OpObserveInstance, journal.TypeOutcome, ObserveOutcome{})
	journal.RegisterPayload(OpBootstrapRegistry, journal.TypeOutcome, BootstrapOutcome{})
}
