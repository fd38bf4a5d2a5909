package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// HubStopGrace is how long Hub.Stop waits after SIGTERM before SIGKILL.
const HubStopGrace = 5 * time.Second

// HubOptions describes one hub replica process.
type HubOptions struct {
	// ReplicaID is passed as --replica-id and prefixes the hub's log lines.
	// Default "hub-<n>", n counting hubs started by the fleet.
	ReplicaID string
	// Args are extra flags, appended after the ones the framework sets.
	Args []string
	// Env is extra environment (KEY=value) on top of the test process's.
	Env []string
	// PlaintextXDS opens the hub's plaintext, unauthenticated xDS port
	// (--xds-addr), which the hub and its chart keep closed by default.
	// Proxies and clients dial the authenticated port, CAAddr, as in a
	// cluster; a test opens this one only where it says why (load
	// generators whose hundreds of streams measure the control plane, not
	// TLS handshakes; baselines of other builds). Pinning XDSAddr, or
	// running another Binary, opens it too.
	PlaintextXDS bool
	// XDSAddr and MonitoringAddr pin the listen addresses, for example to
	// restart a replica where its clients expect it. Default: a free port
	// on ListenHost each (XDSAddr only with PlaintextXDS).
	XDSAddr, MonitoringAddr string
	// GossipAddr and PeerAddr pin the federation listen addresses, CAAddr
	// the workload CA's. Default: a free port on ListenHost each.
	GossipAddr, PeerAddr, CAAddr string
	// ListenHost is the address the default listen addresses are on.
	// Default 127.0.0.1, which Pods of a PodNetwork cannot reach (their
	// loopback is their own): hubs that serve sidecar Pods listen on
	// PodNetworkGateway, which the test process reaches too.
	ListenHost string
	// Join lists hubs whose gossip address this hub joins (--join).
	Join []*Hub
	// GossipKeyFile is passed as --gossip-key-file when set.
	GossipKeyFile string
	// DebugAuth keeps the monitoring port's authentication on (the hub's
	// default). Default off (--debug-auth=false): the tests read /debug
	// documents and the console without tokens, except the test of that
	// authentication.
	DebugAuth bool
	// MonitoringTLS serves the monitoring port over TLS (--monitoring-tls,
	// the CA port's certificate): MonitoringURL is https, and the
	// framework's own reads (readiness, metrics) do not verify the serving
	// certificate, as a kubelet's HTTPS probe does not.
	MonitoringTLS bool
	// Binary is the meshfed-hub binary of this replica, for a benchmark
	// that runs another build beside the fleet's (FleetOptions.HubBinary)
	// one. Default: the fleet's.
	Binary string
}

// Hub is a running meshfed-hub child process.
type Hub struct {
	opts       HubOptions
	gossipAddr string
	peerAddr   string
	id         string
	xdsAddr    string
	monAddr    string
	http       *http.Client
	fleet      *Fleet

	opMu sync.Mutex // operator credentials (xdsauth.go)
	op   *operator
	*process
}

