package integration

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// Forwarder is an in-process TCP forwarder on 127.0.0.1 (a random free
// port) to one target address, that a test can cut or freeze: Cut closes
// every open connection and closes each new one as soon as it is accepted
// (the client sees a reset or EOF, never the target), Restore forwards
// again; Freeze keeps every connection open and accepts new ones but
// forwards nothing until Thaw (a partition, or a frozen server: the
// client's requests go unanswered). It passes bytes through untouched
// (TLS goes end to end).
type Forwarder struct {
	// Addr is the listening address, 127.0.0.1:<port>.
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed *sync.Cond // signalled by Thaw, Cut and Close
	cut    bool
	frozen bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewForwarder starts a Forwarder to target (host:port).
func NewForwarder(target string) (*Forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forwarder{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	f.thawed = sync.NewCond(&f.mu)
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		refuse := f.cut || f.closed
		f.mu.Unlock()
		if refuse {
			abort(c)
			continue
		}
		f.wg.Add(1)
		go f.forward(c)
	}
}

// forward copies c to a new connection to the target and back until either
// side ends or Cut closes both.
func (f *Forwarder) forward(c net.Conn) {
	defer f.wg.Done()
	up, err := net.Dial("tcp", f.target)
	if err != nil {
		abort(c)
		return
	}
	if !f.track(c, up) {
		abort(c)
		_ = up.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				f.waitThawed()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	f.untrack(c, up)
}

// track registers an open pair; false when the forwarder was cut (or
// closed) meanwhile.
func (f *Forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut || f.closed {
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *Forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

// abort closes c with a reset (SO_LINGER 0) where it can.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Cut closes every open connection (with a reset) and refuses new ones
// until Restore.
func (f *Forwarder) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = true
	for c := range f.conns {
		abort(c)
	}
	f.thawed.Broadcast()
}

// Restore forwards new connections again.
func (f *Forwarder) Restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = false
}

// Freeze stops forwarding bytes in both directions, keeping every
// connection open, until Thaw.
func (f *Forwarder) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = true
}

// Thaw forwards again what Freeze held back, and what follows.
func (f *Forwarder) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = false
	f.thawed.Broadcast()
}

// waitThawed returns once the forwarder is not frozen (or is cut or
// closed: the write that follows then fails on the closed connection).
func (f *Forwarder) waitThawed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.frozen && !f.cut && !f.closed {
		f.thawed.Wait()
	}
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (f *Forwarder) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	for c := range f.conns {
		abort(c)
	}
	f.thawed.Broadcast()
	f.mu.Unlock()
	_ = f.ln.Close()
	f.wg.Wait()
}

// writeForwardedKubeconfig writes to path a copy of the kubeconfig at src
// whose clusters' servers point at a new Forwarder (same scheme, CA and
// credentials; the host becomes 127.0.0.1:<port>, which the envtest
// apiserver's serving certificate covers). Every cluster of src must name
// the same server.
func writeForwardedKubeconfig(src, path string) (*Forwarder, error) {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return nil, err
	}
	var target string
	for name, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("kubeconfig cluster %s: server %q is not a URL", name, c.Server)
		}
		if target != "" && target != u.Host {
			return nil, fmt.Errorf("kubeconfig %s names more than one server", src)
		}
		target = u.Host
	}
	if target == "" {
		return nil, errors.New("kubeconfig " + src + " has no cluster")
	}
	f, err := NewForwarder(target)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Clusters {
		u, _ := url.Parse(c.Server)
		u.Host = f.Addr
		c.Server = u.String()
		c.TLSServerName = "" // the certificate covers 127.0.0.1 itself
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
