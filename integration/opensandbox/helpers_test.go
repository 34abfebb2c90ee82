package opensandbox

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// harness drives a Server over real HTTP the way a client would.
type harness struct {
	t   *testing.T
	s   *Server
	c   *http.Client
	key string
	// lastRaw is the raw SSE body of the last run.
	lastRaw []byte
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	s := Start(t, opts)
	key := DefaultAPIKey
	if len(opts.APIKeys) > 0 {
		key = opts.APIKeys[0]
	}
	return &harness{t: t, s: s, c: s.Client(), key: key}
}

// do sends a request; body is JSON-encoded unless it is a string.
func (h *harness) do(method, url string, hdr map[string]string, body any) (*http.Response, []byte) {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, data
}

// api calls the lifecycle API with the harness key.
func (h *harness) api(method, path string, body any) (*http.Response, []byte) {
	h.t.Helper()
	return h.do(method, h.s.URL()+"/v1"+path, map[string]string{APIKeyHeader: h.key}, body)
}

func sandboxBody(extra map[string]any) map[string]any {
	b := map[string]any{
		"image":          map[string]any{"uri": "python:3.11"},
		"entrypoint":     []string{"tail", "-f", "/dev/null"},
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "512Mi"},
		"timeout":        3600,
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func (h *harness) create(extra map[string]any) string {
	h.t.Helper()
	resp, data := h.api("POST", "/sandboxes", sandboxBody(extra))
	if resp.StatusCode != http.StatusAccepted {
		h.t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var out struct {
		ID     string `json:"id"`
		Status struct{ State string }
	}
	mustJSON(h.t, data, &out)
	if out.Status.State != "Pending" {
		h.t.Fatalf("create: state %q, want Pending", out.Status.State)
	}
	return out.ID
}

type sandboxView struct {
	ID     string `json:"id"`
	Status struct {
		State, Reason, Message string
	} `json:"status"`
	Metadata map[string]string `json:"metadata"`
	Image    map[string]any    `json:"image"`
}

func (h *harness) get(id string) (int, sandboxView) {
	h.t.Helper()
	resp, data := h.api("GET", "/sandboxes/"+id, nil)
	var v sandboxView
	if resp.StatusCode == http.StatusOK {
		mustJSON(h.t, data, &v)
	}
	return resp.StatusCode, v
}

func (h *harness) waitState(id, state string) sandboxView {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, v := h.get(id)
		if code == http.StatusOK && v.Status.State == state {
			return v
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s: state %q (status %d), want %s", id, v.Status.State, code, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running creates a sandbox and waits until it runs.
func (h *harness) running(extra map[string]any) string {
	h.t.Helper()
	id := h.create(extra)
	h.waitState(id, "Running")
	return id
}

type endpointView struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers"`
}

// execd resolves the execd base URL and headers through the endpoint API.
func (h *harness) execd(id string) (string, map[string]string) {
	h.t.Helper()
	resp, data := h.api("GET", "/sandboxes/"+id+"/endpoints/44772", nil)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("endpoint: %d %s", resp.StatusCode, data)
	}
	var ep endpointView
	mustJSON(h.t, data, &ep)
	scheme := "http://"
	if strings.HasPrefix(h.s.URL(), "https://") {
		scheme = "https://"
	}
	return scheme + ep.Endpoint, ep.Headers
}

type event struct {
	Type          string `json:"type"`
	Text          string `json:"text"`
	ExecutionTime *int64 `json:"execution_time"`
	Error         *struct {
		EName     string   `json:"ename"`
		EValue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// run posts a command and returns the SSE events.
func (h *harness) run(id string, req map[string]any) []event {
	h.t.Helper()
	base, hdr := h.execd(id)
	resp, data := h.do("POST", base+"/command", hdr, req)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("POST /command: %d %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		h.t.Fatalf("POST /command: content type %q", ct)
	}
	h.lastRaw = data
	var evs []event
	for _, p := range splitEvents(data) {
		var ev event
		mustJSON(h.t, p, &ev)
		evs = append(evs, ev)
	}
	if len(evs) == 0 || evs[0].Type != "init" || !strings.HasPrefix(evs[0].Text, "cmd-") {
		h.t.Fatalf("POST /command: first event is not init with a command id: %s", data)
	}
	return evs
}

type statusView struct {
	ID         string  `json:"id"`
	Running    bool    `json:"running"`
	ExitCode   *int    `json:"exit_code"`
	Error      string  `json:"error"`
	StartedAt  string  `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
}

func (h *harness) status(id, cmd string) (int, statusView) {
	h.t.Helper()
	base, hdr := h.execd(id)
	resp, data := h.do("GET", base+"/command/status/"+cmd, hdr, nil)
	var st statusView
	if resp.StatusCode == http.StatusOK {
		mustJSON(h.t, data, &st)
	}
	return resp.StatusCode, st
}

func (h *harness) waitDone(id, cmd string) statusView {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, st := h.status(id, cmd)
		if code != http.StatusOK {
			h.t.Fatalf("status %s: %d", cmd, code)
		}
		if !st.Running {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("command %s still running", cmd)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}
