// Command ayatori-journal reads Ayatori's operation journal for incident
// forensics: timeline, replay (optionally diffed against the live CR),
// verify (journal invariants), list, export (internal/journalcli). See
// docs/operations.md.
package main

import "git.ddupan.top/panxiao81/ayatori/internal/journalcli"

func main() { journalcli.Main() }
