package framework

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	addr string
	*process
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
	args := append([]string{"--kubeconfig=" + cluster.KubeconfigFile(), "--listen-addr=" + opts.ListenAddr}, opts.Args...)
	proc, err := f.startProcess("spoke "+opts.Name, filepath.Join(f.dir, "spokes"), opts.Name, bin, args, opts.Env)
	if err != nil {
		return nil, err
	}
	s := &Spoke{addr: opts.ListenAddr, process: proc}
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
func (s *Spoke) Stop() error { return s.terminate(syscall.SIGTERM, SpokeStopGrace) }
