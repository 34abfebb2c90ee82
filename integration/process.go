package integration

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one server child process. Its output goes to a log file so a
// failed start can report the tail of the log.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	waitErr error
}

// processSpec describes how to start a child process.
type processSpec struct {
	name    string
	path    string
	args    []string
	env     []string // appended to os.Environ()
	dir     string
	logPath string
	// credential runs the child as another OS user (root only).
	credential *syscall.Credential
}

func startProcess(spec processSpec) (*process, error) {
	lf, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", spec.name, err)
	}
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdout = lf
	cmd.Stderr = lf
	// Pdeathsig: if the test binary dies (even by SIGKILL) the kernel kills
	// the server too, so no process outlives its harness.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: spec.credential}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", spec.name, spec.path, err)
	}
	p := &process{name: spec.name, cmd: cmd, logPath: spec.logPath, logFile: lf, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether p was started and has not ended (nil: false).
func (p *process) running() bool { return p != nil && !p.exited() }

// livePID returns the PID of a running process (0: nil or ended).
func (p *process) livePID() int {
	if !p.running() {
		return 0
	}
	return p.pid()
}

// waitExit waits up to timeout for the process to end and reports whether
// it did (nil: true).
func (p *process) waitExit(timeout time.Duration) bool {
	if p == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends sig, waits up to grace for exit, then SIGKILLs the process group.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill stops the process abruptly (SIGKILL), as a crash would.
func (p *process) kill() {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logTail returns the last n lines of the process log.
func (p *process) logTail(n int) string { return fileTail(p.logPath, n) }

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startError wraps a start failure with the tail of the server log.
func (p *process) startError(err error) error {
	return fmt.Errorf("%s did not start: %w\n--- last lines of %s ---\n%s", p.name, err, p.logPath, p.logTail(30))
}

// waitReady polls check until it succeeds, the process exits or timeout passes.
func (p *process) waitReady(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return p.startError(fmt.Errorf("process exited early: %v", p.waitErr))
		}
		if last = check(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p.startError(fmt.Errorf("not ready after %s: %w", timeout, last))
}

// pollReady polls check every 100 ms until it succeeds or timeout passes
// (servers without a local process: containers).
func pollReady(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The cleanup registry stops every server on SIGINT/SIGTERM, so an
// interrupted `go test` leaves no process or temp dir behind.
var (
	cleanupMu   sync.Mutex
	cleanupFns  = map[int]func(){}
	cleanupNext int
	signalOnce  sync.Once
)

// OwnSignals tells the harness that the program handles SIGINT and SIGTERM
// itself and closes what it started (the demo's `make dev` ends with
// Ctrl-C and exits 0). Call it before starting anything; afterwards the
// harness installs no signal handler of its own (parent-death signals
// still stop every child if the program dies).
func OwnSignals() { signalOnce.Do(func() {}) }

func registerCleanup(fn func()) (unregister func()) {
	signalOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			s := <-ch
			fmt.Fprintf(os.Stderr, "integration: %v received, stopping servers\n", s)
			runAllCleanups()
			os.Exit(130)
		}()
	})
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	id := cleanupNext
	cleanupNext++
	cleanupFns[id] = fn
	return func() {
		cleanupMu.Lock()
		defer cleanupMu.Unlock()
		delete(cleanupFns, id)
	}
}

func runAllCleanups() {
	cleanupMu.Lock()
	fns := make([]func(), 0, len(cleanupFns))
	for id := len(cleanupFns) + cleanupNext; id >= 0; id-- {
		if fn, ok := cleanupFns[id]; ok {
			fns = append(fns, fn)
		}
	}
	cleanupFns = map[int]func(){}
	cleanupMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Tail returns the last n lines of a log file, for failure messages.
func Tail(path string, n int) string { return fileTail(path, n) }
