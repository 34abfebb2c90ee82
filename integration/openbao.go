package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bao "github.com/openbao/openbao/api/v2"
	"github.com/testcontainers/testcontainers-go"
)

// KVMount is the KV v2 mount every OpenBao-compatible test server has.
const KVMount = "kv"

// OpenBao is an OpenBao-compatible server (HashiCorp Vault v1.13.2 built
// from the module proxy, or the `bao` binary named by AYATORI_BAO_BIN) with
// file storage, initialised with one unseal key and a KV v2 mount "kv".
// Unlike `server -dev` its data survives Stop/Start, so tests can take it
// down in the middle of an operation and bring it back. The testcontainers
// provider runs the same set-up in a container (testcontainers_provider.go).
type OpenBao struct {
	// Address is the API address, http://127.0.0.1:<port>.
	Address string
	// RootToken is the initial root token (tests and fixtures only).
	RootToken string
	// Dir is the run directory; removed by Close.
	Dir string
	// LogPath is the server log.
	LogPath string

	bin       string
	unsealKey string
	proc      *process
	unreg     func()
	container testcontainers.Container
}

var baoMountInput = bao.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}

// OpenBaoBinary returns the server binary: $AYATORI_BAO_BIN when set, else
// the cached Vault build.
func OpenBaoBinary() (string, error) {
	if p := os.Getenv("AYATORI_BAO_BIN"); p != "" {
		return p, nil
	}
	return ToolPath("vault")
}

// NewOpenBao starts, initialises and unseals a server and mounts KV v2 at
// "kv", with the provider SelectProvider chose: a local process
// (newLocalOpenBao) or a container (testcontainers provider).
func NewOpenBao(ctx context.Context) (*OpenBao, error) {
	p, _, err := SelectProvider()
	if err != nil {
		return nil, err
	}
	if p == ProviderTestcontainers {
		return newOpenBaoContainer(ctx)
	}
	return newLocalOpenBao(ctx)
}

func newLocalOpenBao(ctx context.Context) (_ *OpenBao, err error) {
	bin, err := OpenBaoBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ayatori-bao-")
	if err != nil {
		return nil, err
	}
	o := &OpenBao{Dir: dir, bin: bin, LogPath: filepath.Join(dir, "server.log")}
	defer func() {
		if err != nil {
			o.Close()
		}
	}()
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	o.Address = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`storage "file" {
  path = %q
}
listener "tcp" {
  address     = "127.0.0.1:%d"
  tls_disable = true
}
disable_mlock = true
api_addr      = %q
ui            = false
`, filepath.Join(dir, "data"), port, o.Address)
	if err := os.WriteFile(filepath.Join(dir, "config.hcl"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	o.unreg = registerCleanup(o.Close)
	if err := o.startProcess(); err != nil {
		return nil, err
	}
	return o, o.initialise(ctx)
}

// initialise initialises a fresh server with one unseal key, unseals it and
// mounts KV v2 at "kv" (both providers).
func (o *OpenBao) initialise(ctx context.Context) error {
	c, err := o.client("")
	if err != nil {
		return err
	}
	init, err := c.Sys().InitWithContext(ctx, &bao.InitRequest{SecretShares: 1, SecretThreshold: 1})
	if err != nil {
		return o.startError(fmt.Errorf("init: %w", err))
	}
	o.unsealKey, o.RootToken = init.Keys[0], init.RootToken
	if err := o.unseal(ctx); err != nil {
		return err
	}
	c.SetToken(o.RootToken)
	if err := c.Sys().MountWithContext(ctx, KVMount, &baoMountInput); err != nil {
		return fmt.Errorf("mount kv v2: %w", err)
	}
	// A fresh KV v2 mount finishes its setup asynchronously; wait until it
	// accepts reads.
	return o.waitReady(30*time.Second, func() error {
		_, err := c.Logical().ReadWithContext(ctx, KVMount+"/config")
		return err
	})
}

// waitReady polls check until it succeeds or timeout passes (or the local
// process exits).
func (o *OpenBao) waitReady(timeout time.Duration, check func() error) error {
	if o.proc != nil {
		return o.proc.waitReady(timeout, check)
	}
	if err := pollReady(timeout, check); err != nil {
		return o.startError(err)
	}
	return nil
}

// startError adds the server log's last lines to err.
func (o *OpenBao) startError(err error) error {
	if o.proc != nil {
		return o.proc.startError(err)
	}
	return fmt.Errorf("openbao container did not start: %w\n--- last lines of %s ---\n%s", err, o.LogPath, fileTail(o.LogPath, 30))
}

func (o *OpenBao) startProcess() error {
	proc, err := startProcess(processSpec{
		name: "openbao", path: o.bin, args: []string{"server", "-config=" + filepath.Join(o.Dir, "config.hcl")},
		dir: o.Dir, logPath: o.LogPath,
		env: []string{"GODEBUG=x509negativeserial=1", "VAULT_DISABLE_MLOCK=true", "BAO_DISABLE_MLOCK=true", "HOME=" + o.Dir},
	})
	if err != nil {
		return err
	}
	o.proc = proc
	return proc.waitReady(60*time.Second, func() error {
		resp, err := http.Get(o.Address + "/v1/sys/seal-status")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("seal-status: HTTP %d", resp.StatusCode)
		}
		return nil
	})
}

