// Package projectors holds one package per domain with the reconcilers that
// decide the next external step, append it to the journal as an intent, and
// fold outcomes back into CR status (projectors/database). Decision code in
// those packages is pure (no I/O) and unit-tested.
package projectors
