package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// TestXDSConnectionBurst: 5,000 ADS stream attempts at once against a hub
// with a stream cap of 200 and a rate of 50 a second (bursts of 100): the
// excess is refused with RESOURCE_EXHAUSTED and counted, nothing fails
// otherwise, and a proxy connected before keeps getting endpoint changes
// during the burst (its push latency is printed before and during). Then
// an oversized DiscoveryRequest (about 5 MiB) ends its own stream with
// RESOURCE_EXHAUSTED and is counted, and the steady proxy still converges.
func TestXDSConnectionBurst(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})
	ctx := t.Context()
	r := f.Remotes()[0]
	w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := f.Config().PutRemoteSecret(ctx, "remotes", r); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{
		"--xds-max-streams=200", "--xds-stream-rate=50", "--xds-stream-burst=100",
	}})
	name := xdsgen.ClusterName(echoHost, 8080)
	// Every stream is authenticated by a certificate of namespace demo,
	// where all the nodes live: the limits guard the port proxies use.
	dial := framework.AuthenticatedDial(t, framework.StartTestCertAgent(t, r, hub, "demo", "burst"))
	watcher := framework.NewTestADSWatcher(t, hub.CAAddr(), &corev3.Node{
		Id:       xdsnode.SidecarID("10.250.0.1", "steady", "demo", model.DefaultDomainSuffix),
		Metadata: xdsnode.Metadata{ClusterID: r.ID}.Struct(),
	}, dial)
	if err := watcher.WatchEDS(name); err != nil {
		t.Fatal(err)
	}
	// servedNow waits for the watcher's endpoints to number n; it returns
	// how long after start they did.
	servedNow := func(n int, start time.Time) (time.Duration, error) {
		timeout := time.After(converge)
		for {
			select {
			case u := <-watcher.Updates():
				if served(u.Assignment) == n {
					return u.Received.Sub(start), nil
				}
			case <-timeout:
				return 0, fmt.Errorf("the steady proxy did not get %d endpoints within %v", n, converge)
			}
		}
	}
	if _, err := servedNow(2, time.Now()); err != nil {
		t.Fatal(err)
	}
	change := func(ready bool) time.Duration {
		t.Helper()
		start := time.Now()
		if err := w.SetReady(ctx, ready); err != nil {
			t.Fatal(err)
		}
		want := 2
		if !ready {
			want = 0
		}
		d, err := servedNow(want, start)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := []time.Duration{change(false), change(true)}

	// The burst: 50 connections × 100 streams, each with its own node.
	const conns, perConn = 50, 100
	var (
		mu       sync.Mutex
		admitted int
		refused  int
		other    []error
		decided  sync.WaitGroup // every attempt admitted or refused
		ended    sync.WaitGroup // every stream over
	)
	burstCtx, endBurst := context.WithCancel(ctx)
	defer endBurst()
	started := time.Now()
	for c := range conns {
		cc, err := grpc.NewClient(hub.CAAddr(), dial)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		for s := range perConn {
			decided.Add(1)
			ended.Add(1)
			go func() {
				defer ended.Done()
				burstStream(burstCtx, cc, fmt.Sprintf("burst-%d-%d", c, s), r.ID, name, func(err error) {
					defer decided.Done()
					mu.Lock()
					defer mu.Unlock()
					switch code := grpcstatus.Code(err); {
					case err == nil:
						admitted++
					case code == codes.ResourceExhausted:
						refused++
					default:
						other = append(other, err)
					}
				})
			}()
		}
	}
	// While the burst is on (its admitted streams stay open), the steady
	// proxy's endpoints change.
	during := []time.Duration{change(false), change(true)}
	decided.Wait()
	burstTook := time.Since(started)
	endBurst()
	ended.Wait()

	t.Logf("burst of %d stream attempts in %v: %d admitted, %d refused with RESOURCE_EXHAUSTED, %d other errors",
		conns*perConn, burstTook.Round(time.Millisecond), admitted, refused, len(other))
	t.Logf("steady proxy's latency from EndpointSlice update to EDS (not ready, ready again): before %v, during the burst %v", before, during)
	if len(other) > 0 {
		t.Errorf("%d attempts failed otherwise, e.g. %v", len(other), other[0])
	}
	if admitted+refused != conns*perConn || admitted == 0 || admitted > 200 || refused < conns*perConn-200 {
		t.Errorf("admitted %d, refused %d of %d: want at most the cap of 200 admitted, the rest refused", admitted, refused, conns*perConn)
	}
	m, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	counted := metricValue(m, `meshfed_xds_streams_refused_total{reason="stream_limit"}`) + metricValue(m, `meshfed_xds_streams_refused_total{reason="stream_rate"}`)
	if counted != refused {
		t.Errorf("meshfed_xds_streams_refused_total sums to %d, the clients saw %d refusals", counted, refused)
	}

	// An oversized DiscoveryRequest (over 4 MiB) ends its own stream with
	// RESOURCE_EXHAUSTED and is counted; the steady proxy goes on.
	time.Sleep(3 * time.Second) // past the burst's admission rate
	cc, err := grpc.NewClient(hub.CAAddr(), dial)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	big, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, 5000)
	for i := range cap(names) {
		names = append(names, fmt.Sprintf("%s-%0992d", name, i))
	}
	node := &corev3.Node{Id: xdsnode.SidecarID("10.252.0.1", "big", "demo", model.DefaultDomainSuffix), Metadata: xdsnode.Metadata{ClusterID: r.ID}.Struct()}
	if err := big.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: names}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = big.Recv()
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
		t.Errorf("an oversized request got %v, want RESOURCE_EXHAUSTED (larger than max)", err)
	}
	after := []time.Duration{change(false), change(true)}
	t.Logf("oversized request (%d names, about 5 MiB) refused: %v; the steady proxy's latency after it: %v", len(names), err, after)
	if m, err = hub.Metrics(ctx); err != nil {
		t.Fatal(err)
	}
	if n := metricValue(m, `meshfed_xds_streams_refused_total{reason="message_too_large"}`); n != 1 {
		t.Errorf("meshfed_xds_streams_refused_total{reason=\"message_too_large\"} = %d, want 1", n)
	}
	select {
	case <-watcher.Done():
		t.Fatalf("the steady proxy's stream ended: %v", watcher.Err())
	default:
	}
}

