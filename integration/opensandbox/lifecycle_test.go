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
