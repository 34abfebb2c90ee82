package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/testcontainers/testcontainers-go"

	natsdeploy "git.ddupan.top/panxiao81/ayatori/deploy/nats"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// NATSOptions tune the embedded JetStream server.
type NATSOptions struct {
	// StoreDir reuses an existing JetStream store (default: a new temp dir,
	// removed by Close).
	StoreDir string
	// Port fixes the client port (default: a free port, kept across Restart).
	Port int
	// NoSyncAlways turns sync_interval "always" off. Only for benchmarks
	// that bulk-load a store before restarting it with SetSyncAlways(true);
	// never for tests of durability.
	NoSyncAlways bool
}

// NATS is an embedded NATS server with JetStream, file storage in a temp
// dir and sync_interval "always": every acknowledged write is fsynced before
// the ack. JetStream's default fsyncs only every 2 minutes, which can lose
// acked records on host crash; a journal of record must not (docs/journal.md).
// Under the testcontainers provider it is a nats-server container with the
// same settings instead (Server then returns nil; StoreDir is inside the
// container).
type NATS struct {
	// URL is the client URL, nats://127.0.0.1:<port> (TLS is required by
	// the server; the clients' options verify it with Auth.CAFile).
	URL string
	// StoreDir is the JetStream store directory.
	StoreDir string
	// Auth is the server's TLS material and the journal identities
	// (deploy/nats auth.conf): every client connects as one of them.
	Auth *NATSAuth

	port   int
	mon    int
	noSync bool
	dir    string
	srv    *server.Server
	unreg  func()
	// container is set by the testcontainers provider.
	container testcontainers.Container
}

// NewNATS starts a JetStream server: embedded, or under the testcontainers
// provider a container (unless opts name a store directory or turn
// sync_interval off: the benchmarks that bulk-load a store on this host).
func NewNATS(opts NATSOptions) (_ *NATS, err error) {
	if opts.StoreDir == "" && !opts.NoSyncAlways && opts.Port == 0 {
		if p, _, err := SelectProvider(); err != nil {
			return nil, err
		} else if p == ProviderTestcontainers {
			return newNATSContainer(context.Background())
		}
	}
	n := &NATS{StoreDir: opts.StoreDir, port: opts.Port, noSync: opts.NoSyncAlways}
	if n.dir, err = os.MkdirTemp("", "ayatori-nats-"); err != nil {
		return nil, err
	}
	if n.StoreDir == "" {
		n.StoreDir = filepath.Join(n.dir, "jetstream")
	}
	if n.Auth, err = NewNATSAuth(filepath.Join(n.dir, "auth")); err != nil {
		_ = os.RemoveAll(n.dir)
		return nil, err
	}
	if n.port == 0 {
		if n.port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if n.mon, err = FreePort(); err != nil {
		return nil, err
	}
	n.unreg = registerCleanup(n.Close)
	if err := n.Start(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Start starts the server on the same store and port (after Stop).
func (n *NATS) Start() error {
	if n.container != nil {
		return n.container.Start(context.Background())
	}
	if n.srv != nil && n.srv.Running() {
		return errors.New("nats: already running")
	}
	// The shipped configuration (deploy/nats nats.conf and auth.conf) with
	// this server's addresses, paths and keys.
	conf, err := n.Auth.render(n.dir, natsdeploy.Settings{ServerName: "ayatori-test",
		Client: fmt.Sprintf("127.0.0.1:%d", n.port), Monitor: fmt.Sprintf("127.0.0.1:%d", n.mon),
		StoreDir: n.StoreDir, NoSyncAlways: n.noSync})
	if err != nil {
		return err
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return errors.New("nats: server not ready for connections after 30s")
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return errors.New("nats: JetStream did not start")
	}
	n.srv = srv
	n.URL = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	return nil
}

// ClientOptions returns the NATS options of identity id (its NKey, inbox
// prefix and the server's CA) followed by extra.
func (n *NATS) ClientOptions(id journal.Identity, extra ...nats.Option) []nats.Option {
	return n.Auth.ClientOptions(id, extra...)
}

// Connect connects to the server as identity id.
func (n *NATS) Connect(id journal.Identity, extra ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(n.URL, n.ClientOptions(id, extra...)...)
}

// Stop shuts the server down and keeps the store (for restart tests).
func (n *NATS) Stop() {
	if n.container != nil {
		timeout := 15 * time.Second
		_ = n.container.Stop(context.Background(), &timeout)
		return
	}
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Kill stops a container server with SIGKILL (`docker stop -t 0`); its
// store stays for Start. The embedded server shares this process and cannot
// be killed: Kill reports false and does nothing.
func (n *NATS) Kill() bool {
	if n.container == nil {
		return false
	}
	timeout := time.Duration(0)
	_ = n.container.Stop(context.Background(), &timeout)
	return true
}

// SetSyncAlways changes sync_interval "always" for the next Start.
func (n *NATS) SetSyncAlways(on bool) { n.noSync = !on }

// Restart stops and starts the server on the same store and port.
func (n *NATS) Restart() error {
	n.Stop()
	return n.Start()
}

// Server returns the running embedded server (nil when stopped).
func (n *NATS) Server() *server.Server { return n.srv }

// Close stops the server and removes the temp dir it created.
func (n *NATS) Close() {
	if n.container != nil {
		_ = n.container.Terminate(context.Background())
		n.container = nil
	}
	n.Stop()
	if n.unreg != nil {
		n.unreg()
	}
	if n.dir != "" {
		// The configuration, keys and (unless the caller named one) the
		// store; a caller's StoreDir is elsewhere and stays.
		_ = os.RemoveAll(n.dir)
	}
}
