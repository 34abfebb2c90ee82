// Package postgresql is the PostgreSQL executor of the database domain: it
// executes journal intents against a registered PostgreSQL server with one
// connection pool per Instance, TLS verify-full by default, SQLSTATE-based
// error classification, and the ownership registry (tern migrations).
//
// Its contract with the projector (operation names, the typed, secret-free
// journal payloads, the failure type) is contracts/database.
package postgresql
