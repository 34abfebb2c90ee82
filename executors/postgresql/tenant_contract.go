package postgresql

import "git.ddupan.top/panxiao81/ayatori/journal"

// Tenant operations executed by the PostgreSQL executor (specification
// §7, §8.3, §11). Each is idempotent and re-checks the ownership registry
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
	OpRetainOwnership  = "RetainOwnership"
	OpDisableLogin     = "DisableLogin"
	OpDropDatabase     = "DropDatabase"
	OpDropRole         = "DropRole"
	OpReleaseOwnership = "ReleaseOwnership"
)

// TenantIntent is the payload of every Tenant operation of this executor.
type TenantIntent struct {
	Endpoint     Endpoint           `json:"endpoint"`
	AdminCredRef AdminCredentialRef `json:"adminCredentialRef"`
	InstanceUID  string             `json:"instanceUID"`
	Database     string             `json:"database"`
	Role         string             `json:"role"`
	// CredentialMount and CredentialPath locate the Tenant's KV v2 record.
	CredentialMount string   `json:"credentialMount"`
	CredentialPath  string   `json:"credentialPath"`
	Extensions      []string `json:"extensions,omitempty"`
}

// TenantOutcome is the payload of Tenant operation outcomes.
type TenantOutcome struct {
	// DatabaseOID and RoleOID are the OIDs of the database and role
	// Ayatori created (recorded in the ownership registry).
	DatabaseOID uint32   `json:"databaseOID,omitempty"`
	RoleOID     uint32   `json:"roleOID,omitempty"`
	Extensions  []string `json:"extensions,omitempty"`
	// Skipped explains why nothing was done (e.g. "not owned").
	Skipped string `json:"skipped,omitempty"`
}

func init() {
	for _, op := range []string{OpCheckExtensions, OpClaimOwnership, OpCreateRole, OpCreateDatabase, OpEnsureExtensions, OpVerifyLogin,
		OpRetainOwnership, OpDisableLogin, OpDropDatabase, OpDropRole, OpReleaseOwnership} {
		journal.RegisterPayload(op, journal.TypeIntent, TenantIntent{})
		journal.RegisterPayload(op, journal.TypeOutcome, TenantOutcome{})
	}
}
