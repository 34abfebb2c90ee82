package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain lets a test run this binary's main() as a child process (the
// test binary re-executed with AYATORI_JOURNAL_RUN_MAIN=1), so that what
// the real binary prints on stdout and stderr can be scanned.
func TestMain(m *testing.M) {
	if os.Getenv("AYATORI_JOURNAL_RUN_MAIN") == "1" {
		os.Args = append([]string{"ayatori-journal"}, os.Args[1:]...)
		main()
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
	for _, server := range servers {
		for _, c := range commands {
			for _, viaEnv := range []bool{false, true} {
				args, env := append([]string{}, c...), []string(nil)
				if viaEnv {
					env = []string{"NATS_URL=" + server}
				} else {
					args = append(args, "--server", server)
				}
				args = append(args, "--timeout", "5s")
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
