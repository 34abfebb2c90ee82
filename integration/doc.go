// Package integration is the environment harness shared by every test suite
// and by the local stack: it starts, health-checks and stops real servers on
// 127.0.0.1 with free ports, isolated per caller.
//
// Servers (see docs/testing.md for the full picture):
//   - control plane: kube-apiserver + etcd through controller-runtime envtest,
//     with the project's CRDs and, on request, External Secrets Operator's;
//   - NATS JetStream, embedded in-process, file storage, sync_interval always;
//   - PostgreSQL 15 from Debian's server binaries, TLS only, per-run CA;
//   - an OpenBao-compatible server (Vault v1.13.2, or a `bao` binary from
//     AYATORI_BAO_BIN) with a KV v2 mount named "kv";
//   - the External Secrets Operator controller pointed at the control plane.
//
// Binaries come from the tool cache that `make tools` fills
// (integration/tools/build.sh, pinned in integration/tools/versions.env).
// Every server started here is a child process of the caller started with a
// parent-death signal, registered for cleanup on test end and on SIGINT or
// SIGTERM, and stopped by PID; temp dirs are removed on stop.
package integration
