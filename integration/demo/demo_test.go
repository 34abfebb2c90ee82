//go:build !unit

// Real servers only (no test runs under -short): left out of the unit
// loop's build (make test-unit: -tags unit), which then links no binary
// that would run nothing.

package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestStackDemo is the stack layer: the README's demo flow (samples applied
// through the Kubernetes API, manager process, real servers) inside make test,
// the OpenSandbox Job included (run fails unless it ends Completed with exit
// code 0 on its class, with its Sandbox and Command references, one sandbox
// and one command on the spec-validating OpenSandbox test server, no spec
// violation, Ensure/Observe/Finished in its timeline, and its sandbox deleted
// with it by the TTL).
// It also checks the newcomer's first screen: nothing the demo process
// writes to stderr may be controller-runtime's "log.SetLogger(...) was
// never called" stack trace (printed 30 s after start when a program uses
// controller-runtime without a logger; the demo runs longer than that).
func TestStackDemo(t *testing.T) {
	integration.Servers(t)
	stderr := captureStderr(t)
	err := run(false)
	// A short demo ends before controller-runtime's 30 s; make dev runs
	// for minutes and logs (envtest) when it tears down. Be past the 30 s
	// and log once through controller-runtime, as that teardown does:
	// without a logger set by run(), this prints the stack trace.
	time.Sleep(time.Until(processStart.Add(31 * time.Second)))
	ctrllog.Log.WithName("demo-test").Info("probe after the demo")
	out := stderr()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "was never called") || strings.Contains(out, "Detected at:") {
		t.Fatalf("the demo printed controller-runtime's missing-logger stack trace:\n%s", out)
	}
}

// processStart is no earlier than controller-runtime's own start time (its
// package is initialised before this one).
var processStart = time.Now()

// captureStderr redirects os.Stderr (still copied to the real stderr) until
// the returned function is called; that function returns what was written.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	orig := os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stderr = w
	var buf bytes.Buffer
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		tmp := make([]byte, 32<<10)
		for {
			n, err := r.Read(tmp)
			if n > 0 {
				mu.Lock()
				buf.Write(tmp[:n])
				mu.Unlock()
				_, _ = orig.Write(tmp[:n])
			}
			if err != nil {
				if err != io.EOF {
					_, _ = orig.WriteString("captureStderr: " + err.Error() + "\n")
				}
				return
			}
		}
	}()
	restore := func() string {
		os.Stderr = orig
		_ = w.Close()
		// A child process that still holds the pipe must not block the test.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	t.Cleanup(func() { _ = r.Close() })
	var once sync.Once
	var out string
	get := func() string {
		once.Do(func() { out = restore() })
		return out
	}
	t.Cleanup(func() { get() })
	return get
}
