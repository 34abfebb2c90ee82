package journal_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// badTokens are strings that are not one plain NATS subject token: NATS
// wildcards, separators, white space, the empty string.
var badTokens = []string{"", " ", "*", ">", ".", "a.b", "a*", "a>", "a b", "a\tb", "a\nb", "a\x00b", "uid.*", "*.>"}

// TestValidateUID: a UID goes into subjects as one token; only a
// Kubernetes-style UID (1-64 letters, digits, '-') is accepted.
func TestValidateUID(t *testing.T) {
	for _, ok := range []string{"7d3c0e52-1c1a-4b8e-9a53-000000000001", "a", strings.Repeat("a", 64)} {
		if err := journal.ValidateUID(ok); err != nil {
			t.Errorf("ValidateUID(%q): %v", ok, err)
		}
	}
	for _, bad := range append(badTokens, strings.Repeat("a", 65), "a_b", "a/b", "ä") {
		err := journal.ValidateUID(bad)
		if !errors.Is(err, journal.ErrInvalidSubjectToken) {
			t.Errorf("ValidateUID(%q) = %v, want ErrInvalidSubjectToken", bad, err)
		}
	}
}

// TestValidateSubjectPrefix: a prefix is dot-separated plain tokens.
func TestValidateSubjectPrefix(t *testing.T) {
	for _, ok := range []string{"ayatori.journal", "a", "a-b.c_d.E9"} {
		if err := journal.ValidateSubjectPrefix(ok); err != nil {
			t.Errorf("ValidateSubjectPrefix(%q): %v", ok, err)
		}
	}
	for _, bad := range append(badTokens, "a.", ".a", "a..b", "a.>", "a.*.b", "$JS.API") {
		if bad == "a.b" {
			continue // two plain tokens: a valid prefix
		}
		if err := journal.ValidateSubjectPrefix(bad); !errors.Is(err, journal.ErrInvalidSubjectToken) {
			t.Errorf("ValidateSubjectPrefix(%q) = %v, want ErrInvalidSubjectToken", bad, err)
		}
	}
}

// TestValidateStreamName: the stream name is a token of JetStream API
// subjects ($JS.API.STREAM.INFO.<name>).
func TestValidateStreamName(t *testing.T) {
	for _, ok := range []string{"AYATORI_JOURNAL", "j-1"} {
		if err := journal.ValidateStreamName(ok); err != nil {
			t.Errorf("ValidateStreamName(%q): %v", ok, err)
		}
	}
	for _, bad := range append(badTokens, "a/b", `a\b`, strings.Repeat("A", 256)) {
		if err := journal.ValidateStreamName(bad); !errors.Is(err, journal.ErrInvalidSubjectToken) {
			t.Errorf("ValidateStreamName(%q) = %v, want ErrInvalidSubjectToken", bad, err)
		}
	}
}

// TestStoreRejectsWildcardUIDs: Read, Latest and Follow with a wildcard
// (or any non-UID) never read other objects' records; Open and
// OpenExisting reject a prefix or stream name that is not plain tokens.
func TestStoreRejectsWildcardUIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs JetStream")
	}
	n := integration.StartNATS(t)
	s := open(t, n, journal.Config{})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := s.Append(ctx, intent(t, obj(), "ObserveInstance", 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range badTokens {
		if recs, err := s.Read(ctx, uid); !errors.Is(err, journal.ErrInvalidSubjectToken) || len(recs) != 0 {
			t.Errorf("Read(%q) = %d records, %v; want ErrInvalidSubjectToken", uid, len(recs), err)
		}
		if r, err := s.Latest(ctx, uid); !errors.Is(err, journal.ErrInvalidSubjectToken) || r != nil {
			t.Errorf("Latest(%q) = %v, %v; want ErrInvalidSubjectToken", uid, r, err)
		}
		if err := s.Follow(ctx, uid, 0, func(journal.Record, error) { t.Errorf("Follow(%q) delivered a record", uid) }); !errors.Is(err, journal.ErrInvalidSubjectToken) {
			t.Errorf("Follow(%q) = %v; want ErrInvalidSubjectToken", uid, err)
		}
	}
	nc := connect(t, n)
	for _, cfg := range []journal.Config{{SubjectPrefix: "a.*"}, {SubjectPrefix: ">"}, {SubjectPrefix: "a..b"}, {StreamName: "A.B"}, {StreamName: "*"}} {
		if _, err := journal.Open(ctx, nc, cfg); !errors.Is(err, journal.ErrInvalidSubjectToken) {
			t.Errorf("Open(%+v) = %v; want ErrInvalidSubjectToken", cfg, err)
		}
		if _, err := journal.OpenExisting(ctx, nc, cfg); !errors.Is(err, journal.ErrInvalidSubjectToken) {
			t.Errorf("OpenExisting(%+v) = %v; want ErrInvalidSubjectToken", cfg, err)
		}
	}
}
