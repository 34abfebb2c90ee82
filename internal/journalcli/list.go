package journalcli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

func newListCommand(g *globalOptions) *cobra.Command {
	var kind, namespace, since, until, result string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the objects in the journal, newest activity first",
		Long: `list prints one line per object (UID) in the journal, newest activity first: its last
operation and that operation's result (the executor's: Succeeded means the operation
worked). For Jobs the DETAIL column is the Job's own result from its Finished note (and
whether it was deleted, by its TTL or otherwise), or while it runs its last observed state.`,
		Example: `  ayatori-journal list --kind PostgreSQLTenant --since 2h
  ayatori-journal list --kind Job -n ci
  ayatori-journal list --result Failed -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sinceT, err := parseTimeFlag("since", since)
			if err != nil {
				return err
			}
			untilT, err := parseTimeFlag("until", until)
			if err != nil {
				return err
			}
			// Case-insensitive: --result failed means Failed.
			for _, v := range []string{"Succeeded", "Failed", "ResultUnknown", "pending"} {
				if strings.EqualFold(result, v) {
					result = v
				}
			}
			switch result {
			case "", "Succeeded", "Failed", "ResultUnknown", "pending":
			default:
				return fmt.Errorf("--result must be Succeeded, Failed, ResultUnknown or pending, got %q", result)
			}
			ctx, cancel := withTimeout(g)
			defer cancel()
			src, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer src.close()
			all, _, err := src.all(ctx, sinceT)
			if err != nil {
				return err
			}
			l := &loaded{recs: all, untrusted: g.checkTrust(all, "", src.verdicts())}
			recs := l.named()
			if len(l.untrusted) > 0 {
				l.warnUntrusted(cmd.ErrOrStderr())
			}
			byUID := map[string][]journal.Record{}
			for _, r := range recs {
				byUID[r.Object.UID] = append(byUID[r.Object.UID], r)
			}
			var rows []listRow
			detailed := false
			for _, s := range journal.Summaries(recs) {
				switch {
				case kind != "" && !strings.EqualFold(s.Object.Kind, kind),
					namespace != "" && s.Object.Namespace != namespace,
					untilT != nil && s.FirstTime.After(*untilT),
					result == "pending" && s.Pending == 0,
					result != "" && result != "pending" && string(s.LastResult) != result:
					continue
				}
				row := listRow{ObjectSummary: s, Detail: summarizeObject(s.Object, byUID[s.Object.UID])}
				detailed = detailed || row.Detail != ""
				rows = append(rows, row)
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				return writeJSON(out, nonNil(rows))
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			header := "LAST ACTIVITY\tKIND\tNAMESPACE\tNAME\tUID\tRECORDS\tPENDING\tLAST OPERATION\tLAST RESULT"
			if detailed {
				header += "\tDETAIL"
			}
			fmt.Fprintln(tw, header)
			for _, r := range rows {
				s := r.ObjectSummary
				res := string(s.LastResult)
				if s.LastReason != "" {
					res += "/" + s.LastReason
				}
				if res == "" && s.Pending > 0 {
					res = "pending"
				}
				line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s", fmtTime(s.LastTime), s.Object.Kind, dash(s.Object.Namespace),
					s.Object.Name, s.Object.UID, s.Records, s.Pending, s.LastOp, dash(res))
				if detailed {
					line += "\t" + dash(r.Detail)
				}
				fmt.Fprintln(tw, line)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "only objects of this kind (case-insensitive), e.g. Job or PostgreSQLTenant")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only objects in this namespace")
	cmd.Flags().StringVar(&since, "since", "", "only records at or after this time (RFC 3339, or a duration ago such as 2h)")
	cmd.Flags().StringVar(&until, "until", "", "only objects whose first record is at or before this time")
	cmd.Flags().StringVar(&result, "result", "", "only objects whose last outcome is Succeeded, Failed or ResultUnknown, or that have pending intents (pending)")
	return cmd
}

// listRow is an object of the journal with its domain's one-line summary.
type listRow struct {
	journal.ObjectSummary
	Detail string `json:"detail,omitempty"`
}
