package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/xds"
)

var (
	floorClients = flag.Int("floor.clients", 100, "BenchmarkADSFloor: ADS clients (SotW and Delta alternating, as BenchmarkScale's)")
	floorChanges = flag.Int("floor.changes", 300, "BenchmarkADSFloor: pushes measured")
)

// floorEnv, set, makes the test binary an ADS floor server (TestMain).
const floorEnv = "MESHFED_BENCH_ADS_FLOOR"

// floorName is the one assignment a floor server serves.
const floorName = "outbound|80||floor.bench.svc.cluster.local"

// floorEndpoints is the size of the floor's assignment, a service of
// BenchmarkScale's.
const floorEndpoints = 20

// BenchmarkADSFloor measures what a push to connected proxies costs a Go
// xDS server that does nothing else: the floor under meshfed's and
// istiod's CPU per proxy update in BenchmarkScale. The test binary runs
// again as a server process (floorServer) with the hub's gRPC server
// options, which answers every ADS stream, SotW or Delta, with one load
// assignment of floorEndpoints endpoints and sends it again, encoded once
// per push, to every stream on each push; it reads and drops the ACKs.
// The same clients as BenchmarkScale's connect (framework.LoadClient,
// SotW and Delta alternating, Delta ones with pilot-agent's windows), and
// -floor.changes pushes flip the first endpoint's health one at a time,
// each until every client has it. Reported: the server process's CPU per
// proxy update (cpu-µs/update) and its read and write system calls per
// update, to set beside BenchmarkScale's figures of the same run size.
func BenchmarkADSFloor(b *testing.B) {
	srv := startFloorServer(b)
	cfg := scaleConfig{clusters: 1, clients: *floorClients, changes: *floorChanges, endpoints: floorEndpoints}
	ctx := b.Context()
	for b.Loop() {
		fl := newScaleFlock(cfg)
		fl.names = func(int) []string { return []string{floorName} }
		fl.probe = floorName
		if err := fl.dial(ctx, []cpReplica{srv.replica}); err != nil {
			b.Fatal(err)
		}
		if err := fl.waitSynced(ctx); err != nil {
			b.Fatal(err)
		}
		cpu0 := srv.replica.cpu()
		reads0, writes0, _ := framework.ProcessSyscalls(srv.replica.pid)
		var lat []time.Duration
		for k := range cfg.changes {
			want := floorEndpoints - (k+1)%2
			fl.expect(want)
			t := time.Now()
			if err := srv.push(ctx, want); err != nil {
				b.Fatal(err)
			}
			_, last, err := fl.waitChange(ctx, scaleChangeBudget)
			if err != nil {
				b.Fatalf("push %d: %v", k, err)
			}
			lat = append(lat, last.Sub(t))
		}
		cpu := srv.replica.cpu() - cpu0
		reads, writes, _ := framework.ProcessSyscalls(srv.replica.pid)
		fl.close()
		updates := float64(cfg.changes * cfg.clients)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(cpu.Microseconds())/updates, "cpu-µs/update")
		b.ReportMetric(float64(cpu.Seconds())*100/float64(cfg.changes), "cpu-s/100changes")
		b.ReportMetric(float64(reads-reads0+writes-writes0)/updates, "syscalls/update")
		b.ReportMetric(msOf(percentile(lat, 50)), "change-p50-ms")
		b.Logf("%d pushes to %d clients: %.1f µs of the server's CPU and %.2f reads and %.2f writes per proxy update; all clients p50 %.1f ms",
			cfg.changes, cfg.clients, float64(cpu.Microseconds())/updates,
			float64(reads-reads0)/updates, float64(writes-writes0)/updates, msOf(percentile(lat, 50)))
	}
}

// floorProcess is a running floor server.
type floorProcess struct {
	replica cpReplica
	pushURL string
}

// push makes the server send the assignment with healthy endpoints of
// floorEndpoints healthy to every stream.
func (p floorProcess) push(ctx context.Context, healthy int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.pushURL+"?healthy="+strconv.Itoa(healthy), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("push: %s: %s", resp.Status, body)
	}
	return nil
}

// startFloorServer runs the test binary as a floor server and reads its
// addresses from the first line it prints.
func startFloorServer(b *testing.B) floorProcess {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), floorEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("floor server: %v", err)
	}
	var xdsAddr, pushAddr string
	if _, err := fmt.Sscanf(line, "xds=%s push=%s", &xdsAddr, &pushAddr); err != nil {
		b.Fatalf("floor server printed %q: %v", line, err)
	}
	return floorProcess{
		replica: cpReplica{pid: cmd.Process.Pid, xdsAddr: xdsAddr},
		pushURL: "http://" + pushAddr + "/push",
	}
}

