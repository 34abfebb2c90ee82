package opensandbox

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proxy is the server-proxy layer in front of each sandbox's execd: it
// finds the sandbox, checks the port and the access token, then hands the
// request to execd.
func (x *exchange) proxy(w *recorder, reqProblems []string) {
	s := x.s
	now := time.Now()
	s.mu.Lock()
	sb := s.sandboxes[x.rt.sandboxID]
	var token string
	var ready bool
	if sb != nil {
		token, ready = sb.token, sb.provisioned(now)
	}
	s.mu.Unlock()
	x.synthetic = true // until execd itself answers
	switch {
	case sb == nil:
		x.writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "sandbox "+x.rt.sandboxID+" not found")
		return
	case x.rt.port != ExecdPort:
		x.writeError(w, http.StatusBadGateway, "NO_UPSTREAM", fmt.Sprintf("nothing listens on port %d in sandbox %s", x.rt.port, sb.id))
		return
	case subtle.ConstantTimeCompare([]byte(x.r.Header.Get(ExecdTokenHeader)), []byte(token)) != 1:
		x.writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "missing or invalid "+ExecdTokenHeader)
		return
	case !ready:
		x.writeError(w, http.StatusBadGateway, "SANDBOX_NOT_READY", "sandbox "+sb.id+" is not running")
		return
	}
	if x.rejectInvalid(w, reqProblems) {
		return
	}
	x.synthetic = false
	x.execd(w, sb)
}

func (x *exchange) execd(w *recorder, sb *sandbox) {
	p, m := x.rt.vpath, x.r.Method
	switch {
	case p == "/ping" && m == http.MethodGet:
		w.WriteHeader(http.StatusOK)
	case p == "/command" && m == http.MethodPost:
		x.runCommand(w, sb)
	case p == "/command" && m == http.MethodDelete:
		c := x.lookupCommand(sb, x.r.URL.Query().Get("id"))
		if c == nil {
			x.writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error interrupting command: command not found: "+x.r.URL.Query().Get("id"))
			return
		}
		x.s.interrupt(c)
		w.WriteHeader(http.StatusOK)
	case strings.HasPrefix(p, "/command/status/") && m == http.MethodGet:
		x.commandStatus(w, sb, strings.TrimPrefix(p, "/command/status/"))
	case strings.HasPrefix(p, "/command/") && strings.HasSuffix(p, "/logs") && m == http.MethodGet:
		x.commandLogs(w, sb, strings.TrimSuffix(strings.TrimPrefix(p, "/command/"), "/logs"))
	case p == "/files/info" && m == http.MethodGet:
		x.filesInfo(w)
	case p == "/files/download" && m == http.MethodGet:
		x.download(w)
	default:
		x.notImplemented(w)
	}
}

func (x *exchange) lookupCommand(sb *sandbox, id string) *command {
	x.s.mu.Lock()
	defer x.s.mu.Unlock()
	return sb.commands[id]
}

type streamEvent struct {
	Type          string      `json:"type"`
	Text          string      `json:"text,omitempty"`
	ExecutionTime *int64      `json:"execution_time,omitempty"`
	Timestamp     int64       `json:"timestamp"`
	Error         *eventError `json:"error,omitempty"`
}

type eventError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// sse writes server-sent events the way the reference execd does.
type sse struct {
	w      http.ResponseWriter
	prefix bool
	failed bool
}

