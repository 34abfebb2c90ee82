package opensandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// reservedMetadataPrefix is the metadata key prefix the server keeps for
// itself.
const reservedMetadataPrefix = "opensandbox.io/"

// phase is one step of a sandbox's state timeline; the current state is the
// last phase whose time has come.
type phase struct {
	at                     time.Time
	state, reason, message string
}

type sandbox struct {
	id          string
	req         CreateRequest
	token       string
	dir         string
	createdAt   time.Time
	provisionAt time.Time
	failPull    bool
	phases      []phase
	metadata    map[string]string
	expiresAt   *time.Time
	commands    map[string]*command
	procs       map[*proc]bool
	// restart is closed (and replaced) by RestartExecd; streams of the
	// execd that "restarted" are cut.
	restart chan struct{}
}

func (sb *sandbox) current(now time.Time) phase {
	cur := sb.phases[0]
	for _, p := range sb.phases[1:] {
		if !p.at.After(now) {
			cur = p
		}
	}
	return cur
}

// provisioned tells whether the sandbox's execd is reachable: its image
// was pulled and the provision delay has passed (state overrides do not
// matter).
func (sb *sandbox) provisioned(now time.Time) bool {
	return !sb.failPull && !now.Before(sb.provisionAt)
}

// setPhases drops the phases still in the future and appends new ones.
func (sb *sandbox) setPhases(now time.Time, next ...phase) {
	kept := sb.phases[:0:0]
	for _, p := range sb.phases {
		if !p.at.After(now) {
			kept = append(kept, p)
		}
	}
	sb.phases = append(kept, next...)
}

// SetSandboxState forces the reported state of a live sandbox from now on
// (any string, e.g. "Unknown", "Failed", "Terminated"); pending transitions
// are dropped. It does not change whether execd answers.
func (s *Server) SetSandboxState(id, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return fmt.Errorf("opensandbox: no live sandbox %q", id)
	}
	sb.setPhases(time.Now(), phase{at: time.Now(), state: state, reason: "test_override", message: "state set by the test"})
	return nil
}

type statusJSON struct {
	State            string    `json:"state"`
	Reason           string    `json:"reason,omitempty"`
	Message          string    `json:"message,omitempty"`
	LastTransitionAt time.Time `json:"lastTransitionAt"`
}

type imageJSON struct {
	URI string `json:"uri"`
}

