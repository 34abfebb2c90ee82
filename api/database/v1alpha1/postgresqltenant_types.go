package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionPolicy says what happens to a Tenant's external resources when the
// Tenant is deleted (specification §11).
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

// Deletion policies. Retain is the default.
const (
	// DeletionPolicyRetain keeps database, role and KV record; the registry
	// record is marked unmanaged (retained).
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyDelete removes ExternalSecret, database, role and KV
	// record after proving ownership, in the order of specification §11.2.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// TenantCredential configures the projected credential Secret.
type TenantCredential struct {
	// secretName is the name of the Kubernetes Secret ESO writes in the
	// Tenant's namespace. Default: `<instanceRef>-<metadata.name>-postgresql`
	// (computed by the controller, the field stays omitted). Immutable after
	// the first external write.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="secretName must be a valid Secret name"
	SecretName string `json:"secretName,omitempty"`
}

// PostgreSQLTenantSpec requests a database, its owner LOGIN role, extensions
// and a credential for one application.
//
// instanceRef, database, loginRole and credential.secretName are immutable
// once the Tenant has left phase Pending (the first external write);
// extensions may only grow.
type PostgreSQLTenantSpec struct {
	// instanceRef is the name of the cluster-scoped PostgreSQLInstance.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=241
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="instanceRef must be a valid object name"
	InstanceRef string `json:"instanceRef"`

	// database is the name of the tenant database. Default: metadata.name
	// (computed by the controller; the effective value is in
	// status.database). Must match ^[a-z][a-z0-9_]{0,62}$ and must not be a
	// reserved name (postgres, template0, template1).
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'template0', 'template1'])",message="database must not be a reserved name"
	Database string `json:"database,omitempty"`

	// loginRole is the database owner and application LOGIN role. Default:
	// metadata.name (effective value in status.loginRole). Must match
	// ^[a-z][a-z0-9_]{0,62}$, must not start with pg_ and must not be
	// postgres.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('pg_') && self != 'postgres' && self != 'public'",message="loginRole must not be a reserved role name"
	LoginRole string `json:"loginRole,omitempty"`

	// extensions is the set of PostgreSQL extensions installed in the tenant
	// database. Each must be installable on the Instance
	// (pg_available_extensions). After provisioning the set may only grow;
	// nothing is ever dropped.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9_-]{0,62}$`
	Extensions []string `json:"extensions,omitempty"`

	// credential configures the projected credential Secret.
	// +optional
	Credential TenantCredential `json:"credential,omitempty"`

	// deletionPolicy is Retain (default) or Delete. It may change until
	// deletion begins; the value seen when deletion began stays in force.
	// +optional
	// +kubebuilder:default=Retain
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// TenantPhase is the controller's checkpoint for a Tenant. It picks the
// candidate next step only; every step is checked against external facts.
// +kubebuilder:validation:Enum=Pending;Planned;CredentialCreated;RoleCreated;DatabaseCreated;ExternalSecretCreated;CredentialProjected;Ready;Deleting
type TenantPhase string

// Tenant phases (specification §9).
const (
	TenantPhasePending               TenantPhase = "Pending"
	TenantPhasePlanned               TenantPhase = "Planned"
	TenantPhaseCredentialCreated     TenantPhase = "CredentialCreated"
	TenantPhaseRoleCreated           TenantPhase = "RoleCreated"
	TenantPhaseDatabaseCreated       TenantPhase = "DatabaseCreated"
	TenantPhaseExternalSecretCreated TenantPhase = "ExternalSecretCreated"
	TenantPhaseCredentialProjected   TenantPhase = "CredentialProjected"
	TenantPhaseReady                 TenantPhase = "Ready"
	TenantPhaseDeleting              TenantPhase = "Deleting"
)

// SecretReference names a Secret in the Tenant's own namespace.
type SecretReference struct {
	// name of the Secret.
	// +optional
	Name string `json:"name,omitempty"`
}

// TenantCredentialStatus tells consumers where the credential is.
type TenantCredentialStatus struct {
	// secretRef names the ESO target Secret in the Tenant's namespace.
	// +optional
	SecretRef SecretReference `json:"secretRef,omitempty"`

	// openBaoURL is the full KV v2 API URL of the credential record,
	// `<consumer-address>/v1/<mount>/data/<base-path>/<namespace>/<name>`.
	// It never contains a token, user name, password or query credential.
	// +optional
	OpenBaoURL string `json:"openBaoURL,omitempty"`
}

// PostgreSQLTenantStatus is written by the controller only and never holds a
// credential value.
type PostgreSQLTenantStatus struct {
	// observedGeneration is the generation of the last reconcile that reached a conclusion.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is the controller's state-machine checkpoint.
	// +optional
	Phase TenantPhase `json:"phase,omitempty"`

	// database is the effective database name (after defaulting).
	// +optional
	Database string `json:"database,omitempty"`

	// loginRole is the effective owner/login role name (after defaulting).
	// +optional
	LoginRole string `json:"loginRole,omitempty"`

	// databaseOID is the database OID read back from pg_database; diagnostic only.
	// +optional
	DatabaseOID uint32 `json:"databaseOID,omitempty"`

	// credential tells consumers where the credential is.
	// +optional
	Credential TenantCredentialStatus `json:"credential,omitempty"`

	// conditions holds exactly one condition of type Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PostgreSQLTenant gives an application its own database, owner LOGIN role,
// extensions and a credential stored in OpenBao and projected by ESO.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pgtenant,categories=ayatori
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.spec.instanceRef`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.status.database`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.credential.secretRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.spec.instanceRef) + size(self.metadata.name) <= 241",message="spec.instanceRef and metadata.name together must not exceed 241 characters",fieldPath=".spec.instanceRef",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec.instanceRef == oldSelf.spec.instanceRef",message="spec.instanceRef is immutable after provisioning started",fieldPath=".spec.instanceRef",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || has(self.spec.database) == has(oldSelf.spec.database) && (!has(self.spec.database) || self.spec.database == oldSelf.spec.database)",message="spec.database is immutable after provisioning started",fieldPath=".spec.database",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || has(self.spec.loginRole) == has(oldSelf.spec.loginRole) && (!has(self.spec.loginRole) || self.spec.loginRole == oldSelf.spec.loginRole)",message="spec.loginRole is immutable after provisioning started",fieldPath=".spec.loginRole",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || (has(self.spec.credential) && has(self.spec.credential.secretName)) == (has(oldSelf.spec.credential) && has(oldSelf.spec.credential.secretName)) && (!has(self.spec.credential) || !has(self.spec.credential.secretName) || self.spec.credential.secretName == oldSelf.spec.credential.secretName)",message="spec.credential.secretName is immutable after provisioning started",fieldPath=".spec.credential.secretName",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || !has(oldSelf.spec.extensions) || (has(self.spec.extensions) && oldSelf.spec.extensions.all(e, e in self.spec.extensions))",message="spec.extensions may only grow after provisioning started (no extension is ever dropped)",fieldPath=".spec.extensions",reason="FieldValueForbidden"
type PostgreSQLTenant struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired tenant.
	// +required
	Spec PostgreSQLTenantSpec `json:"spec"`

	// status is the observed state, written by the controller.
	// +optional
	Status PostgreSQLTenantStatus `json:"status,omitempty"`
}

// PostgreSQLTenantList is a list of PostgreSQLTenant.
//
// +kubebuilder:object:root=true
type PostgreSQLTenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgreSQLTenant `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PostgreSQLTenant{}, &PostgreSQLTenantList{})
}
