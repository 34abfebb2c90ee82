package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsdeploy "git.ddupan.top/panxiao81/ayatori/deploy/nats"
	"git.ddupan.top/panxiao81/ayatori/journal"
)

// NATSClusterOptions tune a JetStream cluster.
type NATSClusterOptions struct {
	// Name is the cluster name (default "ayatori-test").
	Name string
	// Size is the number of nodes (default 3).
	Size int
	// Log receives progress lines (nil: discard).
	Log func(format string, args ...any)
}

// NATSCluster is a JetStream cluster of nats-server processes on loopback:
// each node has its own file store with sync_interval "always" (as NewNATS),
// a client port, a route port and a monitoring port, all free ports chosen
// once and kept across restarts; every node lists every route. The nodes
// are real processes (the nats-server binary built by `make tools` at the
// go.mod version), so Kill is a real SIGKILL: no flush, no goodbye to the
// peers, as on a host crash.
type NATSCluster struct {
	// Name is the cluster name.
	Name string
	// Nodes are the servers, named n1, n2, ...
	Nodes []*NATSNode
	// Auth is the cluster's TLS material and journal identities (one CA
	// and certificate for every node, as deploy/ has one Secret).
	Auth *NATSAuth

	dir   string
	log   func(format string, args ...any)
	unreg func()

	mu sync.Mutex
	nc *nats.Conn // lazily opened helper connection for the JetStream API
}

// NATSNode is one server of a NATSCluster.
type NATSNode struct {
	// Name is the server_name (n1, n2, ...); JetStream reports leaders and
	// replicas by it.
	Name string
	// URL is the node's client URL, nats://127.0.0.1:<port>.
	URL string
	// MonitorURL is the node's HTTP monitoring endpoint.
	MonitorURL string
	// StoreDir is the node's JetStream store directory.
	StoreDir string
	// LogPath is the node's server log.
	LogPath string

	bin, conf string
	mu        sync.Mutex
	p         *process
	frozen    bool
}

// NewNATSCluster starts a JetStream cluster and waits until every node
// reports healthy (JetStream meta leader elected, every node current).
func NewNATSCluster(opts NATSClusterOptions) (_ *NATSCluster, err error) {
	if opts.Name == "" {
		opts.Name = "ayatori-test"
	}
	if opts.Size == 0 {
		opts.Size = 3
	}
	bin, err := ToolPath("nats-server")
	if err != nil {
		return nil, err
	}
	c := &NATSCluster{Name: opts.Name, log: opts.Log}
	if c.log == nil {
		c.log = func(string, ...any) {}
	}
	if c.dir, err = os.MkdirTemp("", "ayatori-natscluster-"); err != nil {
		return nil, err
	}
	c.unreg = registerCleanup(c.Close)
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.Auth, err = NewNATSAuth(filepath.Join(c.dir, "auth")); err != nil {
		return nil, err
	}
	type ports struct{ client, route, monitor int }
	ps := make([]ports, opts.Size)
	var routes []string
	for i := range ps {
		for _, p := range []*int{&ps[i].client, &ps[i].route, &ps[i].monitor} {
			if *p, err = FreePort(); err != nil {
				return nil, err
			}
		}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ps[i].route))
	}
	for i, p := range ps {
		n := &NATSNode{Name: fmt.Sprintf("n%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", p.client),
			MonitorURL: fmt.Sprintf("http://127.0.0.1:%d", p.monitor), bin: bin}
		nd := filepath.Join(c.dir, n.Name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return nil, err
		}
		n.StoreDir, n.LogPath = filepath.Join(nd, "jetstream"), filepath.Join(nd, "nats.log")
		// The shipped cluster configuration (deploy/nats nats-cluster.conf,
		// auth.conf): TLS for clients, mutual TLS on routes, the journal
		// identities; this node's addresses and paths.
		if n.conf, err = c.Auth.render(nd, natsdeploy.Settings{ServerName: n.Name, Cluster: true,
			Client: fmt.Sprintf("127.0.0.1:%d", p.client), Monitor: fmt.Sprintf("127.0.0.1:%d", p.monitor),
			ClusterListen: fmt.Sprintf("127.0.0.1:%d", p.route), Routes: routes, StoreDir: n.StoreDir}); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	start := time.Now()
	for _, n := range c.Nodes {
		if err := n.launch(); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		if err := n.WaitHealthy(60 * time.Second); err != nil {
			return nil, err
		}
	}
	c.log("NATS cluster %s: %d nodes healthy in %s", c.Name, len(c.Nodes), time.Since(start).Round(10*time.Millisecond))
	return c, nil
}