// burstStream opens one ADS stream as node id, asks for EDS of name and
// waits for the first answer, then calls decided with nil (admitted) or
// the stream's error; an admitted stream stays open until ctx ends.
func burstStream(ctx context.Context, cc *grpc.ClientConn, id string, cluster model.ClusterID, name string, decided func(error)) {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		decided(err)
		return
	}
	node := &corev3.Node{Id: xdsnode.SidecarID("10.251.0.1", id, "demo", model.DefaultDomainSuffix), Metadata: xdsnode.Metadata{ClusterID: cluster}.Struct()}
	err = stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{name}})
	if err != nil && !errors.Is(err, io.EOF) { // io.EOF: refused already; Recv has why
		decided(err)
		return
	}
	answered := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		answered <- err
	}()
	select {
	case err := <-answered:
		decided(err)
	case <-time.After(converge):
		decided(fmt.Errorf("%s: no answer within %v", id, converge))
		return
	}
	<-ctx.Done()
}

// served counts the endpoints of a that a client may pick.
func served(a *endpointv3.ClusterLoadAssignment) int {
	n := 0
	for _, l := range a.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			if hs := e.GetHealthStatus(); hs != corev3.HealthStatus_UNHEALTHY && hs != corev3.HealthStatus_DRAINING {
				n++
			}
		}
	}
	return n
}

// TestUnknownClusterRefused: once the hub has read the remote secrets, an
// xDS stream whose CLUSTER_ID no secret names is refused with
// InvalidArgument naming it, and counted; a proxy of a registered cluster
// and one without CLUSTER_ID are served; a cluster whose secret arrives
// later is served from then on.
func TestUnknownClusterRefused(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(2)})
	ctx := t.Context()
	c1, c2 := f.Remotes()[0], f.Remotes()[1]
	if err := f.Config().PutRemoteSecret(ctx, "remote-1", c1); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{})
	// A certificate of c1's namespace demo, where every node lives: the
	// cluster a node names is checked apart from who it is.
	cc, err := grpc.NewClient(hub.CAAddr(), framework.AuthenticatedDial(t, framework.StartTestCertAgent(t, c1, hub, "demo", "prober")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	name := xdsgen.ClusterName(echoHost, 8080)
	// burstStream holds an admitted stream until ctx ends: give each its own.
	try := func(id string, cluster model.ClusterID) error {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go burstStream(sctx, cc, id, cluster, name, func(e error) { errc <- e })
		return <-errc
	}
	err = try("nowhere-0", "cluster-9")
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `"cluster-9"`) {
		t.Errorf("a stream of unknown cluster-9: %v, want InvalidArgument naming it", err)
	}
	if err := try("known-0", c1.ID); err != nil {
		t.Errorf("a stream of registered %s: %v", c1.ID, err)
	}
	if err := try("none-0", ""); err != nil {
		t.Errorf("a stream without CLUSTER_ID: %v", err)
	}
	if err := try("later-0", c2.ID); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("a stream of %s before its secret: %v, want InvalidArgument", c2.ID, err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "remote-2", c2); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error { return try("later-1", c2.ID) })
	m, err := hub.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := metricValue(m, `meshfed_xds_requests_refused_total{reason="unknown_cluster"}`); n < 2 {
		t.Errorf("meshfed_xds_requests_refused_total{reason=\"unknown_cluster\"} = %d, want at least 2", n)
	}
}
