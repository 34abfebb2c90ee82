// Package opensandbox is a spec-validating stand-in for an OpenSandbox server,
// for tests of clients such as the OpenSandbox executor. The real server needs
// Docker; this one serves, on one 127.0.0.1 listener (http, or https with
// Options.TLS):
//
//   - the lifecycle API under /v1 (sandbox-lifecycle.yml), guarded by the
//     OPEN-SANDBOX-API-KEY header, and
//   - the execd API of every sandbox (execd-api.yaml) behind the server proxy
//     path /sandboxes/{id}/port/44772/, guarded by the sandbox's
//     X-EXECD-ACCESS-TOKEN, where commands really run as local processes.
//
// The two OpenAPI 3.1 documents are the pinned, unmodified copies in spec/
// (OpenSandbox commit 3bb6fad3d8b6, Apache-2.0; see spec/PROVENANCE.md),
// embedded with go:embed.
//
// # What is validated
//
// Every request and every response is checked with
// github.com/pb33f/libopenapi-validator against the matching document: the
// lifecycle one for /v1/... (with /v1 removed), the execd one for the execd
// routes (with the proxy prefix removed). Requests: path and method, path,
// query and header parameters, content type and JSON body. Responses: that
// the status is documented for the operation, the content type, and the JSON
// body. Server-sent-event responses (text/event-stream, POST /command) cannot
// be validated as one body: the status and content type are, and then each
// event's JSON payload is validated against the ServerStreamEvent schema.
// Plain-text and octet-stream responses (command logs, file downloads) are
// checked for status and content type only.
//
// Rules the spec states only in prose are checked too and recorded as "spec
// rule" violations: exactly one of image and snapshotId (none with
// extensions.poolRef); entrypoint required with image; resourceLimits required
// without poolRef; metadata keys and values are Kubernetes label keys and
// values (the opensandbox.io/ prefix is reserved, on create and on PATCH);
// extensions["access.renew.extend.seconds"] is 300..86400; endpoint expires
// not with use_server_proxy=true; command gid requires uid; file download
// offset/limit not with Range.
//
// Security requirements are not validated as schema violations: a missing
// or wrong key or token is answered 401 (the documented answer), which is
// server behaviour a test may provoke on purpose.
//
// A violation in either direction is recorded (Violations). With Start, the
// test fails at cleanup with the list (t.Errorf); a test that provokes
// violations on purpose consumes them with TakeViolations. A request that
// breaks the spec is still answered, as the reference server would: 400 with
// an ErrorResponse (404 for a path or method neither document has), after the
// 401 check. Responses the proxy layer makes (unknown sandbox 404, bad token
// 401, sandbox not running or port without execd 502), injected faults,
// these 400/404 rejections and 500 "not implemented" may carry a status the
// operation does not document; for them only the body is checked, against
// the document's ErrorResponse.
//
// # Lenient choices
//
// The lifecycle document (PVC fields) and the execd document
// (CommandStatusResponse exit_code and finished_at) use the OpenAPI 3.0
// keyword `nullable` although they are 3.1 documents, which the 3.1 validator
// refuses. The documents are rewritten in memory before loading: `nullable:
// true` next to `type: X` becomes `type: [X, "null"]` (null is added to an
// enum too) and `nullable` is dropped. The embedded files stay byte-identical.
//
// SandboxState is a plain string in the lifecycle document (its values are
// listed in prose only, and it says clients must tolerate new ones), so the
// state "Unknown" that the reference server reports is not a violation;
// SetSandboxState can produce it.
//
// The reference execd writes each event as bare JSON followed by a blank line
// ("{...}\n\n"), without an SSE "data:" field; this server does the same
// (Options.SSEDataPrefix writes "data: {...}\n\n" instead). Event
// validation accepts both.
//
// # Behaviour where the spec is silent (as the reference server behaves)
//
// Lifecycle:
//   - POST /v1/sandboxes answers 202 CreateSandboxResponse (state Pending,
//     metadata echoed, createdAt, entrypoint, expiresAt when timeout is set)
//     with a Location header; the sandbox becomes Running after
//     Options.ProvisionDelay. An image uri containing "pull-fail" becomes
//     Failed (reason image_pull_failed) instead. Restoring a snapshot and pool
//     mode are not implemented (500 and a recorded violation).
//   - GET /v1/sandboxes filters by state (repeatable, OR, case-insensitive)
//     and by metadata (the value is itself a url-encoded query "k=v&k2=v2",
//     all pairs must match), sorts by creation time and paginates
//     (page/pageSize, defaults 1 and 20). Deleted sandboxes are gone.
//   - GET /v1/sandboxes/{id} returns the Sandbox with image.uri, never
//     image.auth; env is never returned.
//   - DELETE /v1/sandboxes/{id} answers 204, kills the sandbox's process
//     groups (SIGKILL) and forgets it (404 afterwards, also for a second
//     DELETE).
//   - PATCH /v1/sandboxes/{id}/metadata applies a JSON merge patch.
//   - GET /v1/sandboxes/{id}/endpoints/{port} answers
//     {"endpoint": "127.0.0.1:PORT/sandboxes/<id>/port/<port>" (no scheme,
//     like the reference), "headers": {"X-EXECD-ACCESS-TOKEN": <token>}}; the
//     token is random per sandbox.
//   - pause/resume go through Pausing/Resuming after ProvisionDelay (409 from
//     a wrong state); renew-expiration moves expiresAt (400 unless later). The
//     expiry itself is not enforced. Snapshots: the list is empty, a snapshot
//     is 404, creating one is not implemented.
//   - Error bodies are {code, message}; responses carry an X-Request-ID uuid.
//
// Execd (reachable once the sandbox was provisioned, whatever its reported
// state; 502 before or after a failed pull):
//   - GET /ping answers 200 with no body.
//   - POST /command runs `bash -c <command>` as a new process group (Setpgid,
//     parent-death SIGKILL), stdin /dev/null. Environment: PATH (the server's)
//     and HOME (the sandbox dir, FilesRoot/<id>), then the create request's
//     env, then the command's envs (later wins). cwd: the request's, else the
//     sandbox dir. timeout (ms) kills the group with SIGKILL. uid and gid are
//     accepted but ignored. The stream starts with {"type":"init","text":
//     "cmd-<hex>"}. Foreground: one stdout/stderr event per non-empty line
//     (a last line without newline included), a ping event every 3s, then
//     execution_complete (execution_time) on exit 0, or an error event
//     {ename: "CommandExecError", evalue: "<exit code>", traceback:
//     [<error>]} otherwise (no execution_complete), like the reference.
//     Background: init then execution_complete at once. A client leaving the
//     stream does not stop the command.
//   - GET /command/status/{id}: id, content, running, exit_code (null while
//     running; -1 when killed by a signal, as Go and the reference report it),
//     error (e.g. "exit status 3", "signal: killed"), started_at, finished_at
//     (null while running). Unknown id: 404.
//   - GET /command/{id}/logs?cursor=N: the combined stdout+stderr bytes of a
//     background command from byte offset N (the reference execd's cursor is
//     a byte offset, although the spec calls it a line index), text/plain,
//     EXECD-COMMANDS-TAIL-CURSOR = the offset to pass next. A foreground
//     command: 400 (like the reference); unknown id: 404.
//   - DELETE /command?id=<id>: 200, SIGTERM to the group, SIGKILL 2s later
//     if it still runs; unknown id: 500 (like the reference).
//   - GET /files/info and GET /files/download (Range, offset/limit) serve
//     real files, but only absolute paths whose real path (symlinks resolved)
//     lies under FilesRoot; anything else is 404.
//   - Other execd operations are not implemented (500 and a recorded
//     violation).
//
// # Go API
//
//	New(Options) (*Server, error); Start(testing.TB, Options) *Server
//	(*Server).Close(); URL(); CAPEM(); Client(); FilesRoot()
//	(*Server).SetAPIKeys(keys ...string); SetSandboxState(id, state string) error
//	(*Server).RestartExecd(sandboxID string, killProcesses bool) error
//	(*Server).Inject(Fault)
//	(*Server).Violations(); TakeViolations(); Requests(); Bodies()
//	(*Server).CreatedSandboxes(metadataKey, value string) int; Commands(sandboxID string) int
//	(*Server).Sandbox(id string) (CreateRequest, bool); ExecdToken(id); SandboxDir(id)
//	SpecFiles; SpecFile(name)
//
// Faults (Inject) match the method and a prefix of the raw path and apply to
// Times requests (0 = once), first injected first: Delay waits before
// handling; Status answers an ErrorResponse instead of handling, or, with
// AfterHandling, after the real handler ran (its answer discarded);
// CutSSEBeforeInit starts the command's process and then closes the
// connection before the init event. Requests records a cut as status 0.
//
// RestartExecd forgets a sandbox's command state (status and logs 404),
// cuts its open command streams and, with killProcesses, kills and waits for
// its process groups; the token stays. Close kills (SIGKILL) every process
// group the server started and waits for them, and removes the files root it
// created. Processes that leave their process group (setsid) are out of its
// reach. The server needs Linux (/proc, parent-death signal).
package opensandbox
