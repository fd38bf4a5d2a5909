package xds

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

const echo = model.Hostname("echo.demo.svc.cluster.local")

func shard(c model.ClusterID, region string, addrs ...string) map[model.Hostname]*model.ServiceShard {
	s := &model.ServiceShard{Service: &model.Service{
		Hostname: echo, Name: "echo", Namespace: "demo",
		Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}},
	}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, model.Endpoint{
			Cluster: c, Address: netip.MustParseAddr(a), Ready: true,
			Locality: model.Locality{Region: region}, Ports: map[string]uint32{"grpc": 9000},
		})
	}
	return map[model.Hostname]*model.ServiceShard{echo: s}
}

// storeWriter returns the function that replaces cluster c1's services
// in st with a shard.
func storeWriter(t *testing.T, st *store.Store) func(map[model.Hostname]*model.ServiceShard) {
	return func(sh map[model.Hostname]*model.ServiceShard) {
		t.Helper()
		if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), sh); err != nil {
			t.Fatal(err)
		}
	}
}

// serve runs a Server over a real store and returns its address.
func serve(t *testing.T, st *store.Store, reg *prometheus.Registry) string {
	t.Helper()
	return runServer(t, Options{Registry: st, Metrics: reg}).Addr().String()
}

// runServer runs a Server with opts until the test ends; Addr, Log and
// Metrics default to a free loopback port, the test's log and a new
// registry.
func runServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Log.GetSink() == nil {
		opts.Log = testr.New(t)
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	s := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return s
}

// adsClient is a minimal SotW ADS client that ACKs what it receives.
type adsClient struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	cancel context.CancelFunc // ends the stream
}

// dialADS connects to the plaintext port at addr; the connection closes
// and the returned context ends when the test does, or cancel is called.
func dialADS(t *testing.T, addr string) (discoveryv3.AggregatedDiscoveryServiceClient, context.Context, context.CancelFunc) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return discoveryv3.NewAggregatedDiscoveryServiceClient(cc), ctx, cancel
}

func newADS(t *testing.T, addr string, cluster model.ClusterID, region string) *adsClient {
	t.Helper()
	client, ctx, cancel := dialADS(t, addr)
	stream, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{
		Id:       "sidecar~10.0.0.1~client.demo~demo.svc.cluster.local",
		Locality: &corev3.Locality{Region: region},
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			xdsnode.MetadataClusterID: structpb.NewStringValue(string(cluster)),
		}},
	}
	return &adsClient{t: t, stream: stream, node: node, cancel: cancel}
}

// disconnect ends the client's stream, as a proxy that goes away.
func (a *adsClient) disconnect() { a.cancel() }

func (a *adsClient) request(typeURL, version, nonce string, names ...string) {
	a.t.Helper()
	if err := a.stream.Send(&discoveryv3.DiscoveryRequest{
		Node: a.node, TypeUrl: typeURL, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce,
	}); err != nil {
		a.t.Fatal(err)
	}
}

// recv waits (bounded) for the next response and ACKs it.
func (a *adsClient) recv() *discoveryv3.DiscoveryResponse {
	a.t.Helper()
	type result struct {
		r   *discoveryv3.DiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := a.stream.Recv()
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			a.t.Fatal(res.err)
		}
		return res.r
	case <-time.After(10 * time.Second):
		a.t.Fatal("no xDS response within 10s")
		return nil
	}
}

func (a *adsClient) subscribe(typeURL string, names ...string) *discoveryv3.DiscoveryResponse {
	a.t.Helper()
	a.request(typeURL, "", "", names...)
	r := a.recv()
	if r.GetTypeUrl() != typeURL {
		a.t.Fatalf("got %s, want %s", r.GetTypeUrl(), typeURL)
	}
	a.request(typeURL, r.GetVersionInfo(), r.GetNonce(), names...)
	return r
}

func cla(t *testing.T, r *discoveryv3.DiscoveryResponse) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	if len(r.GetResources()) != 1 {
		t.Fatalf("%d resources, want 1", len(r.GetResources()))
	}
	var c endpointv3.ClusterLoadAssignment
	if err := r.GetResources()[0].UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// priorities maps each endpoint address to its priority.
func priorities(c *endpointv3.ClusterLoadAssignment) map[string]uint32 {
	out := map[string]uint32{}
	for _, l := range c.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = l.GetPriority()
		}
	}
	return out
}