type sandboxJSON struct {
	ID         string            `json:"id"`
	Image      *imageJSON        `json:"image,omitempty"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Platform   *PlatformSpec     `json:"platform,omitempty"`
	Status     statusJSON        `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

type createResponseJSON struct {
	ID         string            `json:"id"`
	Status     statusJSON        `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Platform   *PlatformSpec     `json:"platform,omitempty"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	Entrypoint []string          `json:"entrypoint"`
}

func (sb *sandbox) statusJSON(now time.Time) statusJSON {
	p := sb.current(now)
	return statusJSON{State: p.state, Reason: p.reason, Message: p.message, LastTransitionAt: p.at.UTC()}
}

// view is the GET representation; image credentials are never returned.
func (sb *sandbox) view(now time.Time) sandboxJSON {
	v := sandboxJSON{
		ID:         sb.id,
		SnapshotID: sb.req.SnapshotID,
		Platform:   sb.req.Platform,
		Status:     sb.statusJSON(now),
		Metadata:   maps.Clone(sb.metadata),
		Entrypoint: slices.Clone(sb.req.Entrypoint),
		ExpiresAt:  sb.expiresAt,
		CreatedAt:  sb.createdAt,
	}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	if sb.req.Image != nil {
		v.Image = &imageJSON{URI: sb.req.Image.URI}
	}
	return v
}

// lifecycle routes a request that passed auth and the schema check.
func (x *exchange) lifecycle(w http.ResponseWriter) {
	parts := strings.Split(strings.Trim(x.rt.vpath, "/"), "/")
	m := x.r.Method
	switch {
	case len(parts) == 1 && parts[0] == "sandboxes" && m == http.MethodPost:
		x.createSandbox(w)
	case len(parts) == 1 && parts[0] == "sandboxes" && m == http.MethodGet:
		x.listSandboxes(w)
	case len(parts) == 2 && parts[0] == "sandboxes" && m == http.MethodGet:
		x.withSandbox(w, parts[1], func(sb *sandbox) (int, any) { return http.StatusOK, sb.view(time.Now()) })
	case len(parts) == 2 && parts[0] == "sandboxes" && m == http.MethodDelete:
		x.deleteSandbox(w, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && parts[2] == "metadata" && m == http.MethodPatch:
		x.patchMetadata(w, parts[1])
	case len(parts) == 4 && parts[0] == "sandboxes" && parts[2] == "endpoints" && m == http.MethodGet:
		x.endpoint(w, parts[1], parts[3])
	case len(parts) == 3 && parts[0] == "sandboxes" && (parts[2] == "pause" || parts[2] == "resume") && m == http.MethodPost:
		x.pauseResume(w, parts[1], parts[2] == "pause")
	case len(parts) == 3 && parts[0] == "sandboxes" && parts[2] == "renew-expiration" && m == http.MethodPost:
		x.renew(w, parts[1])
	case len(parts) == 1 && parts[0] == "snapshots" && m == http.MethodGet:
		page, size := pageParams(x.r.URL.Query())
		x.writeJSON(w, http.StatusOK, map[string]any{"items": []any{}, "pagination": pagination(0, page, size)})
	case len(parts) == 2 && parts[0] == "snapshots" && (m == http.MethodGet || m == http.MethodDelete):
		x.writeError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", "snapshot "+parts[1]+" not found")
	default:
		x.notImplemented(w)
	}
}

// notImplemented answers 500 for an operation the spec has but this server
// does not serve, and records it so the test notices.
func (x *exchange) notImplemented(w http.ResponseWriter) {
	x.s.violate("request %s: operation not implemented by the test server", x.where())
	x.synthetic = true
	x.writeError(w, http.StatusInternalServerError, "NOT_IMPLEMENTED", "not implemented by the OpenSandbox test server: "+x.r.Method+" "+x.rt.vpath)
}

// withSandbox runs f on a live sandbox under the server lock and answers
// what it returns: a JSON body, or only the status when the body is nil.
// An unknown sandbox is a 404.
func (x *exchange) withSandbox(w http.ResponseWriter, id string, f func(sb *sandbox) (int, any)) {
	x.s.mu.Lock()
	sb := x.s.sandboxes[id]
	if sb == nil {
		x.s.mu.Unlock()
		x.writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "sandbox "+id+" not found")
		return
	}
	status, body := f(sb)
	x.s.mu.Unlock()
	if body == nil {
		w.Header().Set("X-Request-ID", uuid4())
		w.WriteHeader(status)
		return
	}
	x.writeJSON(w, status, body)
}

// metadataProblems checks metadata against the Kubernetes label rules the
// spec states, and the reserved prefix.
func metadataProblems(md map[string]*string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(md)) {
		for _, e := range validation.IsQualifiedName(k) {
			out = append(out, fmt.Sprintf("metadata key %q: %s", k, e))
		}
		if strings.HasPrefix(k, reservedMetadataPrefix) {
			out = append(out, fmt.Sprintf("metadata key %q: the %s prefix is reserved", k, reservedMetadataPrefix))
		}
		if v := md[k]; v != nil {
			for _, e := range validation.IsValidLabelValue(*v) {
				out = append(out, fmt.Sprintf("metadata value of %q: %s", k, e))
			}
		}
	}
	return out
}

func ptrMap(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}

