package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/testcontainers/testcontainers-go"
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
	// URL is the client URL, nats://127.0.0.1:<port>.
	URL string
	// StoreDir is the JetStream store directory.
	StoreDir string

	port   int
	noSync bool
	ownDir bool
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
	if n.StoreDir == "" {
		if n.dir, err = os.MkdirTemp("", "ayatori-nats-"); err != nil {
			return nil, err
		}
		n.ownDir = true
		n.StoreDir = filepath.Join(n.dir, "jetstream")
	}
	if n.port == 0 {
		if n.port, err = FreePort(); err != nil {
			return nil, err
		}
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
	opts := &server.Options{
		ServerName: "ayatori-test",
		Host:       "127.0.0.1",
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.StoreDir,
		SyncAlways: !n.noSync, // sync_interval: always
		NoSigs:     true,
		NoLog:      true,
		// The HTTP monitoring endpoint stays off; tests read state via the API.
	}
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
	n.URL = srv.ClientURL()
	return nil
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
	if n.ownDir {
		_ = os.RemoveAll(n.dir)
	}
}
