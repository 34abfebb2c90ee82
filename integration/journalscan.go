package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// errChunkDone ends one chunk of ScanJournal.
var errChunkDone = errors.New("chunk done")

// ScanJournal delivers every record of the stream (as journal.Store.Scan,
// decodable or not) in chunks of at most 500 records, retrying a chunk
// that fails with "no responders". On a JetStream cluster every fetch of
// the ordered consumer behind Scan creates a new consumer, and a pull
// request can reach the client's server before the new consumer's
// interest does (docs/journal.md "R3 cluster"); the retry makes the
// test checks deterministic until the journal retries that itself.
// It returns the number of records delivered.
func ScanJournal(ctx context.Context, s *journal.Store, fn func(journal.Record, error) error) (int, error) {
	const chunk = 500
	next, total := uint64(1), 0
	for {
		var recs []journal.Record
		var errs []error
		var err error
		for attempt := 1; attempt <= 10; attempt++ {
			recs, errs = recs[:0], errs[:0]
			err = s.Scan(ctx, journal.ScanOptions{StartSequence: next}, func(r journal.Record, err error) error {
				recs, errs = append(recs, r), append(errs, err)
				if len(recs) == chunk {
					return errChunkDone
				}
				return nil
			})
			if err == nil || errors.Is(err, errChunkDone) || !strings.Contains(err.Error(), "no responders") {
				break
			}
			time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, errChunkDone) {
			return total, fmt.Errorf("scan from sequence %d: %w", next, err)
		}
		for i, r := range recs {
			if err := fn(r, errs[i]); err != nil {
				return total, err
			}
			total++
			next = r.Sequence + 1
		}
		if len(recs) < chunk {
			return total, nil
		}
	}
}
