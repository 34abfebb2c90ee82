package database

import "git.ddupan.top/panxiao81/ayatori/journal"

// Payload types of every operation and note of the domain, registered
// with the journal: a payload of another type is refused on write, and
// registration refuses a type with a field that could carry a secret.
func init() {
	reg := func(op string, typ journal.RecordType, sample any) {
		journal.RegisterPayload(Domain, op, typ, sample)
	}
	reg(OpObserveInstance, journal.TypeIntent, InstanceIntent{})
	reg(OpBootstrapRegistry, journal.TypeIntent, InstanceIntent{})
	reg(OpObserveInstance, journal.TypeOutcome, ObserveOutcome{})
	reg(OpBootstrapRegistry, journal.TypeOutcome, BootstrapOutcome{})
	for _, op := range PostgreSQLOperations {
		if op == OpObserveInstance || op == OpBootstrapRegistry {
			continue
		}
		reg(op, journal.TypeIntent, TenantIntent{})
		reg(op, journal.TypeOutcome, TenantOutcome{})
	}
	reg(OpWriteCredential, journal.TypeIntent, CredentialIntent{})
	reg(OpDestroyCredential, journal.TypeIntent, CredentialIntent{})
	reg(OpWriteCredential, journal.TypeOutcome, CredentialOutcome{})
	reg(OpDestroyCredential, journal.TypeOutcome, DestroyOutcome{})
	for _, op := range ExternalSecretsOperations {
		reg(op, journal.TypeIntent, ProjectionIntent{})
	}
	reg(OpEnsureExternalSecret, journal.TypeOutcome, ProjectionOutcome{})
	reg(OpDeleteExternalSecret, journal.TypeOutcome, ProjectionOutcome{})
	reg(OpRetainExternalSecret, journal.TypeOutcome, ProjectionOutcome{})
	reg(NoteDeletionStarted, journal.TypeNote, DeletionNote{})
	// Every ExternalSecret a Tenant ever created stays its own (the
	// projection target check and DeleteExternalSecret read them all), so
	// journal checkpoints keep every successful EnsureExternalSecret.
	journal.KeepSucceeded(Domain, OpEnsureExternalSecret)
	// The forensics CLI: a Ready Instance or Tenant stays Ready while its
	// periodic re-check runs.
	journal.RegisterDescriber(Domain, journal.Describer{Rechecks: []string{OpObserveInstance, OpObserveTenant}})
}