// TestEndpointChangeTouchesOnlyEDS: proxies in different clusters get
// load assignments ranked from where they are, and an endpoint change is
// pushed as EDS alone, for every group.
func TestEndpointChangeTouchesOnlyEDS(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	gen := st.NextGeneration("c2")
	if err := st.ReplaceCluster("c2", gen, shard("c2", "r2", "10.2.0.1")); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	addr := serve(t, st, reg)

	listener := xdsgen.ListenerName(echo, 8080)
	cluster := xdsgen.ClusterName(echo, 8080)
	a := newADS(t, addr, "c1", "r1")
	b := newADS(t, addr, "c2", "r2")
	for _, c := range []*adsClient{a, b} {
		if r := c.subscribe(resourcev3.ListenerType, listener); len(r.GetResources()) != 1 {
			t.Fatalf("LDS: %v", r)
		}
		c.subscribe(resourcev3.RouteType, listener)
		c.subscribe(resourcev3.ClusterType, cluster)
	}
	pa := priorities(cla(t, a.subscribe(resourcev3.EndpointType, cluster)))
	pb := priorities(cla(t, b.subscribe(resourcev3.EndpointType, cluster)))
	if pa["10.1.0.1"] != 0 || pa["10.2.0.1"] != 1 || pb["10.2.0.1"] != 0 || pb["10.1.0.1"] != 1 {
		t.Fatalf("priorities: c1 proxy %v, c2 proxy %v", pa, pb)
	}

	pushes := func(typ string) float64 { return pushCount(t, reg, typ) }
	ldsBefore, cdsBefore := pushes("lds"), pushes("cds")

	if err := st.UpdateShard("c2", gen, echo, shard("c2", "r2", "10.2.0.1", "10.2.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*adsClient{a, b} {
		r := c.recv()
		if r.GetTypeUrl() != resourcev3.EndpointType {
			t.Fatalf("endpoint change pushed %s", r.GetTypeUrl())
		}
		if n := len(priorities(cla(t, r))); n != 3 {
			t.Fatalf("CLA after scale-up has %d endpoints, want 3", n)
		}
		c.request(resourcev3.EndpointType, r.GetVersionInfo(), r.GetNonce(), cluster)
	}
	if pushes("lds") != ldsBefore || pushes("cds") != cdsBefore {
		t.Fatalf("endpoint change rebuilt listeners or clusters: lds %v->%v cds %v->%v",
			ldsBefore, pushes("lds"), cdsBefore, pushes("cds"))
	}

	// The service leaves every cluster: its resources are deleted.
	st.RemoveCluster("c1")
	st.RemoveCluster("c2")
	got := map[string]int{}
	for i := 0; i < 4; i++ {
		_, lds := got[resourcev3.ListenerType]
		_, cds := got[resourcev3.ClusterType]
		if lds && cds {
			break
		}
		r := a.recv()
		got[r.GetTypeUrl()] = len(r.GetResources())
		a.request(r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), nameFor(r.GetTypeUrl(), listener, cluster))
	}
	if n, ok := got[resourcev3.ListenerType]; !ok || n != 0 {
		t.Errorf("listener not withdrawn: %v", got)
	}
	if n, ok := got[resourcev3.ClusterType]; !ok || n != 0 {
		t.Errorf("cluster not withdrawn: %v", got)
	}
}

func nameFor(typeURL, listener, cluster string) string {
	if typeURL == resourcev3.ClusterType || typeURL == resourcev3.EndpointType {
		return cluster
	}
	return listener
}

// pushCount reads meshfed_xds_pushes_total{type=typ} from reg.
func pushCount(t *testing.T, reg *prometheus.Registry, typ string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshfed_xds_pushes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestDeltaStream: a Delta ADS client gets the load assignment it
// subscribes to and then only the changed resource.
func TestDeltaStream(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	gen := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", gen, shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, st, prometheus.NewRegistry())
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := newADS(t, addr, "c1", "r1").node
	cluster := xdsgen.ClusterName(echo, 8080)
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{cluster},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != cluster {
		t.Fatalf("delta response: %v", r)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateShard("c1", gen, echo, shard("c1", "r1", "10.1.0.1", "10.1.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	r, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var c endpointv3.ClusterLoadAssignment
	if len(r.GetResources()) != 1 {
		t.Fatalf("delta update: %v", r)
	}
	if err := r.GetResources()[0].GetResource().UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	if n := len(priorities(&c)); n != 2 {
		t.Fatalf("delta update has %d endpoints, want 2", n)
	}
}

// TestDeltaReconnectUpToDate: a proxy that reconnects declaring the
// versions it already holds (initial_resource_versions) is answered all
// the same: what it holds is resent, what the hub no longer has is
// removed, and the status shows the type SYNCED once the proxy ACKs. The
// cache alone answers nothing when nothing differs, and the type stayed
// NOT SENT.
func TestDeltaReconnectUpToDate(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	gen := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", gen, shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	srv := runServer(t, Options{Registry: st})
	addr := srv.Addr().String()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	node := newADS(t, addr, "c1", "r1").node
	cluster := xdsgen.ClusterName(echo, 8080)
	gone := xdsgen.ClusterName("gone.demo.svc.cluster.local", 8080)

	open := func(known map[string]string) (discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, *discoveryv3.DeltaDiscoveryResponse) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		t.Cleanup(cancel)
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{cluster}
		for n := range known {
			if n != cluster {
				names = append(names, n)
			}
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
			Node: node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: names, InitialResourceVersions: known,
		}); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("first request declaring %v: no answer: %v", known, err)
		}
		return stream, r
	}

	first, r := open(nil)
	if len(r.GetResources()) != 1 {
		t.Fatalf("first connection: %v", r)
	}
	version := r.GetResources()[0].GetVersion()
	if err := first.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// The proxy holds the current version of cluster, and one of gone,
	// which the hub never had.
	again, r := open(map[string]string{cluster: version, gone: "v-old"})
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != cluster || r.GetResources()[0].GetVersion() != version {
		t.Fatalf("reconnect: resources %v, want %s at %s again", r.GetResources(), cluster, version)
	}
	if !slices.Equal(r.GetRemovedResources(), []string{gone}) {
		t.Fatalf("reconnect: removed %v, want [%s]", r.GetRemovedResources(), gone)
	}
	if err := again.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, rec := range srv.Status().Records() {
			if rec.Proxy != node.GetId() {
				continue
			}
			if s := rec.Status("eds"); s != proxystatus.StatusSynced {
				return fmt.Errorf("eds is %s", s)
			}
			return nil
		}
		return fmt.Errorf("no status of %s", node.GetId())
	})
}
