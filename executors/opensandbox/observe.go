package opensandbox

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	executionv1alpha1 "git.ddupan.top/panxiao81/ayatori/api/execution/v1alpha1"
	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/internal/redact"
)

// maxBackendMessage bounds the sandbox status text copied into a message.
const maxBackendMessage = 200

// observe maps the sandbox, its command and the marker to an
// Observation (see the package doc, "Results"). commandID is the intent's
// Command reference ("" = unknown: the metadata's, if any).
func (e *Executor) observe(ctx context.Context, b *backend, uid string, sb *sandbox, commandID string) (execution.Observation, error) {
	id := commandIDOf(sb, commandID)
	refs := sandboxRefs(sb, id)
	cancelled := sb.Metadata[LabelCancelRequested] == "true"
	switch sb.Status.State {
	case "Pending":
		return execution.Observation{State: execution.StatePending, References: refs, Message: "the sandbox is being provisioned" + detail(sb)}, nil
	case "Running", "Pausing", "Paused", "Resuming":
		// The command decides.
	case "Stopping":
		return execution.Observation{State: execution.StateStopping, References: refs, Message: "the sandbox is stopping" + detail(sb)}, nil
	case "Terminated":
		if cancelled {
			return execution.Observation{State: execution.StateCancelled, Terminal: true, References: refs, Message: "the sandbox was stopped on request"}, nil
		}
		return execution.Observation{State: execution.StateFailed, Terminal: true, References: refs, Reason: executionv1alpha1.ReasonBackendFailed,
			Message: "the sandbox terminated before the task recorded a result" + detail(sb)}, nil
	case "Failed":
		reason := executionv1alpha1.ReasonBackendFailed
		if s := strings.ToLower(sb.Status.Reason + " " + sb.Status.Message); strings.Contains(s, "pull") && strings.Contains(s, "image") {
			reason = executionv1alpha1.ReasonImagePullFailed
		}
		return execution.Observation{State: execution.StateFailed, Terminal: true, References: refs, Reason: reason,
			Message: "the sandbox failed" + detail(sb)}, nil
	default:
		return execution.Observation{}, &execution.Failure{Unknown: true, Reason: ReasonUnknownSandboxState, References: refs,
			Message: fmt.Sprintf("the sandbox reports state %q, which Ayatori does not know", clip(sb.Status.State, 32))}
	}
	x, err := b.lc.execdOf(ctx, sb.ID)
	if err != nil {
		return execution.Observation{}, err
	}
	if id != "" {
		st, err := x.status(ctx, id)
		if err != nil {
			return execution.Observation{}, err
		}
		if st != nil {
			if st.Running {
				return execution.Observation{State: execution.StateRunning, References: refs, StartTime: st.StartedAt, Message: "the command runs"}, nil
			}
			return e.finished(ctx, x, uid, sb, st, refs, cancelled)
		}
	}
	// execd does not know the command (restarted, or its id was lost):
	// the marker is the only proof.
	b2, ok, err := x.download(ctx, e.Marker.ExitPath(uid))
	if err != nil {
		return execution.Observation{}, err
	}
	if ok {
		if code, valid := parseExit(b2); valid {
			return exited(code, nil, nil, refs), nil
		}
	}
	started, err := x.exists(ctx, e.Marker.Path(uid))
	if err != nil {
		return execution.Observation{}, err
	}
	switch {
	case started:
		return execution.Observation{}, &execution.Failure{Unknown: true, Reason: ReasonCommandStateLost, References: refs,
			Message: "execd no longer knows the command (its state is kept in memory) and the task has not recorded an exit code: running or killed can not be told apart"}
	case id != "":
		return execution.Observation{}, &execution.Failure{Unknown: true, Reason: ReasonCommandStateLost, References: refs,
			Message: fmt.Sprintf("execd does not know command %s and the task never started", clip(id, 64))}
	}
	return execution.Observation{State: execution.StatePending, References: refs, Message: "the sandbox runs; the command has not started"}, nil
}

