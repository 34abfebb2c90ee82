package database

import (
	databasev1alpha1 "git.ddupan.top/panxiao81/ayatori/api/database/v1alpha1"
)

// Reason is a stable failure reason of the database domain: the same words
// as the Ready condition reasons of the database API, so an outcome's
// reason can become a condition reason unchanged.
type Reason string

// Failure reasons an executor of this domain reports.
const (
	ReasonAuthenticationFailed   Reason = databasev1alpha1.ReasonAuthenticationFailed
	ReasonInsufficientPrivileges Reason = databasev1alpha1.ReasonInsufficientPrivileges
	ReasonDependencyUnavailable  Reason = databasev1alpha1.ReasonDependencyUnavailable
	ReasonInvalidSpec            Reason = databasev1alpha1.ReasonInvalidSpec
	ReasonConflict               Reason = databasev1alpha1.ReasonConflict
	ReasonProvisioningFailed     Reason = databasev1alpha1.ReasonProvisioningFailed
	// ReasonCredentialProjectionFailed: ESO has not projected the Tenant's
	// Secret (yet).
	ReasonCredentialProjectionFailed Reason = databasev1alpha1.ReasonCredentialProjectionFailed
	// ReasonLoginRejected: the server refused the Tenant role's login before
	// checking its password (pg_hba.conf, or a role that may not log in).
	ReasonLoginRejected Reason = databasev1alpha1.ReasonLoginRejected
	// ReasonDeletionBlocked: a Delete step waits for something outside
	// Ayatori (sessions it may not end, objects the role still owns).
	ReasonDeletionBlocked Reason = databasev1alpha1.ReasonDeletionBlocked
)
