// Package database holds the projectors (reconcilers) of the database
// domain: PostgreSQLInstance and PostgreSQLTenant. Pure decision code
// (rules.go, *_decide.go) does no I/O and is table-tested; the reconcilers
// read the object, the journal and the facts they need, ask the decision
// code what to do, append intents to the journal and write status.
package database

import (
	"fmt"
	"net"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// identifierPattern is the PostgreSQL identifier contract of v1alpha1
// (specification §6, api-reference.md): lower-case letters, digits and
// underscores, starting with a letter, at most 63 bytes.
var identifierPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// reservedDatabases may never be a tenant database.
var reservedDatabases = map[string]bool{"postgres": true, "template0": true, "template1": true}

// reservedRoles may never be a tenant role (in addition to the pg_ prefix).
var reservedRoles = map[string]bool{"postgres": true, "public": true, "current_user": true, "session_user": true,
	"current_role": true, "none": true}

// ValidateIdentifier checks a PostgreSQL identifier (database or role name).
// what names the field in the error ("database", "loginRole", ...).
func ValidateIdentifier(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s must not be empty", what)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s must not contain NUL", what)
	case len(s) > 63:
		return fmt.Errorf("%s %q is longer than 63 characters", what, s)
	case !identifierPattern.MatchString(s):
		return fmt.Errorf("%s %q must match ^[a-z][a-z0-9_]{0,62}$ (lower-case letters, digits, underscore)", what, s)
	}
	return nil
}

// ValidateDatabaseName checks a tenant database name, rejecting reserved names.
func ValidateDatabaseName(s string) error {
	if err := ValidateIdentifier("database", s); err != nil {
		return err
	}
	if reservedDatabases[s] {
		return fmt.Errorf("database %q is reserved", s)
	}
	return nil
}

// ValidateRoleName checks a tenant login role name, rejecting reserved names
// and the pg_ prefix (reserved by PostgreSQL for system roles).
func ValidateRoleName(s string) error {
	if err := ValidateIdentifier("loginRole", s); err != nil {
		return err
	}
	if reservedRoles[s] || strings.HasPrefix(s, "pg_") {
		return fmt.Errorf("loginRole %q is reserved", s)
	}
	return nil
}

// ValidateInstanceSpec checks an Instance spec before any side effect:
// endpoint (DNS host, single IP hostaddr, port, admin database identifier,
// TLS mode) and the admin credential reference. It returns every problem.
func ValidateInstanceSpec(spec databasev1alpha1.PostgreSQLInstanceSpec) []string {
	var errs []string
	ep := spec.Endpoint
	if msgs := validation.IsDNS1123Subdomain(ep.Host); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("endpoint.host %q is not a DNS name: %s", ep.Host, strings.Join(msgs, "; ")))
	}
	if net.ParseIP(ep.HostAddr) == nil {
		errs = append(errs, fmt.Sprintf("endpoint.hostaddr %q is not a single IPv4 or IPv6 address", ep.HostAddr))
	}
	if ep.Port < 1 || ep.Port > 65535 {
		errs = append(errs, fmt.Sprintf("endpoint.port %d is outside 1-65535", ep.Port))
	}
	if err := ValidateIdentifier("endpoint.database", ep.Database); err != nil {
		errs = append(errs, err.Error())
	}
	switch ep.SSLMode {
	case databasev1alpha1.SSLModeDisable, databasev1alpha1.SSLModeRequire, databasev1alpha1.SSLModeVerifyCA, databasev1alpha1.SSLModeVerifyFull:
	default:
		errs = append(errs, fmt.Sprintf("endpoint.sslMode %q must be disable, require, verify-ca or verify-full", ep.SSLMode))
	}
	ref := spec.AdminCredentialRef
	if msgs := validation.IsDNS1123Subdomain(ref.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("adminCredentialRef.name %q is not a Secret name: %s", ref.Name, strings.Join(msgs, "; ")))
	}
	for field, key := range map[string]string{"usernameKey": ref.UsernameKey, "passwordKey": ref.PasswordKey} {
		if msgs := validation.IsConfigMapKey(key); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("adminCredentialRef.%s %q is not a Secret key: %s", field, key, strings.Join(msgs, "; ")))
		}
	}
	if ref.UsernameKey != "" && ref.UsernameKey == ref.PasswordKey {
		errs = append(errs, "adminCredentialRef.usernameKey and passwordKey must differ")
	}
	return errs
}

// withDefaults applies the CRD defaults (for objects created without the
// apiserver's defaulting, e.g. in unit tests).
func instanceSpecWithDefaults(spec databasev1alpha1.PostgreSQLInstanceSpec) databasev1alpha1.PostgreSQLInstanceSpec {
	ep, ref := dbcontract.InstanceTarget(spec)
	spec.Endpoint.Port, spec.Endpoint.Database, spec.Endpoint.SSLMode = ep.Port, ep.Database, databasev1alpha1.SSLMode(ep.SSLMode)
	spec.AdminCredentialRef.UsernameKey, spec.AdminCredentialRef.PasswordKey = ref.UsernameKey, ref.PasswordKey
	return spec
}
