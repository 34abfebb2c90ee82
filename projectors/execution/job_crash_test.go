package execution_test

import (
	"testing"
	"time"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestJobSurvivesManagerKill kills the manager (SIGKILL, through a
// failpoint) once after the Ensure intent was acknowledged by the journal
// and delivered, before the executor ran it, and once after the executor
// created the native Job but before the outcome was journaled. After a
// restart each Job converges with exactly one native Job, and the journal
// verifies clean (at most one created execution per Job UID, no Ensure
// after Cancel or a terminal outcome).
func TestJobSurvivesManagerKill(t *testing.T) {
	// A killed executor's intent comes back after the ack wait.
	e := startJobEnv(t, integration.ExecutionStackOptions{ManagerArgs: []string{"--executor-ack-wait=3s"}})
	for fp, nativesAtCrash := range map[string]int{"executor-before-handle": 0, "executor-before-outcome": 1} {
		t.Run(fp, func(t *testing.T) {
			e.s.StopManager()
			if err := e.s.StartManager([]string{"AYATORI_FAILPOINTS=" + fp + "=Ensure"}); err != nil {
				t.Fatal(err)
			}
			ns := e.namespace(t, true)
			j := e.create(t, newJob(ns, "crash", "ayatori.test/succeed"))
			if !e.s.WaitManagerExit(90 * time.Second) {
				t.Fatal("the failpoint did not kill the manager")
			}
			if n := len(e.natives(t, j)); n != nativesAtCrash {
				t.Fatalf("%d native Jobs after the crash, want %d", n, nativesAtCrash)
			}
			if err := e.s.StartManager(nil); err != nil {
				t.Fatal(err)
			}
			got := e.waitSucceeded(t, j, "True/Completed")
			e.wantOneNative(t, got)
		})
	}
	e.verifyJournal(t)
}

// TestTTLDeletesOnceAcrossARestart: a finished Job waiting for its TTL
// when the manager is killed is deleted exactly once after the restart
// (the informer's initial list rebuilds the timer).
func TestTTLDeletesOnceAcrossARestart(t *testing.T) {
	e := startJobEnv(t, integration.ExecutionStackOptions{ManagerArgs: []string{"--executor-ack-wait=3s"}})
	ns := e.namespace(t, true)
	j := newJob(ns, "ttl-restart", "ayatori.test/succeed")
	ttl := int32(6)
	j.Spec.TTLSecondsAfterFinished = &ttl
	e.create(t, j)
	e.waitSucceeded(t, j, "True/Completed")
	e.s.KillManager()
	time.Sleep(2 * time.Second)
	if !e.exists(t, j) {
		t.Fatal("deleted before its TTL")
	}
	if err := e.s.StartManager(nil); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, j)
	if n := e.countNotes(t, j, execution.NoteTTLExpired); n != 1 {
		t.Fatalf("%d TTLExpired notes, want 1", n)
	}
	e.verifyJournal(t)
}
