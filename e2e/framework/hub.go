package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
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
	// XDSAddr and MonitoringAddr pin the listen addresses, for example to
	// restart a replica where its clients expect it. Default: a free port
	// on 127.0.0.1 each.
	XDSAddr, MonitoringAddr string
	// GossipAddr and PeerAddr pin the federation listen addresses, CAAddr
	// the workload CA's. Default: a free port on 127.0.0.1 each.
	GossipAddr, PeerAddr, CAAddr string
	// Join lists hubs whose gossip address this hub joins (--join).
	Join []*Hub
	// GossipKeyFile is passed as --gossip-key-file when set.
	GossipKeyFile string
}

// Hub is a running meshfed-hub child process.
type Hub struct {
	opts       HubOptions
	gossipAddr string
	peerAddr   string
	id         string
	cmd        *exec.Cmd
	xdsAddr    string
	monAddr    string
	logPath    string
	logFile    *os.File
	out        *prefixWriter
	http       *http.Client
	done       chan struct{}
	waitErr    error // set before done is closed
	stopMu     sync.Mutex
	stopErr    error
	stopDone   bool
}

// StartHub starts a meshfed-hub process with
//
//	--kubeconfig=<config cluster kubeconfig> --namespace=istio-system
//	--xds-addr=<XDSAddr> --monitoring-addr=<MonitoringAddr> --replica-id=<id>
//
// followed by opts.Args. It returns once the process runs; call WaitReady
// before using it. The process is in its own process group and is killed
// if the test process dies. Its output goes to <fleet dir>/hubs/<id>.log
// and to FleetOptions.LogOutput.
func (f *Fleet) StartHub(ctx context.Context, opts HubOptions) (*Hub, error) {
	bin, err := f.hubBinary(ctx)
	if err != nil {
		return nil, err
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
	addrs, err := freeAddrs(5)
	if err != nil {
		return nil, fmt.Errorf("framework: choosing hub addresses: %w", err)
	}
	for i, a := range []*string{&opts.XDSAddr, &opts.MonitoringAddr, &opts.GossipAddr, &opts.PeerAddr, &opts.CAAddr} {
		if *a == "" {
			*a = addrs[i]
		}
	}

	logDir := filepath.Join(f.dir, "hubs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	logPath := filepath.Join(logDir, opts.ReplicaID+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("framework: hub log: %w", err)
	}
	var sink io.Writer = logFile
	if f.opts.LogOutput != nil {
		sink = io.MultiWriter(logFile, f.opts.LogOutput)
	}
	out := newPrefixWriter(sink, "["+opts.ReplicaID+"] ")

	args := append([]string{
		"--kubeconfig=" + f.config.KubeconfigFile(),
		"--namespace=" + RemoteSecretNamespace,
		"--xds-addr=" + opts.XDSAddr,
		"--monitoring-addr=" + opts.MonitoringAddr,
		"--replica-id=" + opts.ReplicaID,
		"--gossip-addr=" + opts.GossipAddr,
		"--peer-addr=" + opts.PeerAddr,
		"--ca-addr=" + opts.CAAddr,
	}, opts.Args...)
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
	// Not CommandContext: ctx bounds the start only, the hub lives until
	// Stop, Kill or Fleet.Stop.
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childSysProcAttr()
	cmd.WaitDelay = 2 * time.Second // don't hang on a grandchild holding the pipe
	fmt.Fprintf(out, "starting %s %s\n", bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("framework: starting hub %s: %w", opts.ReplicaID, err)
	}
	h := &Hub{
		id: opts.ReplicaID, cmd: cmd, xdsAddr: opts.XDSAddr, monAddr: opts.MonitoringAddr,
		gossipAddr: opts.GossipAddr, peerAddr: opts.PeerAddr, opts: opts,
		logPath: logPath, logFile: logFile, out: out,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		done: make(chan struct{}),
	}
	go func() {
		err := cmd.Wait()
		out.Flush()
		fmt.Fprintf(out, "exited: %v\n", exitDescription(err))
		out.Flush()
		_ = logFile.Close()
		h.waitErr = err
		close(h.done)
	}()

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
func (h *Hub) Trustz(ctx context.Context) (*Trustz, error) {
	body, err := h.getOK(ctx, "/debug/trustz")
	if err != nil {
		return nil, err
	}
	tz := &Trustz{}
	if err := json.Unmarshal(body, tz); err != nil {
		return nil, fmt.Errorf("framework: hub %s: decoding /debug/trustz: %w", h.id, err)
	}
	return tz, nil
}

// Trustz is the hub's /debug/trustz document.
type Trustz struct {
	Roots []TrustzRoot `json:"roots"`
}

// TrustzRoot is one root of the hub's trust bundle.
type TrustzRoot struct {
	TrustDomain string `json:"trustDomain"`
	Fingerprint string `json:"fingerprint"`
	Source      string `json:"source"`
	// RetireAt is set while the root retires after a rotation.
	RetireAt string `json:"retireAt"`
	PEM      string `json:"pem"`
}

// Has reports whether the bundle holds the root of fingerprint fp.
func (tz *Trustz) Has(fp string) bool {
	return slices.ContainsFunc(tz.Roots, func(r TrustzRoot) bool { return r.Fingerprint == fp })
}

// PeerAddr returns the hub's replica-to-replica gRPC address.
func (h *Hub) PeerAddr() string { return h.peerAddr }

// Options returns the options the hub was started with (with the chosen
// addresses filled in), e.g. to restart it in place.
func (h *Hub) Options() HubOptions { return h.opts }

// Federationz returns the hub's /debug/federationz document.
func (h *Hub) Federationz(ctx context.Context) (*Federationz, error) {
	body, err := h.getOK(ctx, "/debug/federationz")
	if err != nil {
		return nil, err
	}
	fz := &Federationz{}
	if err := json.Unmarshal(body, fz); err != nil {
		return nil, fmt.Errorf("framework: hub %s: decoding /debug/federationz: %w", h.id, err)
	}
	return fz, nil
}

// Federationz is the hub's /debug/federationz document.
type Federationz struct {
	Self          string `json:"self"`
	WatchReplicas int    `json:"watchReplicas"`
	Members       []struct {
		ID        string `json:"id"`
		PeerAddr  string `json:"peerAddr"`
		Connected bool   `json:"connected"`
	} `json:"members"`
	Clusters []struct {
		ID      model.ClusterID `json:"id"`
		Owners  []string        `json:"owners"`
		Version struct {
			Term  uint64 `json:"term"`
			Seq   uint64 `json:"seq"`
			Owner string `json:"owner"`
		} `json:"version"`
	} `json:"clusters"`
	Suspects []string `json:"suspects"`
}

// Owners returns the owners this hub reports for cluster id.
func (f *Federationz) Owners(id model.ClusterID) []string {
	for _, c := range f.Clusters {
		if c.ID == id {
			return c.Owners
		}
	}
	return nil
}

// XDSAddr returns the host:port of the hub's xDS (ADS) server.
func (h *Hub) XDSAddr() string { return h.xdsAddr }

// MonitoringURL returns the base URL of the hub's monitoring server
// (/readyz, /metrics, /debug/registryz), e.g. http://127.0.0.1:40123.
func (h *Hub) MonitoringURL() string { return "http://" + h.monAddr }

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
func (h *Hub) Running() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the hub's process group and waits for it to exit;
// after HubStopGrace it sends SIGKILL and reports that the hub did not stop
// gracefully. A hub that already exited is not an error. Idempotent.
func (h *Hub) Stop() error { return h.terminate(syscall.SIGTERM, HubStopGrace) }

// Kill sends SIGKILL to the hub's process group and waits for it to exit,
// to simulate a crash. Idempotent.
func (h *Hub) Kill() error { return h.terminate(syscall.SIGKILL, 0) }

func (h *Hub) terminate(sig syscall.Signal, grace time.Duration) error {
	h.stopMu.Lock()
	defer h.stopMu.Unlock()
	if h.stopDone {
		return h.stopErr
	}
	h.stopDone = true
	if !h.Running() {
		return nil
	}
	// Negative PID: the whole process group (Setpgid made it the hub's PID).
	_ = syscall.Kill(-h.cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-h.done:
			return nil
		case <-time.After(grace):
			h.stopErr = fmt.Errorf("framework: hub %s did not exit within %s of %s; killed", h.id, grace, sig)
		}
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	<-h.done
	return h.stopErr
}

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

// Metrics returns the hub's /metrics in the Prometheus text format.
func (h *Hub) Metrics(ctx context.Context) (string, error) {
	b, err := h.getOK(ctx, "/metrics")
	return string(b), err
}

// Registryz fetches and decodes /debug/registryz.
func (h *Hub) Registryz(ctx context.Context) (*Registryz, error) {
	b, err := h.getOK(ctx, "/debug/registryz")
	if err != nil {
		return nil, err
	}
	rz := &Registryz{}
	if err := json.Unmarshal(b, rz); err != nil {
		return nil, fmt.Errorf("framework: hub %s: decoding /debug/registryz: %w", h.id, err)
	}
	return rz, nil
}

// ClusterState is the state of a remote cluster as the hub reports it.
type ClusterState string

// The states of a remote cluster in /debug/registryz.
const (
	ClusterSyncing     ClusterState = "syncing"
	ClusterSynced      ClusterState = "synced"
	ClusterUnreachable ClusterState = "unreachable"
	ClusterInvalid     ClusterState = "invalid"
)

// Registryz is the hub's /debug/registryz document: the remote clusters it
// knows, remote secrets it rejected, and the merged service registry.
type Registryz struct {
	// Replica is the answering hub's replica ID.
	Replica string `json:"replica"`
	// Clusters lists every cluster named by a remote secret.
	Clusters []RegistryzCluster `json:"clusters"`
	// SecretErrors lists remote secrets that yield no cluster at all.
	SecretErrors []RegistryzSecretError `json:"secretErrors"`
	// Services is the merged registry, one entry per hostname.
	Services []RegistryzService `json:"services"`
}

// RegistryzCluster is one remote cluster in Registryz.
type RegistryzCluster struct {
	// ID is the cluster ID (the secret's data key).
	ID model.ClusterID `json:"id"`
	// Secret is the remote secret that names the cluster, "<ns>/<name>".
	Secret string `json:"secret"`
	// State is syncing, synced, unreachable or invalid.
	State ClusterState `json:"state"`
	// Error explains an unreachable or invalid cluster.
	Error string `json:"error"`
	// Generation counts the hub's syncs of the cluster.
	Generation uint64 `json:"generation"`
	// Services counts the services the cluster contributes.
	Services int `json:"services"`
	// Endpoints counts the endpoints the cluster contributes.
	Endpoints int `json:"endpoints"`
}

// RegistryzSecretError is a remote secret the hub could not use at all.
type RegistryzSecretError struct {
	// Secret is "<ns>/<name>".
	Secret string `json:"secret"`
	// Error says what is wrong with it.
	Error string `json:"error"`
}

// RegistryzService is one service of the merged registry, with the
// endpoints of every cluster.
type RegistryzService struct {
	// Hostname is <svc>.<ns>.svc.cluster.local.
	Hostname model.Hostname `json:"hostname"`
	// Ports are the service ports.
	Ports []RegistryzPort `json:"ports"`
	// Endpoints are the endpoints of all clusters.
	Endpoints []RegistryzEndpoint `json:"endpoints"`
}

// RegistryzPort is a service port.
type RegistryzPort struct {
	// Name is the port name EndpointSlice ports refer to.
	Name string `json:"name"`
	// Port is the port clients dial.
	Port uint32 `json:"port"`
	// Protocol is GRPC, HTTP, HTTP2 or TCP.
	Protocol model.Protocol `json:"protocol"`
}

// RegistryzEndpoint is one endpoint of a service.
type RegistryzEndpoint struct {
	// Cluster is the cluster the endpoint lives in.
	Cluster model.ClusterID `json:"cluster"`
	// Address is the Pod IP (in a fleet, 10.X.A.B; see LocalAddr).
	Address string `json:"address"`
	// Locality is that of the endpoint's Node.
	Locality model.Locality `json:"locality"`
	// Ready is the EndpointSlice's ready condition.
	Ready bool `json:"ready"`
	// ServiceAccount is the backing Pod's service account.
	ServiceAccount string `json:"serviceAccount"`
	// Pod names the backing Pod.
	Pod string `json:"pod"`
	// Ports maps service port names to target ports.
	Ports map[string]uint32 `json:"ports"`
}

// Cluster returns the entry of cluster id.
func (r *Registryz) Cluster(id model.ClusterID) (RegistryzCluster, bool) {
	for _, c := range r.Clusters {
		if c.ID == id {
			return c, true
		}
	}
	return RegistryzCluster{}, false
}

// Service returns the entry of the service with hostname h.
func (r *Registryz) Service(h model.Hostname) (RegistryzService, bool) {
	for _, s := range r.Services {
		if s.Hostname == h {
			return s, true
		}
	}
	return RegistryzService{}, false
}

// ReadyEndpoints returns the service's ready endpoints in cluster, or in
// every cluster when cluster is empty.
func (s RegistryzService) ReadyEndpoints(cluster model.ClusterID) []RegistryzEndpoint {
	var out []RegistryzEndpoint
	for _, e := range s.Endpoints {
		if e.Ready && (cluster == "" || e.Cluster == cluster) {
			out = append(out, e)
		}
	}
	return out
}
