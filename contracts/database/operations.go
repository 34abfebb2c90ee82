package database

// Domain is the journal domain of this contract: the subject token of
// database.ayatori.ddupan.top (journal.Domain of the API group).
const Domain = "database"

// Instance operations (executed by executors/postgresql).
const (
	// OpObserveInstance: connect with the admin credentials, read the
	// server version, check the admin role's privileges and the registry.
	OpObserveInstance = "ObserveInstance"
	// OpBootstrapRegistry: create or migrate the ownership registry schema
	// under an advisory lock, then read it back.
	OpBootstrapRegistry = "BootstrapRegistry"
)

// Tenant operations executed by executors/postgresql (specification §7,
// §8.3, §11). Each is idempotent and re-checks the ownership registry
// before it writes.
const (
	// OpCheckExtensions is read-only: every requested extension must be in
	// pg_available_extensions before the first external write.
	OpCheckExtensions  = "CheckExtensions"
	OpClaimOwnership   = "ClaimOwnership"
	OpCreateRole       = "CreateRole"
	OpCreateDatabase   = "CreateDatabase"
	OpEnsureExtensions = "EnsureExtensions"
	OpVerifyLogin      = "VerifyLogin"
	// OpObserveTenant is the periodic re-check of a Ready Tenant, one
	// intent for every PostgreSQL fact: the registry row is managed, the
	// role and database are the ones Ayatori created (by OID), the role
	// logs in to its database with the password from OpenBao (by host and
	// by hostaddr) without CREATEDB/CREATEROLE/SUPERUSER, and every
	// requested extension is installed. Read-only; any fact that does not
	// hold fails it, and the projector then re-runs every step.
	OpObserveTenant    = "ObserveTenant"
	OpRetainOwnership  = "RetainOwnership"
	OpDisableLogin     = "DisableLogin"
	OpDropDatabase     = "DropDatabase"
	OpDropRole         = "DropRole"
	OpReleaseOwnership = "ReleaseOwnership"
)

// Tenant operations executed by executors/openbao.
const (
	// OpWriteCredential generates the Tenant's password once and writes the
	// seven keys to KV v2 with cas=0 and ownership custom_metadata; an
	// existing record of the same Tenant is reused (never a second password).
	OpWriteCredential = "WriteCredential"
	// OpDestroyCredential destroys the record with all versions and metadata
	// after proving ownership, then reads back that it is gone.
	OpDestroyCredential = "DestroyCredential"
)

// Tenant operations executed by executors/externalsecrets.
const (
	OpEnsureExternalSecret = "EnsureExternalSecret"
	OpObserveProjection    = "ObserveProjection"
	OpDeleteExternalSecret = "DeleteExternalSecret"
	// OpRetainExternalSecret releases the ExternalSecret of a Tenant deleted
	// with deletionPolicy Retain: the owner reference to the Tenant is
	// removed (so a garbage collector never deletes it, and with it the
	// application's Secret) and the ExternalSecret is marked retained. It
	// keeps projecting the retained KV record; it is unmanaged from then on
	// (docs/decisions/0004-retained-externalsecret.md).
	OpRetainExternalSecret = "RetainExternalSecret"
)

// Journal notes written by the Tenant projector.
const (
	// NoteRevalidate starts a new pass over every step (status lost, or the
	// periodic drift check): steps are considered done only after it.
	NoteRevalidate = "Revalidate"
	// NoteDeletionStarted records the deletion policy in force when
	// deletion began (payload DeletionNote).
	NoteDeletionStarted = "DeletionStarted"
)

// PostgreSQLOperations are the operations executors/postgresql owns.
var PostgreSQLOperations = []string{OpObserveInstance, OpBootstrapRegistry,
	OpCheckExtensions, OpClaimOwnership, OpCreateRole, OpCreateDatabase, OpEnsureExtensions, OpVerifyLogin, OpObserveTenant,
	OpRetainOwnership, OpDisableLogin, OpDropDatabase, OpDropRole, OpReleaseOwnership}

// PersistentOperations run after the Tenant is gone (the Retain policy
// lets the CR go once RetainOwnership is journaled, without waiting for
// PostgreSQL): no projector is left to decide a retry, so their intents are
// retried until they succeed (journal.Dispatcher.Persistent), and their
// executor reports a transient failure (PostgreSQL unreachable) as a
// retry, never as a final outcome.
var PersistentOperations = []string{OpRetainOwnership}

// OpenBaoOperations are the operations executors/openbao owns.
var OpenBaoOperations = []string{OpWriteCredential, OpDestroyCredential}

// ExternalSecretsOperations are the operations executors/externalsecrets owns.
var ExternalSecretsOperations = []string{OpEnsureExternalSecret, OpObserveProjection, OpDeleteExternalSecret, OpRetainExternalSecret}
