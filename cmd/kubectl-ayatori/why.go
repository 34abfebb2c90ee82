package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"git.ddupan.top/panxiao81/ayatori/journal"
)

// Explanation is `why`'s answer: the live object's main condition, where it
// is in its chain, what the journal says it did last and waits for, and
// what an operator can do. Every field comes from the live object or the
// journal; none carries a secret (the journal and conditions never hold
// one).
type Explanation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Condition is the main condition (Ready; Succeeded for a Job).
	Condition Condition `json:"condition"`
	// Phase is status.phase (the current step of a Tenant or Instance).
	Phase    string `json:"phase,omitempty"`
	Deleting bool   `json:"deleting,omitempty"`
	// LastIntent and LastOutcome are the journal's latest of each.
	LastIntent  *Step `json:"lastIntent,omitempty"`
	LastOutcome *Step `json:"lastOutcome,omitempty"`
	// Pending are the intents without an outcome.
	Pending []Step `json:"pending,omitempty"`
	// WaitingFor says what the object waits for now ("" when nothing).
	WaitingFor string `json:"waitingFor,omitempty"`
	// Action is what an operator can do (the runbook's line), with the
	// runbook section.
	Action  string `json:"action"`
	Runbook string `json:"runbook,omitempty"`
	// Journal is "" when the journal was read, else why it could not be.
	Journal string `json:"journal,omitempty"`
	// Records is how many journal records the object has; Untrusted how
	// many were left out for lack of a valid proof of origin (-1: not
	// checked).
	Records   int `json:"journalRecords"`
	Untrusted int `json:"untrustedRecords"`
}

