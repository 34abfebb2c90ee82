package integration

import ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

// QuietControllerRuntimeLog gives controller-runtime a logger that discards
// everything. Programs built on the harness (the demo, the benchmark) use
// controller-runtime (envtest, clients) and print their own progress;
// without any logger, controller-runtime prints a "log.SetLogger(...) was
// never called" stack trace to stderr on the first log call 30 s after
// start. Call it first thing in main (or in the function a test shares
// with main); it replaces whatever logger was set before.
func QuietControllerRuntimeLog() {
	ctrllog.SetLogger(ctrllog.Log.WithSink(ctrllog.NullLogSink{}))
}
