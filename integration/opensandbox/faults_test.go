package opensandbox

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFaultStatusAndTimes(t *testing.T) {
	h := newHarness(t, Options{})
	h.s.Inject(Fault{Method: "POST", Path: "/v1/sandboxes", Status: 503, Times: 2})
	for i := 0; i < 2; i++ {
		resp, data := h.api("POST", "/sandboxes", sandboxBody(map[string]any{"metadata": map[string]string{"run": "f"}}))
		var e errorResponse
		mustJSON(t, data, &e)
		if resp.StatusCode != 503 || e.Code == "" {
			t.Errorf("attempt %d: %d %s", i, resp.StatusCode, data)
		}
	}
	h.create(map[string]any{"metadata": map[string]string{"run": "f"}})
	if n := h.s.CreatedSandboxes("run", "f"); n != 1 {
		t.Errorf("CreatedSandboxes = %d, want 1 (faults before handling create nothing)", n)
	}
	// Method and path must both match; a fault applies once by default.
	h.s.Inject(Fault{Method: "DELETE", Path: "/v1/sandboxes", Status: 409})
	if resp, _ := h.api("GET", "/sandboxes", nil); resp.StatusCode != 200 {
		t.Errorf("GET hit a DELETE fault: %d", resp.StatusCode)
	}
	if resp, _ := h.api("DELETE", "/sandboxes/x", nil); resp.StatusCode != 409 {
		t.Errorf("DELETE fault: %d", resp.StatusCode)
	}
	if resp, _ := h.api("DELETE", "/sandboxes/x", nil); resp.StatusCode != 404 {
		t.Errorf("fault applied twice: %d", resp.StatusCode)
	}
	// Faults answer on execd routes too (raw path prefix).
	id := h.running(nil)
	base, hdr := h.execd(id)
	h.s.Inject(Fault{Path: "/sandboxes/" + id + "/port/44772/command/status", Status: 500})
	if resp, data := h.do("GET", base+"/command/status/cmd-x", hdr, nil); resp.StatusCode != 500 || !bytes.Contains(data, []byte(`"code"`)) {
		t.Errorf("execd fault: %d %s", resp.StatusCode, data)
	}
}

func TestFaultDelay(t *testing.T) {
	h := newHarness(t, Options{})
	h.s.Inject(Fault{Method: "GET", Path: "/v1/sandboxes", Delay: 300 * time.Millisecond})
	start := time.Now()
	if resp, _ := h.api("GET", "/sandboxes", nil); resp.StatusCode != 200 {
		t.Errorf("delayed GET: %d", resp.StatusCode)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("answered after %v, want ≥ 300ms", d)
	}
	start = time.Now()
	h.api("GET", "/sandboxes", nil)
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Errorf("second GET delayed %v", d)
	}
	// A client that gives up during the delay sees a timeout.
	h.s.Inject(Fault{Path: "/v1/", Delay: 2 * time.Second})
	c := h.s.Client()
	c.Timeout = 100 * time.Millisecond
	req, _ := http.NewRequest("GET", h.s.URL()+"/v1/sandboxes", nil)
	req.Header.Set(APIKeyHeader, h.key)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("no timeout: %d", resp.StatusCode)
	}
}

func TestFaultAfterHandling(t *testing.T) {
	h := newHarness(t, Options{})
	h.s.Inject(Fault{Method: "POST", Path: "/v1/sandboxes", Status: 500, AfterHandling: true})
	resp, _ := h.api("POST", "/sandboxes", sandboxBody(map[string]any{"metadata": map[string]string{"op": "ah"}}))
	if resp.StatusCode != 500 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	if n := h.s.CreatedSandboxes("op", "ah"); n != 1 {
		t.Errorf("CreatedSandboxes = %d, want 1 (the create happened)", n)
	}
	_, data := h.api("GET", "/sandboxes?metadata=op%3Dah", nil)
	if !bytes.Contains(data, []byte(`"op":"ah"`)) {
		t.Errorf("the sandbox is not listed: %s", data)
	}

	id := h.running(nil)
	base, hdr := h.execd(id)
	h.s.Inject(Fault{Method: "POST", Path: "/sandboxes/" + id + "/port/44772/command", Status: 502, AfterHandling: true})
	resp, _ = h.do("POST", base+"/command", hdr, map[string]any{"command": "touch ran", "background": true})
	if resp.StatusCode != 502 {
		t.Errorf("command: %d", resp.StatusCode)
	}
	if h.s.Commands(id) != 1 {
		t.Errorf("Commands = %d, want 1", h.s.Commands(id))
	}
	waitFile(t, filepath.Join(h.s.SandboxDir(id), "ran"), false)
}

// waitFile waits until path exists and (with nonEmpty) has content.
func waitFile(t *testing.T, path string, nonEmpty bool) []byte {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && (len(b) > 0 || !nonEmpty) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFaultCutSSEBeforeInit(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	base, hdr := h.execd(id)
	h.s.Inject(Fault{Method: "POST", Path: "/sandboxes/", CutSSEBeforeInit: true})
	req, _ := http.NewRequest("POST", base+"/command", strings.NewReader(`{"command":"echo $$ > pid; sleep 30"}`))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.c.Do(req)
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			t.Fatalf("the stream was not cut: %d %q", resp.StatusCode, body)
		}
	}
	if h.s.Commands(id) != 1 {
		t.Errorf("Commands = %d, want 1 (the process started)", h.s.Commands(id))
	}
	pid := waitFile(t, filepath.Join(h.s.SandboxDir(id), "pid"), true)
	if len(bytes.TrimSpace(pid)) == 0 {
		t.Errorf("no pid written")
	}
	var cut bool
	for _, r := range h.s.Requests() {
		cut = cut || (r.Method == "POST" && strings.HasSuffix(r.Path, "/command") && r.Status == 0)
	}
	if !cut {
		t.Errorf("request log does not show the cut (status 0): %+v", h.s.Requests())
	}
	// The next command streams normally.
	if evs := h.run(id, map[string]any{"command": "echo ok"}); evs[len(evs)-1].Type != "execution_complete" {
		t.Errorf("next command: %+v", evs)
	}
}
