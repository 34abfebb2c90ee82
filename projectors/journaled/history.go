package journaled

import (
	"slices"
	"time"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// IntentsOf returns the intents of operation op decided for generation
// gen, in stream order.
func IntentsOf(st *journal.State, op string, gen int64) []journal.Record {
	var out []journal.Record
	for _, r := range st.Intents {
		if r.Operation == op && r.Object.Generation == gen {
			out = append(out, r)
		}
	}
	SortBySequence(out)
	return out
}

// NextAttempt is one more than the highest attempt of op's intents in gen
// (1: none). The same journal state always yields the same intent ID
// (de-duplicated by Append), and an ID is never reused: the intent with
// the highest attempt is the step's latest, which every checkpoint keeps
// (journal.Compact), so counting what retention left can not produce an
// attempt that exists already.
func NextAttempt(st *journal.State, op string, gen int64) int {
	n := 0
	for _, r := range IntentsOf(st, op, gen) {
		n = max(n, r.Attempt)
	}
	return n + 1
}

// SortBySequence orders records by stream sequence (stable).
func SortBySequence(rs []journal.Record) {
	slices.SortStableFunc(rs, func(a, b journal.Record) int {
		switch {
		case a.Sequence < b.Sequence:
			return -1
		case a.Sequence > b.Sequence:
			return 1
		}
		return 0
	})
}

// Backoff is the delay before retry number failures (1 for the first
// failure): base doubled per further failure, capped at limit (also on
// overflow).
func Backoff(base, limit time.Duration, failures int) time.Duration {
	d := base << min(max(failures-1, 0), 16)
	if d <= 0 || d > limit {
		return limit
	}
	return d
}
