package framework

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// IstiodOptions describe an Istio pilot-discovery process run as an
// external istiod against the fleet, for benchmarks that compare the hub
// with it on the same clusters.
type IstiodOptions struct {
	// Binary is Istio's pilot-discovery (`make istiod`). Required.
	Binary string
	// Env is extra environment on top of what StartIstiod sets, e.g.
	// PILOT_ENABLE_EDS_DEBOUNCE=false.
	Env []string
}

// Istiod is a running pilot-discovery child process.
type Istiod struct {
	xdsAddr, httpAddr, monAddr string
	http                       *http.Client
	*process
}

// StartIstiod runs pilot-discovery outside Kubernetes as an external
// istiod: the config cluster by kubeconfig (where the framework installed
// Istio's CRDs), remote clusters by the same remote secrets a hub reads
// (namespace RemoteSecretNamespace), plaintext xDS on a free loopback port,
// no CA and no webhooks, logging at warn. It runs in a working directory
// of its own under the fleet's, where it writes what it would write under
// / in a pod. Stop ends it; so does the fleet's Stop. Call WaitReady before
// using it.
func (f *Fleet) StartIstiod(ctx context.Context, opts IstiodOptions) (*Istiod, error) {
	if opts.Binary == "" {
		return nil, errors.New("framework: IstiodOptions.Binary is required")
	}
	addrs, err := freeAddrs(4)
	if err != nil {
		return nil, fmt.Errorf("framework: choosing istiod addresses: %w", err)
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, errors.New("framework: fleet is stopped")
	}
	name := fmt.Sprintf("istiod-%d", len(f.istiods))
	f.mu.Unlock()
	dir := filepath.Join(f.dir, "istiod", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	args := []string{
		"discovery",
		"--kubeconfig=" + f.config.KubeconfigFile(),
		"--grpcAddr=" + addrs[0],
		"--httpAddr=" + addrs[1],
		"--monitoringAddr=" + addrs[2],
		"--httpsAddr=" + addrs[3],
		"--secureGRPCAddr=",
		"--domain=cluster.local",
		"--clusterID=config",
		"--log_output_level=default:warn,ads:warn,delta:warn,model:error,kube:warn,krt:warn",
	}
	env := append([]string{
		"POD_NAMESPACE=" + RemoteSecretNamespace,
		"POD_NAME=" + name,
		"REVISION=default",
		"ENABLE_CA_SERVER=false",
		"INJECTION_WEBHOOK_CONFIG_NAME=",
		"VALIDATION_WEBHOOK_CONFIG_NAME=",
		// Or it probes cloud metadata addresses to find its platform.
		"CLOUD_PLATFORM=none",
		"ISTIOD_CUSTOM_HOST=localhost",
	}, opts.Env...)
	proc, err := f.startProcessIn(dir, name, filepath.Join(f.dir, "istiod"), name, opts.Binary, args, env)
	if err != nil {
		return nil, err
	}
	i := &Istiod{xdsAddr: addrs[0], httpAddr: addrs[1], monAddr: addrs[2], process: proc,
		http: &http.Client{Timeout: 10 * time.Second}}
	f.mu.Lock()
	stopped := f.stopped
	if !stopped {
		f.istiods = append(f.istiods, i)
	}
	f.mu.Unlock()
	if stopped {
		return nil, errors.Join(errors.New("framework: fleet stopped while starting istiod"), i.Stop())
	}
	return i, nil
}

// XDSAddr is its plaintext xDS address (istiod's 15010).
func (i *Istiod) XDSAddr() string { return i.xdsAddr }

// DebugURL serves /debug/pprof and /ready (istiod's 8080).
func (i *Istiod) DebugURL() string { return "http://" + i.httpAddr }

// MetricsURL is its Prometheus endpoint (istiod's 15014).
func (i *Istiod) MetricsURL() string { return "http://" + i.monAddr + "/metrics" }

// PID is its process ID.
func (i *Istiod) PID() int { return i.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the exit, killing it after 15 s.
func (i *Istiod) Stop() error { return i.terminate(syscall.SIGTERM, 15*time.Second) }

// WaitReady polls its /ready until it answers 200; it fails early, with
// the end of its log, when the process exits.
func (i *Istiod) WaitReady(ctx context.Context) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, i.DebugURL()+"/ready", nil)
		if err != nil {
			return err
		}
		resp, err := i.http.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/ready: %d", resp.StatusCode)
		}
		last = err
		select {
		case <-i.done:
			return fmt.Errorf("framework: %s exited (%s) before ready; log tail:\n%s", i.what, exitDescription(i.waitErr), i.logTail(40))
		case <-ctx.Done():
			return fmt.Errorf("framework: %s not ready: %w (last: %w)", i.what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func (i *Istiod) logTail(n int) string {
	b, err := os.ReadFile(i.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
