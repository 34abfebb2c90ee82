// Package journal is Ayatori's operation journal on NATS JetStream: every
// intended external action is appended as an intent record, keyed by the
// object's UID and acknowledged by the server before any backend is touched;
// executors consume intents idempotently and append outcome records;
// projectors watch outcomes and fold them into CR status.
//
// The journal knows no domain. Each domain's contract (contracts/<domain>)
// registers its payload types (RegisterPayload) and invariants
// (RegisterInvariant), keyed by the domain's subject token and the
// operation; its executors register their handlers with the domain's
// Dispatcher, consumed by the domain's own durable consumer (Consume).
//
// The record schema, subjects, stream settings and guarantees are described
// in docs/journal.md, which is the source of truth for this package.
package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// SchemaVersion is the version of the record envelope written by this code.
// Readers accept records with a version <= SchemaVersion and refuse newer ones.
const SchemaVersion = 1

// RecordType says what a record is.
type RecordType string

// Record types.
const (
	// TypeIntent: an external action that is about to happen.
	TypeIntent RecordType = "intent"
	// TypeOutcome: what happened when an intent was executed.
	TypeOutcome RecordType = "outcome"
	// TypeNote: an annotation (admin action, hand-over, ...), no effect.
	TypeNote RecordType = "note"
)

// ResultClass classifies an outcome.
type ResultClass string

// Result classes.
const (
	// Succeeded: the action took effect (or was already in effect).
	Succeeded ResultClass = "Succeeded"
	// Failed: the action did not take effect; Reason says why (stable, CamelCase).
	Failed ResultClass = "Failed"
	// ResultUnknown: the executor cannot tell whether the action took effect
	// (for example a timeout after the request was sent). It is never
	// silently retried as a new create: the next intent must observe first.
	ResultUnknown ResultClass = "ResultUnknown"
)

// Failure reasons produced by the journal itself.
const (
	// ReasonUndecodableIntent: an intent message could not be decoded.
	ReasonUndecodableIntent = "UndecodableIntent"
	// ReasonRetriesExhausted: the executor kept failing transiently until
	// its budget (ConsumerConfig.MaxDeliver) was spent, or the intent was
	// delivered more than ConsumerConfig.DeliveryLimit times without an
	// outcome (crashes, AckWait expiries, hand-backs).
	ReasonRetriesExhausted = "RetriesExhausted"
	// ReasonUnknownOperation: no executor handles the intent's operation.
	ReasonUnknownOperation = "UnknownOperation"
	// ReasonDependencyFailed: the intent was not executed because the
	// intent it is ordered after (Record.After) did not succeed, or is not
	// an earlier intent of the object in the journal.
	ReasonDependencyFailed = "DependencyFailed"
	// ReasonUntrustedIntent: the intent was not executed because it can not
	// be attributed to the manager: no valid proof of origin, published on
	// another object's subject, or (checked by the executor) parameters
	// that differ from what the live objects say.
	ReasonUntrustedIntent = "UntrustedIntent"
)

