// Package executors holds one package per backend (postgresql, openbao,
// externalsecrets, ...). Each consumes journal intents of its operations,
// executes them idempotently against the backend, and appends outcomes. Each
// backend exposes one small contract; there is no universal provider.
package executors