func (x *exchange) createSandbox(w http.ResponseWriter) {
	var req CreateRequest
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "invalid body: "+err.Error())
		return
	}
	var problems []string
	rule := func(format string, args ...any) { problems = append(problems, x.ruleViolation(format, args...)) }
	pool := req.Extensions["poolRef"] != ""
	switch {
	case pool && req.SnapshotID != "":
		rule("snapshotId must not be provided together with extensions.poolRef")
	case !pool && (req.Image == nil) == (req.SnapshotID == ""):
		rule("exactly one of image and snapshotId must be provided")
	}
	if req.Image != nil && len(req.Entrypoint) == 0 {
		rule("entrypoint is required when image is provided")
	}
	if !pool && req.ResourceLimits == nil {
		rule("resourceLimits is required when extensions.poolRef is not set")
	}
	for _, p := range metadataProblems(ptrMap(req.Metadata)) {
		rule("%s", p)
	}
	if v, ok := req.Extensions["access.renew.extend.seconds"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 300 || n > 86400 || strconv.Itoa(n) != v {
			rule("extensions[access.renew.extend.seconds] must be a decimal integer from 300 to 86400, got %q", v)
		}
	}
	if len(problems) > 0 {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", strings.Join(problems, "; "))
		return
	}
	if pool || req.SnapshotID != "" {
		x.notImplemented(w)
		return
	}

	s := x.s
	now := time.Now().UTC()
	id := uuid4()
	dir := filepath.Join(s.filesRoot, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		x.writeError(w, http.StatusInternalServerError, "INTERNAL_ERROR", "create sandbox dir: "+err.Error())
		return
	}
	sb := &sandbox{
		id:          id,
		req:         req.clone(),
		token:       randHex(16),
		dir:         dir,
		createdAt:   now,
		provisionAt: now.Add(s.opts.ProvisionDelay),
		failPull:    strings.Contains(req.Image.URI, "pull-fail"),
		metadata:    maps.Clone(req.Metadata),
		commands:    map[string]*command{},
		procs:       map[*proc]bool{},
		restart:     make(chan struct{}),
	}
	sb.phases = []phase{{at: now, state: "Pending", reason: "provisioning", message: "sandbox is being provisioned"}}
	if sb.failPull {
		sb.phases = append(sb.phases, phase{at: sb.provisionAt, state: "Failed", reason: "image_pull_failed",
			message: fmt.Sprintf("failed to pull image %q: pull access denied or repository does not exist", req.Image.URI)})
	} else {
		sb.phases = append(sb.phases, phase{at: sb.provisionAt, state: "Running", reason: "running", message: "sandbox is running"})
	}
	if req.Timeout != nil {
		t := now.Add(time.Duration(*req.Timeout) * time.Second)
		sb.expiresAt = &t
	}
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.records[id] = req.clone()
	s.created = append(s.created, maps.Clone(req.Metadata))
	resp := createResponseJSON{
		ID:         id,
		Status:     sb.statusJSON(now),
		Metadata:   maps.Clone(sb.metadata),
		Platform:   req.Platform,
		ExpiresAt:  sb.expiresAt,
		CreatedAt:  now,
		Entrypoint: slices.Clone(req.Entrypoint),
	}
	s.mu.Unlock()
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	w.Header().Set("Location", s.url+"/v1/sandboxes/"+id)
	x.writeJSON(w, http.StatusAccepted, resp)
}

func pageParams(q url.Values) (page, size int) {
	page, size = 1, 20
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n >= 1 {
		page = n
	}
	if n, err := strconv.Atoi(q.Get("pageSize")); err == nil && n >= 1 {
		size = n
	}
	return page, size
}

func pagination(total, page, size int) map[string]any {
	pages := (total + size - 1) / size
	return map[string]any{"page": page, "pageSize": size, "totalItems": total, "totalPages": pages, "hasNextPage": page < pages}
}

func (x *exchange) listSandboxes(w http.ResponseWriter) {
	q := x.r.URL.Query()
	page, size := pageParams(q)
	states := q["state"]
	var want url.Values
	if raw := q.Get("metadata"); raw != "" {
		var err error
		if want, err = url.ParseQuery(raw); err != nil {
			x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "metadata filter: "+err.Error())
			return
		}
	}
	now := time.Now()
	s := x.s
	s.mu.Lock()
	var items []sandboxJSON
	for _, sb := range s.sandboxes {
		v := sb.view(now)
		if len(states) > 0 && !slices.ContainsFunc(states, func(st string) bool { return strings.EqualFold(st, v.Status.State) }) {
			continue
		}
		match := true
		for k, vals := range want {
			got, ok := sb.metadata[k]
			match = match && ok && slices.Contains(vals, got)
		}
		if match {
			items = append(items, v)
		}
	}
	s.mu.Unlock()
	sort.Slice(items, func(i, j int) bool {
		if !items[i].CreatedAt.Equal(items[j].CreatedAt) {
			return items[i].CreatedAt.Before(items[j].CreatedAt)
		}
		return items[i].ID < items[j].ID
	})
	total := len(items)
	lo := min((page-1)*size, total)
	hi := min(lo+size, total)
	out := items[lo:hi]
	if out == nil {
		out = []sandboxJSON{}
	}
	x.writeJSON(w, http.StatusOK, map[string]any{"items": out, "pagination": pagination(total, page, size)})
}

