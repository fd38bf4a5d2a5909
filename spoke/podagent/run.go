package podagent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/pkg/agent"
)

// shutdownTimeout bounds the HTTP server's graceful shutdown.
const shutdownTimeout = 5 * time.Second

// Reasons the readiness endpoint gives before it is ready.
const (
	reasonNoCert      = "waiting for the first certificate"
	reasonNoBootstrap = "writing the xDS bootstrap"
)

// Run runs the Pod's agent until ctx ends, then returns nil; see the
// package documentation. It returns early with an error when Options are
// invalid (wrapping ErrInvalidOptions), the CA roots or the labels cannot
// be read, the readiness address cannot be listened on, or the bootstrap
// cannot be written. Failures to reach the CA are logged and retried.
func Run(ctx context.Context, opts Options) error {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		if opts.Listener != nil {
			_ = opts.Listener.Close()
		}
		return err
	}
	log := opts.Log
	ln := opts.Listener
	closeLn := func() {
		if ln != nil {
			_ = ln.Close()
		}
	}
	roots, err := readRoots(opts.CARootsFile)
	if err != nil {
		closeLn()
		return err
	}
	labels, err := readLabels(opts.LabelsFile)
	if err != nil {
		closeLn()
		return err
	}
	bootstrap, err := Bootstrap(opts, labels)
	if err != nil {
		closeLn()
		return err
	}
	a, err := agent.New(agent.Options{
		CAAddr:     opts.CAAddress,
		CARoots:    roots,
		ServerName: opts.CAServerName,
		ClusterID:  opts.ClusterID,
		TokenFunc:  agent.TokenFile(opts.TokenFile),
		Identity:   opts.Identity(),
		Dir:        opts.CertDir,
		TTL:        opts.CertTTL,
		Log:        log.WithName("agent"),
	})
	if err != nil {
		closeLn()
		return fmt.Errorf("podagent: %w", err)
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", opts.ReadyAddr); err != nil {
			return fmt.Errorf("podagent: readiness address: %w", err)
		}
	}

	r := &readiness{}
	r.set(reasonNoCert)
	mux := http.NewServeMux()
	mux.Handle("GET "+ReadyPath, r)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards failures
		failures []error
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
		cancel()
	}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fail(fmt.Errorf("podagent: readiness server: %w", err))
		}
	})
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			fail(fmt.Errorf("podagent: %w", err))
		}
	})
	log.Info("agent started", "identity", opts.Identity(), "ca", opts.CAAddress,
		"discovery", opts.DiscoveryAddress, "ready", ln.Addr().String())

	select {
	case <-ctx.Done():
	case <-a.Ready():
		r.set(reasonNoBootstrap)
		if err := writeFileAtomic(opts.BootstrapPath, bootstrap); err != nil {
			r.set("writing the xDS bootstrap failed: " + err.Error())
			fail(err)
			break
		}
		r.setReady()
		log.Info("ready: first certificate in place and xDS bootstrap written",
			"certDir", opts.CertDir, "bootstrap", opts.BootstrapPath)
	}
	<-ctx.Done()

	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(failures...)
}

// readRoots reads the PEM roots of path into a pool, at least one.
func readRoots(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("podagent: CA roots: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("podagent: CA roots: no PEM certificate in %s", path)
	}
	return pool, nil
}

// readiness is the /healthz/ready handler: 200 "ready" once ready, else
// 503 with the reason.
type readiness struct {
	// reason is why the agent is not ready; empty once it is.
	reason atomic.Pointer[string]
}

func (r *readiness) set(reason string) { r.reason.Store(&reason) }

func (r *readiness) setReady() { r.set("") }

// ServeHTTP answers the readiness probe.
func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if reason := *r.reason.Load(); reason != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintln(w, reason)
		return
	}
	_, _ = fmt.Fprintln(w, "ready")
}
