package opensandbox

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// proc is one process group the server started (a command's bash and
// everything it spawned without leaving the group).
type proc struct {
	pgid   int
	exited chan struct{} // closed once the group leader was reaped
}

func (p *proc) leaderReaped() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill signals the whole group. Once the leader is reaped the group id could
// in theory be reused, so the group is then only signalled while processes
// of this session still belong to it.
func (p *proc) kill(sig syscall.Signal) {
	if p.leaderReaped() && !p.groupAlive() {
		return
	}
	_ = syscall.Kill(-p.pgid, sig)
}

// groupAlive tells whether a process of this session is in the group.
func (p *proc) groupAlive() bool {
	if !p.leaderReaped() {
		return true
	}
	sid, err := unix.Getsid(0)
	if err != nil {
		return syscall.Kill(-p.pgid, 0) == nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-p.pgid, 0) == nil
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 4 || f[0] == "Z" {
			continue
		}
		if f[2] == strconv.Itoa(p.pgid) && f[3] == strconv.Itoa(sid) {
			return true
		}
	}
	return false
}

type outLine struct{ stream, text string }

// command is execd's record of one POST /command.
type command struct {
	id         string
	content    string
	background bool
	startedAt  time.Time
	proc       *proc // nil when the process did not start
	// restarted is closed when the execd that ran the command restarts.
	restarted <-chan struct{}

	mu         sync.Mutex
	running    bool
	exitCode   *int
	errMsg     string
	finishedAt *time.Time
	lines      []outLine // foreground: stdout/stderr lines in arrival order
	output     []byte    // stdout and stderr bytes as read (background: one pipe)
	notify     chan struct{}
	done       bool // process exited and its output was drained
}

func (c *command) changed() {
	close(c.notify)
	c.notify = make(chan struct{})
}

