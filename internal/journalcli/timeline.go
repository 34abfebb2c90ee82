package journalcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

func newTimelineCommand(g *globalOptions) *cobra.Command {
	var sel objectSelector
	var follow bool
	cmd := &cobra.Command{
		Use:   "timeline " + selectorUse,
		Short: "Show one object's intents paired with their outcomes",
		Long: `timeline pairs each intent of one object with its outcome, in order, with the notes in
between. Select the object by UID (--uid or the argument) or by kind and name (--kind with
--name/-n or a [NAMESPACE/]NAME argument); the journal keeps an object's records after it
was deleted. By name, the most recently active UID is shown and the older objects that had
the same name (a deleted and recreated object has a new UID) are listed after it, with their
first and last record times, so you can ask for one with --uid.

For Jobs the DETAIL column summarises the payload: an outcome's observation (state, exit
code, reason), a Finished note's result, a TTLExpired note's TTL.`,
		Example: `  ayatori-journal timeline --uid 3f0c...
  ayatori-journal timeline --kind PostgreSQLTenant -n netbox --name netbox --follow
  ayatori-journal timeline --kind Job ci/build`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow && g.fromFile != "" {
				return errors.New("--follow needs a live server, not --from-file")
			}
			l, err := g.load(cmd, args, &sel, false, true, nil)
			if err != nil {
				return err
			}
			defer l.close()
			src, uid, recs := l.src, l.uid, l.trusted()
			if len(l.untrusted) > 0 {
				l.warnUntrusted(cmd.ErrOrStderr())
			}
			if len(recs) == 0 {
				return &exitError{code: 3, msg: "no trusted records for uid " + uid}
			}
			out := cmd.OutOrStdout()
			if err := printTimeline(out, g.output, recs, l.older); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			fctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// After every record read, trusted or not (those left out were
			// counted above).
			last := l.recs[len(l.recs)-1].Sequence
			var newer error
			err = src.follow(fctx, uid, last, func(r journal.Record, err error) {
				switch {
				case newer != nil:
					return
				case errors.Is(err, journal.ErrNewerSchema):
					// The manager's own newer record: this build can
					// not tell what it or anything after it means.
					newer = err
					stop()
					return
				case err != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: record #%d left out: %v\n", r.Sequence, err)
					return
				}
				if g.output == "json" {
					_ = writeJSON(out, r)
					return
				}
				line := fmt.Sprintf("%s  #%d  %-7s %s%s  a%d  %s", fmtTime(r.Time), r.Sequence, r.Type, r.Operation,
					stepSuffix(r.Step), r.Attempt, resultText(r))
				if d := describe(r); d != "" {
					line += "  " + d
				}
				fmt.Fprintln(out, strings.TrimRight(line, " "))
			})
			if newer != nil {
				return newer
			}
			return err
		},
	}
	sel.flags(cmd)
	sel.showsOlder = true
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records of the object until interrupted")
	return cmd
}

// timelineRow is a journal timeline row with the domain's summary of its
// records' payloads.
type timelineRow struct {
	journal.TimelineRow
	Detail string `json:"detail,omitempty"`
}

// olderObject is an older object with the same kind/namespace/name.
type olderObject struct {
	UID       string    `json:"uid"`
	FirstTime time.Time `json:"firstTime"`
	LastTime  time.Time `json:"lastTime"`
	Records   int       `json:"records"`
}

func printTimeline(w io.Writer, output string, recs []journal.Record, older []journal.ObjectSummary) error {
	bySeq := make(map[uint64]journal.Record, len(recs))
	for _, r := range recs {
		bySeq[r.Sequence] = r
	}
	detailed := false
	rows := make([]timelineRow, 0, len(recs))
	for _, r := range journal.Timeline(recs) {
		row := timelineRow{TimelineRow: r}
		if r.OutcomeSeq != 0 {
			row.Detail = describe(bySeq[r.OutcomeSeq])
		}
		if row.Detail == "" && r.IntentSeq != 0 {
			row.Detail = describe(bySeq[r.IntentSeq])
		}
		detailed = detailed || row.Detail != ""
		rows = append(rows, row)
	}
	olderObjs := make([]olderObject, len(older))
	for i, s := range older {
		olderObjs[i] = olderObject{UID: s.Object.UID, FirstTime: s.FirstTime, LastTime: s.LastTime, Records: s.Records}
	}
	if output == "json" {
		v := map[string]any{"object": recs[len(recs)-1].Object, "rows": rows}
		if len(olderObjs) > 0 {
			v["olderObjects"] = olderObjs
		}
		return writeJSON(w, v)
	}
	o := recs[len(recs)-1].Object
	fmt.Fprintf(w, "%s  uid=%s  group=%s  records=%d\n", o.String(), o.UID, o.Group, len(recs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "TIME\tSEQ\tTYPE\tOPERATION\tGEN\tATTEMPT\tRESULT\tDURATION\tACTOR"
	if detailed {
		header += "\tDETAIL"
	}
	fmt.Fprintln(tw, header)
	for _, row := range rows {
		r := row.TimelineRow
		seq := fmt.Sprintf("%d", r.IntentSeq)
		typ := string(r.Type)
		switch {
		case r.Type == journal.TypeIntent && !r.Pending:
			seq = fmt.Sprintf("%d→%d", r.IntentSeq, r.OutcomeSeq)
			typ = "intent→outcome"
		case r.OrphanOutcome:
			seq = fmt.Sprintf("?→%d", r.OutcomeSeq)
			typ = "outcome (no intent)"
		}
		result := string(r.Result)
		if r.Reason != "" {
			result += "/" + r.Reason
		}
		if r.Pending {
			result = "pending"
		}
		if r.Type == journal.TypeNote {
			result = "-"
		}
		dur := "-"
		if r.Type == journal.TypeIntent && !r.Pending {
			dur = fmtDur(r.Duration)
		}
		actor := r.Actor
		if r.OutcomeActor != "" && r.OutcomeActor != r.Actor {
			actor += " → " + r.OutcomeActor
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s%s\t%d\t%d\t%s\t%s\t%s", fmtTime(r.Time), seq, typ, r.Operation, stepSuffix(r.Step),
			r.Gen, r.Attempt, result, dur, actor)
		if detailed {
			line += "\t" + dash(row.Detail)
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(olderObjs) > 0 {
		fmt.Fprintf(w, "\nOlder objects named %s (timeline --uid UID shows one):\n", o.String())
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "UID\tFIRST RECORD\tLAST RECORD\tRECORDS")
		for _, s := range olderObjs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", s.UID, fmtTime(s.FirstTime), fmtTime(s.LastTime), s.Records)
		}
		return tw.Flush()
	}
	return nil
}

func stepSuffix(step string) string {
	if step == "" {
		return ""
	}
	return "(" + step + ")"
}

func resultText(r journal.Record) string {
	if r.Result == nil {
		return ""
	}
	s := string(r.Result.Class)
	if r.Result.Reason != "" {
		s += "/" + r.Result.Reason
	}
	return s
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	default:
		return strings.TrimSuffix(d.Round(10*time.Millisecond).String(), "0s")
	}
}
