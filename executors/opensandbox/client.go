package opensandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"git.ddupan.top/panxiao81/ayatori/contracts/execution"
)

// Headers of the two OpenSandbox APIs.
const (
	headerAPIKey      = "OPEN-SANDBOX-API-KEY"
	headerExecdToken  = "X-EXECD-ACCESS-TOKEN"
	execdPort         = 44772
	maxErrorBodyBytes = 4096
	maxFileBytes      = 64
)

// httpError is a non-2xx answer of OpenSandbox: the status code and the
// ErrorResponse code (never the message or body, which may echo input).
type httpError struct {
	Op     string
	Status int
	Code   string
}

func (e *httpError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s: HTTP %d %s", e.Op, e.Status, e.Code)
	}
	return fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
}

// statusOf is the HTTP status of err (0 when err is no httpError).
func statusOf(err error) int {
	var h *httpError
	if errors.As(err, &h) {
		return h.Status
	}
	return 0
}

// sandbox is the part of the lifecycle API's Sandbox (and
// CreateSandboxResponse) the executor reads.
type sandbox struct {
	ID       string            `json:"id"`
	Status   sandboxStatus     `json:"status"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Created  time.Time         `json:"createdAt"`
}

type sandboxStatus struct {
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

type imageSpec struct {
	URI  string     `json:"uri"`
	Auth *imageAuth `json:"auth,omitempty"`
}

type imageAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// createRequest is the lifecycle API's CreateSandboxRequest (the fields
// the executor sets). Timeout is omitted: the sandbox is removed by
// Delete, not by expiry.
type createRequest struct {
	Image          imageSpec         `json:"image"`
	ResourceLimits map[string]string `json:"resourceLimits"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata"`
	Entrypoint     []string          `json:"entrypoint"`
	Extensions     map[string]string `json:"extensions,omitempty"`
}

type listResponse struct {
	Items      []sandbox `json:"items"`
	Pagination struct {
		HasNextPage bool `json:"hasNextPage"`
	} `json:"pagination"`
}

type endpointResponse struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// runCommandRequest is execd's RunCommandRequest.
type runCommandRequest struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd,omitempty"`
	Background bool              `json:"background"`
	Timeout    int64             `json:"timeout,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
}

type streamEvent struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// commandStatus is execd's CommandStatusResponse.
type commandStatus struct {
	ID         string     `json:"id"`
	Running    bool       `json:"running"`
	ExitCode   *int32     `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// lifecycle talks to one OpenSandbox lifecycle API with one API key.
type lifecycle struct {
	http   *http.Client
	base   *url.URL // scheme://host[/path], without /v1
	apiKey string
	// insecure: http:// is allowed (allowInsecureHTTP).
	insecure bool
	// execdHosts are the hosts execd may be on besides base's (execdHosts).
	execdHosts []string
}

func (c *lifecycle) do(ctx context.Context, op, method, path string, query url.Values, in, out any, want ...int) error {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + "/v1" + path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set(headerAPIKey, c.apiKey)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return doJSON(c.http, req, op, out, want...)
}

// doJSON sends req and decodes a JSON answer with one of the wanted
// status codes into out (nil: discard); any other status is an httpError.
func doJSON(hc *http.Client, req *http.Request, op string, out any, want ...int) error {
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, redactURL(err))
	}
	defer resp.Body.Close()
	if !wanted(resp.StatusCode, want) {
		return errorOf(op, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return &decodeError{op: op, err: err}
	}
	return nil
}

// decodeError: a 2xx answer whose body is not what the API defines. Its
// text names the operation only: a decoder's error quotes the body (a
// time field's parse error repeats the whole value), and no answer is
// copied into an outcome.
type decodeError struct {
	op  string
	err error
}

func (d *decodeError) Error() string { return d.op + ": undecodable answer" }
func (d *decodeError) Unwrap() error { return d.err }

func wanted(code int, want []int) bool {
	if len(want) == 0 {
		return code >= 200 && code < 300
	}
	for _, w := range want {
		if code == w {
			return true
		}
	}
	return false
}

