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
	"net/url"
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

// Client is a logged-in OpenBao client that re-authenticates on 403.
type Client struct {
	c    *bao.Client
	auth Auth
	mu   sync.Mutex
	ok   bool
}

// NewClient creates a client for address (no request retries: the journal
// consumer retries).
//
// An http:// address is refused unless its host is a loopback address or
// allowPlainHTTP is set: the client's token and every password it writes
// or reads would cross the network in plain text.
func NewClient(address string, auth Auth, timeout time.Duration, allowPlainHTTP bool) (*Client, error) {
	if err := CheckTransport(address, allowPlainHTTP); err != nil {
		return nil, err
	}
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

// CheckTransport refuses an http:// OpenBao address whose host is not a
// loopback address (127.0.0.0/8, ::1, localhost), unless allowPlainHTTP.
func CheckTransport(address string, allowPlainHTTP bool) error {
	u, err := url.Parse(address)
	if err != nil {
		return errors.New("openbao: the address is not a URL")
	}
	if u.Scheme != "http" || allowPlainHTTP {
		return nil
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("openbao: %s is plain HTTP to %s: the token and the Tenants' passwords would cross the network unencrypted; use https, or allow it explicitly (--openbao-allow-plain-http)", u.Scheme, host)
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
		if attempt == 0 && isForbidden(err) {
			c.mu.Lock()
			c.ok = false
			c.mu.Unlock()
			continue
		}
		return err
	}
}
