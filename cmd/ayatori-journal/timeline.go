package main

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
		Use:   "timeline",
		Short: "Show one object's intents paired with their outcomes",
		Example: `  ayatori-journal timeline --uid 3f0c...
  ayatori-journal timeline --kind PostgreSQLTenant -n netbox --name netbox --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if follow && g.fromFile != "" {
				return errors.New("--follow needs a live server, not --from-file")
			}
			l, err := g.load(cmd, &sel, false, true, nil)
			if err != nil {
				return err
			}
			defer l.close()
			src, uid, recs := l.src, l.uid, l.recs
			out := cmd.OutOrStdout()
			if err := printTimeline(out, g.output, recs); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			fctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			last := recs[len(recs)-1].Sequence
			return src.follow(fctx, uid, last, func(r journal.Record) {
				if g.output == "json" {
					_ = writeJSON(out, r)
					return
				}
				fmt.Fprintf(out, "%s  #%d  %-7s %s%s  a%d  %s\n", fmtTime(r.Time), r.Sequence, r.Type, r.Operation,
					stepSuffix(r.Step), r.Attempt, resultText(r))
			})
		},
	}
	sel.flags(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records of the object until interrupted")
	return cmd
}

func printTimeline(w io.Writer, output string, recs []journal.Record) error {
	rows := journal.Timeline(recs)
	if output == "json" {
		return writeJSON(w, map[string]any{"object": recs[len(recs)-1].Object, "rows": rows})
	}
	o := recs[len(recs)-1].Object
	fmt.Fprintf(w, "%s  uid=%s  group=%s  records=%d\n", o.String(), o.UID, o.Group, len(recs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSEQ\tTYPE\tOPERATION\tGEN\tATTEMPT\tRESULT\tDURATION\tACTOR")
	for _, r := range rows {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t%d\t%d\t%s\t%s\t%s\n", fmtTime(r.Time), seq, typ, r.Operation, stepSuffix(r.Step),
			r.Gen, r.Attempt, result, dur, actor)
	}
	return tw.Flush()
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
