package journalcli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// replayStep is the derived state after one record.
type replayStep struct {
	Record      journal.Record    `json:"record"`
	Pending     []string          `json:"pending"`
	LastOutcome map[string]string `json:"lastOutcome"`
	Summary     summary           `json:"summary"`
}

// summary is the object-level view derived from the journal alone.
type summary struct {
	Generation int64  `json:"generation"`
	Succeeded  int    `json:"stepsSucceeded"`
	Failed     int    `json:"stepsFailed"`
	Unknown    int    `json:"stepsResultUnknown"`
	Pending    int    `json:"pending"`
	LastFailed string `json:"lastFailure,omitempty"`
	// Settled: no intent pending and the last outcome of every step so far
	// succeeded. The journal cannot tell whether more steps follow: a
	// settled object that is not Ready is waiting for its projector's next
	// decision.
	Settled bool `json:"settled"`
}

func summarize(st *journal.State) summary {
	s := summary{Generation: st.Object.Generation, Pending: len(st.Pending())}
	var lastFail journal.Record
	for _, k := range st.StepKeys() {
		o := st.LastOutcome[k]
		switch o.Result.Class {
		case journal.Succeeded:
			s.Succeeded++
		case journal.Failed:
			s.Failed++
			if o.Sequence > lastFail.Sequence {
				lastFail = o
			}
		case journal.ResultUnknown:
			s.Unknown++
		}
	}
	if lastFail.Result != nil {
		s.LastFailed = journal.StepKey(lastFail) + ": " + lastFail.Result.Reason
	}
	s.Settled = s.Pending == 0 && s.Failed == 0 && s.Unknown == 0 && s.Succeeded > 0
	return s
}

func newReplayCommand(g *globalOptions) *cobra.Command {
	var sel objectSelector
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "replay " + selectorUse,
		Short: "Fold one object's records in order and print the derived state after each; optionally diff against the live CR",
		Long: `replay applies an object's records one by one and prints, after each, the pending
intents, the last outcome per step and an object-level summary. With --kubeconfig it then
reads the live object and reports where its status disagrees with what the journal says
(for example Ready=True while intents are pending, other than the periodic re-check of a
Ready object, or a failure the status does not show).

For a Job the comparison is of its result: the live Succeeded condition (status and
reason), status.result.exitCode and status.execution.references against the journal's
Finished note and the references its outcomes reported. A Job that is gone (or whose name
now belongs to another UID) is no mismatch when its journal says why: a TTLExpired note
("deleted by TTL"), a Finished note and a Delete ("deleted"), or a Finished note and no
Ensure (finished without an execution: nothing to clean up). Exit status 1 on a mismatch.`,
		Example: `  ayatori-journal replay --kind PostgreSQLTenant -n netbox --name netbox --kubeconfig ~/.kube/config
  ayatori-journal replay --kind Job ci/build --kubeconfig ~/.kube/config`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.load(cmd, args, &sel, false, true, nil)
			if err != nil {
				return err
			}
			defer l.close()
			ctx, recs := l.ctx, l.trusted()
			if len(l.untrusted) > 0 {
				l.warnUntrusted(cmd.ErrOrStderr())
			}
			if len(recs) == 0 {
				return &exitError{code: 3, msg: "no trusted records for uid " + l.uid}
			}
			st := journal.NewState()
			steps := make([]replayStep, 0, len(recs))
			for _, r := range recs {
				st.Apply(r)
				step := replayStep{Record: r, Pending: []string{}, LastOutcome: map[string]string{}, Summary: summarize(st)}
				for _, p := range st.Pending() {
					step.Pending = append(step.Pending, fmt.Sprintf("%s%s a%d", p.Operation, stepSuffix(p.Step), p.Attempt))
				}
				for _, k := range st.StepKeys() {
					step.LastOutcome[k] = resultText(st.LastOutcome[k])
				}
				steps = append(steps, step)
			}
			var diff *liveDiff
			if kubeconfig != "" {
				diff, err = diffLive(ctx, kubeconfig, st, recs)
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				return writeJSON(out, map[string]any{"object": st.Object, "steps": steps, "live": diff})
			}
			printReplay(out, steps)
			if diff != nil {
				printDiff(out, diff)
				if len(diff.Mismatches) > 0 {
					return &exitError{code: 1, msg: fmt.Sprintf("%d mismatch(es) between the journal and the live object", len(diff.Mismatches))}
				}
			}
			return nil
		},
	}
	sel.flags(cmd)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster: diff the derived state against the live object's status")
	return cmd
}

func printReplay(w io.Writer, steps []replayStep) {
	o := steps[len(steps)-1].Record.Object
	fmt.Fprintf(w, "%s  uid=%s  records=%d\n", o.String(), o.UID, len(steps))
	for _, s := range steps {
		r := s.Record
		line := fmt.Sprintf("#%d %s %s %s%s a%d gen=%d actor=%s", r.Sequence, fmtTime(r.Time), r.Type, r.Operation, stepSuffix(r.Step), r.Attempt, r.Object.Generation, r.Actor)
		if r.Type == journal.TypeOutcome {
			line += " result=" + resultText(r)
		}
		if d := describe(r); d != "" {
			line += " (" + d + ")"
		}
		fmt.Fprintln(w, line)
		pending := "none"
		if len(s.Pending) > 0 {
			pending = strings.Join(s.Pending, ", ")
		}
		fmt.Fprintf(w, "    pending: %s\n", pending)
		if len(s.LastOutcome) > 0 {
			keys := make([]string, 0, len(s.LastOutcome))
			for k := range s.LastOutcome {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + "=" + s.LastOutcome[k]
			}
			fmt.Fprintf(w, "    last outcome: %s\n", strings.Join(parts, ", "))
		}
		sm := s.Summary
		fmt.Fprintf(w, "    summary: gen=%d succeeded=%d failed=%d unknown=%d pending=%d settled=%t", sm.Generation, sm.Succeeded, sm.Failed, sm.Unknown, sm.Pending, sm.Settled)
		if sm.LastFailed != "" {
			fmt.Fprintf(w, " lastFailure=%q", sm.LastFailed)
		}
		fmt.Fprintln(w)
	}
}

