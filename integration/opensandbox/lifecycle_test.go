package opensandbox

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestHappyPathBackgroundCommand(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.create(map[string]any{"metadata": map[string]string{"team": "ml"}})
	h.waitState(id, "Running")
	evs := h.run(id, map[string]any{"command": "echo hi; exit 3", "background": true})
	cmd := evs[0].Text
	if last := evs[len(evs)-1]; last.Type != "execution_complete" {
		t.Errorf("background stream ends with %q, want execution_complete", last.Type)
	}
	st := h.waitDone(id, cmd)
	if st.ExitCode == nil || *st.ExitCode != 3 || st.FinishedAt == nil || st.ID != cmd {
		t.Errorf("status = %+v, want exit 3 finished", st)
	}
	if h.s.Commands(id) != 1 {
		t.Errorf("Commands = %d, want 1", h.s.Commands(id))
	}
	base, hdr := h.execd(id)
	resp, body := h.do("GET", base+"/command/"+cmd+"/logs", hdr, nil)
	if resp.StatusCode != 200 || string(body) != "hi\n" || resp.Header.Get(TailCursorHeader) != "3" {
		t.Errorf("logs = %d %q cursor %q", resp.StatusCode, body, resp.Header.Get(TailCursorHeader))
	}
}

func TestMetadataFilterAndPagination(t *testing.T) {
	h := newHarness(t, Options{})
	a := h.create(map[string]any{"metadata": map[string]string{"project": "apollo", "note": "x"}})
	h.create(map[string]any{"metadata": map[string]string{"project": "apollo"}})
	h.create(map[string]any{"metadata": map[string]string{"project": "zeus"}})
	filter := url.QueryEscape("project=apollo&note=x")
	resp, data := h.api("GET", "/sandboxes?metadata="+filter, nil)
	var list struct {
		Items      []sandboxView
		Pagination struct {
			Page, PageSize, TotalItems, TotalPages int
			HasNextPage                            bool
		}
	}
	mustJSON(t, data, &list)
	if resp.StatusCode != 200 || len(list.Items) != 1 || list.Items[0].ID != a {
		t.Fatalf("filter: %d %s", resp.StatusCode, data)
	}
	_, data = h.api("GET", "/sandboxes?metadata="+url.QueryEscape("project=apollo")+"&pageSize=1&page=2", nil)
	mustJSON(t, data, &list)
	if len(list.Items) != 1 || list.Pagination.TotalItems != 2 || list.Pagination.TotalPages != 2 || list.Pagination.HasNextPage {
		t.Fatalf("page 2: %s", data)
	}
	_, data = h.api("GET", "/sandboxes?state=Failed&state=Paused", nil)
	mustJSON(t, data, &list)
	if len(list.Items) != 0 {
		t.Fatalf("state filter: %s", data)
	}
	if n := h.s.CreatedSandboxes("project", "apollo"); n != 2 {
		t.Errorf("CreatedSandboxes = %d, want 2", n)
	}
}

func TestAPIKeyAndRotation(t *testing.T) {
	h := newHarness(t, Options{APIKeys: []string{"old"}})
	for _, hdr := range []map[string]string{nil, {APIKeyHeader: "wrong"}} {
		resp, data := h.do("GET", h.s.URL()+"/v1/sandboxes", hdr, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(data), `"code"`) {
			t.Errorf("key %v: %d %s", hdr, resp.StatusCode, data)
		}
	}
	h.s.SetAPIKeys("old", "new")
	for _, k := range []string{"old", "new"} {
		if resp, _ := h.do("GET", h.s.URL()+"/v1/sandboxes", map[string]string{APIKeyHeader: k}, nil); resp.StatusCode != 200 {
			t.Errorf("key %s during rotation: %d", k, resp.StatusCode)
		}
	}
	h.s.SetAPIKeys("new")
	if resp, _ := h.do("GET", h.s.URL()+"/v1/sandboxes", map[string]string{APIKeyHeader: "old"}, nil); resp.StatusCode != 401 {
		t.Errorf("retired key: %d", resp.StatusCode)
	}
}

