package journalcli

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

func newVerifyCommand(g *globalOptions) *cobra.Command {
	var sel objectSelector
	cmd := &cobra.Command{
		Use:   "verify " + selectorUse,
		Short: "Check journal invariants over one object or the whole stream; exit 1 on violation",
		Long: `verify checks, over one object (a UID, or --kind with [NAMESPACE/]NAME) or the whole stream:
  - every outcome has its intent;
  - no intent executed twice with different results;
` + domainInvariants() + `  - no record ID stored twice, and every record decodes;
  - with --trusted-keys: every record carries a valid proof of origin by one of the
    manager's signing keys (an untrusted record, and the Failed/UntrustedIntent outcome
    an executor answered it with, are reported; the other rules see trusted records only);
  - no intent for a step (UID, generation, operation) while the previous intent
    of that step has no outcome, unless a note (new epoch) came in between: two
    deciders (replicas, a stale leader) never both decide one step.
Each violation is reported with the stream sequences involved. Exit status: 0 clean,
1 violations, 2 the journal could not be read.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.load(cmd, args, &sel, true, false, nil)
			if err != nil {
				return err
			}
			defer l.close()
			recs, bad := l.trusted(), l.bad
			violations := append(untrustedViolations(l), journal.Verify(recs, bad)...)
			if l.untrusted == nil {
				l.warnUntrusted(cmd.ErrOrStderr())
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				if err := writeJSON(out, map[string]any{"records": len(recs), "violations": nonNil(violations)}); err != nil {
					return err
				}
			} else if len(violations) == 0 {
				fmt.Fprintf(out, "OK: %s, %s, no invariant violated\n", plural(len(recs), "record"), plural(len(journal.Summaries(recs)), "object"))
			} else {
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "RULE\tSEQUENCES\tOBJECT\tUID\tDETAIL")
				for _, v := range violations {
					seqs := make([]string, len(v.Sequences))
					for i, s := range v.Sequences {
						seqs[i] = fmt.Sprint(s)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Rule, strings.Join(seqs, ","), dash(v.Object), dash(v.UID), v.Detail)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(out, "FAILED: %d violation(s) in %d records\n", len(violations), len(recs))
			}
			if len(violations) > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d invariant violation(s)", len(violations))}
			}
			return nil
		},
	}
	sel.flags(cmd)
	return cmd
}

// untrustedViolations reports each record without a valid proof of
// origin, with the executor's refusal of it (a trusted outcome answering
// it) when there is one.
func untrustedViolations(l *loaded) []journal.Violation {
	var out []journal.Violation
	// The stream sequence each trusted refusal answers: the executor names
	// the untrusted record by the UID of the subject it was read from,
	// which is the refusal's own (never the UID the record claims).
	refusals := map[uint64]uint64{}
	for _, o := range l.trusted() {
		if seq, ok := journal.RefusalOf(o); ok {
			refusals[seq] = o.Sequence
		}
	}
	for _, r := range l.recs {
		why, bad := l.untrusted[r.Sequence]
		if !bad {
			continue
		}
		refused := ""
		if seq, ok := refusals[r.Sequence]; ok {
			refused = fmt.Sprintf("; refused by an executor (outcome at sequence %d)", seq)
		}
		out = append(out, journal.Violation{Rule: "untrusted-record", Sequences: []uint64{r.Sequence}, Object: r.Object.String(), UID: r.Object.UID,
			Detail: fmt.Sprintf("%s %s: %s%s", r.Type, r.Operation, why, refused)})
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural renders "1 record" / "2 records".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// domainInvariants lists the invariants the domains registered, one
// "  - <description>;" line each, domains in name order.
func domainInvariants() string {
	byDomain := journal.RegisteredInvariants()
	domains := make([]string, 0, len(byDomain))
	for d := range byDomain {
		domains = append(domains, d)
	}
	sort.Strings(domains)
	var b strings.Builder
	for _, d := range domains {
		for _, inv := range byDomain[d] {
			fmt.Fprintf(&b, "  - %s;\n", inv.Description)
		}
	}
	return b.String()
}