// URLs returns every node's client URL.
func (c *NATSCluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.URL
	}
	return out
}

// URL returns the comma-separated client URL list, as nats.Connect, the
// manager's --nats-url and ayatori-journal --server take it.
func (c *NATSCluster) URL() string { return strings.Join(c.URLs(), ",") }

// ClientOptions returns the NATS options of identity id followed by extra.
func (c *NATSCluster) ClientOptions(id journal.Identity, extra ...nats.Option) []nats.Option {
	return c.Auth.ClientOptions(id, extra...)
}

// Connect connects to the cluster (every node's URL) as identity id.
func (c *NATSCluster) Connect(id journal.Identity, extra ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(c.URL(), c.ClientOptions(id, extra...)...)
}

// Node returns the node named name (nil if none).
func (c *NATSCluster) Node(name string) *NATSNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// conn returns the helper connection (reconnecting to any node).
func (c *NATSCluster) conn() (*nats.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil && !c.nc.IsClosed() {
		return c.nc, nil
	}
	nc, err := c.Connect(journal.IdentityManager, nats.Name("ayatori-test-cluster-probe"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(2))
	if err != nil {
		return nil, err
	}
	c.nc = nc
	return nc, nil
}

// StreamInfo returns the stream's info through any reachable node.
func (c *NATSCluster) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	nc, err := c.conn()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.CachedInfo(), nil
}

// StreamLeader returns the node that leads the stream's Raft group now (an
// error while there is none, e.g. during an election).
func (c *NATSCluster) StreamLeader(ctx context.Context, stream string) (*NATSNode, error) {
	info, err := c.StreamInfo(ctx, stream)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("stream %s has no leader", stream)
	}
	n := c.Node(info.Cluster.Leader)
	if n == nil {
		return nil, fmt.Errorf("stream %s: leader %q is not a node of the cluster", stream, info.Cluster.Leader)
	}
	return n, nil
}

// WaitStreamLeader waits until the stream has a leader other than not
// (nil: any) on a running node, and returns it.
func (c *NATSCluster) WaitStreamLeader(ctx context.Context, stream string, not *NATSNode, timeout time.Duration) (*NATSNode, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l, err := c.StreamLeader(ctx, stream)
		switch {
		case err != nil:
			last = err
		case l == not:
			last = fmt.Errorf("stream %s: %s still leads", stream, l.Name)
		case !l.Running():
			last = fmt.Errorf("stream %s: leader %s is not running", stream, l.Name)
		default:
			return l, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no new stream leader after %s: %v", timeout, last)
}

// WaitStreamCurrent waits until the stream has a leader and every replica
// is online and current (caught up), e.g. after a node came back.
func (c *NATSCluster) WaitStreamCurrent(ctx context.Context, stream string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := errors.New("not checked")
	for time.Now().Before(deadline) && ctx.Err() == nil {
		info, err := c.StreamInfo(ctx, stream)
		if err != nil {
			last = err
		} else if info.Cluster == nil || info.Cluster.Leader == "" {
			last = errors.New("no leader")
		} else if len(info.Cluster.Replicas) != info.Config.Replicas-1 {
			last = fmt.Errorf("%d peers besides the leader", len(info.Cluster.Replicas))
		} else {
			last = nil
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					last = fmt.Errorf("replica %s: current=%v offline=%v lag=%d", r.Name, r.Current, r.Offline, r.Lag)
				}
			}
			if last == nil {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("stream %s not current after %s: %v", stream, timeout, last)
}

// ClientNode returns the running node a client whose connection name starts
// with prefix is connected to (nil if none), from the nodes' /connz.
func (c *NATSCluster) ClientNode(prefix string) *NATSNode {
	cl := http.Client{Timeout: time.Second}
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		resp, err := cl.Get(n.MonitorURL + "/connz?limit=4096")
		if err != nil {
			continue
		}
		var connz struct {
			Connections []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&connz)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, conn := range connz.Connections {
			if strings.HasPrefix(conn.Name, prefix) {
				return n
			}
		}
	}
	return nil
}

// MetaLeader returns the node that leads the JetStream meta group now (it
// answers consumer and stream creates), from a running node's /jsz; an
// error while there is none.
func (c *NATSCluster) MetaLeader() (*NATSNode, error) {
	cl := http.Client{Timeout: time.Second}
	var last error = errors.New("no node running")
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		resp, err := cl.Get(n.MonitorURL + "/jsz")
		if err != nil {
			last = err
			continue
		}
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		switch {
		case err != nil:
			last = err
		case jsz.Meta == nil || jsz.Meta.Leader == "":
			last = fmt.Errorf("nats %s knows no meta leader", n.Name)
		case c.Node(jsz.Meta.Leader) == nil:
			last = fmt.Errorf("meta leader %q is not a node of the cluster", jsz.Meta.Leader)
		default:
			return c.Node(jsz.Meta.Leader), nil
		}
	}
	return nil, last
}

