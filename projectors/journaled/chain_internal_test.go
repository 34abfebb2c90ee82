package journaled

import (
	"context"
	"errors"
	"testing"

	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// TestAppendLink: a link of a chain steps over the outcomes the executors
// appended since the record before it, and is not appended after anything
// else (another decider's intent or note): the chain is cut there.
func TestAppendLink(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded JetStream")
	}
	n, err := integration.NewNATS(integration.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	j := integration.OpenJournal(t, n, "test")
	ctx := context.Background()
	obj := journal.ObjectRef{Group: "example.ayatori.ddupan.top", Kind: "Pod", Namespace: "ns", Name: "p",
		UID: "0b5f0ae2-8c7e-4f57-9b4e-2a3c4d5e6f71", Generation: 1}
	mk := func(op string, after *journal.Record) *journal.Record {
		r, err := journal.NewIntent(obj, op, "", 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if after != nil {
			r.After = after.ID
		}
		return &r
	}
	head := mk("CreateRole", nil)
	res, err := appendLink(ctx, j, head, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	// The executor records the head's outcome before the pass appends the
	// next link.
	out, err := journal.NewOutcome(*head, journal.Result{Class: journal.Succeeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, &out); err != nil {
		t.Fatal(err)
	}
	db := mk("CreateDatabase", head)
	res, err = appendLink(ctx, j, db, res.Sequence, true)
	if err != nil {
		t.Fatalf("a link after an outcome: %v", err)
	}
	// Another decider appends a note: the next link is not appended.
	note, err := journal.NewNote(obj, "Revalidate", res.Sequence, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, &note); err != nil {
		t.Fatal(err)
	}
	ext := mk("EnsureExtensions", db)
	if _, err := appendLink(ctx, j, ext, res.Sequence, true); !errors.Is(err, errChainCut) {
		t.Fatalf("a link after another decider's note: %v, want errChainCut", err)
	}
	recs, err := j.Read(ctx, obj.UID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == ext.ID {
			t.Fatal("the cut link is in the journal")
		}
	}
	// The head (no link) still reports a conflict.
	if _, err := appendLink(ctx, j, mk("VerifyLogin", nil), res.Sequence, false); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("a head on a moved journal: %v, want ErrConflict", err)
	}
}
