package database

// Payloads of the Instance operations (ObserveInstance, BootstrapRegistry).
// Fields whose names mention a secret carry the tag `journal:"ref"`: they
// hold a name, key or version, never a value (see journal.RegisterPayload).

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
	SecretName  string `json:"secretName" journal:"ref"`
	UsernameKey string `json:"usernameKey"`
	PasswordKey string `json:"passwordKey" journal:"ref"`
	// ResourceVersion of the Secret when the intent was decided; outcomes
	// report the one they actually used, so stale observations are detected.
	ResourceVersion string `json:"resourceVersion"`
}

// InstanceIntent is the payload of ObserveInstance and BootstrapRegistry intents.
type InstanceIntent struct {
	Endpoint     Endpoint           `json:"endpoint"`
	AdminCredRef AdminCredentialRef `json:"adminCredentialRef" journal:"ref"`
}

// ObserveOutcome is the payload of an ObserveInstance outcome.
type ObserveOutcome struct {
	ServerVersion   string        `json:"serverVersion,omitempty"`
	Registry        RegistryState `json:"registry,omitempty"`
	RegistryVersion int32         `json:"registryVersion,omitempty"`
	// ResourceVersion of the admin Secret the observation used.
	SecretResourceVersion string `json:"secretResourceVersion,omitempty" journal:"ref"`
	// MissingPrivileges lists what the admin role lacks (Failed/InsufficientPrivileges).
	MissingPrivileges []string `json:"missingPrivileges,omitempty"`
}

// BootstrapOutcome is the payload of a BootstrapRegistry outcome.
type BootstrapOutcome struct {
	RegistryVersion       int32  `json:"registryVersion"`
	MigrationsApplied     int32  `json:"migrationsApplied"`
	SecretResourceVersion string `json:"secretResourceVersion,omitempty" journal:"ref"`
}
