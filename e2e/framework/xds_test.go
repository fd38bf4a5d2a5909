package framework

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// The resources a minimal control plane serves for one proxyless gRPC
// service: an API listener (HttpConnectionManager, RDS over ADS, router
// filter), a route configuration, an EDS cluster and its assignment.
const (
	testHost     = "echo.demo.svc.cluster.local"
	testListener = testHost + ":8080"
	testRoute    = "outbound|8080||" + testHost
	testCluster  = "outbound|8080||" + testHost
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

type testBackend struct {
	zone string
	addr *EchoServer
}

func testSnapshot(t *testing.T, version string, backends ...testBackend) *cachev3.Snapshot {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: adsSource(), RouteConfigName: testRoute,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})},
		}},
	}
	lis := &listenerv3.Listener{Name: testListener, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, hcm)}}
	rc := &routev3.RouteConfiguration{
		Name: testRoute,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    testHost,
			Domains: []string{testHost, testListener},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: testCluster}}},
			}},
		}},
	}
	cl := &clusterv3.Cluster{
		Name:                 testCluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: testCluster}
	for _, b := range backends {
		ap := b.addr.Addr()
		// The assignment names the pod IP; the client's DialPod maps it
		// back to the loopback listener.
		podIP := PodIP(ap.Addr())
		cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
			Locality: &corev3.Locality{Region: "r1", Zone: b.zone},
			// grpc-go ignores a locality without a weight.
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address: podIP.String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(ap.Port())},
					}}},
				}},
				HealthStatus: corev3.HealthStatus_HEALTHY,
			}},
		})
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {lis},
		resourcev3.RouteType:    {rc},
		resourcev3.ClusterType:  {cl},
		resourcev3.EndpointType: {cla},
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// testControlPlane is a go-control-plane SnapshotCache ADS server that
// records the node of every stream.
type testControlPlane struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	nodes map[string]*corev3.Node // by node ID
}

func startTestControlPlane(t *testing.T) *testControlPlane {
	t.Helper()
	cp := &testControlPlane{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), nodes: map[string]*corev3.Node{}}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, cp.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if n := req.GetNode(); n != nil {
				cp.mu.Lock()
				cp.nodes[n.GetId()] = n
				cp.mu.Unlock()
			}
			return nil
		},
	})
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(func() {
		gs.Stop()
		cancel()
	})
	cp.addr = l.Addr().String()
	return cp
}

func (cp *testControlPlane) node(id string) *corev3.Node {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.nodes[id]
}

