package opensandbox

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func eventTexts(evs []event, typ string) []string {
	var out []string
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e.Text)
		}
	}
	return out
}

func TestForegroundCommandStreamsOutput(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(map[string]any{"env": map[string]string{"A": "from-sandbox", "B": "from-sandbox"}})
	evs := h.run(id, map[string]any{
		"command": `echo "$A $B"; echo err >&2; echo "$HOME"; pwd; printf tail`,
		"envs":    map[string]string{"B": "from-command"},
	})
	if !strings.HasPrefix(string(h.lastRaw), `{"type":"init","text":"cmd-`) || !strings.HasSuffix(string(h.lastRaw), "}\n\n") {
		t.Errorf("raw stream = %q, want bare JSON events separated by blank lines", h.lastRaw)
	}
	dir := h.s.SandboxDir(id)
	if got, want := eventTexts(evs, "stdout"), []string{"from-sandbox from-command", dir, dir, "tail"}; !slices.Equal(got, want) {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got := eventTexts(evs, "stderr"); !slices.Equal(got, []string{"err"}) {
		t.Errorf("stderr = %q", got)
	}
	last := evs[len(evs)-1]
	if last.Type != "execution_complete" || last.ExecutionTime == nil {
		t.Errorf("last event = %+v, want execution_complete with execution_time", last)
	}
	st := h.waitDone(id, evs[0].Text)
	if st.ExitCode == nil || *st.ExitCode != 0 || st.Error != "" {
		t.Errorf("status = %+v", st)
	}

	// A failing command ends with an error event carrying the exit code.
	evs = h.run(id, map[string]any{"command": "exit 4", "cwd": h.s.FilesRoot()})
	last = evs[len(evs)-1]
	if last.Type != "error" || last.Error == nil || last.Error.EName != "CommandExecError" || last.Error.EValue != "4" {
		t.Errorf("last event = %+v, want CommandExecError 4", last)
	}
	if st := h.waitDone(id, evs[0].Text); st.ExitCode == nil || *st.ExitCode != 4 || st.Error != "exit status 4" {
		t.Errorf("status = %+v", st)
	}

	// The logs of a foreground command are not served (reference: 400).
	base, hdr := h.execd(id)
	if resp, _ := h.do("GET", base+"/command/"+evs[0].Text+"/logs", hdr, nil); resp.StatusCode != 400 {
		t.Errorf("foreground logs: %d", resp.StatusCode)
	}
	if resp, _ := h.do("GET", base+"/ping", hdr, nil); resp.StatusCode != 200 {
		t.Errorf("ping: %d", resp.StatusCode)
	}
}

func TestCommandTimeoutAndInterrupt(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	start := time.Now()
	evs := h.run(id, map[string]any{"command": "sleep 30", "timeout": 200})
	if time.Since(start) > 5*time.Second {
		t.Errorf("timeout took %v", time.Since(start))
	}
	if last := evs[len(evs)-1]; last.Type != "error" || last.Error.EValue != "-1" {
		t.Errorf("last event = %+v", last)
	}
	if st := h.waitDone(id, evs[0].Text); st.ExitCode == nil || *st.ExitCode != -1 || !strings.Contains(st.Error, "killed") {
		t.Errorf("status after timeout = %+v", st)
	}

	base, hdr := h.execd(id)
	for _, tc := range []struct{ cmd, errText string }{
		{"sleep 30", "terminated"},
		{"trap '' TERM; sleep 30", "killed"}, // SIGKILL 2s after SIGTERM
	} {
		evs := h.run(id, map[string]any{"command": tc.cmd, "background": true})
		if code, st := h.status(id, evs[0].Text); code != 200 || !st.Running || st.ExitCode != nil || st.FinishedAt != nil {
			t.Errorf("%s: running status = %d %+v", tc.cmd, code, st)
		}
		time.Sleep(50 * time.Millisecond) // let bash install its trap
		if resp, body := h.do("DELETE", base+"/command?id="+evs[0].Text, hdr, nil); resp.StatusCode != 200 {
			t.Fatalf("interrupt: %d %s", resp.StatusCode, body)
		}
		if st := h.waitDone(id, evs[0].Text); !strings.Contains(st.Error, tc.errText) {
			t.Errorf("%s: status after interrupt = %+v, want %q", tc.cmd, st, tc.errText)
		}
	}
	if resp, _ := h.do("DELETE", base+"/command?id=cmd-unknown", hdr, nil); resp.StatusCode != 500 {
		t.Errorf("interrupt unknown: %d", resp.StatusCode)
	}
}

func TestBackgroundLogsCursor(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	base, hdr := h.execd(id)
	evs := h.run(id, map[string]any{"command": "echo a; echo b >&2; sleep 0.3; echo c", "background": true})
	cmd := evs[0].Text
	logs := func(cursor string) (string, string) {
		u := base + "/command/" + cmd + "/logs"
		if cursor != "" {
			u += "?cursor=" + cursor
		}
		resp, body := h.do("GET", u, hdr, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("logs: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return string(body), resp.Header.Get(TailCursorHeader)
	}
	deadline := time.Now().Add(5 * time.Second)
	var first, cur string
	for first != "a\nb\n" && time.Now().Before(deadline) {
		first, cur = logs("")
		time.Sleep(10 * time.Millisecond)
	}
	if first != "a\nb\n" || cur != "4" {
		t.Fatalf("first read = %q cursor %q", first, cur)
	}
	h.waitDone(id, cmd)
	if rest, next := logs(cur); rest != "c\n" || next != "6" {
		t.Errorf("read from %s = %q cursor %q", cur, rest, next)
	}
	if rest, next := logs("100"); rest != "" || next != "6" {
		t.Errorf("read past the end = %q cursor %q", rest, next)
	}
	if resp, _ := h.do("GET", base+"/command/cmd-nope/logs", hdr, nil); resp.StatusCode != 404 {
		t.Errorf("unknown logs: %d", resp.StatusCode)
	}
	if code, _ := h.status(id, "cmd-nope"); code != 404 {
		t.Errorf("unknown status: %d", code)
	}
}

func TestFilesServeOnlyTheRoot(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	h.run(id, map[string]any{"command": "printf 'line1\\nline2\\nline3\\n' > marker.txt; chmod 640 marker.txt; ln -s /etc/hostname escape"})
	dir := h.s.SandboxDir(id)
	marker := filepath.Join(dir, "marker.txt")
	base, hdr := h.execd(id)

	resp, data := h.do("GET", base+"/files/info?path="+url.QueryEscape(marker)+"&path="+url.QueryEscape(dir), hdr, nil)
	var info map[string]struct {
		Path, Type, Owner, Group string
		Size                     int64
		Mode                     int
	}
	mustJSON(t, data, &info)
	if resp.StatusCode != 200 || info[marker].Size != 18 || info[marker].Type != "file" || info[marker].Mode != 640 || info[dir].Type != "directory" || info[marker].Owner == "" {
		t.Errorf("info = %d %s", resp.StatusCode, data)
	}
	if resp, data := h.do("GET", base+"/files/download?path="+url.QueryEscape(marker), hdr, nil); resp.StatusCode != 200 || string(data) != "line1\nline2\nline3\n" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download = %d %q", resp.StatusCode, data)
	}
	if resp, data := h.do("GET", base+"/files/download?offset=2&limit=1&path="+url.QueryEscape(marker), hdr, nil); resp.StatusCode != 200 || string(data) != "line2\n" {
		t.Errorf("line download = %d %q", resp.StatusCode, data)
	}
	hr := map[string]string{"Range": "bytes=6-10"}
	for k, v := range hdr {
		hr[k] = v
	}
	if resp, data := h.do("GET", base+"/files/download?path="+url.QueryEscape(marker), hr, nil); resp.StatusCode != 206 || string(data) != "line2" {
		t.Errorf("range download = %d %q", resp.StatusCode, data)
	}
	for _, p := range []string{"/etc/hostname", filepath.Join(dir, "escape"), filepath.Join(dir, "missing"), filepath.Join(dir, "..", "..", "etc"), "relative.txt"} {
		for _, route := range []string{"/files/info", "/files/download"} {
			if resp, _ := h.do("GET", base+route+"?path="+url.QueryEscape(p), hdr, nil); resp.StatusCode != 404 {
				t.Errorf("%s %s: %d, want 404", route, p, resp.StatusCode)
			}
		}
	}
}

func TestExecdProxyLayer(t *testing.T) {
	h := newHarness(t, Options{ProvisionDelay: 300 * time.Millisecond})
	id := h.create(nil)
	base, hdr := h.execd(id)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/sandboxes/"+id+"/port/44772") || len(hdr[ExecdTokenHeader]) != 32 {
		t.Errorf("endpoint = %s %v", base, hdr)
	}
	if resp, _ := h.do("GET", base+"/ping", hdr, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("ping while Pending: %d", resp.StatusCode)
	}
	h.waitState(id, "Running")
	if resp, _ := h.do("GET", base+"/ping", map[string]string{ExecdTokenHeader: "wrong"}, nil); resp.StatusCode != 401 {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	if resp, _ := h.do("GET", base+"/ping", nil, nil); resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	if resp, _ := h.do("GET", strings.Replace(base, id, "nope", 1)+"/ping", hdr, nil); resp.StatusCode != 404 {
		t.Errorf("unknown sandbox: %d", resp.StatusCode)
	}
	if resp, _ := h.do("GET", strings.Replace(base, "44772", "8080", 1)+"/", hdr, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("other port: %d", resp.StatusCode)
	}
	// Another sandbox's token does not open this one.
	other := h.running(nil)
	if resp, _ := h.do("GET", base+"/ping", map[string]string{ExecdTokenHeader: h.s.ExecdToken(other)}, nil); resp.StatusCode != 401 {
		t.Errorf("other sandbox's token: %d", resp.StatusCode)
	}
}

// pidGone waits until a process no longer exists (or is a zombie).
func pidGone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pids starts a background command that prints its bash pid and the pid of
// a child it leaves running, and returns both.
func (h *harness) pids(id string) (cmd string, pids []int) {
	h.t.Helper()
	evs := h.run(id, map[string]any{"command": "echo $$; sleep 300 & echo $!; wait", "background": true})
	cmd = evs[0].Text
	base, hdr := h.execd(id)
	deadline := time.Now().Add(5 * time.Second)
	for len(pids) < 2 {
		if time.Now().After(deadline) {
			h.t.Fatalf("no pids from %s", cmd)
		}
		_, body := h.do("GET", base+"/command/"+cmd+"/logs", hdr, nil)
		pids = pids[:0]
		for _, f := range strings.Fields(string(body)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				h.t.Fatalf("logs %q", body)
			}
			pids = append(pids, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, pids
}

func TestRestartExecd(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	cmd, pids := h.pids(id)
	if err := h.s.RestartExecd(id, false); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.status(id, cmd); code != 404 {
		t.Errorf("status after restart: %d, want 404", code)
	}
	if pidGone(pids[1], 0) {
		t.Errorf("restart without kill killed %d", pids[1])
	}
	base, hdr := h.execd(id)
	if resp, _ := h.do("GET", base+"/ping", hdr, nil); resp.StatusCode != 200 {
		t.Errorf("ping after restart (same token): %d", resp.StatusCode)
	}
	if err := h.s.RestartExecd(id, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if !pidGone(p, 2*time.Second) {
			t.Errorf("pid %d survived RestartExecd(kill)", p)
		}
	}
	// A restart cuts the streams of the old execd.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = h.s.RestartExecd(id, true)
	}()
	req, _ := http.NewRequest("POST", base+"/command", strings.NewReader(`{"command":"echo started; sleep 30"}`))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !strings.Contains(string(body), "started") {
		t.Errorf("stream across a restart: %q, %v; want the output so far then a cut", body, err)
	}
	if err := h.s.RestartExecd("nope", true); err == nil {
		t.Error("RestartExecd of an unknown sandbox: no error")
	}
}

func TestDeleteKillsProcesses(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.running(nil)
	_, pids := h.pids(id)
	if resp, _ := h.api("DELETE", "/sandboxes/"+id, nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	for _, p := range pids {
		if !pidGone(p, 2*time.Second) {
			t.Errorf("pid %d survived the sandbox delete", p)
		}
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	s, err := New(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: s, c: s.Client(), key: DefaultAPIKey}
	id := h.running(nil)
	_, pids := h.pids(id)
	// And a foreground command still streaming.
	base, hdr := h.execd(id)
	go func() {
		req, _ := http.NewRequest("POST", base+"/command", strings.NewReader(`{"command":"sleep 300"}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if resp, err := h.c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.Commands(id) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	root := s.FilesRoot()
	s.Close()
	s.Close() // idempotent
	for _, p := range pids {
		if !pidGone(p, 2*time.Second) {
			t.Errorf("pid %d survived Close", p)
		}
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("files root %s left behind: %v", root, err)
	}
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("violations: %q", v)
	}
}
