package opensandbox

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a spec-validating stand-in for an OpenSandbox server (lifecycle
// API under /v1) and the execd of each of its sandboxes (under
// /sandboxes/{id}/port/44772/), on one loopback listener.
type Server struct {
	opts      Options
	lc, ex    *apiDoc
	ln        net.Listener
	hs        *http.Server
	url       string
	host      string
	caPEM     []byte
	filesRoot string
	ownRoot   bool
	closing   chan struct{}
	handlers  sync.WaitGroup
	procWG    sync.WaitGroup

	mu     sync.Mutex
	closed bool
	// respHook, when set, may rewrite a JSON response body before it is
	// sent (a test hook to prove response validation); set with setRespHook.
	respHook   func(r *http.Request, status int, body []byte) []byte
	apiKeys    map[string]bool
	sandboxes  map[string]*sandbox // live ones
	records    map[string]CreateRequest
	created    []map[string]string // metadata of every accepted create
	faults     []*Fault
	requests   []Request
	bodies     [][]byte
	violations []string
	started    map[string]int // sandbox id → commands that started a process
	procs      map[*proc]bool // every process group not known to be gone
}

// New starts a server on 127.0.0.1 with a free port.
func New(opts Options) (*Server, error) {
	lc, ex, err := docs()
	if err != nil {
		return nil, err
	}
	if opts.ProvisionDelay == 0 {
		opts.ProvisionDelay = DefaultProvisionDelay
	} else if opts.ProvisionDelay < 0 {
		opts.ProvisionDelay = 0
	}
	keys := opts.APIKeys
	if len(keys) == 0 {
		keys = []string{DefaultAPIKey}
	}
	s := &Server{
		opts:      opts,
		lc:        lc,
		ex:        ex,
		closing:   make(chan struct{}),
		sandboxes: map[string]*sandbox{},
		records:   map[string]CreateRequest{},
		started:   map[string]int{},
		procs:     map[*proc]bool{},
	}
	s.SetAPIKeys(keys...)
	if opts.FilesRoot != "" {
		s.filesRoot = opts.FilesRoot
		if err := os.MkdirAll(s.filesRoot, 0o755); err != nil {
			return nil, err
		}
	} else {
		dir, err := os.MkdirTemp("", "opensandbox-files-")
		if err != nil {
			return nil, err
		}
		s.filesRoot, s.ownRoot = dir, true
	}
	if real, err := filepath.EvalSymlinks(s.filesRoot); err == nil {
		s.filesRoot = real
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.removeRoot()
		return nil, err
	}
	s.host = ln.Addr().String()
	scheme := "http"
	if opts.TLS {
		cert, caPEM, err := selfSigned()
		if err != nil {
			ln.Close()
			s.removeRoot()
			return nil, err
		}
		s.caPEM = caPEM
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	s.ln = ln
	s.url = scheme + "://" + s.host
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = s.hs.Serve(ln) }()
	return s, nil
}

// Start is New for a test: it fails the test when the server cannot start,
// and at cleanup closes the server and reports every recorded spec
// violation with t.Errorf.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
		inner := opts.Logf
		var mu sync.Mutex
		done := false
		opts.Logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				inner(format, args...)
			}
		}
		t.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("opensandbox: start test server: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("opensandbox: %d OpenAPI spec violation(s) seen by the test server:\n  %s", len(v), strings.Join(v, "\n  "))
		}
	})
	return s
}

// URL is the lifecycle base URL without /v1, e.g. http://127.0.0.1:PORT.
func (s *Server) URL() string { return s.url }

// CAPEM is the PEM certificate of the CA that issued the server certificate
// (nil without Options.TLS).
func (s *Server) CAPEM() []byte { return slices.Clone(s.caPEM) }

// Client returns an HTTP client that trusts the server (its CA with TLS).
func (s *Server) Client() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.caPEM != nil {
		pool := x509Pool(s.caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}
}

// FilesRoot is the directory tree execd's /files routes serve.
func (s *Server) FilesRoot() string { return s.filesRoot }

