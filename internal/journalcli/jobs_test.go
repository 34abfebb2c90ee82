package journalcli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
	"git.ddupan.top/panxiao81/ayatori/integration"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// The execution domain's recorded stream: Ayatori Jobs.
const (
	// jobBuildOldUID: ci/build, succeeded, deleted by its TTL.
	jobBuildOldUID = "5b1e9f7a-2c4d-4e8f-8a1b-00000000a001"
	// jobBuildUID: ci/build recreated, failed with exit code 3.
	jobBuildUID = "5b1e9f7a-2c4d-4e8f-8a1b-00000000b002"
	// jobNightlyUID: ci/nightly, cancelled while running.
	jobNightlyUID = "5b1e9f7a-2c4d-4e8f-8a1b-00000000c003"
	// The native batch/v1 Jobs the executor created for them.
	nativeBuildOldUID = "e0c1d2e3-0000-4000-8000-00000000a001"
	nativeBuildUID    = "e0c1d2e3-0000-4000-8000-00000000b002"
	nativeNightlyUID  = "e0c1d2e3-0000-4000-8000-00000000c003"
)

const jobGroup = "execution.ayatori.ddupan.top"

func i32(v int32) *int32 { return &v }

// populateJobs records the execution domain's incident into a real
// stream, with the real payload types: ci/build succeeds and is deleted
// by its TTL; ci/build is recreated (new UID) and fails with exit code 3;
// ci/nightly is cancelled while running. One Tenant record shows that
// `list --kind Job` filters.
func populateJobs(t *testing.T, srv *integration.NATS) {
	t.Helper()
	nc, err := srv.Connect(journal.IdentityManager)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	ctx := context.Background()
	manager, err := journal.Open(ctx, nc, journal.Config{Actor: "ayatori-manager-0", Clock: clk, Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	executor, err := journal.Open(ctx, nc, journal.Config{Actor: "ayatori-manager-0/executor", Clock: clk, Signer: testSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	step := func(d time.Duration) { clk.SetTime(clk.Now().Add(d)) }
	var lastSeq uint64
	app := func(s *journal.Store, r journal.Record) {
		t.Helper()
		res, err := s.Append(ctx, &r)
		if err != nil {
			t.Fatal(err)
		}
		lastSeq = res.Sequence
	}
	job := func(name, uid string) journal.ObjectRef {
		return journal.ObjectRef{Group: jobGroup, Kind: "Job", Namespace: "ci", Name: name, UID: uid, Generation: 1}
	}
	ensure := func(o journal.ObjectRef) execution.EnsureIntent {
		return execution.EnsureIntent{Adapter: execution.AdapterKubernetes, JobClass: "default", JobClassUID: "9f00c0de-0000-4000-8000-000000000001",
			ParametersKind: "KubernetesExecutionParameters", ParametersName: "default", ParametersUID: "9f00c0de-0000-4000-8000-000000000002",
			Image: "registry.example/ci/build:1.4", TaskDigest: "sha256:" + strings.Repeat("ab", 32),
			Resources: execution.Resources{RequestsCPU: "500m", RequestsMemory: "256Mi", LimitsMemory: "256Mi"}}
	}
	do := func(o journal.ObjectRef, op, stepName string, attempt int, in any, obs execution.Observation) {
		t.Helper()
		rec, err := journal.NewIntent(o, op, stepName, attempt, in)
		if err != nil {
			t.Fatal(err)
		}
		app(manager, rec)
		step(80 * time.Millisecond)
		out, err := journal.NewOutcome(rec, journal.Result{Class: journal.Succeeded}, obs)
		if err != nil {
			t.Fatal(err)
		}
		app(executor, out)
		step(20 * time.Millisecond)
	}
	note := func(o journal.ObjectRef, op string, payload any) {
		t.Helper()
		n := journal.Record{ID: fmt.Sprintf("%s/g%d/note/%s/%d", o.UID, o.Generation, op, lastSeq), Type: journal.TypeNote,
			Operation: op, Object: o, Attempt: 1}
		if err := n.SetPayload(payload); err != nil {
			t.Fatal(err)
		}
		app(manager, n)
		step(20 * time.Millisecond)
	}
	exec := func(refs []execution.Reference) execution.ExecutionIntent {
		return execution.ExecutionIntent{Adapter: execution.AdapterKubernetes, References: refs}
	}
	obs := func(st execution.State, refs []execution.Reference) execution.Observation {
		return execution.Observation{State: st, Adapter: execution.AdapterKubernetes, References: refs, Terminal: st.Stopped() && st != execution.StateNotFound}
	}
	ref := func(uid string) []execution.Reference { return []execution.Reference{{Type: "Job", ID: uid}} }

	// ci/build: succeeds, is deleted by its TTL a minute later.
	old := job("build", jobBuildOldUID)
	created := obs(execution.StatePending, ref(nativeBuildOldUID))
	created.Created = true
	do(old, execution.OpEnsure, "", 1, ensure(old), created)
	step(time.Second)
	do(old, execution.OpObserve, "", 1, exec(ref(nativeBuildOldUID)), obs(execution.StateRunning, ref(nativeBuildOldUID)))
	note(old, execution.NoteDeadlineStarted, execution.DeadlineNote{ActiveDeadlineSeconds: 600})
	step(4 * time.Second)
	done := obs(execution.StateSucceeded, ref(nativeBuildOldUID))
	done.ExitCode, done.Reason = i32(0), "Completed"
	do(old, execution.OpObserve, "", 2, exec(ref(nativeBuildOldUID)), done)
	note(old, execution.NoteFinished, execution.FinishedNote{Succeeded: true, Reason: "Completed", ExitCode: i32(0)})
	step(60 * time.Second)
	note(old, execution.NoteTTLExpired, execution.TTLNote{TTLSecondsAfterFinished: 60})
	do(old, execution.OpDelete, "", 1, exec(ref(nativeBuildOldUID)), obs(execution.StateNotFound, nil))

	// A Tenant: not a Job.
	step(2 * time.Second)
	ten := journal.ObjectRef{Group: "database.ayatori.ddupan.top", Kind: "PostgreSQLTenant", Namespace: "ci", Name: "build",
		UID: "7d3c0e52-1c1a-4b8e-9a53-000000000009", Generation: 1}
	tin, err := journal.NewIntent(ten, "ClaimOwnership", "", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	app(manager, tin)
	tout, err := journal.NewOutcome(tin, journal.Result{Class: journal.Succeeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	app(executor, tout)

	// ci/build again, a new object: exits 3.
	step(10 * time.Second)
	b := job("build", jobBuildUID)
	created = obs(execution.StatePending, ref(nativeBuildUID))
	created.Created = true
	do(b, execution.OpEnsure, "", 1, ensure(b), created)
	step(time.Second)
	do(b, execution.OpObserve, "", 1, exec(ref(nativeBuildUID)), obs(execution.StateRunning, ref(nativeBuildUID)))
	step(2 * time.Second)
	failed := obs(execution.StateFailed, ref(nativeBuildUID))
	failed.ExitCode, failed.Reason, failed.Message = i32(3), "ProcessFailed", "the main process exited with code 3"
	do(b, execution.OpObserve, "", 2, exec(ref(nativeBuildUID)), failed)
	note(b, execution.NoteFinished, execution.FinishedNote{Succeeded: false, Reason: "ProcessFailed", ExitCode: i32(3)})

	// ci/nightly: cancelled (desiredState: Cancelled, generation 2) while running.
	step(3 * time.Second)
	n := job("nightly", jobNightlyUID)
	created = obs(execution.StatePending, ref(nativeNightlyUID))
	created.Created = true
	do(n, execution.OpEnsure, "", 1, ensure(n), created)
	step(time.Second)
	do(n, execution.OpObserve, "", 1, exec(ref(nativeNightlyUID)), obs(execution.StateRunning, ref(nativeNightlyUID)))
	step(30 * time.Second)
	n.Generation = 2
	cancel := exec(ref(nativeNightlyUID))
	cancel.Reason = execution.StopCancelled
	do(n, execution.OpCancel, string(execution.StopCancelled), 1, cancel, obs(execution.StateStopping, ref(nativeNightlyUID)))
	step(time.Second)
	stopped := obs(execution.StateCancelled, ref(nativeNightlyUID))
	stopped.Reason = "Cancelled"
	do(n, execution.OpObserve, "", 1, exec(ref(nativeNightlyUID)), stopped)
	note(n, execution.NoteFinished, execution.FinishedNote{Succeeded: false, Reason: "Cancelled"})
}

func TestGoldenJobs(t *testing.T) {
	n := integration.StartNATS(t)
	populateJobs(t, n)
	fixture := filepath.Join("testdata", "jobs-fixture.ndjson")
	exported, stderr, code := run(t, append(liveArgs(n), "export")...)
	if code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	golden(t, "jobs-fixture.ndjson", exported)

	cases := []struct {
		name   string
		args   []string
		code   int
		golden string
		stderr string // substring of stderr
	}{
		{"timeline by name: the newest, older UIDs listed", []string{"timeline", "--kind", "Job", "ci/build"}, 0, "jobs-timeline-name.txt", ""},
		{"timeline by name with flags", []string{"timeline", "--kind", "job", "-n", "ci", "--name", "build"}, 0, "jobs-timeline-name.txt", ""},
		{"timeline by name json", []string{"timeline", "--kind", "Job", "ci/build", "-o", "json"}, 0, "jobs-timeline-name.json", ""},
		{"timeline of the TTL-deleted Job by UID", []string{"timeline", "--uid", jobBuildOldUID}, 0, "jobs-timeline-uid.txt", ""},
		{"UID as the argument", []string{"timeline", jobBuildOldUID}, 0, "jobs-timeline-uid.txt", ""},
		{"timeline of the cancelled Job", []string{"timeline", "--kind", "Job", "ci/nightly"}, 0, "jobs-timeline-cancelled.txt", ""},
		{"replay", []string{"replay", "--kind", "Job", "ci/build"}, 0, "jobs-replay.txt", "older object with the same name: uid " + jobBuildOldUID},
		{"verify", []string{"verify"}, 0, "jobs-verify.txt", ""},
		{"list --kind Job", []string{"list", "--kind", "Job"}, 0, "jobs-list.txt", ""},
		{"list --kind is case-insensitive", []string{"list", "--kind", "job"}, 0, "jobs-list.txt", ""},
		{"list json", []string{"list", "--kind", "Job", "-n", "ci", "--result", "Succeeded", "-o", "json"}, 0, "jobs-list.json", ""},
		{"both argument and --name", []string{"timeline", "--kind", "Job", "--name", "build", "ci/build"}, 2, "", "not both"},
		{"no such Job", []string{"timeline", "--kind", "Job", "ci/deploy"}, 3, "", "no records for Job ci/deploy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live, lerr, lcode := run(t, append(liveArgs(n), tc.args...)...)
			file, ferr, fcode := run(t, append(offline(fixture), tc.args...)...)
			if lcode != tc.code || fcode != tc.code {
				t.Fatalf("exit codes live=%d file=%d, want %d\n%s%s", lcode, fcode, tc.code, lerr, ferr)
			}
			if live != file || lerr != ferr {
				t.Fatalf("live and --from-file output differ:\n%s%s\n---\n%s%s", live, lerr, file, ferr)
			}
			if !strings.Contains(lerr, tc.stderr) {
				t.Fatalf("stderr %q does not contain %q", lerr, tc.stderr)
			}
			if tc.golden != "" {
				golden(t, tc.golden, live)
			}
		})
	}
}

// fakeAPIServer serves discovery for execution.ayatori.ddupan.top/v1alpha1
// and the Jobs in jobs (by "namespace/name"; absent: 404).
func fakeAPIServer(t *testing.T, jobs map[string]map[string]any) string {
	t.Helper()
	gv := jobGroup + "/v1alpha1"
	mux := http.NewServeMux()
	writeJSONResponse := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/api", func(w http.ResponseWriter, _ *http.Request) {
		writeJSONResponse(w, 200, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, _ *http.Request) {
		v := map[string]any{"groupVersion": gv, "version": "v1alpha1"}
		writeJSONResponse(w, 200, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{
			map[string]any{"name": jobGroup, "versions": []any{v}, "preferredVersion": v}}})
	})
	mux.HandleFunc("/apis/"+gv, func(w http.ResponseWriter, _ *http.Request) {
		writeJSONResponse(w, 200, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": []any{
			map[string]any{"name": "jobs", "singularName": "job", "namespaced": true, "kind": "Job", "verbs": []string{"get", "list"}}}})
	})
	mux.HandleFunc("/apis/"+gv+"/namespaces/{ns}/jobs/{name}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("ns") + "/" + r.PathValue("name")
		if j, ok := jobs[key]; ok {
			writeJSONResponse(w, 200, j)
			return
		}
		writeJSONResponse(w, 404, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
			"message": fmt.Sprintf("jobs.%s %q not found", jobGroup, r.PathValue("name")),
			"details": map[string]any{"name": r.PathValue("name"), "group": jobGroup, "kind": "jobs"}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// liveJob is an Ayatori Job as the API server returns it.
func liveJob(name, uid, succeeded, reason string, exit *int32, nativeUID string, deleting bool) map[string]any {
	meta := map[string]any{"name": name, "namespace": "ci", "uid": uid, "generation": 1}
	if deleting {
		meta["deletionTimestamp"] = "2026-12-02T09:05:00Z"
	}
	status := map[string]any{
		"observedGeneration": 1,
		"conditions": []any{map[string]any{"type": "Succeeded", "status": succeeded, "reason": reason,
			"lastTransitionTime": "2026-12-02T09:02:00Z", "message": ""}},
		"execution": map[string]any{"adapter": "kubernetes", "references": []any{map[string]any{"type": "Job", "id": nativeUID}}},
	}
	if exit != nil {
		status["result"] = map[string]any{"exitCode": *exit, "reason": reason}
	}
	return map[string]any{"apiVersion": jobGroup + "/v1alpha1", "kind": "Job", "metadata": meta, "status": status}
}

// replay --kubeconfig on Jobs, against a fake API server, from the
// recorded Job stream.
func TestReplayLiveJobs(t *testing.T) {
	fixture := filepath.Join("testdata", "jobs-fixture.ndjson")
	failedB := liveJob("build", jobBuildUID, "False", "ProcessFailed", i32(3), nativeBuildUID, false)
	cases := []struct {
		name   string
		jobs   map[string]map[string]any
		args   []string
		code   int
		golden string
		want   string // substring of stdout
	}{
		{"live Job agrees with its Finished note", map[string]map[string]any{"ci/build": failedB},
			[]string{"replay", "--kind", "Job", "ci/build"}, 0, "jobs-replay-live.txt", "no mismatch with the journal"},
		{"TTL-deleted Job, its name now another Job's", map[string]map[string]any{"ci/build": failedB},
			[]string{"replay", "--uid", jobBuildOldUID}, 0, "jobs-replay-ttl.txt", "deleted by TTL (TTLExpired #"},
		{"TTL-deleted Job, nothing of that name", nil,
			[]string{"replay", "--uid", jobBuildOldUID}, 0, "", "deleted by TTL"},
		{"TTL-deleted Job json", nil,
			[]string{"replay", "--uid", jobBuildOldUID, "-o", "json"}, 0, "", `"verdict": "deleted by TTL`},
		{"live status disagrees with the Finished note",
			map[string]map[string]any{"ci/build": liveJob("build", jobBuildUID, "True", "Completed", i32(0), nativeBuildUID, false)},
			[]string{"replay", "--kind", "Job", "ci/build"}, 1, "jobs-replay-mismatch.txt", "MISMATCH: live Succeeded=True"},
		{"live status names another execution",
			map[string]map[string]any{"ci/build": liveJob("build", jobBuildUID, "False", "ProcessFailed", i32(3), "someone-elses", false)},
			[]string{"replay", "--kind", "Job", "ci/build"}, 1, "", "another execution"},
		{"finished Job gone without a Delete in the journal", nil,
			[]string{"replay", "--kind", "Job", "ci/nightly"}, 1, "", "MISMATCH: the Job no longer exists"},
		{"terminal status not written yet",
			map[string]map[string]any{"ci/nightly": liveJob("nightly", jobNightlyUID, "Unknown", "Cancelling", nil, nativeNightlyUID, false)},
			[]string{"replay", "--kind", "Job", "ci/nightly"}, 1, "", "the terminal status was not written"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := fakeAPIServer(t, tc.jobs)
			out, errOut, code := run(t, append(append(offline(fixture), tc.args...), "--kubeconfig", kc)...)
			if code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output does not contain %q:\n%s", tc.want, out)
			}
			if tc.golden != "" {
				golden(t, tc.golden, out)
			}
		})
	}
}

// verify --help lists every execution invariant: the contracts import
// registers them.
func TestVerifyRunsExecutionInvariants(t *testing.T) {
	help, _, code := run(t, "verify", "--help")
	if code != 0 {
		t.Fatalf("verify --help: exit %d", code)
	}
	if len(execution.Invariants) == 0 {
		t.Fatal("contracts/execution has no invariants")
	}
	for _, inv := range execution.Invariants {
		if !strings.Contains(help, inv.Description) {
			t.Errorf("verify --help does not list %q", inv.Description)
		}
	}
	registered := map[string]bool{}
	for _, inv := range journal.RegisteredInvariants()[execution.Domain] {
		registered[inv.Rule] = true
	}
	for _, rule := range []string{execution.RuleEnsureAfterTerminal, execution.RuleEnsureAfterCancel, execution.RuleSecondExecution, execution.RuleTTLBeforeFinished} {
		if !registered[rule] {
			t.Errorf("%s is not registered", rule)
		}
	}
}