// finished maps a command execd reports as ended.
func (e *Executor) finished(ctx context.Context, x *execd, uid string, sb *sandbox, st *commandStatus, refs []execution.Reference, cancelled bool) (execution.Observation, error) {
	b, ok, err := x.download(ctx, e.Marker.ExitPath(uid))
	if err != nil {
		return execution.Observation{}, err
	}
	if ok {
		if code, valid := parseExit(b); valid {
			return exited(code, st.StartedAt, st.FinishedAt, refs), nil
		}
	}
	// The command ended without an exit code: it is the task's only if it
	// claimed the marker with the token of the launch it was sent by.
	if token := sb.Metadata[LabelLaunching]; token != "" {
		owner, ok, err := x.download(ctx, e.Marker.OwnerPath(uid))
		if err != nil {
			return execution.Observation{}, err
		}
		// An empty owner file is a claim killed before it wrote its token
		// (the file is created, then written in one write): not proof of
		// another owner.
		if o := strings.TrimSpace(string(owner)); ok && o != "" && o != token {
			return execution.Observation{}, &execution.Failure{Unknown: true, Reason: ReasonCommandStateLost, References: refs,
				Message: "the known command lost the claim to an earlier one whose id is lost, and the task has not recorded an exit code: running or killed can not be told apart"}
		}
	}
	if cancelled {
		return execution.Observation{State: execution.StateCancelled, Terminal: true, References: refs, StartTime: st.StartedAt, FinishTime: st.FinishedAt,
			Message: "the command was interrupted on request"}, nil
	}
	if d, err := strconv.ParseInt(sb.Metadata[LabelDeadlineSeconds], 10, 64); err == nil && d > 0 && st.StartedAt != nil && st.FinishedAt != nil &&
		st.FinishedAt.Sub(*st.StartedAt) >= time.Duration(d)*time.Second {
		// Both times are execd's (one clock).
		return execution.Observation{State: execution.StateFailed, Terminal: true, References: refs, StartTime: st.StartedAt, FinishTime: st.FinishedAt,
			Reason: executionv1alpha1.ReasonDeadlineExceeded, Message: fmt.Sprintf("execd stopped the command at its timeout (activeDeadlineSeconds %d)", d)}, nil
	}
	return execution.Observation{}, &execution.Failure{Unknown: true, Reason: ReasonExitCodeNotRecorded, References: refs,
		Message: "the command ended without the task recording an exit code (killed, or not the command that ran the task)"}
}

func exited(code int32, start, finish *time.Time, refs []execution.Reference) execution.Observation {
	c := code
	o := execution.Observation{Terminal: true, References: refs, StartTime: start, FinishTime: finish, ExitCode: &c}
	if code == 0 {
		o.State, o.Reason, o.Message = execution.StateSucceeded, executionv1alpha1.ReasonCompleted, "the task exited 0"
		return o
	}
	o.State, o.Reason, o.Message = execution.StateFailed, executionv1alpha1.ReasonProcessFailed, fmt.Sprintf("the task exited %d", code)
	return o
}

// detail renders the sandbox's status reason and message for a message
// (clipped; they are the backend's words, never a request body).
func detail(sb *sandbox) string {
	var parts []string
	if r := reasonToken.FindString(sb.Status.Reason); r != "" {
		parts = append(parts, r)
	}
	if sb.Status.Message != "" {
		parts = append(parts, clip(scrub(sb.Status.Message), maxBackendMessage))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ": ") + ")"
}

// reasonToken is what of a backend's status reason is kept: a CamelCase or
// dotted token, at most 64 characters.
var reasonToken = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}`)

// tokenLike matches runs that could be a credential: long strings of
// base64 or hex characters (tokens, keys, passwords a backend echoed).
var tokenLike = regexp.MustCompile(`[A-Za-z0-9+/=_-]{24,}`)

// scrub removes from a backend's message what could carry a secret: the
// credentials of URLs in it and any token-like run of characters.
func scrub(msg string) string {
	fields := strings.Fields(msg)
	for i, f := range fields {
		if strings.Contains(f, "://") {
			fields[i] = redact.URL(f)
		}
	}
	return tokenLike.ReplaceAllString(strings.Join(fields, " "), "[redacted]")
}

func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