func TestDeleteThen404(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	if resp, _ := h.api("DELETE", "/sandboxes/"+id, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if code, _ := h.get(id); code != http.StatusNotFound {
		t.Errorf("get after delete: %d", code)
	}
	if resp, _ := h.api("DELETE", "/sandboxes/"+id, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("second delete: %d", resp.StatusCode)
	}
	if _, ok := h.s.Sandbox(id); !ok {
		t.Errorf("Sandbox(%s) forgot a deleted sandbox", id)
	}
}

func TestImagePullFailure(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.create(map[string]any{"image": map[string]any{"uri": "registry.example/pull-fail:1"}})
	v := h.waitState(id, "Failed")
	if v.Status.Reason != "image_pull_failed" || v.Status.Message == "" {
		t.Errorf("status = %+v", v.Status)
	}
	base, hdr := h.execd(id)
	if resp, _ := h.do("GET", base+"/ping", hdr, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("execd of a failed sandbox: %d", resp.StatusCode)
	}
}

// State overrides: "Unknown" is no spec violation (SandboxState is a plain
// string) and does not take execd away.
func TestSetSandboxState(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	for _, st := range []string{"Unknown", "Terminated", "Failed"} {
		if err := h.s.SetSandboxState(id, st); err != nil {
			t.Fatal(err)
		}
		if _, v := h.get(id); v.Status.State != st {
			t.Errorf("state = %q, want %s", v.Status.State, st)
		}
	}
	_, data := h.api("GET", "/sandboxes?state=failed", nil)
	if !strings.Contains(string(data), id) {
		t.Errorf("state filter (case-insensitive) misses %s: %s", id, data)
	}
	h.run(id, map[string]any{"command": "true"})
	if err := h.s.SetSandboxState("nope", "Running"); err == nil {
		t.Error("no error for an unknown sandbox")
	}
}

func TestSecretsStayInRequests(t *testing.T) {
	h := newHarness(t, Options{})
	const canary = "CANARY-7f3a9"
	id := h.running(map[string]any{
		"image": map[string]any{"uri": "private.example/app:1", "auth": map[string]string{"username": "u", "password": canary}},
		"env":   map[string]string{"TOKEN": canary},
	})
	_, one := h.api("GET", "/sandboxes/"+id, nil)
	_, list := h.api("GET", "/sandboxes", nil)
	for _, body := range [][]byte{one, list} {
		if strings.Contains(string(body), canary) || strings.Contains(string(body), "auth") {
			t.Errorf("a response leaks credentials: %s", body)
		}
	}
	if !strings.Contains(string(one), "private.example/app:1") {
		t.Errorf("image uri missing: %s", one)
	}
	var seen int
	for _, b := range h.s.Bodies() {
		if strings.Contains(string(b), canary) {
			seen++
		}
	}
	if seen != 1 {
		t.Errorf("canary in %d request bodies, want 1", seen)
	}
	req, ok := h.s.Sandbox(id)
	if !ok || req.Image.Auth.Password != canary || req.Env["TOKEN"] != canary {
		t.Errorf("Sandbox(%s) = %+v %v", id, req, ok)
	}
	req.Env["TOKEN"] = "changed" // a copy
	if again, _ := h.s.Sandbox(id); again.Env["TOKEN"] != canary {
		t.Error("Sandbox returned the stored map, not a copy")
	}
	// The sandbox env reaches commands.
	if evs := h.run(id, map[string]any{"command": `test "$TOKEN" = ` + canary}); evs[len(evs)-1].Type != "execution_complete" {
		t.Errorf("env not passed: %+v", evs)
	}
}

func TestPatchMetadata(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.create(map[string]any{"metadata": map[string]string{"keep": "1", "drop": "2", "change": "3"}})
	resp, data := h.api("PATCH", "/sandboxes/"+id+"/metadata", `{"drop": null, "change": "4", "add": "5", "gone": null}`)
	var v sandboxView
	mustJSON(t, data, &v)
	want := map[string]string{"keep": "1", "change": "4", "add": "5"}
	if resp.StatusCode != 200 || len(v.Metadata) != len(want) || v.Metadata["keep"] != "1" || v.Metadata["change"] != "4" || v.Metadata["add"] != "5" {
		t.Errorf("patch = %d %s", resp.StatusCode, data)
	}
	if resp, _ := h.api("PATCH", "/sandboxes/"+id+"/metadata", `{"opensandbox.io/owner": "x"}`); resp.StatusCode != 400 {
		t.Errorf("reserved prefix: %d", resp.StatusCode)
	}
	takeViolations(t, h.s, "PATCH", "reserved")
	if resp, _ := h.api("PATCH", "/sandboxes/"+id+"/metadata", `{"Bad Key": "x"}`); resp.StatusCode != 400 {
		t.Errorf("invalid key: %d", resp.StatusCode)
	}
	takeViolations(t, h.s, "PATCH", `metadata key "Bad Key"`)
	if resp, _ := h.api("PATCH", "/sandboxes/nope/metadata", `{}`); resp.StatusCode != 404 {
		t.Errorf("unknown sandbox: %d", resp.StatusCode)
	}
}

func TestPauseResumeRenew(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	if resp, _ := h.api("POST", "/sandboxes/"+id+"/resume", nil); resp.StatusCode != 409 {
		t.Errorf("resume while running: %d", resp.StatusCode)
	}
	if resp, _ := h.api("POST", "/sandboxes/"+id+"/pause", nil); resp.StatusCode != 202 {
		t.Errorf("pause: %d", resp.StatusCode)
	}
	h.waitState(id, "Paused")
	if resp, _ := h.api("POST", "/sandboxes/"+id+"/resume", nil); resp.StatusCode != 202 {
		t.Errorf("resume: %d", resp.StatusCode)
	}
	h.waitState(id, "Running")
	resp, data := h.api("POST", "/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": "2999-01-01T00:00:00Z"})
	if resp.StatusCode != 200 || !strings.Contains(string(data), "2999-01-01T00:00:00Z") {
		t.Errorf("renew: %d %s", resp.StatusCode, data)
	}
	if resp, _ := h.api("POST", "/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": "2001-01-01T00:00:00Z"}); resp.StatusCode != 400 {
		t.Errorf("renew into the past: %d", resp.StatusCode)
	}
}

func TestTLSAndDataPrefixedEvents(t *testing.T) {
	h := newHarness(t, Options{TLS: true, SSEDataPrefix: true})
	if !strings.HasPrefix(h.s.URL(), "https://127.0.0.1:") || !strings.Contains(string(h.s.CAPEM()), "BEGIN CERTIFICATE") {
		t.Fatalf("URL %s CA %q", h.s.URL(), h.s.CAPEM())
	}
	if _, err := http.Get(h.s.URL() + "/v1/sandboxes"); err == nil {
		t.Error("an untrusting client connected")
	}
	id := h.running(nil)
	evs := h.run(id, map[string]any{"command": "echo over-tls"})
	if got := eventTexts(evs, "stdout"); len(got) != 1 || got[0] != "over-tls" {
		t.Errorf("events = %+v", evs)
	}
	if !strings.HasPrefix(string(h.lastRaw), `data: {"type":"init"`) {
		t.Errorf("raw stream = %q", h.lastRaw)
	}
}
