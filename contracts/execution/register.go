package execution

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Registers the domain with the journal: its invariants, payload types,
// the outcomes kept in checkpoints, and its forensics describer.
func init() {
	for _, inv := range Invariants {
		journal.RegisterInvariant(Domain, inv)
	}
	journal.RegisterPayload(Domain, OpEnsure, journal.TypeIntent, EnsureIntent{})
	for _, op := range []string{OpObserve, OpCancel, OpDelete} {
		journal.RegisterPayload(Domain, op, journal.TypeIntent, ExecutionIntent{})
	}
	for _, op := range Operations {
		journal.RegisterPayload(Domain, op, journal.TypeOutcome, Observation{})
	}
	journal.RegisterPayload(Domain, NoteBackendLostConfirmed, journal.TypeNote, BackendLostNote{})
	journal.RegisterPayload(Domain, NoteDeadlineStarted, journal.TypeNote, DeadlineNote{})
	journal.RegisterPayload(Domain, NoteFinished, journal.TypeNote, FinishedNote{})
	journal.RegisterPayload(Domain, NoteTTLExpired, journal.TypeNote, TTLNote{})
	// The created execution's outcome stays in every checkpoint: the
	// projector reads from it that an execution exists.
	journal.KeepSucceeded(Domain, OpEnsure)
	// The forensics CLI's vocabulary for Jobs.
	journal.RegisterDescriber(Domain, journal.Describer{Describe: Describe, Summary: Summary,
		CompareLive: func(live map[string]any, uid string, recs []journal.Record) (bool, []string, any) {
			var u *unstructured.Unstructured
			if live != nil {
				u = &unstructured.Unstructured{Object: live}
			}
			c := CompareLive(u, uid, recs)
			return c.Found, c.Mismatches, &c
		}})
}