// Close stops the server, kills every process group it started (SIGKILL),
// waits for them and removes the files root it created. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.closing)
	procs := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()

	for _, p := range procs {
		p.kill(syscall.SIGKILL)
	}
	s.procWG.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for _, p := range procs {
		for p.groupAlive() && time.Now().Before(deadline) {
			p.kill(syscall.SIGKILL)
			time.Sleep(10 * time.Millisecond)
		}
		if p.groupAlive() {
			s.logf("opensandbox: process group %d still has members after Close", p.pgid)
		}
	}
	_ = s.hs.Close()
	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.logf("opensandbox: handlers still running after Close")
	}
	s.mu.Lock()
	dirs := []string{}
	for _, sb := range s.sandboxes {
		dirs = append(dirs, sb.dir)
	}
	s.mu.Unlock()
	if s.ownRoot {
		s.removeRoot()
	} else {
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}
}

func (s *Server) removeRoot() {
	if s.ownRoot {
		_ = os.RemoveAll(s.filesRoot)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

func (s *Server) setRespHook(h func(r *http.Request, status int, body []byte) []byte) {
	s.mu.Lock()
	s.respHook = h
	s.mu.Unlock()
}

// SetAPIKeys replaces the accepted API keys (none: every request is 401).
func (s *Server) SetAPIKeys(keys ...string) {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	s.mu.Lock()
	s.apiKeys = m
	s.mu.Unlock()
}

// Inject adds a fault (see Fault).
func (s *Server) Inject(f Fault) {
	if f.Times <= 0 {
		f.Times = 1
	}
	s.mu.Lock()
	s.faults = append(s.faults, &f)
	s.mu.Unlock()
}

func (s *Server) takeFault(method, path string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if (f.Method == "" || strings.EqualFold(f.Method, method)) && strings.HasPrefix(path, f.Path) {
			out := *f
			f.Times--
			if f.Times <= 0 {
				s.faults = slices.Delete(s.faults, i, i+1)
			}
			return &out
		}
	}
	return nil
}

// Violations returns every spec violation recorded so far, in order.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// TakeViolations returns the recorded violations and forgets them (for a
// test that provokes violations on purpose).
func (s *Server) TakeViolations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.violations
	s.violations = nil
	return v
}

func (s *Server) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
	s.logf("opensandbox: spec violation: %s", msg)
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Bodies returns the raw bodies of every request that had one.
func (s *Server) Bodies() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.bodies))
	for i, b := range s.bodies {
		out[i] = slices.Clone(b)
	}
	return out
}

// CreatedSandboxes counts accepted creates (deleted sandboxes included) whose
// metadata had key = value.
func (s *Server) CreatedSandboxes(metadataKey, value string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, md := range s.created {
		if v, ok := md[metadataKey]; ok && v == value {
			n++
		}
	}
	return n
}

// Commands counts the POST /command requests of a sandbox that started a
// process.
func (s *Server) Commands(sandboxID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started[sandboxID]
}

// Sandbox returns a copy of the create request a sandbox was created with
// (env and image credentials included; deleted sandboxes too).
func (s *Server) Sandbox(id string) (CreateRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.records[id]
	if !ok {
		return CreateRequest{}, false
	}
	return c.clone(), true
}

// ExecdToken returns the X-EXECD-ACCESS-TOKEN of a live sandbox ("" if none).
func (s *Server) ExecdToken(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.token
	}
	return ""
}

// SandboxDir returns the home directory of a live sandbox ("" if none).
func (s *Server) SandboxDir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.dir
	}
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func uuid4() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// route is what a raw request path addresses.
type route struct {
	doc       *apiDoc // nil: neither API
	vpath     string  // path inside the document
	execd     bool
	sandboxID string
	port      int
}

func (s *Server) classify(path string) route {
	switch {
	case path == "/v1" || strings.HasPrefix(path, "/v1/"):
		return route{doc: s.lc, vpath: strings.TrimPrefix(path, "/v1")}
	case strings.HasPrefix(path, "/sandboxes/"):
		// /sandboxes/{id}/port/{port}[/rest]
		parts := strings.SplitN(strings.TrimPrefix(path, "/sandboxes/"), "/", 4)
		if len(parts) < 3 || parts[1] != "port" || parts[0] == "" {
			return route{}
		}
		port, err := strconv.Atoi(parts[2])
		if err != nil {
			return route{}
		}
		rest := "/"
		if len(parts) == 4 {
			rest += parts[3]
		}
		r := route{execd: true, sandboxID: parts[0], port: port, vpath: rest}
		if port == ExecdPort {
			r.doc = s.ex
		}
		return r
	}
	return route{}
}