// ConsumerLeader returns the node leading a durable consumer of the stream.
func (c *NATSCluster) ConsumerLeader(ctx context.Context, stream, consumer string) (*NATSNode, error) {
	nc, err := c.conn()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	info := cons.CachedInfo()
	if info.Cluster == nil || c.Node(info.Cluster.Leader) == nil {
		return nil, fmt.Errorf("consumer %s has no leader", consumer)
	}
	return c.Node(info.Cluster.Leader), nil
}

// Close stops every node and removes the cluster's files.
func (c *NATSCluster) Close() {
	c.mu.Lock()
	if c.nc != nil {
		c.nc.Close()
	}
	c.mu.Unlock()
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.unreg != nil {
		c.unreg()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func (n *NATSNode) launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil && !n.p.exited() {
		return fmt.Errorf("nats %s: already running", n.Name)
	}
	p, err := startProcess(processSpec{name: "nats-server " + n.Name, path: n.bin, args: []string{"--config", n.conf},
		dir: filepath.Dir(n.conf), logPath: n.LogPath})
	if err != nil {
		return err
	}
	n.p, n.frozen = p, false
	return p.waitReady(30*time.Second, func() error { return n.health("js-enabled-only=true") })
}

// health asks the node's /healthz with the given query.
func (n *NATSNode) health(query string) error {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(n.MonitorURL + "/healthz?" + query)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nats %s: /healthz %s", n.Name, resp.Status)
	}
	return nil
}

// WaitHealthy waits until the node's /healthz reports it healthy: JetStream
// up, the meta group has a leader and this node is current with it and with
// every stream and consumer it hosts (a restarted node has caught up).
func (n *NATSNode) WaitHealthy(timeout time.Duration) error {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("nats %s is not running", n.Name)
	}
	return p.waitReady(timeout, func() error { return n.health("") })
}

// Running reports whether the node's process runs (frozen counts as running).
func (n *NATSNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p != nil && !n.p.exited()
}

// PID returns the node's process ID (0 when not running).
func (n *NATSNode) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil || n.p.exited() {
		return 0
	}
	return n.p.pid()
}

// Kill stops the node with SIGKILL, as a host crash would: nothing is
// flushed and the peers are not told. The store stays for Start.
func (n *NATSNode) Kill() {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	p.kill()
}

// Stop shuts the node down gracefully (SIGTERM; SIGKILL after 15 s) and
// keeps its store for Start.
func (n *NATSNode) Stop() {
	n.mu.Lock()
	p, frozen := n.p, n.frozen
	n.mu.Unlock()
	if p != nil && frozen && !p.exited() {
		_ = syscall.Kill(p.pid(), syscall.SIGCONT)
	}
	p.stop(syscall.SIGTERM, 15*time.Second)
}

// Start starts a stopped or killed node again on the same store and ports
// and waits until it accepts clients with JetStream enabled (WaitHealthy
// waits for it to catch up).
func (n *NATSNode) Start() error { return n.launch() }

// Freeze suspends the node (SIGSTOP): its sockets stay open but it answers
// nothing, as a node behind a network partition looks to its peers and
// clients. Thaw resumes it.
func (n *NATSNode) Freeze() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil || n.p.exited() {
		return fmt.Errorf("nats %s is not running", n.Name)
	}
	n.frozen = true
	return syscall.Kill(n.p.pid(), syscall.SIGSTOP)
}

// Thaw resumes a frozen node (SIGCONT).
func (n *NATSNode) Thaw() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil || n.p.exited() {
		return fmt.Errorf("nats %s is not running", n.Name)
	}
	n.frozen = false
	return syscall.Kill(n.p.pid(), syscall.SIGCONT)
}
