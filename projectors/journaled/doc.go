// Package journaled is the reconcile skeleton every Ayatori projector
// shares, whatever its domain:
//
//	get → finalizer → read and fold the object's journal → plan (facts + the
//	kind's pure decide function) → append one record (an intent or a note)
//	→ release the finalizer, or one status write.
//
// A kind (PostgreSQLInstance, PostgreSQLTenant, Job) contributes a
// Kind: how to gather its facts and decide (Plan), and how to write the
// decision into its status (Project). Everything between — the finalizer,
// the journal read, the optimistic append (journal.ExpectLastSequence, a
// lost race is a requeue), the IntentAppended Event, the "status lost or
// only not yet cached" check, finalizer removal — lives here once.
//
// It also holds the journal plumbing projectors share: routing the
// journal's outcome watch into reconcile requests per kind (OutcomeRouter),
// attempts of a step (IntentsOf, NextAttempt), the retry back-off
// (Backoff) and status helpers (SetCondition, PatchStatus).
//
// The package knows no domain and no backend: it imports only the journal
// and Kubernetes API machinery.
package journaled
