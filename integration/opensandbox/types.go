package opensandbox

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

const (
	// APIKeyHeader carries the lifecycle API key.
	APIKeyHeader = "OPEN-SANDBOX-API-KEY"
	// ExecdTokenHeader carries the per-sandbox execd access token.
	ExecdTokenHeader = "X-EXECD-ACCESS-TOKEN"
	// TailCursorHeader is the cursor header of GET /command/{id}/logs.
	TailCursorHeader = "EXECD-COMMANDS-TAIL-CURSOR"
	// ExecdPort is the in-sandbox port of execd.
	ExecdPort = 44772
	// DefaultAPIKey is the accepted API key when Options.APIKeys is empty.
	DefaultAPIKey = "opensandbox-test-key"
	// DefaultProvisionDelay is the Pending → Running delay when
	// Options.ProvisionDelay is zero.
	DefaultProvisionDelay = 50 * time.Millisecond
)

// Options configures a Server.
type Options struct {
	// APIKeys are the accepted values of OPEN-SANDBOX-API-KEY; empty means
	// []string{DefaultAPIKey}. SetAPIKeys replaces them at runtime.
	APIKeys []string
	// ProvisionDelay is how long a new sandbox stays Pending (default
	// DefaultProvisionDelay; a negative value means none).
	ProvisionDelay time.Duration
	// TLS serves https with a certificate for 127.0.0.1 and localhost issued
	// by a throwaway CA (CAPEM).
	TLS bool
	// FilesRoot is the only tree execd's /files routes serve; every sandbox
	// gets its home (HOME and default cwd of its commands) in
	// FilesRoot/<sandbox id>. Empty means a temp dir created by New and
	// removed by Close.
	FilesRoot string
	// Logf, when set, receives one line per request (method, path, status;
	// never a body or header value) and server notes.
	Logf func(format string, args ...any)
	// SSEDataPrefix writes every server-sent event as "data: <json>\n\n"
	// instead of the reference execd's bare "<json>\n\n".
	SSEDataPrefix bool
}

// Fault is a one-shot (or Times-shot) misbehaviour of the server, matched by
// method and raw path prefix. Inject adds one; the first matching fault in
// injection order applies to a request.
type Fault struct {
	// Method matches the request method (empty matches any).
	Method string
	// Path is a prefix of the raw request path (before the execd proxy
	// prefix is stripped), e.g. "/v1/sandboxes" or "/sandboxes/".
	Path string
	// Status, when non-zero, answers an ErrorResponse with this status
	// instead of running the handler (or, with AfterHandling, after it ran).
	Status int
	// Delay waits this long before answering (before the handler runs).
	Delay time.Duration
	// CutSSEBeforeInit, for POST /command, starts the process and then
	// closes the connection before the init event is written.
	CutSSEBeforeInit bool
	// AfterHandling applies Status after the real handler ran: the action
	// happened, the client sees an error. The handler's own response is
	// discarded (a foreground command is waited for).
	AfterHandling bool
	// Times is how many requests the fault applies to; 0 means once.
	Times int
}

// Request is one request the server received.
type Request struct {
	Method string
	Path   string // raw path, including /v1 or the execd proxy prefix
	Query  string // raw query
	// Status is the status the client was sent; 0 when the connection was
	// cut without a response.
	Status int
	At     time.Time
}

// CreateRequest is a stored POST /v1/sandboxes body (the spec's
// CreateSandboxRequest), including env and image credentials.
type CreateRequest struct {
	Image           *ImageSpec        `json:"image,omitempty"`
	SnapshotID      string            `json:"snapshotId,omitempty"`
	Platform        *PlatformSpec     `json:"platform,omitempty"`
	Timeout         *int              `json:"timeout,omitempty"`
	ResourceLimits  map[string]string `json:"resourceLimits,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Entrypoint      []string          `json:"entrypoint,omitempty"`
	NetworkPolicy   json.RawMessage   `json:"networkPolicy,omitempty"`
	CredentialProxy json.RawMessage   `json:"credentialProxy,omitempty"`
	SecureAccess    *bool             `json:"secureAccess,omitempty"`
	Volumes         json.RawMessage   `json:"volumes,omitempty"`
	Extensions      map[string]string `json:"extensions,omitempty"`
}

// ImageSpec is the spec's ImageSpec.
type ImageSpec struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth is ImageSpec.auth (registry credentials).
type ImageAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// PlatformSpec is the spec's PlatformSpec.
type PlatformSpec struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

func (c CreateRequest) clone() CreateRequest {
	out := c
	if c.Image != nil {
		img := *c.Image
		if c.Image.Auth != nil {
			a := *c.Image.Auth
			img.Auth = &a
		}
		out.Image = &img
	}
	if c.Platform != nil {
		p := *c.Platform
		out.Platform = &p
	}
	if c.Timeout != nil {
		t := *c.Timeout
		out.Timeout = &t
	}
	if c.SecureAccess != nil {
		b := *c.SecureAccess
		out.SecureAccess = &b
	}
	out.ResourceLimits = maps.Clone(c.ResourceLimits)
	out.Env = maps.Clone(c.Env)
	out.Metadata = maps.Clone(c.Metadata)
	out.Extensions = maps.Clone(c.Extensions)
	out.Entrypoint = slices.Clone(c.Entrypoint)
	out.NetworkPolicy = slices.Clone(c.NetworkPolicy)
	out.CredentialProxy = slices.Clone(c.CredentialProxy)
	out.Volumes = slices.Clone(c.Volumes)
	return out
}