type runCommandRequest struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd,omitempty"`
	Background bool              `json:"background,omitempty"`
	Timeout    *int64            `json:"timeout,omitempty"`
	UID        *int              `json:"uid,omitempty"`
	GID        *int              `json:"gid,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
}

// commandEnv is PATH and HOME (the sandbox dir), then the sandbox's create
// env, then the command's envs (later wins).
func commandEnv(home string, sandboxEnv, envs map[string]string) []string {
	m := map[string]string{"PATH": os.Getenv("PATH"), "HOME": home}
	if m["PATH"] == "" {
		m["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	maps.Copy(m, sandboxEnv)
	maps.Copy(m, envs)
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// startCommand runs `bash -c` in a new process group of a live sandbox. The
// returned command is registered even when the process failed to start (err
// is then the start error).
func (s *Server) startCommand(sandboxID string, req runCommandRequest) (*command, error) {
	c := &command{
		id:         "cmd-" + randHex(8),
		content:    req.Command,
		background: req.Background,
		startedAt:  time.Now().UTC(),
		running:    true,
		notify:     make(chan struct{}),
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW := outR, outW
	if !req.Background {
		if errR, errW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			return nil, err
		}
	}
	closeAll := func() {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			f.Close()
		}
	}

	s.mu.Lock()
	sb := s.sandboxes[sandboxID]
	if s.closed || sb == nil {
		s.mu.Unlock()
		closeAll()
		return nil, fmt.Errorf("sandbox %s is gone", sandboxID)
	}
	c.restarted = sb.restart
	cmd := exec.Command("bash", "-c", req.Command)
	cmd.Dir = sb.dir
	if req.Cwd != "" {
		cmd.Dir = req.Cwd
	}
	cmd.Env = commandEnv(sb.dir, sb.req.Env, req.Envs)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		one := 255
		now := time.Now().UTC()
		c.running, c.exitCode, c.errMsg, c.finishedAt, c.done = false, &one, err.Error(), &now, true
		sb.commands[c.id] = c
		s.mu.Unlock()
		closeAll()
		return c, err
	}
	p := &proc{pgid: cmd.Process.Pid, exited: make(chan struct{})}
	c.proc = p
	sb.commands[c.id] = c
	sb.procs[p] = true
	s.procs[p] = true
	s.started[sandboxID]++
	s.procWG.Add(1)
	s.mu.Unlock()
	outW.Close()
	if errW != outW {
		errW.Close()
	}

	var readers sync.WaitGroup
	read := func(f *os.File, stream string) {
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer f.Close()
			c.readStream(f, stream)
		}()
	}
	read(outR, "stdout")
	if errR != outR {
		read(errR, "stderr")
	}
	var timer *time.Timer
	if req.Timeout != nil && *req.Timeout > 0 {
		timer = time.AfterFunc(time.Duration(*req.Timeout)*time.Millisecond, func() { p.kill(syscall.SIGKILL) })
	}

	go func() {
		defer s.procWG.Done()
		werr := cmd.Wait()
		close(p.exited)
		if timer != nil {
			timer.Stop()
		}
		// Output is complete when every writer closed the pipes; a process
		// the command left behind may keep them open, so wait only briefly.
		drained := make(chan struct{})
		go func() { readers.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(200 * time.Millisecond):
		}
		code, msg := 0, ""
		if werr != nil {
			code, msg = 1, werr.Error()
			var ee *exec.ExitError
			if errors.As(werr, &ee) {
				code = ee.ExitCode()
			}
		}
		now := time.Now().UTC()
		c.mu.Lock()
		c.running, c.exitCode, c.errMsg, c.finishedAt, c.done = false, &code, msg, &now, true
		c.changed()
		c.mu.Unlock()
		if !p.groupAlive() {
			s.mu.Lock()
			delete(s.procs, p)
			delete(sb.procs, p)
			s.mu.Unlock()
		}
	}()
	return c, nil
}

// readStream appends what a pipe yields to the command: raw bytes to output
// and, for foreground commands, non-empty lines (a last line without a
// newline included).
func (c *command) readStream(f *os.File, stream string) {
	buf := make([]byte, 32<<10)
	var partial []byte
	emit := func(line []byte) {
		line = bytes.TrimRight(line, "\r")
		if len(line) > 0 && !c.background {
			c.lines = append(c.lines, outLine{stream: stream, text: string(line)})
		}
	}
	for {
		n, err := f.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.output = append(c.output, buf[:n]...)
			partial = append(partial, buf[:n]...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				emit(partial[:i])
				partial = partial[i+1:]
			}
			c.changed()
			c.mu.Unlock()
		}
		if err != nil {
			c.mu.Lock()
			if len(partial) > 0 {
				emit(partial)
				c.changed()
			}
			c.mu.Unlock()
			return
		}
	}
}

// interrupt sends SIGTERM to the command's group and SIGKILL 2s later if
// its leader is still running.
func (s *Server) interrupt(c *command) {
	p := c.proc
	if p == nil || p.leaderReaped() {
		return
	}
	p.kill(syscall.SIGTERM)
	go func() {
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
			p.kill(syscall.SIGKILL)
		case <-s.closing:
		}
	}()
}

// RestartExecd simulates an execd restart in a sandbox: all its command
// state is forgotten (status and logs answer 404 afterwards) and the command
// streams still open are cut (connection closed mid-stream); with
// killProcesses its process groups are killed and waited for. The access
// token and the sandbox itself stay.
func (s *Server) RestartExecd(sandboxID string, killProcesses bool) error {
	s.mu.Lock()
	sb := s.sandboxes[sandboxID]
	if sb == nil {
		s.mu.Unlock()
		return fmt.Errorf("opensandbox: no live sandbox %q", sandboxID)
	}
	sb.commands = map[string]*command{}
	close(sb.restart)
	sb.restart = make(chan struct{})
	procs := slices.Collect(maps.Keys(sb.procs))
	s.mu.Unlock()
	if !killProcesses {
		return nil
	}
	deadline := time.After(5 * time.Second)
	for _, p := range procs {
		p.kill(syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-deadline:
			return fmt.Errorf("opensandbox: process group %d survived SIGKILL", p.pgid)
		}
	}
	return nil
}