// ObjectRef identifies the Kubernetes object a record is about.
type ObjectRef struct {
	Group      string `json:"group"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
}

// String renders kind/namespace/name.
func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// Result is an outcome's result.
type Result struct {
	Class ResultClass `json:"class"`
	// Reason is a stable CamelCase reason; required for Failed and ResultUnknown.
	Reason string `json:"reason,omitempty"`
	// Message is a human explanation. It must never contain a secret value
	// or a raw driver error (executors classify errors first).
	Message string `json:"message,omitempty"`
}

// String renders Class or Class/Reason.
func (r *Result) String() string {
	if r == nil {
		return ""
	}
	if r.Reason == "" {
		return string(r.Class)
	}
	return string(r.Class) + "/" + r.Reason
}

// Record is the versioned journal envelope, stored as JSON, one record per
// JetStream message (see docs/journal.md "Record schema").
type Record struct {
	SchemaVersion int        `json:"schemaVersion"`
	ID            string     `json:"id"`
	Type          RecordType `json:"type"`
	// Operation is the operation name (CamelCase), unique within the domain.
	Operation string    `json:"operation"`
	Object    ObjectRef `json:"object"`
	// Step distinguishes intents of the same operation within one
	// generation (for example an extension name); may be empty.
	Step string `json:"step,omitempty"`
	// Attempt counts re-decided intents of the same step, starting at 1.
	Attempt int `json:"attempt"`
	// After is, for an intent, the ID of an earlier intent of the same
	// object UID that must have a Succeeded outcome before this one is
	// executed (empty: none). The consumer runs the intent only once that
	// outcome is in the journal; when the named intent ends in any other
	// way, or is not in the journal, this one gets a Failed outcome with
	// ReasonDependencyFailed and nothing is executed. It lets one projector
	// pass decide a chain of steps whose inputs are all known, each after
	// the one before it (docs/journal.md "Intents that wait for another").
	After string `json:"after,omitempty"`
	// CausationID is, for an outcome, the ID of its intent.
	CausationID string `json:"causationId,omitempty"`
	// Result is set on outcomes only.
	Result *Result `json:"result,omitempty"`
	// Actor is the manager or executor instance that wrote the record.
	Actor string    `json:"actor"`
	Time  time.Time `json:"time"`
	// Payload is the operation's typed payload (see RegisterPayload).
	Payload json.RawMessage `json:"payload,omitempty"`
	// Proof is the record's proof of origin (see Proof), set by Append
	// when its Store has a signing key; readers that trust a set of keys
	// take no record without a valid one.
	Proof *Proof `json:"proof,omitempty"`

	// Sequence is the JetStream stream sequence; set on read, never stored.
	Sequence uint64 `json:"seq,omitempty"`
}

// IntentID returns the deterministic record ID of an intent, derived from
// UID + generation + operation/step + attempt, used as Nats-Msg-Id.
func IntentID(uid string, generation int64, operation, step string, attempt int) string {
	s := operation
	if step != "" {
		s += ":" + step
	}
	return fmt.Sprintf("%s/g%d/%s/a%d", uid, generation, s, attempt)
}

// OutcomeID returns the deterministic ID of the (single) outcome of an intent.
func OutcomeID(intentID string) string { return intentID + "/outcome" }

// NewIntent builds an intent record with its deterministic ID.
func NewIntent(obj ObjectRef, operation, step string, attempt int, payload any) (Record, error) {
	r := Record{
		SchemaVersion: SchemaVersion,
		ID:            IntentID(obj.UID, obj.Generation, operation, step, attempt),
		Type:          TypeIntent,
		Operation:     operation,
		Object:        obj,
		Step:          step,
		Attempt:       attempt,
	}
	if err := r.SetPayload(payload); err != nil {
		return Record{}, err
	}
	return r, nil
}

// NewNote builds a note record decided by a projector pass that read the
// object's records up to sequence after: its ID,
// "<uid>/g<generation>/note/<operation>/<after>", is the same for every
// pass deciding it on the same journal, so a repeated append is dropped.
// payload may be nil (no payload).
func NewNote(obj ObjectRef, operation string, after uint64, payload any) (Record, error) {
	return newNote(fmt.Sprintf("%s/g%d/note/%s/%d", obj.UID, obj.Generation, operation, after), obj, operation, payload)
}

// NewOnceNote builds a note that exists at most once per object UID: its
// ID is "<uid>/note/<operation>".
func NewOnceNote(obj ObjectRef, operation string, payload any) (Record, error) {
	return newNote(obj.UID+"/note/"+operation, obj, operation, payload)
}

func newNote(id string, obj ObjectRef, operation string, payload any) (Record, error) {
	r := Record{ID: id, Type: TypeNote, Operation: operation, Object: obj, Attempt: 1}
	if payload != nil {
		if err := r.SetPayload(payload); err != nil {
			return Record{}, err
		}
	}
	return r, nil
}

// NewOutcome builds the outcome record of intent.
func NewOutcome(intent Record, result Result, payload any) (Record, error) {
	r := Record{
		SchemaVersion: SchemaVersion,
		ID:            OutcomeID(intent.ID),
		Type:          TypeOutcome,
		Operation:     intent.Operation,
		Object:        intent.Object,
		Step:          intent.Step,
		Attempt:       intent.Attempt,
		CausationID:   intent.ID,
		Result:        &result,
	}
	if err := r.SetPayload(payload); err != nil {
		return Record{}, err
	}
	return r, nil
}

// SetPayload encodes payload (nil clears it). The payload's type must be the
// one registered for the record's operation and type, if any is registered.
func (r *Record) SetPayload(payload any) error {
	if payload == nil {
		r.Payload = nil
		return nil
	}
	if err := checkPayloadType(r, payload); err != nil {
		return err
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("journal: encode %s payload: %w", r.Operation, err)
	}
	r.Payload = b
	return nil
}

// DecodePayload decodes the payload into out.
func (r *Record) DecodePayload(out any) error {
	if len(r.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Payload, out); err != nil {
		return fmt.Errorf("journal: decode %s payload of %s: %w", r.Operation, r.ID, err)
	}
	return nil
}

// ErrInvalidRecord is wrapped by Validate errors.
var ErrInvalidRecord = errors.New("journal: invalid record")

// ErrNewerSchema is returned for a record written by a newer schema version
// than this build reads; such a record is never silently skipped.
var ErrNewerSchema = errors.New("journal: record schema is newer than this build")

var (
	opPattern     = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,63}$`)
	domainPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
)