func (e *sse) send(ev streamEvent) bool {
	if e.failed {
		return false
	}
	ev.Timestamp = time.Now().UnixMilli()
	b, _ := json.Marshal(ev)
	if e.prefix {
		b = append([]byte("data: "), b...)
	}
	b = append(b, '\n', '\n')
	if _, err := e.w.Write(b); err != nil {
		e.failed = true
		return false
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
	return true
}

const pingInterval = 3 * time.Second

func (x *exchange) runCommand(w http.ResponseWriter, sb *sandbox) {
	var req runCommandRequest
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "error parsing request, MAYBE invalid body format. "+err.Error())
		return
	}
	if req.GID != nil && req.UID == nil {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", x.ruleViolation("gid requires uid"))
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "invalid request, validation error: command is empty")
		return
	}
	c, startErr := x.s.startCommand(sb.id, req)
	if c == nil {
		x.writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error running commands: "+startErr.Error())
		return
	}
	if x.fault != nil && x.fault.CutSSEBeforeInit {
		panic(http.ErrAbortHandler)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sse{w: w, prefix: x.s.opts.SSEDataPrefix}
	out.send(streamEvent{Type: "init", Text: c.id})
	if req.Background {
		ms := time.Since(c.startedAt).Milliseconds()
		out.send(streamEvent{Type: "execution_complete", ExecutionTime: &ms})
		return
	}
	if startErr != nil {
		out.send(streamEvent{Type: "error", Error: &eventError{EName: "CommandExecError", EValue: startErr.Error(), Traceback: []string{startErr.Error()}}})
		return
	}
	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	next := 0
	for {
		c.mu.Lock()
		lines := c.lines[next:]
		next = len(c.lines)
		done, notify := c.done, c.notify
		code, msg, finished := c.exitCode, c.errMsg, c.finishedAt
		c.mu.Unlock()
		for _, l := range lines {
			out.send(streamEvent{Type: l.stream, Text: l.text})
		}
		if done {
			if *code == 0 && msg == "" {
				ms := finished.Sub(c.startedAt).Milliseconds()
				out.send(streamEvent{Type: "execution_complete", ExecutionTime: &ms})
			} else {
				out.send(streamEvent{Type: "error", Error: &eventError{EName: "CommandExecError", EValue: strconv.Itoa(*code), Traceback: []string{msg}}})
			}
			return
		}
		if out.failed {
			return // the client left; the command keeps running
		}
		select {
		case <-notify:
		case <-ping.C:
			out.send(streamEvent{Type: "ping", Text: "pong"})
		case <-x.s.closing:
			return
		case <-c.restarted:
			panic(http.ErrAbortHandler) // execd went away mid-stream
		}
	}
}

