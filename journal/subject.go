package journal

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalidSubjectToken is wrapped by every error about a user-supplied
// string that cannot be used in a journal subject or JetStream API
// subject: a NATS wildcard ("*", ">"), a separator ('.'), white space, an
// empty token, or another character outside the allowed set.
var ErrInvalidSubjectToken = errors.New("not a plain NATS subject token")

var (
	// uidPattern is a Kubernetes object UID (a UUID in practice).
	uidPattern   = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// streamPattern: JetStream forbids '.', '*', '>', white space and path
	// separators in stream names; we allow only this safe subset.
	streamPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
)

// ValidateUID returns nil when uid can be the UID token of a journal
// subject (<prefix>.<domain>.<uid>.<type>): 1-64 ASCII letters, digits or
// '-', as Kubernetes UIDs are. Otherwise (wildcards, '.', white space,
// empty, too long) it returns an error wrapping ErrInvalidSubjectToken
// that starts with uid quoted and says what is allowed; callers prefix
// what the value is ("--uid", "journal: uid").
func ValidateUID(uid string) error {
	if !uidPattern.MatchString(uid) {
		return fmt.Errorf("%q: %w: a UID is 1-64 letters, digits or '-' (no NATS wildcards '*' '>', no '.', no white space)", uid, ErrInvalidSubjectToken)
	}
	return nil
}

// ValidateSubjectPrefix returns nil when prefix is one or more
// '.'-separated tokens of ASCII letters, digits, '_' or '-' (for example
// "ayatori.journal"); otherwise an error wrapping ErrInvalidSubjectToken.
func ValidateSubjectPrefix(prefix string) error {
	for _, tok := range strings.Split(prefix, ".") {
		if !tokenPattern.MatchString(tok) {
			return fmt.Errorf("%q: %w: a subject prefix is '.'-separated tokens of letters, digits, '_' or '-' (no wildcards, no empty token, no white space)", prefix, ErrInvalidSubjectToken)
		}
	}
	return nil
}

// ValidateStreamName returns nil when name is 1-255 ASCII letters,
// digits, '_' or '-' (it becomes a token of JetStream API subjects such
// as $JS.API.STREAM.INFO.<name>); otherwise an error wrapping
// ErrInvalidSubjectToken.
func ValidateStreamName(name string) error {
	if !streamPattern.MatchString(name) {
		return fmt.Errorf("%q: %w: a stream name is 1-255 letters, digits, '_' or '-'", name, ErrInvalidSubjectToken)
	}
	return nil
}

// validate checks the user-supplied parts of the configuration.
func (c *Config) validate() error {
	if err := ValidateStreamName(c.StreamName); err != nil {
		return fmt.Errorf("journal: stream name %w", err)
	}
	if err := ValidateSubjectPrefix(c.SubjectPrefix); err != nil {
		return fmt.Errorf("journal: subject prefix %w", err)
	}
	if c.Signer != nil {
		if _, ok := c.Trust.keys[c.Signer.ID()]; !ok {
			return fmt.Errorf("journal: the signing key %s is not among the trusted keys %v: this store could not read its own records", c.Signer.ID(), c.Trust.IDs())
		}
	}
	return nil
}
