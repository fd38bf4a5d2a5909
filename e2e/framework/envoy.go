//go:build linux

package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// EnvoyOptions configures StartEnvoy and ValidateEnvoy.
type EnvoyOptions struct {
	// Binary is upstream Envoy; required (TestEnvoyBinary reads it from
	// the environment).
	Binary string
	// Name names the Envoy in errors and logs.
	Name string
	// Dir receives bootstrap.pb, envoy.log and admin.addr; required, and
	// one per Envoy (StartTestEnvoy makes one).
	Dir string
	// Bootstrap is written as a binary proto, which, unlike JSON, can hold
	// an Any of a type Go does not know. StartEnvoy gives a copy without
	// an admin address one on 127.0.0.1:0.
	Bootstrap *bootstrapv3.Bootstrap
	// LogLevel is Envoy's --log-level; empty is "info".
	LogLevel string
	// Concurrency is Envoy's worker threads; 0 is Envoy's default (one per
	// core), which many Envoys on one machine do not want.
	Concurrency int
}

func (o *EnvoyOptions) defaults() error {
	if o.Binary == "" || o.Dir == "" || o.Bootstrap == nil {
		return errors.New("framework: EnvoyOptions needs Binary, Dir and Bootstrap")
	}
	if o.Name == "" {
		o.Name = "envoy"
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	return nil
}

// args are Envoy's flags for o, its bootstrap written to o.Dir.
func (o *EnvoyOptions) args(b *bootstrapv3.Bootstrap) ([]string, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("framework: envoy %s bootstrap: %w", o.Name, err)
	}
	path := filepath.Join(o.Dir, "bootstrap.pb")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, fmt.Errorf("framework: envoy %s bootstrap: %w", o.Name, err)
	}
	args := []string{"-c", path, "--disable-hot-restart", "--log-level", o.LogLevel}
	if o.Concurrency > 0 {
		args = append(args, "--concurrency", strconv.Itoa(o.Concurrency))
	}
	return args, nil
}

// ValidateEnvoy runs `envoy --mode validate` on opts.Bootstrap and returns
// Envoy's output; the error is Envoy's refusal (or failure to run).
func ValidateEnvoy(ctx context.Context, opts EnvoyOptions) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", err
	}
	args, err := opts.args(opts.Bootstrap)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, opts.Binary, append([]string{"--mode", "validate"}, args...)...).CombinedOutput()
	return string(out), err
}

// Envoy is a running upstream Envoy on a bootstrap of the test's own, with
// no pilot-agent in front (a Sidecar is the Istio way). Many may run side
// by side: hot restart is off, so they share no memory, and unless the
// bootstrap says otherwise each admin listens on an ephemeral port of
// 127.0.0.1.
type Envoy struct {
	opts    EnvoyOptions
	cmd     *exec.Cmd
	logPath string
	admin   string // host:port
	done    chan struct{}
	waitErr error // set before done is closed
	stop    sync.Once
}

// envoyStopGrace is how long Stop waits after SIGTERM; Envoy exits at once
// on it, so a longer wait is a hung process.
const envoyStopGrace = 5 * time.Second

// StartEnvoy starts Envoy and returns once its admin answers; its output
// goes to envoy.log in opts.Dir. It runs until Stop, not until ctx ends
// (ctx bounds the start). An Envoy that exits first fails the start with
// the end of its log.
func StartEnvoy(ctx context.Context, opts EnvoyOptions) (*Envoy, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	b := opts.Bootstrap
	if b.GetAdmin().GetAddress() == nil {
		b = proto.Clone(b).(*bootstrapv3.Bootstrap)
		b.Admin = &bootstrapv3.Admin{Address: SocketAddress("127.0.0.1", 0)}
	}
	args, err := opts.args(b)
	if err != nil {
		return nil, err
	}
	adminPath := filepath.Join(opts.Dir, "admin.addr")
	args = append(args, "--admin-address-path", adminPath)
	e := &Envoy{opts: opts, logPath: filepath.Join(opts.Dir, "envoy.log"), done: make(chan struct{})}
	log, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("framework: envoy %s log: %w", opts.Name, err)
	}
	e.cmd = exec.Command(opts.Binary, args...)
	e.cmd.Stdout, e.cmd.Stderr = log, log
	e.cmd.SysProcAttr = childSysProcAttr() // no Envoy outlives a killed test
	if err := e.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("framework: starting envoy %s: %w", opts.Name, err)
	}
	go func() {
		e.waitErr = e.cmd.Wait()
		_ = log.Close()
		close(e.done)
	}()
	if err := e.awaitAdmin(ctx, adminPath); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// awaitAdmin waits for the address Envoy writes once its admin listens,
