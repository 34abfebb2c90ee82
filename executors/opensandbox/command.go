package opensandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultMarkerDir is where, inside the sandbox, a command records that it
// started the Job's task and with which exit code (see Marker).
const DefaultMarkerDir = "/tmp"

// Quote renders one argv element as a POSIX shell word: single-quoted,
// with every single quote written as '\” (close, escaped quote, reopen).
// Inside single quotes bash takes every other byte literally (spaces, $,
// backquotes, backslashes, double quotes, newlines, globs), so the word
// reaches the process exactly as given. An empty element becomes ”.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// QuoteArgv renders argv as one shell command line: the quoted words
// separated by spaces (execd runs a command as `bash -c <string>`).
func QuoteArgv(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = Quote(a)
	}
	return strings.Join(words, " ")
}

// Marker is the per-Job directory a command claims inside the sandbox,
// <dir>/ayatori-<job UID>:
//
//   - the wrapper creates it with mkdir (atomic) before it runs the task,
//     and does not run the task when it exists already: however many
//     commands an ambiguous launch leaves behind, the task runs once;
//   - when the task exits, the wrapper writes its exit code to
//     <marker>/exit (written to exit.tmp, then renamed: never a partial
//     file).
//
// execd keeps command state in memory only, so after an execd restart (or
// when a launch's command id was lost) the marker is the only proof of the
// outcome: <marker>/exit proves the exit code; a marker without exit
// proves only that the task started (ResultUnknown: running or killed can
// not be told apart); no marker proves the task never started.
type Marker struct {
	Dir string
}

// Path is the marker directory of the Job with UID uid.
func (m Marker) Path(uid string) string {
	dir := m.Dir
	if dir == "" {
		dir = DefaultMarkerDir
	}
	return strings.TrimRight(dir, "/") + "/ayatori-" + uid
}

// OwnerPath is the file holding the launch token of the command that
// claimed the marker (the one that runs the task).
func (m Marker) OwnerPath(uid string) string { return m.Path(uid) + "/owner" }

// ExitPath is the file holding the task's exit code.
func (m Marker) ExitPath(uid string) string { return m.Path(uid) + "/exit" }

// Script is the shell command line execd runs for the Job with UID uid:
// it claims the marker, writes token (the launch's, see LabelLaunching) to
// OwnerPath so the command that runs the task can be told from a copy
// that lost the claim, runs argv (quoted, see QuoteArgv) as a child of
// the wrapper shell, records the exit code and exits with it. argv must
// not be empty. The wrapper's own utilities (mkdir, mv) are found with
// `command -p` (the system's default PATH), not the task's PATH, which
// the task env may set to anything.
func (m Marker) Script(uid string, argv []string, token string) string {
	p := Quote(m.Path(uid))
	var b strings.Builder
	// The task's env is the wrapper's too: options it sets through
	// SHELLOPTS (errexit, nounset, pipefail) are switched off first.
	b.WriteString("set +e +u +o pipefail 2>/dev/null; ")
	fmt.Fprintf(&b, "command -p mkdir -p %s 2>/dev/null; ", Quote(m.dirOrDefault()))
	fmt.Fprintf(&b, "if ! command -p mkdir %s 2>/dev/null; then echo 'ayatori: this Job'\\''s task was started by an earlier command; not starting it again' >&2; exit 0; fi\n", p)
	fmt.Fprintf(&b, "printf '%%s\\n' %s > %s/owner\n", Quote(token), p)
	b.WriteString(QuoteArgv(argv))
	b.WriteString("\n")
	fmt.Fprintf(&b, "rc=$?; printf '%%s\\n' \"$rc\" > %s/exit.tmp && command -p mv -f %s/exit.tmp %s/exit; exit \"$rc\"", p, p, p)
	return b.String()
}

func (m Marker) dirOrDefault() string {
	if m.Dir == "" {
		return DefaultMarkerDir
	}
	return m.Dir
}

// MaxScriptBytes is the longest Script execd can run: it runs the command
// as one argument of `bash -c`, and Linux bounds one argument at 128 KiB
// (MAX_ARG_STRLEN, including its terminating NUL).
const MaxScriptBytes = 128<<10 - 1

// parseExit reads the content of a marker's exit file.
func parseExit(b []byte) (int32, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}
