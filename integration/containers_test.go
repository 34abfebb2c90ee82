package integration_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestContainersOfAKilledTestAreSwept: a test binary SIGKILLed before its
// cleanup leaves its containers (no reaper can be pulled here); the next
// test process that starts a container removes them, and only them.
func TestContainersOfAKilledTestAreSwept(t *testing.T) {
	if os.Getenv("AYATORI_TC_SWEEP_CHILD") == "1" {
		integration.StartPostgres(t, integration.PostgresOptions{})
		os.Stdout.WriteString("STARTED " + strconv.Itoa(os.Getpid()) + "\n")
		time.Sleep(10 * time.Minute) // killed by the parent
		return
	}
	if p, _, _ := integration.SelectProvider(); p != integration.ProviderTestcontainers {
		t.Skip("containers only (make test-containers)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestContainersOfAKilledTestAreSwept$", "-test.v")
	cmd.Env = integration.ChildTestEnv(t, "AYATORI_TC_SWEEP_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child := ""
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if rest, ok := strings.CutPrefix(sc.Text(), "STARTED "); ok {
			child = rest
			break
		}
	}
	if child == "" {
		t.Fatal("the child started no container")
	}
	owned := func() string {
		b, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+integration.LabelOwnerPID+"="+child).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if owned() == "" {
		t.Fatal("the child's container carries no owner label")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if owned() == "" {
		t.Fatal("the killed child's container is already gone: nothing to sweep")
	}
	// A live owner's containers stay.
	mine := integration.StartPostgres(t, integration.PostgresOptions{})
	removed, err := integration.SweepOrphanContainers()
	if err != nil {
		t.Fatal(err)
	}
	if left := owned(); left != "" {
		t.Fatalf("container %s of the killed test was not swept (removed %v)", left, removed)
	}
	if err := mine.Start(t.Context()); err != nil {
		t.Fatalf("this test's own container was swept: %v", err)
	}
}
