// Command ayatori-journal reads Ayatori's operation journal for incident
// forensics: timeline, replay (optionally diffed against the live CR),
// verify (journal invariants), list, export. It reads from a NATS server
// (--server / NATS_URL, standard NATS credential options) or, offline, from
// an NDJSON file written by `export` (--from-file). See docs/operations.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	cmd := newRootCommand(os.Stdout, os.Stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ayatori-journal:", err)
		os.Exit(exitCode(err))
	}
}
