// Package openbao is the OpenBao executor of the database domain: it
// writes, reads and destroys Tenant credentials in KV v2 with ownership
// metadata. The client is github.com/openbao/openbao/api/v2 only (tests run
// against the OpenBao-compatible Vault v1.13.2, see
// docs/decisions/0001-openbao-test-server.md).
package openbao

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	bao "github.com/openbao/openbao/api/v2"

	dbcontract "git.ddupan.top/panxiao81/ayatori/contracts/database"
)

// Auth logs the client in.
type Auth interface {
	// Login returns a token. It is called again after a 403.
	Login(ctx context.Context, c *bao.Client) (string, error)
}

// TokenFileAuth reads a token from a file (development only).
type TokenFileAuth struct{ Path string }

// Login reads the token file.
func (a TokenFileAuth) Login(context.Context, *bao.Client) (string, error) {
	b, err := os.ReadFile(a.Path)
	if err != nil {
		return "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: "cannot read the OpenBao token file " + a.Path}
	}
	return strings.TrimSpace(string(b)), nil
}

// KubernetesAuth logs in with the controller's projected ServiceAccount
// token through the Kubernetes auth method (POST auth/<mount>/login).
type KubernetesAuth struct {
	Mount     string
	Role      string
	TokenPath string
}

// Login performs the Kubernetes auth login.
func (a KubernetesAuth) Login(ctx context.Context, c *bao.Client) (string, error) {
	jwt, err := os.ReadFile(a.TokenPath)
	if err != nil {
		return "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login (role %s) cannot read the ServiceAccount token %s", a.Role, a.TokenPath)}
	}
	lc, err := c.Clone()
	if err != nil {
		return "", err
	}
	lc.ClearToken()
	mount := strings.Trim(a.Mount, "/")
	sec, err := lc.Logical().WriteWithContext(ctx, "auth/"+mount+"/login",
		map[string]any{"role": a.Role, "jwt": strings.TrimSpace(string(jwt))})
	if err != nil {
		return "", loginFailure(err, mount, a.Role)
	}
	if sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "" {
		return "", &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login (auth/%s, role %s) returned no token", mount, a.Role)}
	}
	return sec.Auth.ClientToken, nil
}

// loginFailure says that the Kubernetes auth login failed, for which role,
// with the HTTP status (never the response body, which can echo the JWT).
func loginFailure(err error, mount, role string) *dbcontract.Failure {
	var re *bao.ResponseError
	switch {
	case errors.As(err, &re) && (re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusBadRequest):
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login was refused (auth/%s, role %s, HTTP %d): "+
			"check that the role binds the controller's ServiceAccount name and namespace and accepts the token's audience", mount, role, re.StatusCode)}
	case errors.As(err, &re):
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s, HTTP %d)", mount, role, re.StatusCode)}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s): OpenBao is unreachable", mount, role)}
	}
	return &dbcontract.Failure{Reason: dbcontract.ReasonDependencyUnavailable, Message: fmt.Sprintf("the OpenBao Kubernetes auth login failed (auth/%s, role %s)", mount, role)}
}

// Client is a logged-in OpenBao client that re-authenticates on 403.
type Client struct {
	c    *bao.Client
	auth Auth
	mu   sync.Mutex
	ok   bool
}

// NewClient creates a client for address (no request retries: the journal
// consumer retries).
func NewClient(address string, auth Auth, timeout time.Duration) (*Client, error) {
	cfg := bao.DefaultConfig()
	cfg.Address = address
	cfg.MaxRetries = 0
	if timeout > 0 {
		cfg.Timeout = timeout
	}
	c, err := bao.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	c.ClearToken()
	return &Client{c: c, auth: auth}, nil
}

// do runs fn with a valid token, logging in (again) when needed.
func (c *Client) do(ctx context.Context, fn func(*bao.Client) error) error {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		if !c.ok {
			tok, err := c.auth.Login(ctx, c.c)
			if err != nil {
				c.mu.Unlock()
				return err
			}
			c.c.SetToken(tok)
			c.ok = true
		}
		c.mu.Unlock()
		err := fn(c.c)
		var re *bao.ResponseError
		if attempt == 0 && errors.As(err, &re) && re.StatusCode == http.StatusForbidden {
			c.mu.Lock()
			c.ok = false
			c.mu.Unlock()
			continue
		}
		return err
	}
}

// redact drops response bodies from OpenBao errors (they can echo request data).
func redact(err error) error {
	var re *bao.ResponseError
	if errors.As(err, &re) {
		return fmt.Errorf("HTTP %d from OpenBao", re.StatusCode)
	}
	return err
}
