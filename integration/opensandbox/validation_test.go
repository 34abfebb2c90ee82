package opensandbox

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// takeViolations returns the recorded violations (clearing them, so Start's
// cleanup check passes) and fails unless one contains every part.
func takeViolations(t *testing.T, s *Server, parts ...string) []string {
	t.Helper()
	v := s.TakeViolations()
	for _, msg := range v {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(msg, p)
		}
		if ok {
			return v
		}
	}
	t.Errorf("no violation containing %q in %q", parts, v)
	return v
}

func TestInvalidRequestIsRecordedAndAnswered400(t *testing.T) {
	h := newHarness(t, Options{})
	cases := []struct {
		name  string
		body  map[string]any
		parts []string
	}{
		{"timeout below minimum", sandboxBody(map[string]any{"timeout": 5}), []string{"request lifecycle POST /sandboxes", "timeout"}},
		{"image without entrypoint", map[string]any{"image": map[string]any{"uri": "python:3.11"}, "resourceLimits": map[string]string{}}, []string{"spec rule", "entrypoint is required"}},
		{"image and snapshot", sandboxBody(map[string]any{"snapshotId": "snap"}), []string{"spec rule", "exactly one of image and snapshotId"}},
		{"bad metadata value", sandboxBody(map[string]any{"metadata": map[string]string{"k": "has space"}}), []string{"spec rule", `metadata value of "k"`}},
		{"reserved metadata key", sandboxBody(map[string]any{"metadata": map[string]string{"opensandbox.io/x": "y"}}), []string{"spec rule", "reserved"}},
		{"unknown field in image", sandboxBody(map[string]any{"image": map[string]any{"uri": "x", "tag": "y"}}), []string{"request lifecycle POST /sandboxes"}},
	}
	for _, tc := range cases {
		resp, data := h.api("POST", "/sandboxes", tc.body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d %s, want 400", tc.name, resp.StatusCode, data)
		}
		var e errorResponse
		mustJSON(t, data, &e)
		if e.Code == "" || e.Message == "" {
			t.Errorf("%s: body %s is not an ErrorResponse", tc.name, data)
		}
		takeViolations(t, h.s, tc.parts...)
	}
	if n := len(h.s.Requests()); n != len(cases) {
		t.Errorf("Requests() has %d entries, want %d", n, len(cases))
	}
	for _, r := range h.s.Requests() {
		if r.Status != 400 || r.Method != "POST" || r.Path != "/v1/sandboxes" {
			t.Errorf("request log entry %+v", r)
		}
	}

	// A path in neither document.
	resp, _ := h.api("GET", "/nothing/here", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("undocumented path: %d", resp.StatusCode)
	}
	takeViolations(t, h.s, "GET /nothing/here", "not found")

	// An execd request breaking the spec (gid without uid; cursor < 0).
	id := h.running(nil)
	base, hdr := h.execd(id)
	resp, _ = h.do("POST", base+"/command", hdr, map[string]any{"command": "true", "gid": 1})
	if resp.StatusCode != 400 {
		t.Errorf("gid without uid: %d", resp.StatusCode)
	}
	takeViolations(t, h.s, "execd POST /command", "gid requires uid")
	resp, _ = h.do("GET", base+"/command/cmd-x/logs?cursor=-1", hdr, nil)
	if resp.StatusCode != 400 {
		t.Errorf("negative cursor: %d", resp.StatusCode)
	}
	takeViolations(t, h.s, "execd GET /command/cmd-x/logs", "cursor")
	// An execd route the server does not implement is answered 500 and recorded.
	resp, _ = h.do("GET", base+"/metrics", hdr, nil)
	if resp.StatusCode != 500 {
		t.Errorf("unimplemented route: %d", resp.StatusCode)
	}
	takeViolations(t, h.s, "execd GET /metrics", "not implemented")
}

func TestInvalidResponseIsRecorded(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	h.s.setRespHook(func(r *http.Request, status int, body []byte) []byte {
		if r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") {
			return []byte(`{"id": 5, "status": {"state": "Running"}}`)
		}
		return body
	})
	resp, _ := h.api("GET", "/sandboxes/"+id, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("get: %d", resp.StatusCode)
	}
	v := takeViolations(t, h.s, "response lifecycle GET /sandboxes/"+id+" 200")
	joined := strings.Join(v, "\n")
	for _, want := range []string{"$.id", "createdAt", "entrypoint"} {
		if !strings.Contains(joined, want) {
			t.Errorf("violations do not mention %s: %s", want, joined)
		}
	}

	// An undocumented status with a non-ErrorResponse body.
	h.s.setRespHook(func(r *http.Request, status int, body []byte) []byte {
		if status == 404 {
			return []byte(`{"error": "nope"}`)
		}
		return body
	})
	h.api("GET", "/sandboxes/missing", nil)
	takeViolations(t, h.s, "response lifecycle GET /sandboxes/missing 404")
	h.s.setRespHook(nil)
}

// Each event of an SSE response is validated against ServerStreamEvent.
func TestSSEEventsAreValidated(t *testing.T) {
	s := Start(t, Options{})
	r := httptest.NewRequest("POST", "/sandboxes/x/port/44772/command", strings.NewReader(`{"command":"true"}`))
	x := &exchange{s: s, r: r, body: []byte(`{"command":"true"}`), rt: s.classify(r.URL.Path)}
	rec := &recorder{w: httptest.NewRecorder()}
	rec.Header().Set("Content-Type", "text/event-stream")
	rec.WriteHeader(200)
	fmt.Fprint(rec, "{\"type\":\"init\",\"text\":\"cmd-1\",\"timestamp\":1}\n\n")
	fmt.Fprint(rec, "data: {\"type\":\"bogus\",\"timestamp\":2}\n\n")
	fmt.Fprint(rec, "{\"type\":\"stdout\",\"text\":7}\n\n")
	fmt.Fprint(rec, "not json\n\n")
	x.checkResponse(rec)
	v := s.TakeViolations()
	joined := strings.Join(v, "\n")
	if len(v) != 3 || !strings.Contains(joined, "event 1") || !strings.Contains(joined, "event 2") || !strings.Contains(joined, "event 3: body is not JSON") {
		t.Errorf("violations = %s", joined)
	}
	if bytes.Contains([]byte(joined), []byte("event 0")) {
		t.Errorf("the valid init event was flagged: %s", joined)
	}
}

// fakeTB records what Start reports at cleanup.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (f *fakeTB) Helper()                    {}
func (f *fakeTB) Logf(string, ...any)        {}
func (f *fakeTB) Cleanup(fn func())          { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(fm string, a ...any) { panic(fmt.Sprintf(fm, a...)) }
func (f *fakeTB) Errorf(fm string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(fm, a...))
}

func TestStartFailsTheTestOnViolations(t *testing.T) {
	ft := &fakeTB{TB: t}
	s := Start(ft, Options{})
	h := &harness{t: t, s: s, c: s.Client(), key: DefaultAPIKey}
	h.api("POST", "/sandboxes", sandboxBody(map[string]any{"timeout": 5}))
	for i := len(ft.cleanups) - 1; i >= 0; i-- {
		ft.cleanups[i]()
	}
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "spec violation") || !strings.Contains(ft.errs[0], "timeout") {
		t.Errorf("Start reported %q", ft.errs)
	}
}