// StartHub starts a meshfed-hub process with
//
//	--kubeconfig=<config cluster kubeconfig> --namespace=istio-system
//	--monitoring-addr=<MonitoringAddr> --replica-id=<id> --ca-addr=<CAAddr>
//	--xds-san=<host of CAAddr> (and --xds-addr=<XDSAddr> with PlaintextXDS)
//
// followed by opts.Args. It returns once the process runs; call WaitReady
// before using it. The process is in its own process group and is killed
// if the test process dies. Its output goes to <fleet dir>/hubs/<id>.log
// and to FleetOptions.LogOutput.
func (f *Fleet) StartHub(ctx context.Context, opts HubOptions) (*Hub, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = f.hubBinary(ctx); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, errors.New("framework: fleet is stopped")
	}
	if opts.ReplicaID == "" {
		opts.ReplicaID = fmt.Sprintf("hub-%d", len(f.hubs))
	}
	f.mu.Unlock()
	if opts.XDSAddr != "" || opts.Binary != "" {
		opts.PlaintextXDS = true
	}
	ports := []*string{&opts.MonitoringAddr, &opts.GossipAddr, &opts.PeerAddr, &opts.CAAddr}
	if opts.PlaintextXDS {
		ports = append(ports, &opts.XDSAddr)
	}
	var preset []string
	for _, a := range ports {
		if *a != "" {
			preset = append(preset, *a)
		}
	}
	addrs, err := freeAddrsOn(opts.ListenHost, len(ports), preset...)
	if err != nil {
		return nil, fmt.Errorf("framework: choosing hub addresses: %w", err)
	}
	for i, a := range ports {
		if *a == "" {
			*a = addrs[i]
		}
	}

	args := []string{
		"--kubeconfig=" + f.config.KubeconfigFile(),
		"--namespace=" + RemoteSecretNamespace,
		"--monitoring-addr=" + opts.MonitoringAddr,
		"--replica-id=" + opts.ReplicaID,
		"--gossip-addr=" + opts.GossipAddr,
		"--peer-addr=" + opts.PeerAddr,
		"--ca-addr=" + opts.CAAddr,
	}
	if opts.MonitoringTLS {
		args = append(args, "--monitoring-tls")
	}
	if opts.PlaintextXDS { // else the binary's default: closed
		args = append(args, "--xds-addr="+opts.XDSAddr)
	}
	if opts.Binary == "" {
		// Another build (a benchmark's baseline) may predate these flags
		// and the authentication the first turns off. The second certifies
		// the CA port for the address clients dial, as a deployment names
		// the address its proxies use.
		host, _, _ := net.SplitHostPort(opts.CAAddr)
		args = append(args, "--debug-auth="+strconv.FormatBool(opts.DebugAuth), "--xds-san="+host)
	}
	args = append(args, opts.Args...)
	if len(opts.Join) > 0 {
		var seeds []string
		for _, j := range opts.Join {
			seeds = append(seeds, j.GossipAddr())
		}
		args = append(args, "--join="+strings.Join(seeds, ","))
	}
	if opts.GossipKeyFile != "" {
		args = append(args, "--gossip-key-file="+opts.GossipKeyFile)
	}
	proc, err := f.startProcess("hub "+opts.ReplicaID, filepath.Join(f.dir, "hubs"), opts.ReplicaID, bin, args, opts.Env)
	if err != nil {
		return nil, err
	}
	h := &Hub{
		id: opts.ReplicaID, xdsAddr: opts.XDSAddr, monAddr: opts.MonitoringAddr,
		gossipAddr: opts.GossipAddr, peerAddr: opts.PeerAddr, opts: opts, process: proc, fleet: f,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: opts.MonitoringTLS}}}, //nolint:gosec // probes: see MonitoringTLS
	}

	f.mu.Lock()
	stopped := f.stopped
	if !stopped {
		f.hubs = append(f.hubs, h)
	}
	f.mu.Unlock()
	if stopped {
		return nil, errors.Join(errors.New("framework: fleet stopped while starting a hub"), h.Kill())
	}
	return h, nil
}

// freeAddrsOn is freeAddrs on host (default 127.0.0.1).
func freeAddrsOn(host string, n int, taken ...string) ([]string, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	return pickAddrs(func() (net.Listener, error) { return net.Listen("tcp", net.JoinHostPort(host, "0")) }, n, taken)
}

