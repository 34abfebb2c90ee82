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
// that fails with "no responders". On a JetStream cluster every Scan
// creates a new consumer, and a pull request can reach the client's
// server before the new consumer's interest does (docs/journal.md "R3
// cluster"); the journal retries that five times within 300 ms, and this
// retry makes the test checks deterministic beyond that.
// It returns the number of records delivered.
func ScanJournal(ctx context.Context, s *journal.Store, fn func(journal.Record, error) error) (int, error) {
	const chunk = 500
	// The stream's last sequence, from its leader. Scan reads up to the
	// leader's last sequence itself (docs/journal.md, known limitation 2);
	// a chunk that ends before it anyway is reported and read again.
	stream, err := s.JetStream().Stream(ctx, s.Config().StreamName)
	if err != nil {
		return 0, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	last := info.State.LastSeq
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
			end := next
			if len(recs) > 0 {
				end = recs[len(recs)-1].Sequence + 1
			}
			if err == nil && end <= last {
				err = fmt.Errorf("the scan ended at sequence %d, the stream's last is %d (a replica behind the leader served it)", end-1, last)
			} else if err == nil || errors.Is(err, errChunkDone) || !strings.Contains(err.Error(), "no responders") {
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