func startTestEcho(t *testing.T, addr, identity string) *EchoServer {
	t.Helper()
	s, err := StartEchoServer(addr, identity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestXDSClient proves the client plumbing against a real (if minimal)
// xDS server: grpc-go accepts the resources, routes by locality weight to
// real echo servers, and two clients in one process present distinct
// nodes and get distinct configuration.
func TestXDSClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cp := startTestControlPlane(t)
	a := testBackend{zone: "z1", addr: startTestEcho(t, "127.20.0.1:0", "cluster-a/echo-0")}
	b := testBackend{zone: "z2", addr: startTestEcho(t, "127.21.0.1:0", "cluster-b/echo-0")}

	clientA := NewTestXDSClient(t, ClientOptions{HubAddr: cp.addr, Cluster: "cluster-a", Namespace: "demo", Name: "client-a",
		Locality: model.Locality{Region: "r1", Zone: "z1"}})
	clientB := NewTestXDSClient(t, ClientOptions{HubAddr: cp.addr, Cluster: "cluster-b", Namespace: "demo", Name: "client-b",
		Locality: model.Locality{Region: "r1", Zone: "z2"}})
	if clientA.NodeID() == clientB.NodeID() {
		t.Fatalf("both clients have node ID %s", clientA.NodeID())
	}
	// Different configuration per node: A sees both backends, B only b.
	if err := cp.cache.SetSnapshot(ctx, clientA.NodeID(), testSnapshot(t, "1", a, b)); err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(ctx, clientB.NodeID(), testSnapshot(t, "1", b)); err != nil {
		t.Fatal(err)
	}

	connA, err := clientA.Dial("xds:///" + testListener)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := connA.Call(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("first xDS call took %s", time.Since(start).Round(time.Millisecond))
	counts, err := connA.Spread(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	byCluster := ByCluster(counts)
	if len(counts) != 2 || byCluster["cluster-a"] == 0 || byCluster["cluster-b"] == 0 {
		t.Errorf("client A spread %v (by cluster %v), want both backends", counts, byCluster)
	}

	connB, err := clientB.Dial("xds:///" + testListener)
	if err != nil {
		t.Fatal(err)
	}
	counts, err = connB.Spread(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	if counts["cluster-b/echo-0"] != 20 {
		t.Errorf("client B spread %v, want only cluster-b/echo-0", counts)
	}

	// The server saw each client's own node: locality and metadata.
	for _, c := range []*XDSClient{clientA, clientB} {
		n := cp.node(c.NodeID())
		if n == nil {
			t.Fatalf("server never saw node %s", c.NodeID())
		}
		o := c.Options()
		md := n.GetMetadata().GetFields()
		if n.GetLocality().GetZone() != o.Locality.Zone || md[xdsnode.MetadataClusterID].GetStringValue() != string(o.Cluster) ||
			md[xdsnode.MetadataNamespace].GetStringValue() != "demo" {
			t.Errorf("node %s: locality %v metadata %v", c.NodeID(), n.GetLocality(), n.GetMetadata())
		}
	}

	// Endpoint changes reach the client: drop b from A's view.
	if err := cp.cache.SetSnapshot(ctx, clientA.NodeID(), testSnapshot(t, "2", a)); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, 30*time.Second, 20*time.Millisecond, func() error {
		counts, err := connA.Spread(ctx, 10)
		if err != nil {
			return err
		}
		if counts["cluster-a/echo-0"] != 10 {
			return fmt.Errorf("spread %v", counts)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestADSWatcher checks the raw ADS client: it receives, ACKs and delivers
// each ClusterLoadAssignment version.
func TestADSWatcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cp := startTestControlPlane(t)
	a := testBackend{zone: "z1", addr: startTestEcho(t, "127.20.0.1:0", "cluster-a/echo-0")}
	b := testBackend{zone: "z2", addr: startTestEcho(t, "127.21.0.1:0", "cluster-b/echo-0")}
	node := &corev3.Node{Id: xdsnode.SidecarID("127.0.0.9", "watcher", "bench", model.DefaultDomainSuffix),
		Metadata: xdsnode.Metadata{ClusterID: "cluster-a"}.Struct()}
	if err := cp.cache.SetSnapshot(ctx, node.GetId(), testSnapshot(t, "1", a, b)); err != nil {
		t.Fatal(err)
	}
	w := NewTestADSWatcher(t, cp.addr, node)
	if err := w.WatchEDS(testCluster); err != nil {
		t.Fatal(err)
	}
	next := func() EDSUpdate {
		t.Helper()
		select {
		case u, ok := <-w.Updates():
			if !ok {
				t.Fatalf("stream ended: %v", w.Err())
			}
			return u
		case <-ctx.Done():
			t.Fatal("no EDS update")
		}
		panic("unreachable")
	}
	u1 := next()
	if u1.Version != "1" || u1.Assignment.GetClusterName() != testCluster || len(u1.Assignment.GetEndpoints()) != 2 {
		t.Errorf("first update: version %s %v", u1.Version, u1.Assignment)
	}
	sent := time.Now()
	if err := cp.cache.SetSnapshot(ctx, node.GetId(), testSnapshot(t, "2", a)); err != nil {
		t.Fatal(err)
	}
	u2 := next()
	if u2.Version != "2" || len(u2.Assignment.GetEndpoints()) != 1 || u2.Received.Before(u1.Received) {
		t.Errorf("second update: version %s %v", u2.Version, u2.Assignment)
	}
	t.Logf("snapshot → EDS update received in %s", u2.Received.Sub(sent).Round(time.Microsecond))
	if cp.node(node.GetId()) == nil {
		t.Errorf("server never saw the watcher's node")
	}
	if err := w.Close(); err != nil {
		t.Error(err)
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err after Close: %v", err)
	}
	if _, ok := <-w.Updates(); ok {
		t.Errorf("Updates not closed after Close")
	}
}
