package journal

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
	done, cancel := context.WithCancel(ctx)
	cancel()
	if unanswered(done, context.DeadlineExceeded) {
		t.Error("sent again after the caller's context ended")
	}
}
