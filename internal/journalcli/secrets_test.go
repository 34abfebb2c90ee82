package journalcli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestMain lets a test run this binary's main() as a child process (the
// test binary re-executed with AYATORI_JOURNAL_RUN_MAIN=1), so that what
// the real binary prints on stdout and stderr can be scanned.
func TestMain(m *testing.M) {
	if os.Getenv("AYATORI_JOURNAL_RUN_MAIN") == "1" {
		os.Args = append([]string{"ayatori-journal"}, os.Args[1:]...)
		Main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runBinary runs main() in a child process with args and extra environment
// and returns its combined stdout+stderr and exit status.
func runBinary(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "AYATORI_JOURNAL_RUN_MAIN=1", "NATS_URL="), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// TestConnectionErrorsHideCredentials: a NATS URL with a password or a
// token (in --server or NATS_URL, alone or in a server list, parseable or
// not) never appears with its secret in anything the binary prints; the
// connection error still names the server.
func TestConnectionErrorsHideCredentials(t *testing.T) {
	const canary = "CANARY-jrnl-7a2c"
	servers := []string{
		"nats://user:" + canary + "@127.0.0.1:1",
		"nats://" + canary + "@127.0.0.1:1",
		"tls://user:" + canary + "@127.0.0.1:1",
		"nats://user:pa ss" + canary + "@127.0.0.1:1",
		"nats://user:" + canary + "%zz@127.0.0.1:1",
		"nats://user:12/" + canary + "@127.0.0.1:1",
		"nats://a:" + canary + "@127.0.0.1:1,nats://b:" + canary + "@127.0.0.1:2",
		"user:" + canary + "@127.0.0.1:1",
	}
	commands := [][]string{
		{"timeline", "--uid", "7d3c0e52-1c1a-4b8e-9a53-000000000001"},
		{"list"},
		{"verify"},
		{"export"},
	}
	// An identity, so the client gets as far as dialling the server.
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "reader.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, server := range servers {
		for _, c := range commands {
			for _, viaEnv := range []bool{false, true} {
				args, env := append([]string{}, c...), []string(nil)
				if viaEnv {
					env = []string{"NATS_URL=" + server}
				} else {
					args = append(args, "--server", server)
				}
				args = append(args, "--timeout", "5s", "--nkey", seedFile)
				out, code := runBinary(t, env, args...)
				if strings.Contains(out, canary) {
					t.Errorf("%v (env %v): the secret is printed:\n%s", args, env, out)
				}
				if code != exitOtherError {
					t.Errorf("%v (env %v): exit %d, want %d:\n%s", args, env, code, exitOtherError, out)
				}
				if !strings.Contains(out, "127.0.0.1:1") {
					t.Errorf("%v (env %v): the error does not name the server:\n%s", args, env, out)
				}
			}
		}
	}
}

// TestHelpHidesCredentialsFromTheEnvironment: --help shows NATS_URL as the
// default of --server, redacted.
func TestHelpHidesCredentialsFromTheEnvironment(t *testing.T) {
	const canary = "CANARY-jrnl-help-3b9d"
	for _, args := range [][]string{{"--help"}, {"timeline", "--help"}, {"verify", "-h"}} {
		out, code := runBinary(t, []string{"NATS_URL=nats://user:" + canary + "@127.0.0.1:1"}, args...)
		if code != 0 || strings.Contains(out, canary) || !strings.Contains(out, "nats://user:xxxxx@127.0.0.1:1") {
			t.Errorf("%v: exit %d, want 0 and the URL shown redacted:\n%s", args, code, out)
		}
	}
}

// TestRejectsSubjectTokensBeforeConnecting: a --uid, --subject-prefix or
// --stream that is not a plain subject token (NATS wildcards, '.', white
// space, empty) is a flag error (exit 2) that names the flag, before any
// connection (the server here is unreachable, so an attempt would show up
// as a connection error) and also with --from-file.
func TestRejectsSubjectTokensBeforeConnecting(t *testing.T) {
	export := t.TempDir() + "/empty.ndjson"
	if err := os.WriteFile(export, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		args []string
		want string
	}
	add := func(want string, args ...string) {
		cases = append(cases, struct {
			args []string
			want string
		}{args, want})
	}
	for _, uid := range []string{"*", ">", ".", "a.b", "a*", "*.>", " ", "a b", "a\tb", "a\nb", "", strings.Repeat("a", 65)} {
		for _, cmd := range []string{"timeline", "replay", "verify", "export"} {
			add("--uid", cmd, "--uid", uid)
			add("--uid", cmd, "--uid="+uid, "--from-file", export)
		}
	}
	for _, prefix := range []string{"*", ">", "ayatori.*", "ayatori.>", "a..b", "a.", "", "a b"} {
		add("--subject-prefix", "list", "--subject-prefix", prefix)
		add("--subject-prefix", "timeline", "--uid", "7d3c0e52-1c1a-4b8e-9a53-000000000001", "--subject-prefix="+prefix)
	}
	for _, stream := range []string{"*", ">", "A.B", "", "A B", "A/B"} {
		add("--stream", "verify", "--stream", stream)
	}
	for _, tc := range cases {
		args := append([]string{"--server", "nats://127.0.0.1:1"}, tc.args...)
		var out, errb bytes.Buffer
		cmd := NewRootCommand(&out, &errb)
		cmd.SetArgs(args)
		err := cmd.Execute()
		if err == nil {
			t.Errorf("%q: accepted", args)
			continue
		}
		if code := ExitCode(err); code != exitOtherError || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "connect") {
			t.Errorf("%q: exit %d, %v; want exit %d, a %s error before connecting", args, code, err, exitOtherError, tc.want)
		}
	}
}