// liveDiff compares the journal's derived state with the live object.
type liveDiff struct {
	Found              bool     `json:"found"`
	Phase              string   `json:"phase,omitempty"`
	Ready              string   `json:"ready,omitempty"`
	ReadyReason        string   `json:"readyReason,omitempty"`
	ObservedGeneration int64    `json:"observedGeneration,omitempty"`
	Generation         int64    `json:"generation,omitempty"`
	Mismatches         []string `json:"mismatches"`
	// Job is the domain's own comparison (the execution domain's of a
	// Job's result), from its journal.Describer.
	Job any `json:"job,omitempty"`
}

func diffLive(ctx context.Context, kubeconfig string, st *journal.State, recs []journal.Record) (*liveDiff, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	o := st.Object
	mapping, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: o.Group, Kind: o.Kind})
	if err != nil {
		return nil, fmt.Errorf("find API for %s.%s: %w", o.Kind, o.Group, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, u); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		u = nil
	}
	if found, mismatches, detail, ok := compareDomainLive(o, u, recs); ok {
		return &liveDiff{Found: found, Mismatches: mismatches, Job: detail}, nil
	}
	return compareLive(u, st), nil
}

// compareLive compares the live object u (nil: it does not exist) with the
// state the journal derives for it; each disagreement is one mismatch.
func compareLive(u *unstructured.Unstructured, st *journal.State) *liveDiff {
	o := st.Object
	d := &liveDiff{Mismatches: []string{}}
	if u == nil {
		d.Mismatches = append(d.Mismatches, "the object no longer exists; the journal is the only record")
		return d
	}
	d.Found = true
	if string(u.GetUID()) != o.UID {
		d.Mismatches = append(d.Mismatches, fmt.Sprintf("the live object has uid %s: it was recreated; the journal shows uid %s", u.GetUID(), o.UID))
		return d
	}
	d.Generation = u.GetGeneration()
	d.Phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	d.ObservedGeneration, _, _ = unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, ci := range conds {
		if m, ok := ci.(map[string]any); ok && m["type"] == "Ready" {
			d.Ready, _ = m["status"].(string)
			d.ReadyReason, _ = m["reason"].(string)
		}
	}
	s := summarize(st)
	switch {
	case d.Ready == "True" && s.Pending-rechecksPending(st, d.Generation, d.ObservedGeneration) > 0:
		d.Mismatches = append(d.Mismatches, fmt.Sprintf("live Ready=True but the journal has %d pending intent(s)",
			s.Pending-rechecksPending(st, d.Generation, d.ObservedGeneration)))
	case d.Ready == "True" && s.Failed > 0:
		d.Mismatches = append(d.Mismatches, "live Ready=True but the journal's last outcome of a step failed ("+s.LastFailed+")")
	case d.Ready != "True" && s.Settled && d.Generation == s.Generation:
		d.Mismatches = append(d.Mismatches, fmt.Sprintf("the journal has nothing pending and no failed step for generation %d, but live Ready=%s (%s): "+
			"the next step has not been decided (is a leader running?), or this read raced with it", s.Generation, dash(d.Ready), dash(d.ReadyReason)))
	}
	if d.Generation > s.Generation && d.ObservedGeneration >= d.Generation {
		d.Mismatches = append(d.Mismatches, fmt.Sprintf("status claims generation %d was observed, but the journal has no intent for generations after %d", d.ObservedGeneration, s.Generation))
	}
	return d
}

// rechecksPending counts st's pending intents that re-check a Ready object
// (journal.Describer.Rechecks): of the live generation, which status says
// was observed, after an earlier successful step of that generation. A
// Ready object stays Ready while they run; the first step of a generation,
// or one of a generation status has not caught up with, is still a
// mismatch.
func rechecksPending(st *journal.State, generation, observed int64) int {
	d, ok := journal.DescriberOf(st.Object.Group)
	if !ok || generation != observed {
		return 0
	}
	n := 0
	for _, in := range st.Pending() {
		if !slices.Contains(d.Rechecks, in.Operation) || in.Object.Generation != generation {
			continue
		}
		for _, o := range st.Outcomes {
			if o.Object.Generation == generation && o.Sequence < in.Sequence &&
				o.Result != nil && o.Result.Class == journal.Succeeded {
				n++
				break
			}
		}
	}
	return n
}

func printDiff(w io.Writer, d *liveDiff) {
	fmt.Fprintln(w, "live object:")
	if l, ok := d.Job.(interface{ Lines() []string }); ok {
		for _, line := range l.Lines() {
			fmt.Fprintf(w, "    %s\n", line)
		}
	} else if d.Found {
		fmt.Fprintf(w, "    phase=%s ready=%s reason=%s generation=%d observedGeneration=%d\n", dash(d.Phase), dash(d.Ready), dash(d.ReadyReason), d.Generation, d.ObservedGeneration)
	}
	if len(d.Mismatches) == 0 {
		fmt.Fprintln(w, "    no mismatch with the journal")
	}
	for _, m := range d.Mismatches {
		fmt.Fprintf(w, "    MISMATCH: %s\n", m)
	}
}
