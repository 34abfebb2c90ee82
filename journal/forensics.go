package journal

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TimelineRow is one line of an object's timeline: an intent paired with
// its outcome, or a note, or an outcome whose intent is missing.
type TimelineRow struct {
	Time      time.Time  `json:"time"`
	Type      RecordType `json:"type"`
	Operation string     `json:"operation"`
	Step      string     `json:"step,omitempty"`
	Attempt   int        `json:"attempt"`
	Gen       int64      `json:"generation"`
	IntentSeq uint64     `json:"intentSeq,omitempty"`
	// OutcomeSeq is 0 while the intent is pending.
	OutcomeSeq uint64      `json:"outcomeSeq,omitempty"`
	Result     ResultClass `json:"result,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	Message    string      `json:"message,omitempty"`
	// Duration from intent to outcome; 0 while pending.
	Duration      time.Duration `json:"durationNanos,omitempty"`
	Actor         string        `json:"actor"`
	OutcomeActor  string        `json:"outcomeActor,omitempty"`
	IntentID      string        `json:"intentId,omitempty"`
	RecordID      string        `json:"recordId"`
	Pending       bool          `json:"pending,omitempty"`
	OrphanOutcome bool          `json:"orphanOutcome,omitempty"`
}

// Timeline pairs a UID's records (in stream order) into rows ordered by the
// first record of each row.
func Timeline(records []Record) []TimelineRow {
	outcomes := map[string]Record{}
	intents := map[string]bool{}
	for _, r := range records {
		switch r.Type {
		case TypeOutcome:
			if _, ok := outcomes[r.CausationID]; !ok {
				outcomes[r.CausationID] = r
			}
		case TypeIntent:
			intents[r.ID] = true
		}
	}
	var rows []TimelineRow
	for _, r := range records {
		row := TimelineRow{Time: r.Time, Type: r.Type, Operation: r.Operation, Step: r.Step, Attempt: r.Attempt,
			Gen: r.Object.Generation, Actor: r.Actor, RecordID: r.ID}
		switch r.Type {
		case TypeIntent:
			row.IntentSeq, row.IntentID = r.Sequence, r.ID
			if o, ok := outcomes[r.ID]; ok {
				row.OutcomeSeq = o.Sequence
				row.Result, row.Reason, row.Message = o.Result.Class, o.Result.Reason, o.Result.Message
				row.Duration = o.Time.Sub(r.Time)
				row.OutcomeActor = o.Actor
			} else {
				row.Pending = true
			}
		case TypeOutcome:
			if intents[r.CausationID] {
				continue // shown with its intent
			}
			row.OutcomeSeq, row.IntentID, row.OrphanOutcome = r.Sequence, r.CausationID, true
			row.Result, row.Reason, row.Message = r.Result.Class, r.Result.Reason, r.Result.Message
		case TypeNote:
			row.IntentSeq = r.Sequence
		}
		rows = append(rows, row)
	}
	return rows
}

// Violation is one broken journal invariant, with the sequences involved.
type Violation struct {
	Rule      string   `json:"rule"`
	UID       string   `json:"uid"`
	Object    string   `json:"object,omitempty"`
	Sequences []uint64 `json:"sequences"`
	Detail    string   `json:"detail"`
}

// Rule names of the invariants Verify checks for every domain. Domains
// add their own with RegisterInvariant.
const (
	RuleOutcomeWithoutIntent = "outcome-without-intent"
	// RuleUntrustedIntentRefused: an executor refused an intent
	// (Failed/UntrustedIntent): someone other than the manager wrote it, or
	// its parameters contradict the live objects.
	RuleUntrustedIntentRefused = "untrusted-intent-refused"
	RuleConflictingOutcomes    = "intent-executed-twice-with-different-results"
	RuleDuplicateRecordID      = "duplicate-record-id"
	RuleIntentWhilePending     = "intent-while-step-pending"
	RuleStepRepeated           = "step-repeated-after-success"
	RuleUndecodableRecord      = "undecodable-record"
	// RuleDependencyOrder: an intent ordered after another (Record.After)
	// names no earlier intent of its object, or was executed although that
	// intent had no Succeeded outcome before it, or was skipped
	// (DependencyFailed) although that intent succeeded.
	RuleDependencyOrder = "dependency-order"
)

// InvariantCheck follows the records of one object (one UID) in stream
// order and returns the violations the record r reveals. A violation
// reported again with the same rule and first sequence replaces the
// earlier report (a violation that grows, such as a third occurrence of
// something allowed once). Verify fills in UID and Object when they are
// empty.
type InvariantCheck func(r Record) []Violation

// Invariant is a rule a domain promises about the records of each of its
// objects, checked by Verify (and `ayatori-journal verify`).
type Invariant struct {
	// Rule is the stable name reported in violations (kebab-case).
	Rule string
	// Description is one line for documentation and --help.
	Description string
	// New returns a fresh check for one object.
	New func() InvariantCheck
}

var (
	invariantMu sync.RWMutex
	invariants  = map[string][]Invariant{}
)

// RegisterInvariant adds a domain's invariant to Verify (domain is the
// subject token, see Domain). It panics on an incomplete invariant or a
// rule name the domain registered before.
func RegisterInvariant(domain string, inv Invariant) {
	if !domainPattern.MatchString(domain) || inv.Rule == "" || inv.New == nil {
		panic(fmt.Sprintf("journal: invariant %q of domain %q needs a domain token, a rule name and a check", inv.Rule, domain))
	}
	invariantMu.Lock()
	defer invariantMu.Unlock()
	for _, old := range invariants[domain] {
		if old.Rule == inv.Rule {
			panic(fmt.Sprintf("journal: invariant %s of domain %s registered twice", inv.Rule, domain))
		}
	}
	invariants[domain] = append(invariants[domain], inv)
}

// RegisteredInvariants returns the invariants registered per domain.
func RegisteredInvariants() map[string][]Invariant {
	invariantMu.RLock()
	defer invariantMu.RUnlock()
	out := make(map[string][]Invariant, len(invariants))
	for d, invs := range invariants {
		out[d] = append([]Invariant(nil), invs...)
	}
	return out
}

func domainChecks(group string) []InvariantCheck {
	domain, err := Domain(group)
	if err != nil {
		return nil
	}
	invariantMu.RLock()
	defer invariantMu.RUnlock()
	var out []InvariantCheck
	for _, inv := range invariants[domain] {
		out = append(out, inv.New())
	}
	return out
}

// Verify checks the journal invariants over records (any number of UIDs,
// in stream order) plus the sequences of undecodable records. For every
// domain:
//   - every outcome has its intent;
//   - no intent has two outcomes with different results;
//   - no record ID stored twice;
//   - no intent for a step (UID, generation, operation, step) while the previous
//     intent of that step has no outcome yet, unless a note (a new epoch,
//     e.g. a revalidation) came in between: a second decider (another
//     replica, a stale leader) must wait for the first decision's outcome;
//   - every record decodes;
//
// and the invariants the object's domain registered (RegisterInvariant),
// in stream order with the others.
func Verify(records []Record, undecodable []uint64) []Violation {
	var out []Violation
	// The executors' answers to undecodable intents, by the sequence
	// they answer (UndecodableIntentID).
	answers := map[uint64]Record{}
	for _, r := range records {
		if seq, ok := undecodableAnswer(r); ok {
			answers[seq] = r
		}
	}
	unreadable := map[uint64]bool{}
	for _, seq := range undecodable {
		unreadable[seq] = true
	}
	for _, seq := range undecodable {
		detail := "record does not decode as a journal envelope"
		if a, ok := answers[seq]; ok {
			detail += fmt.Sprintf("; answered %s/%s by an executor (outcome at sequence %d)", a.Result.Class, a.Result.Reason, a.Sequence)
		}
		out = append(out, Violation{Rule: RuleUndecodableRecord, Sequences: []uint64{seq}, Detail: detail})
	}
	byUID := map[string][]Record{}
	var order []string
	for _, r := range records {
		if _, ok := byUID[r.Object.UID]; !ok {
			order = append(order, r.Object.UID)
		}
		byUID[r.Object.UID] = append(byUID[r.Object.UID], r)
	}
	for _, uid := range order {
		out = append(out, verifyUID(uid, byUID[uid], unreadable)...)
	}
	return out
}

// verifyUID checks one UID's records; unreadable are the sequences of the
// undecodable records read with them.
func verifyUID(uid string, recs []Record, unreadable map[uint64]bool) []Violation {
	var out []Violation
	add := func(rule, obj, detail string, seqs ...uint64) {
		out = append(out, Violation{Rule: rule, UID: uid, Object: obj, Sequences: seqs, Detail: detail})
	}
	seen := map[string]uint64{}
	intents := map[string]Record{}
	firstOutcome := map[string]Record{}
	steps := newStepTracker()
	var checks []InvariantCheck
	if len(recs) > 0 {
		checks = domainChecks(recs[0].Object.Group)
	}
	for _, r := range recs {
		if prev, pending := steps.observe(r); pending {
			add(RuleIntentWhilePending, r.Object.String(), fmt.Sprintf("%s intent %s decided while %s had no outcome", r.Operation, r.ID, prev.ID),
				prev.Sequence, r.Sequence)
		}
		obj := r.Object.String()
		if prev, dup := seen[r.ID]; dup {
			add(RuleDuplicateRecordID, obj, fmt.Sprintf("record ID %s stored twice", r.ID), prev, r.Sequence)
		}
		seen[r.ID] = r.Sequence
		switch r.Type {
		case TypeIntent:
			if r.After != "" {
				if dep, ok := intents[r.After]; !ok || dep.Sequence >= r.Sequence {
					add(RuleDependencyOrder, obj, fmt.Sprintf("%s intent %s is ordered after %s, which is not an earlier intent of this object", r.Operation, r.ID, r.After), r.Sequence)
				}
			}
			intents[r.ID] = r
		case TypeOutcome:
			if in, ok := intents[r.CausationID]; ok && in.After != "" {
				dep, depDone := firstOutcome[in.After]
				succeeded := depDone && dep.Result.Class == Succeeded
				skipped := r.Result.Class == Failed && r.Result.Reason == ReasonDependencyFailed
				switch {
				case !skipped && !succeeded:
					add(RuleDependencyOrder, obj, fmt.Sprintf("%s intent %s ran before the intent it is ordered after (%s) succeeded", r.Operation, r.CausationID, in.After), in.Sequence, r.Sequence)
				case skipped && succeeded:
					add(RuleDependencyOrder, obj, fmt.Sprintf("%s intent %s was skipped although the intent it is ordered after (%s) succeeded before it", r.Operation, r.CausationID, in.After), dep.Sequence, r.Sequence)
				}
			}
			if _, refusal := RefusalOf(r); refusal {
				add(RuleUntrustedIntentRefused, obj, fmt.Sprintf("an executor refused an intent without a valid proof of origin (%s): %s",
					strings.TrimPrefix(r.CausationID, r.Object.UID+"/untrusted/"), r.Result.Message), r.Sequence)
				continue
			}
			if r.Result.Reason == ReasonUntrustedIntent {
				// Signed, but the live objects contradict it: a race with a
				// change of the object, or a stolen signing key.
				add(RuleUntrustedIntentRefused, obj, fmt.Sprintf("an executor refused %s intent %s, which the live objects contradict: %s",
					r.Operation, r.CausationID, r.Result.Message), intents[r.CausationID].Sequence, r.Sequence)
			}
			if seq, ok := undecodableAnswer(r); ok && unreadable[seq] && seq < r.Sequence {
				continue // reported with the undecodable record it answers
			}
			if _, ok := intents[r.CausationID]; !ok {
				add(RuleOutcomeWithoutIntent, obj, fmt.Sprintf("outcome of %s has no earlier intent", r.CausationID), r.Sequence)
			}
			if prev, ok := firstOutcome[r.CausationID]; ok {
				if prev.Result.Class != r.Result.Class || prev.Result.Reason != r.Result.Reason {
					add(RuleConflictingOutcomes, obj, fmt.Sprintf("intent %s has outcomes %s and %s", r.CausationID,
						prev.Result, r.Result), prev.Sequence, r.Sequence)
				}
			} else {
				firstOutcome[r.CausationID] = r
			}
		}
		for _, check := range checks {
			for _, v := range check(r) {
				if v.UID == "" {
					v.UID = uid
				}
				if v.Object == "" {
					v.Object = obj
				}
				out = replaceOrAppend(out, v)
			}
		}
	}
	return out
}

// replaceOrAppend replaces the violation with v's rule and first sequence,
// or appends v.
func replaceOrAppend(out []Violation, v Violation) []Violation {
	for i := range out {
		if out[i].Rule == v.Rule && len(out[i].Sequences) > 0 && len(v.Sequences) > 0 && out[i].Sequences[0] == v.Sequences[0] {
			out[i] = v
			return out
		}
	}
	return append(out, v)
}

// RepeatedSteps returns one violation per intent that repeats a step (UID,
// generation, operation, step) whose previous intent succeeded, with no note (new
// epoch) in between. For a state machine that walks each step once per
// epoch (a new epoch starts with a note), every hit is a duplicate
// decision. Periodic re-observation repeats succeeded steps by design, so
// Verify does not apply this rule: callers filter the records to the kinds
// it holds for (the scale benchmark and the hand-over test do).
func RepeatedSteps(records []Record) []Violation {
	var out []Violation
	byUID := map[string]*stepTracker{}
	for _, r := range records {
		t := byUID[r.Object.UID]
		if t == nil {
			t = newStepTracker()
			byUID[r.Object.UID] = t
		}
		prev, _ := t.observe(r)
		if prev != nil && t.results[prev.ID] == Succeeded {
			out = append(out, Violation{Rule: RuleStepRepeated, UID: r.Object.UID, Object: r.Object.String(),
				Sequences: []uint64{prev.Sequence, r.Sequence},
				Detail:    fmt.Sprintf("%s intent %s after %s had succeeded", r.Operation, r.ID, prev.ID)})
		}
	}
	return out
}

type stepKey struct {
	gen      int64
	op, step string
}

// stepTracker follows the steps of one UID in stream order.
type stepTracker struct {
	last    map[stepKey]Record
	results map[string]ResultClass // intent ID -> first outcome's class
}

func newStepTracker() *stepTracker {
	return &stepTracker{last: map[stepKey]Record{}, results: map[string]ResultClass{}}
}

// observe applies r. For an intent it returns the previous intent of the
// same step in the current epoch (nil if none) and whether that one was
// still pending.
func (t *stepTracker) observe(r Record) (prev *Record, pending bool) {
	switch r.Type {
	case TypeNote:
		clear(t.last)
	case TypeOutcome:
		if _, ok := t.results[r.CausationID]; !ok {
			t.results[r.CausationID] = r.Result.Class
		}
	case TypeIntent:
		k := stepKey{r.Object.Generation, r.Operation, r.Step}
		if p, ok := t.last[k]; ok && p.ID != r.ID {
			prev = &p
			_, done := t.results[p.ID]
			pending = !done
		}
		t.last[k] = r
	}
	return prev, pending
}

// ObjectSummary describes one object (UID) of the journal for `list`.
type ObjectSummary struct {
	Object     ObjectRef   `json:"object"`
	FirstTime  time.Time   `json:"firstTime"`
	LastTime   time.Time   `json:"lastTime"`
	Records    int         `json:"records"`
	LastSeq    uint64      `json:"lastSeq"`
	Pending    int         `json:"pending"`
	LastOp     string      `json:"lastOperation"`
	LastResult ResultClass `json:"lastResult,omitempty"`
	LastReason string      `json:"lastReason,omitempty"`
}

// Summaries groups records by UID, newest (by latest record time) first;
// FirstTime and LastTime are the earliest and latest record times, Object
// is as the records of its highest generation name it.
func Summaries(records []Record) []ObjectSummary {
	byUID := map[string]*ObjectSummary{}
	states := map[string]*State{}
	for _, r := range records {
		s, ok := byUID[r.Object.UID]
		if !ok {
			s = &ObjectSummary{FirstTime: r.Time}
			byUID[r.Object.UID] = s
			states[r.Object.UID] = NewState()
		}
		states[r.Object.UID].Apply(r)
		// Not by stream order: a record stored again later (a replayed
		// copy) moves neither time nor the object, which is as its
		// newest generation names it (not the latest time: an
		// executor's clock may run ahead of the manager's).
		if r.Object.Generation >= s.Object.Generation {
			s.Object = r.Object
		}
		if r.Time.Before(s.FirstTime) {
			s.FirstTime = r.Time
		}
		if r.Time.After(s.LastTime) {
			s.LastTime = r.Time
		}
		s.Records++
		s.LastSeq = r.Sequence
	}
	out := make([]ObjectSummary, 0, len(byUID))
	for uid, s := range byUID {
		st := states[uid]
		s.Pending = len(st.Pending())
		var last *Record
		for _, in := range st.Intents {
			if last == nil || in.Sequence > last.Sequence {
				in := in
				last = &in
			}
		}
		if last != nil {
			s.LastOp = last.Operation
			if o, ok := st.OutcomeOf(last.ID); ok {
				s.LastResult, s.LastReason = o.Result.Class, o.Result.Reason
			}
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastTime.Equal(out[j].LastTime) {
			return out[i].LastTime.After(out[j].LastTime)
		}
		return out[i].LastSeq > out[j].LastSeq
	})
	return out
}

// Describer is a domain's vocabulary for the forensics CLI
// (ayatori-journal): what a payload means and how a live object compares
// with its journal. Every field may be nil.
type Describer struct {
	// Describe is a one-line summary of r's payload ("" if none).
	Describe func(r Record) string
	// Summary is one line on an object's state from its records ("" if
	// none).
	Summary func(recs []Record) string
	// CompareLive compares the live object (its unstructured content;
	// nil: not found) with the records of the object with UID uid. found
	// says a live object with that UID exists; mismatches are the
	// disagreements; detail is the domain's own account (printed as JSON).
	CompareLive func(live map[string]any, uid string, recs []Record) (found bool, mismatches []string, detail any)
	// Rechecks are the operations that re-check an object which stays
	// Ready while the check runs (a periodic observation): a pending intent
	// of one of them on a Ready object, of the generation status observed
	// and after an earlier successful step of it, is no disagreement.
	Rechecks []string
}

var (
	describerMu sync.RWMutex
	describers  = map[string]Describer{}
)

// RegisterDescriber sets domain's Describer (domain is the subject token,
// see Domain). It panics on a bad token or a second registration.
func RegisterDescriber(domain string, d Describer) {
	if !domainPattern.MatchString(domain) {
		panic(fmt.Sprintf("journal: describer of domain %q needs a domain token", domain))
	}
	describerMu.Lock()
	defer describerMu.Unlock()
	if _, dup := describers[domain]; dup {
		panic(fmt.Sprintf("journal: describer of domain %s registered twice", domain))
	}
	describers[domain] = d
}

// DescriberOf returns the Describer registered for the domain of group
// (an API group), if any.
func DescriberOf(group string) (Describer, bool) {
	dom, err := Domain(group)
	if err != nil {
		return Describer{}, false
	}
	describerMu.RLock()
	defer describerMu.RUnlock()
	d, ok := describers[dom]
	return d, ok
}

// undecodableAnswer reports whether r is an executor's Failed/
// UndecodableIntent outcome of the undecodable intent message at the
// returned stream sequence of r's UID (UndecodableIntentID).
func undecodableAnswer(r Record) (uint64, bool) {
	return answerTo(r, ReasonUndecodableIntent, UndecodableIntentID)
}

// RefusalOf reports whether r is an executor's refusal of an untrusted
// record (a Failed/UntrustedIntent outcome answering UntrustedIntentID of
// its own UID) and the stream sequence of the record it refuses. Whether
// r itself is trusted is the caller's check.
func RefusalOf(r Record) (seq uint64, ok bool) {
	return answerTo(r, ReasonUntrustedIntent, UntrustedIntentID)
}

// StrayAnswer reports whether r is an executor's answer to a stream
// message it could not take as the manager's intent: a refusal of an
// untrusted record (RefusalOf) or the failure of an undecodable one. Its
// object's kind, name and generation are then not the manager's (a
// refusal names what the refused record claims; an undecodable one's is
// Unknown/unknown): only its UID, that of the subject the message was
// read from, is. Forensics take no object name from it.
func StrayAnswer(r Record) bool {
	_, refusal := RefusalOf(r)
	_, undecodable := undecodableAnswer(r)
	return refusal || undecodable
}

// answerTo reports whether r is a Failed outcome with reason answering
// id(r's UID, seq), and seq: the stream sequence of the message answered.
func answerTo(r Record, reason string, id func(string, uint64) string) (uint64, bool) {
	if r.Type != TypeOutcome || r.Result == nil || r.Result.Reason != reason {
		return 0, false
	}
	prefix := id(r.Object.UID, 0)
	rest, ok := strings.CutPrefix(r.CausationID, prefix[:len(prefix)-1])
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, err == nil && r.CausationID == id(r.Object.UID, seq)
}