// then for an answer from it. The address alone is not enough: Envoy
// writes it before it builds the bootstrap's clusters and listeners, and
// a bootstrap it refuses ends it a moment later. The admin answers only
// once the main loop runs, past that point.
func (e *Envoy) awaitAdmin(ctx context.Context, path string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	last := errors.New("no admin address yet")
	for {
		if e.admin == "" {
			if addr, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(addr)) > 0 {
				e.admin = string(bytes.TrimSpace(addr))
			}
		}
		if e.admin != "" {
			if _, last = e.Admin(ctx, "/server_info"); last == nil {
				return nil
			}
		}
		select {
		case <-e.done:
			return fmt.Errorf("framework: envoy %s exited (%s) before its admin answered; log tail:\n%s",
				e.opts.Name, exitDescription(e.waitErr), e.LogTail(40))
		case <-ctx.Done():
			return fmt.Errorf("framework: envoy %s: no admin: %w (last: %w)", e.opts.Name, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// StartTestEnvoy starts Envoy with opts (Binary from the environment
// when empty, Dir a new temporary one) and stops it in t.Cleanup; after a
// failing test it logs the end of Envoy's output.
func StartTestEnvoy(t testing.TB, opts EnvoyOptions) *Envoy {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = TestEnvoyBinary(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := StartEnvoy(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping envoy %s: %v", opts.Name, err)
		}
		if t.Failed() {
			t.Logf("envoy %s log %s, last lines:\n%s", opts.Name, e.logPath, e.LogTail(60))
		}
	})
	return e
}

// TestEnvoyBinary returns $MESHFED_ENVOY_BIN. Envoy cannot be built here,
// so an unset or missing binary fails the test: a skip would hide that
// nothing was checked. It is SidecarBinaries' lookup, asked for Envoy
// only (it fills just what is empty).
func TestEnvoyBinary(t testing.TB) string {
	t.Helper()
	opts := SidecarOptions{PilotAgentBinary: "unused", BootstrapTemplate: "unused"}
	SidecarBinaries(t, &opts)
	return opts.EnvoyBinary
}

// AdminAddr is the admin's host:port.
func (e *Envoy) AdminAddr() string { return e.admin }

// Pid is the process ID (for /proc).
func (e *Envoy) Pid() int { return e.cmd.Process.Pid }

// LogPath is where Envoy's output goes.
func (e *Envoy) LogPath() string { return e.logPath }

// LogTail returns the last n lines of Envoy's output.
func (e *Envoy) LogTail(n int) string {
	b, err := os.ReadFile(e.logPath)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), n)
}

// lastLines returns the last n lines of s, without the final newline.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Admin GETs path (e.g. "/stats?filter=…", "/config_dump", "/memory")
// from Envoy's admin; an answer other than 200 is an error.
func (e *Envoy) Admin(ctx context.Context, path string) ([]byte, error) {
	b, err := HTTPGet(ctx, nil, "http://"+e.admin+path, "")
	if err != nil {
		return nil, fmt.Errorf("framework: envoy %s admin: %w", e.opts.Name, err)
	}
	return b, nil
}

// Stop sends SIGTERM and waits, with SIGKILL after envoyStopGrace, which
// it reports. An Envoy that exited on its own is not an error here (the
// start, or the test's traffic, says so). Idempotent.
func (e *Envoy) Stop() error {
	var err error
	e.stop.Do(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
			return
		case <-time.After(envoyStopGrace):
		}
		_ = e.cmd.Process.Kill()
		<-e.done
		err = fmt.Errorf("framework: envoy %s did not exit within %s of SIGTERM; killed", e.opts.Name, envoyStopGrace)
	})
	return err
}

// HTTPGet returns the body of GET url, sent with Host host (the URL's when
// empty) by c (http.DefaultClient when nil); an answer other than 200 is
// an error holding the body. ctx bounds the call.
func HTTPGet(ctx context.Context, c *http.Client, url, host string) ([]byte, error) {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// Bootstrap building blocks, for tests that write Envoy's configuration
// themselves.

// SocketAddress is the TCP address ip:port.
func SocketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// PipeAddress is the Unix socket at path.
func PipeAddress(path string) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}}
}

// HTTP2ProtocolOptions are a cluster's typed_extension_protocol_options
// that make it speak HTTP/2 to its endpoints, as gRPC needs.
func HTTP2ProtocolOptions() map[string]*anypb.Any {
	a, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		panic(err) // a known message type always packs
	}
	return map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": a}
}

// GRPCCluster is a static cluster of one endpoint, addr, spoken to over
// HTTP/2: the shape of pilot-agent's xds-grpc and sds-grpc clusters.
func GRPCCluster(name string, addr *corev3.Address) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                          name,
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:                durationpb.New(time.Second),
		TypedExtensionProtocolOptions: HTTP2ProtocolOptions(),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			}}}},
		},
	}
}

// ADSConfig is an aggregated (ADS) gRPC config source over cluster.
func ADSConfig(cluster string) *corev3.ApiConfigSource {
	return &corev3.ApiConfigSource{
		ApiType:             corev3.ApiConfigSource_GRPC,
		TransportApiVersion: corev3.ApiVersion_V3,
		GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster},
		}}},
	}
}
