// Package database is the contract of the database domain
// (database.ayatori.ddupan.top): the operation and note names, the typed,
// secret-free journal payloads of every intent, outcome and note, the
// failure vocabulary (reasons, Failure), the names Ayatori derives for a
// Tenant's objects, and the invariants `ayatori-journal verify` checks for
// this domain.
//
// Both sides import it: projectors/database builds intents and folds
// outcomes with it, executors/{postgresql,openbao,externalsecrets} decode
// intents and write outcomes with it. It imports no backend SDK (no pgx,
// no OpenBao client, no ESO types), so the decision code links none; the
// dependency test in contracts/architecture_test.go keeps it that way.
package database
