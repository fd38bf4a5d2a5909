package framework

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child of the fleet: a built meshfed binary (a hub or a
// spoke) in a process group of its own, its output in a log file (each
// line prefixed with its name, and copied to the fleet's LogOutput). It
// lives until terminate, not until the context that started it.
type process struct {
	what    string // "hub hub-0", for errors
	cmd     *exec.Cmd
	logPath string
	out     *prefixWriter
	done    chan struct{}
	waitErr error // set before done is closed

	stopMu   sync.Mutex // guards stopDone and stopErr
	stopDone bool
	stopErr  error
}

// startProcess starts bin with args and env (added to the environment),
// logging to <logDir>/<name>.log.
func (f *Fleet) startProcess(what, logDir, name, bin string, args, env []string) (*process, error) {
	return f.startProcessIn("", what, logDir, name, bin, args, env)
}

// startProcessIn is startProcess in working directory dir ("": the test
// process's).
func (f *Fleet) startProcessIn(dir, what, logDir, name, bin string, args, env []string) (*process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("framework: %s log: %w", what, err)
	}
	var sink io.Writer = logFile
	if f.opts.LogOutput != nil {
		sink = io.MultiWriter(logFile, f.opts.LogOutput)
	}
	out := newPrefixWriter(sink, "["+name+"] ")
	// Not CommandContext: the start's context does not bound the process.
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childSysProcAttr()
	cmd.WaitDelay = 2 * time.Second // don't hang on a grandchild holding the pipe
	fmt.Fprintf(out, "starting %s %s\n", bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("framework: starting %s: %w", what, err)
	}
	p := &process{what: what, cmd: cmd, logPath: logPath, out: out, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		out.Flush()
		fmt.Fprintf(out, "exited: %v\n", exitDescription(err))
		out.Flush()
		_ = logFile.Close()
		p.waitErr = err
		close(p.done)
	}()
	return p, nil
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// terminate sends sig to the process group and waits for the exit; after
// grace (unless sig is SIGKILL) it kills the group and reports that the
// process did not stop. A process that already exited is not an error.
// Idempotent.
func (p *process) terminate(sig syscall.Signal, grace time.Duration) error {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	if p.stopDone {
		return p.stopErr
	}
	p.stopDone = true
	if !p.running() {
		return nil
	}
	// Negative PID: the whole process group (Setpgid made it the child's PID).
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-p.done:
			return nil
		case <-time.After(grace):
			p.stopErr = fmt.Errorf("framework: %s did not exit within %s of %s; killed (its goroutines are at the end of its log)", p.what, grace, sig)
			// A Go program dumps every goroutine's stack on SIGQUIT: what
			// held up its shutdown, for the log.
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(2 * time.Second):
			}
		}
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	return p.stopErr
}
