package journal

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestUnansweredCoversElections: the answers JetStream gives while a
// leader is being elected are sent again like a timeout is. ci on 4dcbeef:
// a Read's consumer create got "JetStream system temporarily unavailable"
// (10008) from the meta group between the old leader's death and the
// election, and the read failed; a publish with an expected last
// sequence per subject gets 10163 from a new stream leader that has not
// rebuilt its per-subject state yet. An answer that means the request was
// refused stays final.
func TestUnansweredCoversElections(t *testing.T) {
	ctx := context.Background()
	again := []error{
		context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrNoStreamResponse,
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		fmt.Errorf("create consumer: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}),
		&jetstream.APIError{Code: 503, ErrorCode: 10163, Description: "expected last sequence per subject temporarily unavailable"},
	}
	for _, err := range again {
		if !unanswered(ctx, err) {
			t.Errorf("%v: final, want sent again", err)
		}
	}
	final := []error{
		errors.New("boom"),
		&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence},
		&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeMessageNotFound},
		&jetstream.APIError{Code: 503, ErrorCode: 10039, Description: "JetStream not enabled for account"},
	}
	for _, err := range final {
		if unanswered(ctx, err) {
			t.Errorf("%v: sent again, want final", err)
		}
	}
	// A publish refused while an earlier attempt of it (same Nats-Msg-Id,
	// or on its expected-sequence subject) is still being replicated is
	// in process, not refused for good.
	for _, err := range []error{
		&jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"},
		fmt.Errorf("publish: %w", &jetstream.APIError{Code: 400, ErrorCode: 10164, Description: "wrong last sequence"}),
	} {
		if !inProcess(err) {
			t.Errorf("%v: not in process", err)
		}
	}
	if inProcess(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}) {
		t.Error("10071 (wrong last sequence: the journal moved) taken as in process")
	}
	for n, want := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 9: 8 * time.Second} {
		if got := attemptTimeout(n); got != want {
			t.Errorf("attemptTimeout(%d) = %s, want %s", n, got, want)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if unanswered(done, context.DeadlineExceeded) {
		t.Error("sent again after the caller's context ended")
	}
}