// serveADSFloor is the floor server's main: ADS on one loopback port,
// POST /push?healthy=N on another; it prints both and serves until killed.
func serveADSFloor() error {
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fs := newFloorServer()
	gs := grpc.NewServer(xds.GRPCOptions()...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, fs)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /push", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("healthy"))
		if err != nil || n < 0 || n > floorEndpoints {
			http.Error(w, "healthy: want 0.."+strconv.Itoa(floorEndpoints), http.StatusBadRequest)
			return
		}
		if err := fs.push(n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	fmt.Printf("xds=%s push=%s\n", xl.Addr(), pl.Addr())
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(xl) }()
	go func() { errc <- (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(pl) }()
	return <-errc
}

// floorServer is the least an ADS server can do for a push: one encoded
// assignment, sent to every stream.
type floorServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	mu      sync.Mutex // guards version, current and streams
	version int
	current *anypb.Any
	streams map[chan struct{}]struct{} // each stream's push signal
}

func newFloorServer() *floorServer {
	fs := &floorServer{streams: map[chan struct{}]struct{}{}}
	if err := fs.push(floorEndpoints); err != nil {
		panic(err) // encoding a fixed assignment cannot fail
	}
	return fs
}

func (fs *floorServer) push(healthy int) error {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: floorName}
	loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "region-1", Zone: "zone-1"}}
	for i := range floorEndpoints {
		status := corev3.HealthStatus_HEALTHY
		if i >= healthy {
			status = corev3.HealthStatus_UNHEALTHY
		}
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HealthStatus: status,
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: ip.String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}},
		})
	}
	cla.Endpoints = []*endpointv3.LocalityLbEndpoints{loc}
	a, err := anypb.New(cla)
	if err != nil {
		return err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.version++
	fs.current = a
	for sig := range fs.streams {
		select {
		case sig <- struct{}{}:
		default: // a push is pending on that stream already
		}
	}
	return nil
}

// subscribe registers a stream for pushes; the returned function ends it.
func (fs *floorServer) subscribe() (chan struct{}, func()) {
	sig := make(chan struct{}, 1)
	fs.mu.Lock()
	fs.streams[sig] = struct{}{}
	fs.mu.Unlock()
	return sig, func() {
		fs.mu.Lock()
		delete(fs.streams, sig)
		fs.mu.Unlock()
	}
}

func (fs *floorServer) snapshot() (string, *anypb.Any) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return strconv.Itoa(fs.version), fs.current
}

// serveStream runs one stream: after its first request, a response now
// and one per push; recv reads (and drops) the ACKs.
func (fs *floorServer) serveStream(ctx context.Context, recv func() error, send func(version string, res *anypb.Any, nonce int) error) error {
	if err := recv(); err != nil {
		return err
	}
	sig, done := fs.subscribe()
	defer done()
	errc := make(chan error, 1)
	go func() {
		for {
			if err := recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	for nonce := 1; ; nonce++ {
		v, res := fs.snapshot()
		if err := send(v, res, nonce); err != nil {
			return err
		}
		select {
		case <-sig:
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

func (fs *floorServer) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return fs.serveStream(st.Context(),
		func() error { _, err := st.Recv(); return err },
		func(v string, res *anypb.Any, nonce int) error {
			return st.Send(&discoveryv3.DiscoveryResponse{
				TypeUrl: resourcev3.EndpointType, VersionInfo: v, Nonce: strconv.Itoa(nonce),
				Resources: []*anypb.Any{res},
			})
		})
}

func (fs *floorServer) DeltaAggregatedResources(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return fs.serveStream(st.Context(),
		func() error { _, err := st.Recv(); return err },
		func(v string, res *anypb.Any, nonce int) error {
			return st.Send(&discoveryv3.DeltaDiscoveryResponse{
				TypeUrl: resourcev3.EndpointType, SystemVersionInfo: v, Nonce: strconv.Itoa(nonce),
				Resources: []*discoveryv3.Resource{{Name: floorName, Version: v, Resource: res}},
			})
		})
}

// floorMain runs the floor server when the test binary was started as
// one, and reports whether it was.
func floorMain() bool {
	if os.Getenv(floorEnv) == "" {
		return false
	}
	if err := serveADSFloor(); err != nil && !strings.Contains(err.Error(), "closed") {
		fmt.Fprintln(os.Stderr, "floor server:", err)
		os.Exit(1)
	}
	return true
}
