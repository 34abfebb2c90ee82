package journal

import "sort"

// State is the fold of one UID's records: what was intended, what came of
// it, and what is still pending. Build it with Fold or Apply records in
// stream order.
type State struct {
	// Object is the object reference of the latest intent, note or outcome
	// of a seen intent (of an orphan outcome only while there is none: an
	// executor's answer to a record it could not attribute or decode names
	// what that record's publisher chose).
	Object ObjectRef
	// LastSequence is the stream sequence of the latest record applied; pass
	// it to ExpectLastSequence when appending a decision based on this state.
	LastSequence uint64
	// Records counts applied records.
	Records int
	// Intents by record ID.
	Intents map[string]Record
	// Outcomes by the ID of their intent (causation).
	Outcomes map[string]Record
	// LastOutcome per step key (operation, or operation:step), of the
	// outcomes of seen intents (Orphans are not in it).
	LastOutcome map[string]Record
	// Orphans are outcomes whose intent was not seen.
	Orphans []Record

	intentOrder []string
}

// NewState returns an empty state.
func NewState() *State {
	return &State{Intents: map[string]Record{}, Outcomes: map[string]Record{}, LastOutcome: map[string]Record{}}
}

// Fold applies records in order and returns the state.
func Fold(records []Record) *State {
	s := NewState()
	for i := range records {
		s.Apply(records[i])
	}
	return s
}

// StepKey is the key of LastOutcome: operation, or operation:step.
func StepKey(r Record) string {
	if r.Step == "" {
		return r.Operation
	}
	return r.Operation + ":" + r.Step
}

// Apply folds one record into the state.
func (s *State) Apply(r Record) {
	s.Records++
	if r.Sequence > s.LastSequence {
		s.LastSequence = r.Sequence
	}
	switch r.Type {
	case TypeIntent:
		s.Object = r.Object
		if _, dup := s.Intents[r.ID]; !dup {
			s.intentOrder = append(s.intentOrder, r.ID)
		}
		s.Intents[r.ID] = r
	case TypeOutcome:
		if _, seen := s.Outcomes[r.CausationID]; !seen {
			s.Outcomes[r.CausationID] = r
		}
		if _, ok := s.Intents[r.CausationID]; !ok {
			s.Orphans = append(s.Orphans, r)
			if s.Object == (ObjectRef{}) {
				s.Object = r.Object
			}
			return
		}
		s.Object = r.Object
		s.LastOutcome[StepKey(r)] = r
	default:
		s.Object = r.Object
	}
}

// Pending returns the intents without an outcome, in append order.
func (s *State) Pending() []Record {
	var out []Record
	for _, id := range s.intentOrder {
		if _, done := s.Outcomes[id]; !done {
			out = append(out, s.Intents[id])
		}
	}
	return out
}

// OutcomeOf returns the outcome of an intent, if any.
func (s *State) OutcomeOf(intentID string) (Record, bool) {
	r, ok := s.Outcomes[intentID]
	return r, ok
}

// LatestIntent returns the last intent of a step key (operation or
// operation:step) in append order.
func (s *State) LatestIntent(stepKey string) (Record, bool) {
	for i := len(s.intentOrder) - 1; i >= 0; i-- {
		r := s.Intents[s.intentOrder[i]]
		if StepKey(r) == stepKey {
			return r, true
		}
	}
	return Record{}, false
}

// StepKeys returns the step keys that have an outcome, sorted.
func (s *State) StepKeys() []string {
	out := make([]string, 0, len(s.LastOutcome))
	for k := range s.LastOutcome {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