func errorOf(op string, resp *http.Response) error {
	var e struct {
		Code string `json:"code"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	_ = json.Unmarshal(b, &e)
	code := e.Code
	if !errorCode.MatchString(code) {
		code = "" // a code is a short token; anything else is not repeated
	}
	return &httpError{Op: op, Status: resp.StatusCode, Code: code}
}

// errorCode is the shape of an ErrorResponse code the executor repeats
// (e.g. SANDBOX_NOT_FOUND, INVALID_REQUEST): letters, digits, _ . : -,
// at most 64 characters.
var errorCode = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// validID reports whether an id the backend gave (a sandbox id, a command
// id) may become a reference: status.execution.references takes 1..253
// characters; control characters and invalid UTF-8 are refused too.
func validID(s string) bool {
	if s == "" || len(s) > 253 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// checkIDs refuses an answer listing a sandbox whose id can not be a
// reference (decodeError: UnexpectedResponse).
func checkIDs(op string, sbs ...sandbox) error {
	for _, s := range sbs {
		if !validID(s.ID) {
			return &decodeError{op: op, err: errors.New("a sandbox id is empty, longer than 253 characters or not printable")}
		}
	}
	return nil
}

// redactURL drops the query of a *url.Error's URL (a metadata filter
// holds the Job UID only, but no query is ever worth logging).
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery = ""
			ue.URL = u.String()
		}
	}
	return err
}

// findByUID lists the sandboxes whose metadata carries the Job UID.
func (c *lifecycle) findByUID(ctx context.Context, uid string) ([]sandbox, error) {
	var mine []sandbox
	for page := 1; ; page++ {
		q := url.Values{}
		q.Set("metadata", url.Values{LabelJobUID: {uid}}.Encode())
		q.Set("pageSize", "20")
		q.Set("page", strconv.Itoa(page))
		var out listResponse
		if err := c.do(ctx, "list sandboxes", http.MethodGet, "/sandboxes", q, nil, &out, http.StatusOK); err != nil {
			return nil, err
		}
		if err := checkIDs("list sandboxes", out.Items...); err != nil {
			return nil, err
		}
		for _, s := range out.Items {
			if s.Metadata[LabelJobUID] == uid {
				mine = append(mine, s)
			}
		}
		// A backend that honours the filter answers one page; one that
		// ignores it is paged through (bounded), so the Job's sandbox is
		// never missed and never created twice.
		if !out.Pagination.HasNextPage || len(out.Items) == 0 {
			return mine, nil
		}
		if page >= maxListPages {
			return nil, &decodeError{op: "list sandboxes", err: fmt.Errorf("more than %d pages for one Job UID", maxListPages)}
		}
	}
}

// maxListPages bounds the pages findByUID reads (20 sandboxes each).
const maxListPages = 100

// get reads one sandbox; nil when it does not exist.
func (c *lifecycle) get(ctx context.Context, id string) (*sandbox, error) {
	var s sandbox
	err := c.do(ctx, "get sandbox", http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &s, http.StatusOK)
	if statusOf(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := checkIDs("get sandbox", s); err != nil {
		return nil, err
	}
	return &s, nil
}

func (c *lifecycle) create(ctx context.Context, req createRequest) (*sandbox, error) {
	var s sandbox
	if err := c.do(ctx, "create sandbox", http.MethodPost, "/sandboxes", nil, req, &s, http.StatusAccepted, http.StatusOK, http.StatusCreated); err != nil {
		return nil, err
	}
	if !validID(s.ID) {
		// Created, but not addressable: like a lost answer, the
		// redelivery looks for it by UID.
		return nil, &ambiguousCreate{}
	}
	return &s, nil
}

// delete deletes a sandbox; false when it did not exist.
func (c *lifecycle) delete(ctx context.Context, id string) (bool, error) {
	err := c.do(ctx, "delete sandbox", http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent, http.StatusOK, http.StatusAccepted)
	if statusOf(err) == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// patchMetadata merges md into a sandbox's metadata.
func (c *lifecycle) patchMetadata(ctx context.Context, id string, md map[string]string) error {
	return c.do(ctx, "patch sandbox metadata", http.MethodPatch, "/sandboxes/"+url.PathEscape(id)+"/metadata", nil, md, nil, http.StatusOK)
}

// probe lists at most one sandbox: the API answers and takes the key.
func (c *lifecycle) probe(ctx context.Context) error {
	q := url.Values{"pageSize": {"1"}}
	return c.do(ctx, "list sandboxes", http.MethodGet, "/sandboxes", q, nil, nil, http.StatusOK)
}

// execd talks to the execd of one sandbox.
type execd struct {
	http    *http.Client
	base    *url.URL
	headers map[string]string
}

// execdOf resolves the sandbox's execd endpoint. The endpoint carries no
// scheme (host[:port]/path); the lifecycle API's scheme is used, and an
// endpoint with an http:// scheme is refused unless insecure HTTP is
// allowed.
func (c *lifecycle) execdOf(ctx context.Context, sandboxID string) (*execd, error) {
	var ep endpointResponse
	path := fmt.Sprintf("/sandboxes/%s/endpoints/%d", url.PathEscape(sandboxID), execdPort)
	if err := c.do(ctx, "get execd endpoint", http.MethodGet, path, nil, nil, &ep, http.StatusOK); err != nil {
		return nil, err
	}
	raw := ep.Endpoint
	if !strings.Contains(raw, "://") {
		raw = c.base.Scheme + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, &decodeError{op: "get execd endpoint", err: errors.New("the endpoint is not a host[:port]/path or an http(s) URL")}
	}
	if u.Scheme == "http" && !c.insecure {
		return nil, &execution.Failure{Reason: ReasonInsecureEndpoint, Message: "the sandbox's execd endpoint uses http:// and the parameters do not set allowInsecureHTTP"}
	}
	if h := u.Hostname(); !strings.EqualFold(h, c.base.Hostname()) && !slices.ContainsFunc(c.execdHosts, func(a string) bool { return strings.EqualFold(a, h) }) {
		// The lifecycle API names where commands (with the task's
		// environment) go: only to its own host or one the parameters
		// allow, never where a backend's answer redirects them.
		return nil, &execution.Failure{Reason: ReasonExecdEndpointNotAllowed,
			Message: fmt.Sprintf("the sandbox's execd endpoint is on host %s, neither the endpoint's host nor one of the parameters' execdHosts", clip(h, 64))}
	}
	u.RawQuery, u.Fragment = "", ""
	return &execd{http: c.http, base: u, headers: ep.Headers}, nil
}

func (x *execd) request(ctx context.Context, method, path string, query url.Values, in any) (*http.Request, error) {
	u := *x.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range x.headers {
		req.Header.Set(k, v)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// run starts a command and returns its id from the stream's init event.
// A stream that ends or fails before init leaves it unknown whether the
// command started: errAmbiguousLaunch.
func (x *execd) run(ctx context.Context, in runCommandRequest) (string, error) {
	req, err := x.request(ctx, http.MethodPost, "/command", nil, in)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := x.http.Do(req)
	if err != nil {
		// The request may have reached execd.
		return "", &ambiguousLaunch{err: redactURL(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", errorOf("run command", resp)
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			if strings.HasPrefix(line, "{") {
				data = line // execd may write bare JSON lines
			} else {
				continue
			}
		}
		var ev streamEvent
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) != nil {
			continue
		}
		if ev.Type == "init" && ev.Text != "" {
			if !validID(ev.Text) {
				// The command started under an id that can not be a
				// reference: as if it were lost (the marker decides).
				return "", &ambiguousLaunch{err: errors.New("the init event's command id is not a valid reference")}
			}
			return ev.Text, nil
		}
	}
	return "", &ambiguousLaunch{err: errors.New("the command stream ended before its init event")}
}

// ambiguousCreate: a sandbox was created whose id the answer did not give
// in a usable form (transient: the redelivery lists by UID; a listed
// sandbox with such an id is an UnexpectedResponse).
type ambiguousCreate struct{}

func (*ambiguousCreate) Error() string {
	return "create sandbox: the answer's id is empty, longer than 253 characters or not printable"
}

// ambiguousLaunch: the command may or may not have started.
type ambiguousLaunch struct{ err error }

func (a *ambiguousLaunch) Error() string { return "run command: " + a.err.Error() }
func (a *ambiguousLaunch) Unwrap() error { return a.err }

// status reads a command's status; nil when execd does not know the id.
func (x *execd) status(ctx context.Context, id string) (*commandStatus, error) {
	req, err := x.request(ctx, http.MethodGet, "/command/status/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return nil, err
	}
	var st commandStatus
	err = doJSON(x.http, req, "get command status", &st, http.StatusOK)
	if statusOf(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// interrupt stops a command.
func (x *execd) interrupt(ctx context.Context, id string) error {
	req, err := x.request(ctx, http.MethodDelete, "/command", url.Values{"id": {id}}, nil)
	if err != nil {
		return err
	}
	err = doJSON(x.http, req, "interrupt command", nil, http.StatusOK, http.StatusNoContent)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}

// download reads a small file; ok false when it does not exist.
func (x *execd) download(ctx context.Context, path string) ([]byte, bool, error) {
	req, err := x.request(ctx, http.MethodGet, "/files/download", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := x.http.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("download file: %w", redactURL(err))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxFileBytes))
		return b, err == nil, err
	case http.StatusNotFound:
		return nil, false, nil
	}
	return nil, false, errorOf("download file", resp)
}

// exists reports whether path exists in the sandbox.
func (x *execd) exists(ctx context.Context, path string) (bool, error) {
	req, err := x.request(ctx, http.MethodGet, "/files/info", url.Values{"path": {path}}, nil)
	if err != nil {
		return false, err
	}
	err = doJSON(x.http, req, "get file info", nil, http.StatusOK)
	if statusOf(err) == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}