func exitDescription(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// ReplicaID returns the hub's --replica-id.
func (h *Hub) ReplicaID() string { return h.id }

// GossipAddr returns the hub's memberlist address.
func (h *Hub) GossipAddr() string { return h.gossipAddr }

// CAAddr returns the hub's workload CA address (TLS).
func (h *Hub) CAAddr() string { return h.opts.CAAddr }

// Trustz returns the hub's /debug/trustz document: the federated trust
// bundle, each root with its PEM.
func (h *Hub) Trustz(ctx context.Context) (*debugdoc.Trustz, error) {
	tz := &debugdoc.Trustz{}
	if err := h.getDoc(ctx, debugdoc.TrustzPath, tz); err != nil {
		return nil, err
	}
	return tz, nil
}

// PeerAddr returns the hub's replica-to-replica gRPC address.
func (h *Hub) PeerAddr() string { return h.peerAddr }

// Options returns the options the hub was started with (with the chosen
// addresses filled in), e.g. to restart it in place.
func (h *Hub) Options() HubOptions { return h.opts }

// Federationz returns the hub's /debug/federationz document.
func (h *Hub) Federationz(ctx context.Context) (*debugdoc.Federationz, error) {
	fz := &debugdoc.Federationz{}
	if err := h.getDoc(ctx, debugdoc.FederationzPath, fz); err != nil {
		return nil, err
	}
	return fz, nil
}

// XDSAddr returns the host:port of the hub's plaintext xDS (ADS) server,
// empty unless HubOptions.PlaintextXDS opened it. Clients dial CAAddr.
func (h *Hub) XDSAddr() string { return h.xdsAddr }

// MonitoringURL returns the base URL of the hub's monitoring server
// (/readyz, /metrics, /debug/registryz), e.g. http://127.0.0.1:40123.
func (h *Hub) MonitoringURL() string {
	if h.opts.MonitoringTLS {
		return "https://" + h.monAddr
	}
	return "http://" + h.monAddr
}

// LogPath returns the file that collects the hub's output.
func (h *Hub) LogPath() string { return h.logPath }

// Logs returns the hub's output so far.
func (h *Hub) Logs() (string, error) {
	b, err := os.ReadFile(h.logPath)
	if err != nil {
		return "", fmt.Errorf("framework: reading hub log: %w", err)
	}
	return string(b), nil
}

// PID returns the hub's process ID.
func (h *Hub) PID() int { return h.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (h *Hub) Exited() <-chan struct{} { return h.done }

// ExitErr returns how the process ended (nil for status 0); it must only be
// called after Exited is closed.
func (h *Hub) ExitErr() error {
	<-h.done
	return h.waitErr
}

// Running reports whether the process has not exited yet.
func (h *Hub) Running() bool { return h.running() }

// Stop sends SIGTERM to the hub's process group and waits for it to exit;
// after HubStopGrace it sends SIGKILL and reports that the hub did not stop
// gracefully. A hub that already exited is not an error. Idempotent.
func (h *Hub) Stop() error { return h.terminate(syscall.SIGTERM, HubStopGrace) }

// Kill sends SIGKILL to the hub's process group and waits for it to exit,
// to simulate a crash. Idempotent.
func (h *Hub) Kill() error { return h.terminate(syscall.SIGKILL, 0) }

// WaitReady polls GET /readyz until it answers 200. It fails early when the
// process exits, quoting the end of its log.
func (h *Hub) WaitReady(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		code, body, err := h.get(ctx, "/readyz")
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case err == nil:
			last = fmt.Errorf("/readyz: %d %s", code, strings.TrimSpace(string(body)))
		default:
			last = err
		}
		select {
		case <-h.done:
			return fmt.Errorf("framework: hub %s exited (%s) before ready; log tail:\n%s",
				h.id, exitDescription(h.waitErr), h.logTail(30))
		case <-ctx.Done():
			return fmt.Errorf("framework: hub %s not ready: %w (last: %w)", h.id, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func (h *Hub) logTail(n int) string {
	s, err := h.Logs()
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (h *Hub) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.MonitoringURL()+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

func (h *Hub) getOK(ctx context.Context, path string) ([]byte, error) {
	code, body, err := h.get(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("framework: hub %s GET %s: %w", h.id, path, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("framework: hub %s GET %s: status %d: %s", h.id, path, code, bytes.TrimSpace(body))
	}
	return body, nil
}

// HeapAlloc returns the hub's HeapAlloc right after a GC: its heap
// profile with gc=1 (the "# HeapAlloc = <bytes>" line of debug=1).
func (h *Hub) HeapAlloc(ctx context.Context) (uint64, error) {
	return HeapAllocAt(ctx, h.http, h.MonitoringURL())
}

// Goroutines returns how many goroutines the hub runs (its goroutine
// profile's total).
func (h *Hub) Goroutines(ctx context.Context) (int, error) {
	b, err := h.getOK(ctx, "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	v, err := profileValue(b, "goroutine profile: total ")
	if err != nil {
		return 0, fmt.Errorf("framework: hub %s goroutine profile: %w", h.id, err)
	}
	return int(v), nil
}

// profileValue returns the number after prefix on the first line of a
// debug=1 pprof profile that starts with it.
func profileValue(profile []byte, prefix string) (uint64, error) {
	for line := range strings.Lines(string(profile)) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %q line", strings.TrimSpace(prefix))
}

// Metrics returns the hub's /metrics in the Prometheus text format.
func (h *Hub) Metrics(ctx context.Context) (string, error) {
	b, err := h.getOK(ctx, "/metrics")
	return string(b), err
}

// Registryz fetches and decodes /debug/registryz.
func (h *Hub) Registryz(ctx context.Context) (*debugdoc.Registryz, error) {
	rz := &debugdoc.Registryz{}
	if err := h.getDoc(ctx, debugdoc.RegistryzPath, rz); err != nil {
		return nil, err
	}
	return rz, nil
}

// Configz fetches and decodes /debug/configz: every Istio config object
// the hub has read, with its state.
func (h *Hub) Configz(ctx context.Context) (*debugdoc.Configz, error) {
	cz := &debugdoc.Configz{}
	if err := h.getDoc(ctx, debugdoc.ConfigzPath, cz); err != nil {
		return nil, err
	}
	return cz, nil
}

// Spokez fetches and decodes /debug/spokez: every spoke of the fleet.
func (h *Hub) Spokez(ctx context.Context) (debugdoc.Spokez, error) {
	var sz debugdoc.Spokez
	if err := h.getDoc(ctx, debugdoc.SpokezPath, &sz); err != nil {
		return nil, err
	}
	return sz, nil
}

// getDoc fetches the JSON document at path and decodes it into v.
func (h *Hub) getDoc(ctx context.Context, path string, v any) error {
	b, err := h.getOK(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("framework: hub %s: decoding %s: %w", h.id, path, err)
	}
	return nil
}

// HeapAllocAt returns the HeapAlloc of the Go process whose pprof handlers
// are served at baseURL (http://host:port, without /debug/pprof) right
// after a GC: a meshfed hub's monitoring address, or istiod's debug port.
func HeapAllocAt(ctx context.Context, c *http.Client, baseURL string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("framework: heap profile of %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("framework: heap profile of %s: %w", baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("framework: heap profile of %s: status %d", baseURL, resp.StatusCode)
	}
	v, err := profileValue(b, "# HeapAlloc = ")
	if err != nil {
		return 0, fmt.Errorf("framework: heap profile of %s: %w", baseURL, err)
	}
	return v, nil
}