type commandStatusJSON struct {
	ID         string     `json:"id"`
	Content    string     `json:"content"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

func (x *exchange) commandStatus(w http.ResponseWriter, sb *sandbox, id string) {
	c := x.lookupCommand(sb, id)
	if c == nil {
		x.writeError(w, http.StatusNotFound, "COMMAND_NOT_FOUND", "command not found: "+id)
		return
	}
	c.mu.Lock()
	st := commandStatusJSON{ID: c.id, Content: c.content, Running: c.running, ExitCode: c.exitCode, Error: c.errMsg, StartedAt: c.startedAt, FinishedAt: c.finishedAt}
	c.mu.Unlock()
	x.writeJSON(w, http.StatusOK, st)
}

// commandLogs serves a background command's combined output from a byte
// cursor, like the reference execd (the spec calls it a line cursor).
func (x *exchange) commandLogs(w http.ResponseWriter, sb *sandbox, id string) {
	c := x.lookupCommand(sb, id)
	if c == nil {
		x.writeError(w, http.StatusNotFound, "COMMAND_NOT_FOUND", "command not found: "+id)
		return
	}
	if !c.background {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "command "+id+" is not running in background")
		return
	}
	cursor := int64(0)
	if v := x.r.URL.Query().Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "invalid cursor")
			return
		}
		cursor = n
	}
	c.mu.Lock()
	out := c.output
	cursor = min(cursor, int64(len(out)))
	body := bytes.Clone(out[cursor:])
	end := len(out)
	c.mu.Unlock()
	w.Header().Set(TailCursorHeader, strconv.Itoa(end))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// resolve maps a requested path to a real file under the files root; ok is
// false for a path outside it or missing.
func (x *exchange) resolve(p string) (string, os.FileInfo, bool) {
	if !filepath.IsAbs(p) {
		return "", nil, false
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", nil, false
	}
	rel, err := filepath.Rel(x.s.filesRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", nil, false
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, false
	}
	return real, fi, true
}

type fileInfoJSON struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

func fileInfo(path string, fi os.FileInfo) fileInfoJSON {
	typ := "other"
	switch {
	case fi.Mode().IsRegular():
		typ = "file"
	case fi.IsDir():
		typ = "directory"
	case fi.Mode()&os.ModeSymlink != 0:
		typ = "symlink"
	}
	mode, _ := strconv.Atoi(strconv.FormatUint(uint64(fi.Mode().Perm()), 8))
	out := fileInfoJSON{Path: path, Type: typ, Size: fi.Size(), ModifiedAt: fi.ModTime().UTC(), CreatedAt: fi.ModTime().UTC(), Mode: mode}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		out.CreatedAt = time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC()
		uid, gid := strconv.FormatUint(uint64(st.Uid), 10), strconv.FormatUint(uint64(st.Gid), 10)
		out.Owner, out.Group = uid, gid
		if u, err := user.LookupId(uid); err == nil {
			out.Owner = u.Username
		}
		if g, err := user.LookupGroupId(gid); err == nil {
			out.Group = g.Name
		}
	}
	return out
}

func (x *exchange) filesInfo(w http.ResponseWriter) {
	out := map[string]fileInfoJSON{}
	for _, p := range x.r.URL.Query()["path"] {
		_, fi, ok := x.resolve(p)
		if !ok {
			x.writeError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found: "+p)
			return
		}
		out[p] = fileInfo(p, fi)
	}
	x.writeJSON(w, http.StatusOK, out)
}

func (x *exchange) download(w http.ResponseWriter) {
	q := x.r.URL.Query()
	p := q.Get("path")
	real, fi, ok := x.resolve(p)
	if !ok || !fi.Mode().IsRegular() {
		x.writeError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found: "+p)
		return
	}
	data, err := os.ReadFile(real)
	if err != nil {
		x.writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "read file: "+err.Error())
		return
	}
	if q.Has("offset") || q.Has("limit") {
		if x.r.Header.Get("Range") != "" {
			x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", x.ruleViolation("offset/limit are mutually exclusive with the Range header"))
			return
		}
		offset, limit := 1, -1
		if v, err := strconv.Atoi(q.Get("offset")); err == nil {
			offset = v
		}
		if v, err := strconv.Atoi(q.Get("limit")); err == nil {
			limit = v
		}
		var b bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64<<10), len(data)+1)
		for n := 1; sc.Scan(); n++ {
			if n >= offset && (limit < 0 || n < offset+limit) {
				b.Write(sc.Bytes())
				b.WriteByte('\n')
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.Copy(w, &b)
		return
	}
	if rng := x.r.Header.Get("Range"); rng != "" {
		start, end, ok := parseRange(rng, int64(len(data)))
		if !ok {
			x.writeError(w, http.StatusRequestedRangeNotSatisfiable, "INVALID_RANGE", "range not satisfiable: "+rng)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(data)))
		w.Header().Set("Content-Length", strconv.FormatInt(end-start+1, 10))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(data[start : end+1])
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", filepath.Base(real)))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// parseRange understands one "bytes=a-b", "bytes=a-" or "bytes=-n" range.
func parseRange(h string, size int64) (start, end int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") || size == 0 {
		return 0, 0, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found {
		return 0, 0, false
	}
	var err error
	switch {
	case a == "":
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		return max(size-n, 0), size - 1, true
	default:
		if start, err = strconv.ParseInt(a, 10, 64); err != nil || start >= size {
			return 0, 0, false
		}
		end = size - 1
		if b != "" {
			if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
				return 0, 0, false
			}
			end = min(end, size-1)
		}
		return start, end, true
	}
}