func (o *OpenBao) unseal(ctx context.Context) error {
	c, err := o.client("")
	if err != nil {
		return err
	}
	st, err := c.Sys().UnsealWithContext(ctx, o.unsealKey)
	if err != nil {
		return fmt.Errorf("unseal: %w", err)
	}
	if st.Sealed {
		return errors.New("unseal: still sealed")
	}
	c.SetToken(o.RootToken)
	return o.waitReady(30*time.Second, func() error {
		h, err := c.Sys().HealthWithContext(ctx)
		if err != nil {
			return err
		}
		if !h.Initialized || h.Sealed {
			return errors.New("not initialised or sealed")
		}
		return nil
	})
}

// Client returns an API client for Address authenticated with token (empty: none).
func (o *OpenBao) Client(token string) (*bao.Client, error) { return o.client(token) }

func (o *OpenBao) client(token string) (*bao.Client, error) {
	cfg := bao.DefaultConfig()
	cfg.Address = o.Address
	cfg.MaxRetries = 0
	c, err := bao.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	c.SetToken(token)
	return c, nil
}

// Stop stops the server and keeps its storage.
func (o *OpenBao) Stop() {
	if o.container != nil {
		timeout := 15 * time.Second
		_ = o.container.Stop(context.Background(), &timeout)
		return
	}
	if o.proc != nil {
		o.proc.stop(syscall.SIGTERM, 15*time.Second)
	}
}

// Kill stops the server with SIGKILL (a container: `docker stop -t 0`);
// its storage stays for Start.
func (o *OpenBao) Kill() {
	if o.container != nil {
		timeout := time.Duration(0)
		_ = o.container.Stop(context.Background(), &timeout)
		return
	}
	if o.proc != nil {
		o.proc.kill()
	}
}

// Start starts a stopped server on the same storage and port and unseals it.
func (o *OpenBao) Start(ctx context.Context) error {
	if o.container != nil {
		if err := o.container.Start(ctx); err != nil {
			return err
		}
		return o.unseal(ctx)
	}
	if o.proc != nil && !o.proc.exited() {
		return errors.New("openbao: already running")
	}
	if err := o.startProcess(); err != nil {
		return err
	}
	return o.unseal(ctx)
}

// Close stops the server and removes its directory.
func (o *OpenBao) Close() {
	if o.container != nil {
		_ = o.container.Terminate(context.Background())
		o.container = nil
	}
	o.Stop()
	if o.unreg != nil {
		o.unreg()
	}
	if o.Dir != "" {
		_ = os.RemoveAll(o.Dir)
	}
}
