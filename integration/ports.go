package integration

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 for a server the harness is
// about to start, reserved for the life of this process.
//
// The port is outside the kernel's ephemeral range, so no outgoing
// connection (a NATS node dialing its routes, a docker-proxy, a client)
// can take it between this pick and the server's bind, nor while a killed
// server is down before its restart on the same port. It is free when
// picked, never returned twice by this process, and locked against other
// test processes on the machine (an flock on a file under
// portLockDir, released when this process exits). Where no range below or
// above the ephemeral one is usable it falls back to a kernel-chosen port.
func FreePort() (int, error) {
	return FreePortOn("127.0.0.1")
}

// FreePortOn is FreePort for a server that listens on host (an address of
// this machine, such as the Docker bridge's gateway).
func FreePortOn(host string) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	if lo, hi, ok := portPool(); ok {
		for range 1000 {
			p := lo + rand.IntN(hi-lo+1)
			if portsTaken[p] {
				continue
			}
			if !reservePort(p) {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				continue // in use by something outside the harness; keep it reserved
			}
			l.Close()
			return p, nil
		}
	}
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsTaken[p] {
			portsTaken[p] = true
			return p, nil
		}
	}
	return 0, errors.New("FreePort: no free port")
}

var (
	portsMu    sync.Mutex
	portsTaken = map[int]bool{}
	portsLocks []*os.File // held open: an flock lasts as long as its file
)

// portPool is the range FreePort picks from: the 16,384 ports below the
// ephemeral range (never below 1024), else those above it.
func portPool() (lo, hi int, ok bool) {
	elo, ehi, err := ephemeralRange()
	if err != nil {
		return 0, 0, false
	}
	if elo-1 >= 1024+4096 {
		return max(1024, elo-16384), elo - 1, true
	}
	if ehi+1 <= 65535-4096 {
		return ehi + 1, 65535, true
	}
	return 0, 0, false
}

// reservePort marks p taken by this process and, where the lock directory
// is usable, takes an exclusive flock on its file so another test process
// skips it. It reports false when another process holds p.
func reservePort(p int) bool {
	portsTaken[p] = true
	dir := portLockDir()
	if err := os.MkdirAll(dir, os.ModeSticky|0o777); err != nil {
		return true
	}
	_ = os.Chmod(dir, os.ModeSticky|0o777) // past the umask: every user's test processes share it
	// Read-only is enough for flock, and opens another user's file.
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return !errors.Is(err, syscall.EWOULDBLOCK)
	}
	portsLocks = append(portsLocks, f)
	return true
}

// portLockEnv names the port lock directory for a child test binary whose
// TMPDIR is not its parent's (ChildTestEnv).
const portLockEnv = "AYATORI_PORT_LOCK_DIR"

// portLockDir is where FreePort's locks live: $AYATORI_PORT_LOCK_DIR, else
// $TMPDIR/ayatori-ports. Every test process on the machine shares it.
func portLockDir() string {
	if d := os.Getenv(portLockEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "ayatori-ports")
}

// ChildTestEnv is the environment for a child test binary that t starts
// and may kill before its cleanups run: this process's, with extra added,
// TMPDIR a directory of t's (whatever the killed child leaves there goes
// when t ends, envtest's directories included), and the port locks still
// shared with every other test process.
func ChildTestEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	env := append(os.Environ(), portLockEnv+"="+portLockDir(), "TMPDIR="+t.TempDir())
	return append(env, extra...)
}

// ephemeralRange reads the kernel's range of local ports for outgoing
// connections and port-0 listeners (/proc/sys/net/ipv4/ip_local_port_range),
// inclusive.
func ephemeralRange() (lo, hi int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("ip_local_port_range: unexpected %q", b)
	}
	if lo, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, err
	}
	if hi, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	return lo, hi, nil
}
