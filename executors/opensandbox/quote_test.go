package opensandbox

import (
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// argvCases are the words the quoting must deliver intact.
var argvCases = []struct {
	name string
	argv []string
}{
	{"plain", []string{"echo", "hello"}},
	{"spaces", []string{"printf", "%s|", "a b", "  two  spaces  "}},
	{"single quotes", []string{"printf", "%s|", "it's", "'", "''", "a'b'c"}},
	{"double quotes", []string{"printf", "%s|", `"quoted"`, `"`, `a"b`}},
	{"dollar", []string{"printf", "%s|", "$HOME", "${PATH}", "$(id)", "`id`", "$$", "$?"}},
	{"backslashes", []string{"printf", "%s|", `\`, `\\`, `a\nb`, `\'`, `end\`}},
	{"newlines", []string{"printf", "%s|", "line1\nline2", "\n", "trailing\n"}},
	{"globs and operators", []string{"printf", "%s|", "*", "?", "[a]", ";", "&&", "|", ">", "<", "#", "~", "!"}},
	{"empty", []string{"printf", "%s|", "", "x", ""}},
	{"unicode", []string{"printf", "%s|", "héllo wörld", "日本語", "\t tab"}},
}

// TestQuoteArgvRoundTrip runs each quoted argv through bash -c (as execd
// does) and checks that every word arrived byte for byte.
func TestQuoteArgvRoundTrip(t *testing.T) {
	for _, tc := range argvCases {
		t.Run(tc.name, func(t *testing.T) {
			line := QuoteArgv(append([]string{"bash", "-c", `for a in "$@"; do printf '%s\0' "$a"; done`, "argv0"}, tc.argv...))
			out, err := exec.Command("bash", "-c", line).Output()
			if err != nil {
				t.Fatalf("bash -c %q: %v", line, err)
			}
			got := strings.Split(string(out), "\x00")
			got = got[:len(got)-1]
			if !reflect.DeepEqual(got, tc.argv) {
				t.Fatalf("argv %q arrived as %q (line %q)", tc.argv, got, line)
			}
		})
	}
}

// TestMarkerScript checks the wrapper: it runs the task once, records the
// exit code, and a second copy does not run the task again.
func TestMarkerScript(t *testing.T) {
	dir := t.TempDir()
	m := Marker{Dir: dir}
	uid := "0b8c7e1a-1111-2222-3333-444455556666"
	script := m.Script(uid, []string{"bash", "-c", `echo ran >> "$1"; exit 3`, "x", dir + "/count"}, "tok-1")
	cmd := exec.Command("bash", "-c", script)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("first run: %v, want exit 3", err)
	}
	if err := exec.Command("bash", "-c", script).Run(); err != nil {
		t.Fatalf("second run: %v, want exit 0 without running the task", err)
	}
	out, _ := exec.Command("cat", dir+"/count").Output()
	if string(out) != "ran\n" {
		t.Fatalf("the task ran %q", out)
	}
	b, err := exec.Command("cat", m.ExitPath(uid)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if code, ok := parseExit(b); !ok || code != 3 {
		t.Fatalf("exit marker %q", b)
	}
}

// The task's env reaches the wrapper shell too: SHELLOPTS=errexit:nounset
// must not keep the wrapper from recording a failing task's exit code.
func TestMarkerScriptIgnoresShellOptionsFromEnv(t *testing.T) {
	dir := t.TempDir()
	m := Marker{Dir: dir}
	uid := "0b8c7e1a-1111-2222-3333-444455556667"
	cmd := exec.Command("bash", "-c", m.Script(uid, []string{"bash", "-c", "exit 3"}, "tok"))
	cmd.Env = append(cmd.Environ(), "SHELLOPTS=errexit:nounset:pipefail")
	if err := cmd.Run(); err == nil {
		t.Fatal("want exit 3")
	}
	b, _ := exec.Command("cat", m.ExitPath(uid)).Output()
	if code, ok := parseExit(b); !ok || code != 3 {
		t.Fatalf("exit marker %q", b)
	}
}
