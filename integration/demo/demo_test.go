package main

import (
	"testing"

	"git.ddupan.top/panxiao81/ayatori/integration"
)

// TestStackDemo is the stack layer: the README's demo flow (samples applied
// through the Kubernetes API, manager process, real servers) inside make test.
func TestStackDemo(t *testing.T) {
	integration.Servers(t)
	if err := run(false); err != nil {
		t.Fatal(err)
	}
}
