// Package contracts links every domain contract (one package per domain
// below this directory): importing it registers each domain's payload
// types and journal invariants. A binary that reads the journal without
// deciding or executing anything (ayatori-journal) imports it and so
// knows every domain without any domain code of its own.
//
// architecture_test.go holds the dependency rules of the tree.
package contracts

import (
	// Every domain's contract, for its journal registrations.
	_ "git.ddupan.top/panxiao81/ayatori/contracts/database"
	_ "git.ddupan.top/panxiao81/ayatori/contracts/execution"
)
