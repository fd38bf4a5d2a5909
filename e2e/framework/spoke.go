package framework

import (
	"context"
	"errors"
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

// SpokeOptions configure a spoke process (meshfed-spoke) on one cluster.
type SpokeOptions struct {
	// Name names the spoke in logs; default "spoke-<n>".
	Name string
	// ListenAddr is --listen-addr; default a free loopback address.
	ListenAddr string
	// Args are further flags (serving certificate, webhook configurations,
	// the hub's CA address...).
	Args []string
	// Env is added to the process environment.
	Env []string
}

// Spoke is a meshfed-spoke process: the workload cluster's webhooks and
// config-cluster shim, run from the built binary against a cluster's
// apiserver, as the spoke chart runs it in a pod.
type Spoke struct {
	name, addr string
	cmd        *exec.Cmd
	out        *prefixWriter
	logFile    *os.File
	done       chan struct{}
	waitErr    error

	stopMu   sync.Mutex // guards stopDone and stopErr
	stopDone bool
	stopErr  error
}

// SpokeStopGrace is how long Stop waits after SIGTERM before SIGKILL.
const SpokeStopGrace = 10 * time.Second

// StartSpoke starts meshfed-spoke against cluster (its kubeconfig) and
// returns once the process runs; wait for its /readyz yourself (it serves
// TLS with the certificate the Args name). The spoke lives until Stop or
// Fleet.Stop.
func (f *Fleet) StartSpoke(ctx context.Context, cluster *Cluster, opts SpokeOptions) (*Spoke, error) {
	bin, err := TestSpokeBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("framework: spoke binary: %w", err)
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, errors.New("framework: fleet is stopped")
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("spoke-%d", len(f.spokes))
	}
	f.mu.Unlock()
	if opts.ListenAddr == "" {
		addrs, err := freeAddrs(1)
		if err != nil {
			return nil, fmt.Errorf("framework: choosing a spoke address: %w", err)
		}
		opts.ListenAddr = addrs[0]
	}
	logDir := filepath.Join(f.dir, "spokes")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, opts.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("framework: spoke log: %w", err)
	}
	var sink io.Writer = logFile
	if f.opts.LogOutput != nil {
		sink = io.MultiWriter(logFile, f.opts.LogOutput)
	}
	out := newPrefixWriter(sink, "["+opts.Name+"] ")
	args := append([]string{"--kubeconfig=" + cluster.KubeconfigFile(), "--listen-addr=" + opts.ListenAddr}, opts.Args...)
	// Not CommandContext: ctx bounds the start only.
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childSysProcAttr()
	cmd.WaitDelay = 2 * time.Second
	fmt.Fprintf(out, "starting %s %s\n", bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("framework: starting spoke %s: %w", opts.Name, err)
	}
	s := &Spoke{name: opts.Name, addr: opts.ListenAddr, cmd: cmd, out: out, logFile: logFile, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		out.Flush()
		fmt.Fprintf(out, "exited: %v\n", exitDescription(err))
		out.Flush()
		_ = logFile.Close()
		s.waitErr = err
		close(s.done)
	}()
	f.mu.Lock()
	stopped := f.stopped
	if !stopped {
		f.spokes = append(f.spokes, s)
	}
	f.mu.Unlock()
	if stopped {
		return nil, errors.Join(errors.New("framework: fleet stopped while starting a spoke"), s.Stop())
	}
	return s, nil
}

// Addr returns the spoke's --listen-addr (HTTPS).
func (s *Spoke) Addr() string { return s.addr }

// Exited is closed when the process has exited; Err then says how.
func (s *Spoke) Exited() <-chan struct{} { return s.done }

// Err returns how the process exited, once Exited is closed.
func (s *Spoke) Err() error {
	select {
	case <-s.done:
		return s.waitErr
	default:
		return nil
	}
}

// Stop sends SIGTERM to the spoke's process group, waits up to
// SpokeStopGrace, then kills it. Idempotent.
func (s *Spoke) Stop() error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopDone {
		return s.stopErr
	}
	s.stopDone = true
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(SpokeStopGrace):
		s.stopErr = fmt.Errorf("framework: spoke %s did not exit within %s of SIGTERM; killed", s.name, SpokeStopGrace)
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	return s.stopErr
}
