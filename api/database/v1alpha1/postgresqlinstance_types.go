package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SSLMode is the libpq sslmode used for every connection to an Instance.
// +kubebuilder:validation:Enum=disable;require;verify-ca;verify-full
type SSLMode string

// SSL modes accepted by the API. verify-full is the default; weaker modes are
// only used when the Instance states them explicitly (no implicit downgrade).
const (
	SSLModeDisable    SSLMode = "disable"
	SSLModeRequire    SSLMode = "require"
	SSLModeVerifyCA   SSLMode = "verify-ca"
	SSLModeVerifyFull SSLMode = "verify-full"
)

// PostgreSQLEndpoint is how the controller reaches the PostgreSQL server.
type PostgreSQLEndpoint struct {
	// host is the DNS name of the PostgreSQL server. The server certificate
	// must carry it as a DNS subject alternative name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="host must be a valid DNS name"
	Host string `json:"host"`

	// hostaddr is a single IPv4 or IPv6 address of the server, used to open
	// the TCP connection. The server certificate must carry it as an IP
	// subject alternative name.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="hostaddr must be a single IPv4 or IPv6 address"
	HostAddr string `json:"hostaddr"`

	// port is the TCP port of the server, 1-65535.
	// +optional
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// database is the maintenance database the admin connection opens. It
	// must be a valid PostgreSQL identifier.
	// +optional
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	Database string `json:"database,omitempty"`

	// sslMode is the TLS mode of every connection: disable, require,
	// verify-ca or verify-full (default).
	// +optional
	// +kubebuilder:default=verify-full
	SSLMode SSLMode `json:"sslMode,omitempty"`
}

// AdminCredentialReference names the Secret holding the admin role's
// credentials. The Secret always lives in the controller's own namespace; no
// namespace or OpenBao path can be given.
type AdminCredentialReference struct {
	// name is the name of the Secret in the controller namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="name must be a valid Secret name"
	Name string `json:"name"`

	// usernameKey is the key of the Secret data holding the admin user name.
	// +optional
	// +kubebuilder:default=username
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	UsernameKey string `json:"usernameKey,omitempty"`

	// passwordKey is the key of the Secret data holding the admin password.
	// +optional
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	PasswordKey string `json:"passwordKey,omitempty"`
}

// PostgreSQLInstanceSpec registers an existing PostgreSQL server. Endpoint and
// credential reference may change; a change triggers re-validation.
type PostgreSQLInstanceSpec struct {
	// endpoint is how the controller reaches the server.
	// +required
	Endpoint PostgreSQLEndpoint `json:"endpoint"`

	// adminCredentialRef names the admin credential Secret in the controller namespace.
	// +required
	AdminCredentialRef AdminCredentialReference `json:"adminCredentialRef"`

	// allowedNamespaces limits whose PostgreSQLTenants may use this
	// Instance: a Tenant's namespace must be listed in names or match
	// selector. Unset: every namespace (the homelab default; set it on a
	// platform shared by teams). A Tenant outside it is Ready=False with
	// reason NamespaceNotAllowed and nothing is written for it; a Tenant
	// provisioned before its namespace was removed can still be deleted.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`
}

// AllowedNamespaces selects namespaces by name or by label. An empty value
// (neither set) allows none.
type AllowedNamespaces struct {
	// names are namespace names.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Names []string `json:"names,omitempty"`

	// selector selects namespaces by their labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// InstancePhase is the controller's checkpoint for an Instance. Automation
// must read the Ready condition instead.
// +kubebuilder:validation:Enum=Pending;Validating;InitializingRegistry;Ready;Deleting
type InstancePhase string

// Instance phases (specification §8.2).
const (
	InstancePhasePending              InstancePhase = "Pending"
	InstancePhaseValidating           InstancePhase = "Validating"
	InstancePhaseInitializingRegistry InstancePhase = "InitializingRegistry"
	InstancePhaseReady                InstancePhase = "Ready"
	InstancePhaseDeleting             InstancePhase = "Deleting"
)

// PostgreSQLInstanceStatus is written by the controller only. It never holds
// a password, token, admin user name or connection string.
type PostgreSQLInstanceStatus struct {
	// observedGeneration is the generation of the last reconcile that reached a conclusion.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is the controller's state-machine checkpoint.
	// +optional
	Phase InstancePhase `json:"phase,omitempty"`

	// postgresqlVersion is the server version as read back from the server
	// (server_version); informational, not parsed by clients.
	// +optional
	PostgreSQLVersion string `json:"postgresqlVersion,omitempty"`

	// conditions holds exactly one condition of type Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PostgreSQLInstance registers an existing PostgreSQL server that Tenants can
// be provisioned on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pginstance,categories=ayatori
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint.host`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PostgreSQLInstance struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired registration.
	// +required
	Spec PostgreSQLInstanceSpec `json:"spec"`

	// status is the observed state, written by the controller.
	// +optional
	Status PostgreSQLInstanceStatus `json:"status,omitempty"`
}

// PostgreSQLInstanceList is a list of PostgreSQLInstance.
//
// +kubebuilder:object:root=true
type PostgreSQLInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgreSQLInstance `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PostgreSQLInstance{}, &PostgreSQLInstanceList{})
}