// Validate checks the envelope before it is written or after it is read.
func (r *Record) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidRecord, r.ID, fmt.Sprintf(format, args...))
	}
	if r.SchemaVersion > SchemaVersion {
		return fmt.Errorf("%w: record %q has schema version %d, this build reads 1..%d", ErrNewerSchema, r.ID, r.SchemaVersion, SchemaVersion)
	}
	switch {
	case r.SchemaVersion < 1:
		return bad("schema version %d not supported (this build reads 1..%d)", r.SchemaVersion, SchemaVersion)
	case r.ID == "" || len(r.ID) > 512 || strings.ContainsAny(r.ID, " \t\r\n"):
		return bad("id must be 1-512 characters without white space")
	case !uidPattern.MatchString(r.Object.UID):
		return bad("object.uid %q is not a UID", r.Object.UID)
	case r.Object.Kind == "" || r.Object.Name == "":
		return bad("object.kind and object.name are required")
	case !opPattern.MatchString(r.Operation):
		return bad("operation %q must be CamelCase", r.Operation)
	}
	if _, err := Domain(r.Object.Group); err != nil {
		return bad("%v", err)
	}
	switch r.Type {
	case TypeIntent:
		if r.Result != nil || r.CausationID != "" {
			return bad("an intent has no result or causation")
		}
		if r.Attempt < 1 {
			return bad("attempt must be >= 1")
		}
		if r.After != "" && (r.After == r.ID || len(r.After) > 512 || strings.ContainsAny(r.After, " \t\r\n") ||
			!strings.HasPrefix(r.After, r.Object.UID+"/")) {
			return bad("after must name another intent of the same object")
		}
	case TypeOutcome:
		if r.After != "" {
			return bad("only an intent has after")
		}
		if r.Result == nil || r.CausationID == "" {
			return bad("an outcome needs result and causationId")
		}
		switch r.Result.Class {
		case Succeeded:
		case Failed, ResultUnknown:
			if r.Result.Reason == "" {
				return bad("a %s outcome needs a reason", r.Result.Class)
			}
		default:
			return bad("result class %q", r.Result.Class)
		}
	case TypeNote:
		if r.After != "" {
			return bad("only an intent has after")
		}
	default:
		return bad("type %q", r.Type)
	}
	if len(r.Payload) > 0 && !json.Valid(r.Payload) {
		return bad("payload is not JSON")
	}
	return nil
}

// Domain maps an API group to the journal domain token used in subjects:
// the first DNS label ("example.ayatori.ddupan.top" -> "example").
// The core group ("") maps to "core".
func Domain(group string) (string, error) {
	if group == "" {
		return "core", nil
	}
	d, _, _ := strings.Cut(group, ".")
	if !domainPattern.MatchString(d) {
		return "", fmt.Errorf("group %q does not give a subject token", group)
	}
	return d, nil
}