// Condition is the main condition as the live object has it.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Step is one journal record of the object, summarized.
type Step struct {
	Operation string    `json:"operation"`
	Step      string    `json:"step,omitempty"`
	Attempt   int       `json:"attempt"`
	Sequence  uint64    `json:"sequence"`
	Time      time.Time `json:"time"`
	Result    string    `json:"result,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
}

const runbookBase = "https://git.ddupan.top/panxiao81/ayatori/src/branch/main/docs/runbook.md#"

// advice is what an operator can do for a condition reason of a kind ("*"
// for any kind), with the runbook section.
var advice = map[string]struct{ action, runbook string }{
	"*/Ready":                                     {"Nothing: the object is converged.", ""},
	"*/Reconciling":                               {"Nothing yet: the manager is working through the steps and continues on its own.", ""},
	"PostgreSQLTenant/InstanceNotReady":           {"Make the Instance Ready first: kubectl ayatori why instance/%s.", "ayatoriinstancenotready"},
	"PostgreSQLTenant/Conflict":                   {"A human decides: a database or role of that name exists and is not this Tenant's, and Ayatori changes nothing. Rename spec.database / spec.loginRole, or drop the foreign object if it is garbage.", "ayatoritenantconflict"},
	"*/DependencyUnavailable":                     {"Restore the backend named in the message (PostgreSQL, OpenBao or the API server); the step is retried with back-off on its own.", "ayatoritenantnotready"},
	"PostgreSQLTenant/ProvisioningFailed":         {"Fix what the message names; the step is decided again with back-off.", "ayatoritenantnotready"},
	"PostgreSQLTenant/CredentialProjectionFailed": {"Check External Secrets Operator, the ClusterSecretStore and the ExternalSecret's conditions in the Tenant's namespace.", "ayatoricredentialprojectionfailing"},
	"PostgreSQLTenant/LoginRejected":              {"PostgreSQL refused the Tenant role's login before its password: add a pg_hba.conf entry for it.", "ayatoritenantnotready"},
	"PostgreSQLTenant/DeletionBlocked":            {"End the sessions or reassign the objects the message names; the finalizer stays until then.", "ayatoritenantnotready"},
	"*/InvalidSpec":                               {"Change the spec as the message says; nothing happens until then.", "ayatoritenantnotready"},
	"PostgreSQLTenant/ImmutableField":             {"Revert the field the message names (it can not change after the first external write), or create a new Tenant.", "ayatoritenantnotready"},
	"PostgreSQLTenant/NamespaceNotAllowed":        {"Add the namespace to the Instance's spec.allowedNamespaces, or move the Tenant.", "ayatoritenantnotready"},
	"PostgreSQLInstance/AuthenticationFailed":     {"Fix the admin Secret or the TLS identity the Instance uses.", "ayatoriinstancenotready"},
	"PostgreSQLInstance/InsufficientPrivileges":   {"Grant the admin role what the message names (CREATEROLE, CREATEDB, CREATE on the database).", "ayatoriinstancenotready"},
	"Job/Pending":                                 {"Nothing yet: the Job waits to be accepted; if it stays, check the Accepted condition's message.", ""},
	"Job/Scheduling":                              {"Nothing yet: the backend execution is being created.", ""},
	"Job/Starting":                                {"Nothing yet: the execution exists and its main process has not started (image pull, scheduling).", ""},
	"Job/Running":                                 {"Nothing: the main process runs.", ""},
	"Job/Cancelling":                              {"Nothing yet: a stop was requested (spec.desiredState Cancelled) and the backend has not confirmed it; it ends Cancelled on its own.", ""},
	"Job/ResultUnknown":                           {"If the execution is gone for good, confirm it: kubectl annotate ajob -n %s %s execution.ayatori.ddupan.top/confirm-backend-lost=%s (it ends Failed/BackendLost); if the backend comes back, the next observation resolves it.", "ayatorijobresultunknown"},
	"Job/Completed":                               {"Nothing: the Job succeeded.", ""},
	"Job/ProcessFailed":                           {"The task exited non-zero (status.result has the exit code): read its logs; the Job is finished.", ""},
	"Job/OOMKilled":                               {"Raise the task's memory limit; the Job is finished.", ""},
	"Job/DeadlineExceeded":                        {"Raise spec.activeDeadlineSeconds or make the task faster; the Job is finished.", ""},
	"Job/ImagePullFailed":                         {"Fix the image name or its pull Secret; the Job is finished.", ""},
	"JobClass/BackendUnavailable":                 {"Restore the class's backend; the class is probed again on its own.", "ayatorijobclassnotready"},
	"Job/BackendUnavailable":                      {"Restore the class's backend; the step is retried on its own.", "ayatorijobclassnotready"},
	"JobClass/APIKeyRejected":                     {"Fix the API key Secret the parameters name.", "ayatorijobclassnotready"},
	"JobClass/APIKeySecretNotFound":               {"Create the API key Secret the parameters name.", "ayatorijobclassnotready"},
}

// explain builds the Explanation of obj (its kind's main condition cond)
// from the object and its journal records.
func explain(kind, cond string, obj *unstructured.Unstructured, recs []journal.Record, untrusted int, now time.Time) Explanation {
	e := Explanation{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()),
		Deleting: obj.GetDeletionTimestamp() != nil, Records: len(recs), Untrusted: untrusted}
	e.Phase, _, _ = unstructured.NestedString(obj.Object, "status", "phase")
	e.Phase = printable(e.Phase)
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	e.Condition = Condition{Type: cond, Status: "Unknown", Reason: "None", Message: "no " + cond + " condition yet: the manager has not seen the object"}
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == cond {
			e.Condition = Condition{Type: cond, Status: printable(fmt.Sprint(m["status"])), Reason: printable(fmt.Sprint(m["reason"])),
				Message: printable(fmt.Sprint(m["message"]))}
		}
	}
	st := journal.Fold(recs)
	for _, r := range recs {
		r := r
		switch r.Type {
		case journal.TypeIntent:
			s := summarize(r, st)
			e.LastIntent = &s
		case journal.TypeOutcome:
			s := summarize(r, st)
			e.LastOutcome = &s
		}
	}
	for _, p := range st.Pending() {
		e.Pending = append(e.Pending, summarize(p, st))
	}
	sort.Slice(e.Pending, func(i, j int) bool { return e.Pending[i].Sequence < e.Pending[j].Sequence })

	a, ok := advice[kind+"/"+e.Condition.Reason]
	if !ok {
		a, ok = advice["*/"+e.Condition.Reason]
	}
	if !ok {
		a.action = "Read the condition's message; docs/runbook.md has a section per alert."
	}
	switch {
	case kind == "PostgreSQLTenant" && e.Condition.Reason == "InstanceNotReady":
		ref, _, _ := unstructured.NestedString(obj.Object, "spec", "instanceRef")
		a.action = fmt.Sprintf(a.action, ref)
		e.WaitingFor = fmt.Sprintf("PostgreSQLInstance %q to become Ready", ref)
	case kind == "Job" && e.Condition.Reason == "ResultUnknown":
		a.action = fmt.Sprintf(a.action, e.Namespace, e.Name, e.UID)
		e.WaitingFor = "an administrator: the execution can not be found or proven stopped"
	}
	if kind == "PostgreSQLInstance" && a.runbook == "ayatoritenantnotready" {
		a.runbook = "ayatoriinstancenotready"
	}
	e.Action = a.action
	if a.runbook != "" {
		e.Runbook = runbookBase + a.runbook
	}
	if len(e.Pending) > 0 {
		p := e.Pending[len(e.Pending)-1]
		what := fmt.Sprintf("the outcome of %s (attempt %d, intent at sequence %d, decided %s ago): an executor has not reported it yet",
			p.Operation, p.Attempt, p.Sequence, now.Sub(p.Time).Round(time.Second))
		if e.WaitingFor == "" {
			e.WaitingFor = what
		} else {
			e.WaitingFor += "; " + what
		}
		if e.Condition.Reason == "Cancelling" {
			e.WaitingFor = "the backend to confirm the stop: " + what
		}
	}
	return e
}

// printable replaces control characters (a terminal escape in a message a
// backend or someone with status access wrote) with U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

func summarize(r journal.Record, st *journal.State) Step {
	s := Step{Operation: r.Operation, Step: r.Step, Attempt: r.Attempt, Sequence: r.Sequence, Time: r.Time}
	if r.Result != nil {
		s.Result, s.Reason, s.Message = string(r.Result.Class), printable(r.Result.Reason), printable(r.Result.Message)
	} else if r.Type == journal.TypeIntent {
		if o, ok := st.OutcomeOf(r.ID); ok && o.Result != nil {
			s.Result, s.Reason = string(o.Result.Class), o.Result.Reason
		} else {
			s.Result = "pending"
		}
	}
	return s
}

// printExplanation writes e for a human.
func printExplanation(w io.Writer, e Explanation, now time.Time) {
	ref := e.Kind + " " + e.Name
	if e.Namespace != "" {
		ref = e.Kind + " " + e.Namespace + "/" + e.Name
	}
	fmt.Fprintf(w, "%s (uid %s)\n", ref, e.UID)
	fmt.Fprintf(w, "  %-13s %s=%s  reason %s\n", "Condition:", e.Condition.Type, e.Condition.Status, e.Condition.Reason)
	if e.Condition.Message != "" {
		fmt.Fprintf(w, "  %-13s %s\n", "Message:", e.Condition.Message)
	}
	if e.Phase != "" {
		fmt.Fprintf(w, "  %-13s %s\n", "Phase:", e.Phase)
	}
	if e.Deleting {
		fmt.Fprintf(w, "  %-13s %s\n", "Deleting:", "yes (its finalizer stays until the external resources are settled)")
	}
	step := func(s *Step) string {
		out := fmt.Sprintf("%s attempt %d at sequence %d, %s ago", s.Operation, s.Attempt, s.Sequence, now.Sub(s.Time).Round(time.Second))
		if s.Step != "" {
			out = fmt.Sprintf("%s[%s] attempt %d at sequence %d, %s ago", s.Operation, s.Step, s.Attempt, s.Sequence, now.Sub(s.Time).Round(time.Second))
		}
		if s.Result != "" {
			out += " → " + s.Result
			if s.Reason != "" {
				out += "/" + s.Reason
			}
		}
		if s.Message != "" {
			out += ": " + s.Message
		}
		return out
	}
	if e.LastIntent != nil {
		fmt.Fprintf(w, "  %-13s %s\n", "Last intent:", step(e.LastIntent))
	}
	if e.LastOutcome != nil {
		fmt.Fprintf(w, "  %-13s %s\n", "Last outcome:", step(e.LastOutcome))
	}
	if e.Journal != "" {
		fmt.Fprintf(w, "  %-13s %s\n", "Journal:", e.Journal)
	} else if e.LastIntent == nil && e.LastOutcome == nil {
		fmt.Fprintf(w, "  %-13s %s\n", "Journal:", "no records for this UID (not decided yet, or removed by retention)")
	}
	if e.WaitingFor != "" {
		fmt.Fprintf(w, "  %-13s %s\n", "Waiting for:", e.WaitingFor)
	}
	fmt.Fprintf(w, "  %-13s %s\n", "Do:", e.Action)
	if e.Runbook != "" {
		fmt.Fprintf(w, "  %-13s %s\n", "Runbook:", e.Runbook)
	}
	switch {
	case e.Untrusted > 0:
		fmt.Fprintf(w, "  warning: %d journal record(s) without a valid proof of origin left out (kubectl ayatori verify)\n", e.Untrusted)
	case e.Untrusted < 0:
		fmt.Fprintln(w, "  note: proofs of origin not checked (no --journal-trusted-keys)")
	}
}
