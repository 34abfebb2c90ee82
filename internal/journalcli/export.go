package journalcli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newExportCommand(g *globalOptions) *cobra.Command {
	var sel objectSelector
	var since, until string
	cmd := &cobra.Command{
		Use:   "export " + selectorUse,
		Short: "Write records as NDJSON (one object, a filter, or the whole stream) for offline analysis",
		Long: `export writes one JSON record per line, in stream order, with its stream sequence ("seq").
An undecodable stream message is written as {"seq":N,"invalid":true}. Every command reads
such a file back with --from-file. With --trusted-keys, a record without a valid proof of
origin carries why ("untrusted"): the file keeps no subject nor message proof, so only
the live read can tell a signed record copied onto another subject; export with the keys.`,
		Example: `  ayatori-journal export > journal.ndjson
  ayatori-journal export --uid 3f0c... > tenant.ndjson
  ayatori-journal timeline --from-file tenant.ndjson --uid 3f0c...`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sinceT, err := parseTimeFlag("since", since)
			if err != nil {
				return err
			}
			untilT, err := parseTimeFlag("until", until)
			if err != nil {
				return err
			}
			l, err := g.load(cmd, args, &sel, true, false, sinceT)
			if err != nil {
				return err
			}
			defer l.close()
			if l.untrusted == nil {
				// Only the live read with the keys can tell a signed
				// record copied onto another subject: the file keeps no
				// subject nor message proof.
				fmt.Fprintln(cmd.ErrOrStderr(), "note: exported without --trusted-keys: the file records no verdict of origin; read back with --trusted-keys, its records' own proofs are checked, not the subject each was stored on")
			}
			recs, bad := l.recs, l.bad
			w := bufio.NewWriter(cmd.OutOrStdout())
			enc := json.NewEncoder(w)
			bi := 0
			for _, r := range recs {
				for bi < len(bad) && bad[bi] < r.Sequence {
					_ = enc.Encode(map[string]any{"seq": bad[bi], "invalid": true})
					bi++
				}
				if sel.kind != "" && sel.name == "" && !strings.EqualFold(r.Object.Kind, sel.kind) ||
					sel.namespace != "" && sel.name == "" && r.Object.Namespace != sel.namespace ||
					sinceT != nil && r.Time.Before(*sinceT) || untilT != nil && r.Time.After(*untilT) {
					continue
				}
				if err := enc.Encode(exportLine{Record: r, Untrusted: l.untrusted[r.Sequence]}); err != nil {
					return err
				}
			}
			for ; bi < len(bad); bi++ {
				_ = enc.Encode(map[string]any{"seq": bad[bi], "invalid": true})
			}
			return w.Flush()
		},
	}
	sel.flags(cmd)
	cmd.Flags().StringVar(&since, "since", "", "only records at or after this time (RFC 3339 or a duration ago)")
	cmd.Flags().StringVar(&until, "until", "", "only records at or before this time")
	return cmd
}
