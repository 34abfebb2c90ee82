package v1alpha1

// ConditionReady is the only condition type the database kinds promise.
// Automation must read it (for example `kubectl wait --for=condition=Ready`)
// instead of status.phase.
const ConditionReady = "Ready"

// Condition reasons of the Ready condition (api-reference.md "Condition").
// A Ready=True condition always carries ReasonReady; in-progress work is
// Unknown/ReasonReconciling; a known unmet contract is False with one of the
// other reasons.
const (
	// ReasonReconciling: work is in progress (both kinds).
	ReasonReconciling = "Reconciling"
	// ReasonReady: converged (both kinds).
	ReasonReady = "Ready"
	// ReasonInvalidSpec: the spec can not be satisfied until it is changed (both kinds).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonImmutableField: an immutable Tenant field was changed after the first external write.
	ReasonImmutableField = "ImmutableField"
	// ReasonDependencyUnavailable: a backend is unreachable; retried automatically (both kinds).
	ReasonDependencyUnavailable = "DependencyUnavailable"
	// ReasonAuthenticationFailed: admin credentials or TLS identity were rejected (Instance).
	ReasonAuthenticationFailed = "AuthenticationFailed"
	// ReasonInsufficientPrivileges: the admin role lacks a required privilege (Instance).
	ReasonInsufficientPrivileges = "InsufficientPrivileges"
	// ReasonInstanceNotReady: the referenced Instance is missing, deleting or not Ready (Tenant).
	ReasonInstanceNotReady = "InstanceNotReady"
	// ReasonConflict: a name or ownership conflict needs a human (Tenant).
	ReasonConflict = "Conflict"
	// ReasonProvisioningFailed: a provisioning step failed; retried with back-off (Tenant).
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonCredentialProjectionFailed: ESO has not projected the credential Secret (Tenant).
	ReasonCredentialProjectionFailed = "CredentialProjectionFailed"
	// ReasonLoginRejected: PostgreSQL refused the Tenant role's login before
	// checking its password (no pg_hba.conf entry, or the role may not log in) (Tenant).
	ReasonLoginRejected = "LoginRejected"
	// ReasonDeletionBlocked: deletion waits for something outside Ayatori
	// (sessions the admin role may not end, objects the role still owns
	// elsewhere); the message names it and the finalizer stays (Tenant).
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonNamespaceNotAllowed: the Tenant's namespace is not in its
	// Instance's spec.allowedNamespaces.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
)