// exchange is one request in flight through the pipeline.
type exchange struct {
	s     *Server
	r     *http.Request
	body  []byte
	rt    route
	fault *Fault
	// synthetic marks a response made by the proxy layer, a fault or a
	// request rejected for breaking the spec: its status need not be one the
	// operation documents, but its body must be the document's ErrorResponse.
	synthetic bool
	// routeMissing: the document has no such path or method.
	routeMissing bool
}

// ServeHTTP is the whole pipeline: record, validate the request, apply a
// fault, handle, validate the response.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	idx := len(s.requests)
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, At: time.Now()})
	if len(body) > 0 {
		s.bodies = append(s.bodies, slices.Clone(body))
	}
	s.mu.Unlock()

	x := &exchange{s: s, r: r, body: body, rt: s.classify(r.URL.Path)}
	rec := &recorder{w: w}
	defer func() {
		p := recover()
		status := rec.status
		if p != nil || !rec.wrote {
			if p == nil {
				status = http.StatusOK
			} else {
				status = 0
			}
		}
		s.mu.Lock()
		s.requests[idx].Status = status
		s.mu.Unlock()
		s.logf("opensandbox: %s %s → %d", r.Method, r.URL.Path, status)
		if p != nil {
			panic(p)
		}
		x.checkResponse(rec)
	}()

	reqProblems := x.checkRequest()
	x.fault = s.takeFault(r.Method, r.URL.Path)
	if f := x.fault; f != nil && f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
		case <-s.closing:
		}
		t.Stop()
	}
	if f := x.fault; f != nil && f.Status != 0 && !f.AfterHandling {
		x.synthetic = true
		x.writeError(rec, f.Status, "INJECTED_FAULT", fmt.Sprintf("injected fault: status %d", f.Status))
		return
	}
	if f := x.fault; f != nil && f.Status != 0 && f.AfterHandling {
		x.dispatch(&recorder{w: discardWriter{h: http.Header{}}}, reqProblems)
		x.synthetic = true
		x.writeError(rec, f.Status, "INJECTED_FAULT", fmt.Sprintf("injected fault after handling: status %d", f.Status))
		return
	}
	x.dispatch(rec, reqProblems)
}

// dispatch authenticates, rejects spec-breaking requests, and runs the
// handler.
func (x *exchange) dispatch(w *recorder, reqProblems []string) {
	s := x.s
	switch {
	case x.rt.doc == s.lc && x.rt.doc != nil:
		s.mu.Lock()
		ok := s.apiKeys[x.r.Header.Get(APIKeyHeader)]
		s.mu.Unlock()
		if !ok {
			code, msg := "INVALID_API_KEY", "authentication credentials are missing or invalid"
			if x.r.Header.Get(APIKeyHeader) == "" {
				code, msg = "MISSING_API_KEY", "missing "+APIKeyHeader+" header"
			}
			x.writeError(w, http.StatusUnauthorized, code, msg)
			return
		}
		if x.rejectInvalid(w, reqProblems) {
			return
		}
		x.lifecycle(w)
	case x.rt.execd:
		x.proxy(w, reqProblems)
	default:
		x.synthetic = true
		x.writeError(w, http.StatusNotFound, "NOT_FOUND", "no such route: "+x.r.URL.Path)
	}
}

// rejectInvalid answers 400 (404 for an undocumented route) when the request
// broke the spec; the violations were already recorded.
func (x *exchange) rejectInvalid(w *recorder, problems []string) bool {
	if len(problems) == 0 {
		return false
	}
	x.synthetic = true
	status, code := http.StatusBadRequest, "INVALID_REQUEST"
	if x.routeMissing {
		status, code = http.StatusNotFound, "NOT_FOUND"
	}
	x.writeError(w, status, code, strings.Join(problems, "; "))
	return true
}

// recorder passes a response through and keeps a copy for validation.
type recorder struct {
	w         http.ResponseWriter
	status    int
	wrote     bool
	buf       bytes.Buffer
	truncated bool
}

const maxCapture = 8 << 20

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(status int) {
	if r.wrote {
		return
	}
	r.wrote = true
	r.status = status
	r.w.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	if r.buf.Len()+len(b) <= maxCapture {
		r.buf.Write(b)
	} else {
		r.truncated = true
	}
	return r.w.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.w.(http.Flusher); ok {
		f.Flush()
	}
}

// discardWriter swallows the real handler's response under an
// AfterHandling fault.
type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}
