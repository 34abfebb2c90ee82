package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestJournalKeysLeaveNothingBehind runs this test binary again as a child
// that takes the process's journal key and its files and exits normally, with
// TMPDIR a fresh directory: the child must leave it empty. The files hold
// a private signing key; a directory removed only on SIGINT or SIGTERM
// stayed in /tmp after every test binary.
func TestJournalKeysLeaveNothingBehind(t *testing.T) {
	if os.Getenv("AYATORI_JOURNAL_KEYS_CHILD") == "1" {
		if _, err := JournalSigningKey(); err != nil {
			t.Fatal(err)
		}
		_ = TestJournalKeys(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalKeysLeaveNothingBehind$", "-test.count=1")
	cmd.Env = ChildTestEnv(t, "AYATORI_JOURNAL_KEYS_CHILD=1")
	var tmp string
	for _, kv := range cmd.Env {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok {
			tmp = v // the last one counts
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the child left %s in TMPDIR", e.Name())
	}
}