func (x *exchange) deleteSandbox(w http.ResponseWriter, id string) {
	s := x.s
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil {
		s.mu.Unlock()
		x.writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "sandbox "+id+" not found")
		return
	}
	delete(s.sandboxes, id)
	procs := slices.Collect(maps.Keys(sb.procs))
	s.mu.Unlock()
	for _, p := range procs {
		p.kill(syscall.SIGKILL)
	}
	w.Header().Set("X-Request-ID", uuid4())
	w.WriteHeader(http.StatusNoContent)
}

func (x *exchange) patchMetadata(w http.ResponseWriter, id string) {
	var patch map[string]*string
	if err := json.Unmarshal(x.body, &patch); err != nil {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "invalid body: "+err.Error())
		return
	}
	var problems []string
	for _, p := range metadataProblems(patch) {
		problems = append(problems, x.ruleViolation("%s", p))
	}
	if len(problems) > 0 {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", strings.Join(problems, "; "))
		return
	}
	x.withSandbox(w, id, func(sb *sandbox) (int, any) {
		if sb.metadata == nil {
			sb.metadata = map[string]string{}
		}
		for k, v := range patch {
			if v == nil {
				delete(sb.metadata, k)
			} else {
				sb.metadata[k] = *v
			}
		}
		return http.StatusOK, sb.view(time.Now())
	})
}

type endpointJSON struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

func (x *exchange) endpoint(w http.ResponseWriter, id, port string) {
	q := x.r.URL.Query()
	if q.Get("expires") != "" && q.Get("use_server_proxy") == "true" {
		msg := x.ruleViolation("expires cannot be combined with use_server_proxy=true")
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", msg)
		return
	}
	x.withSandbox(w, id, func(sb *sandbox) (int, any) {
		return http.StatusOK, endpointJSON{
			Endpoint: x.s.host + "/sandboxes/" + sb.id + "/port/" + port,
			Headers:  map[string]string{ExecdTokenHeader: sb.token},
		}
	})
}

func (x *exchange) pauseResume(w http.ResponseWriter, id string, pause bool) {
	x.withSandbox(w, id, func(sb *sandbox) (int, any) {
		now := time.Now()
		cur := sb.current(now).state
		d := x.s.opts.ProvisionDelay
		switch {
		case pause && cur == "Running":
			sb.setPhases(now, phase{at: now, state: "Pausing", reason: "pause_requested"}, phase{at: now.Add(d), state: "Paused", reason: "paused"})
		case !pause && cur == "Paused":
			sb.setPhases(now, phase{at: now, state: "Resuming", reason: "resume_requested"}, phase{at: now.Add(d), state: "Running", reason: "running"})
		default:
			return http.StatusConflict, errorResponse{Code: "INVALID_STATE", Message: "sandbox is " + cur}
		}
		return http.StatusAccepted, nil
	})
}

func (x *exchange) renew(w http.ResponseWriter, id string) {
	var req struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "invalid body: "+err.Error())
		return
	}
	x.withSandbox(w, id, func(sb *sandbox) (int, any) {
		if !req.ExpiresAt.After(time.Now()) || (sb.expiresAt != nil && !req.ExpiresAt.After(*sb.expiresAt)) {
			return http.StatusBadRequest, errorResponse{Code: "INVALID_EXPIRATION", Message: "expiresAt must be in the future and after the current expiresAt"}
		}
		t := req.ExpiresAt.UTC()
		sb.expiresAt = &t
		return http.StatusOK, map[string]any{"expiresAt": t}
	})
}
