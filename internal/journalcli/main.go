// Package journalcli is the command line of Ayatori's operation journal:
// timeline, replay (optionally diffed against the live CR), verify
// (journal invariants), list, export. The ayatori-journal binary is its
// root command; the kubectl-ayatori plugin runs the same commands for one
// object it resolves from the cluster. It reads from a NATS server
// (--server / NATS_URL, standard NATS credential options) or, offline,
// from an NDJSON file written by `export` (--from-file). See
// docs/operations.md.
package journalcli

import (
	"fmt"
	"os"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	// Every domain's contract: its payload types, the invariants verify
	// checks and its journal.Describer. The CLI itself has no domain code:
	// domains.go asks the describer registered for a record's domain.
	_ "git.ddupan.top/panxiao81/ayatori/contracts"
)

// Main runs the ayatori-journal command with os.Args and exits with its
// status (0 success, 1 invariant violations, 2 other errors, 3 not found).
func Main() {
	// replay --kubeconfig uses a controller-runtime client; without a
	// logger, a run longer than 30 s would end in controller-runtime's
	// "log.SetLogger(...) was never called" stack trace. Nothing of it is
	// for the user: discard.
	ctrllog.SetLogger(ctrllog.Log.WithSink(ctrllog.NullLogSink{}))
	cmd := NewRootCommand(os.Stdout, os.Stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ayatori-journal:", err)
		os.Exit(ExitCode(err))
	}
}
