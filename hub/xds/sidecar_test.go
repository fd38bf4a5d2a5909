package xds

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/model"
	waitutil "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// envoyNode is the node pilot-agent's Envoy sends for pod <pod>.demo at ip
// in cluster c, with the given interception mode.
func envoyNode(ip, pod string, c model.ClusterID, interception string) *corev3.Node {
	return &corev3.Node{
		Id:            xdsnode.SidecarID(ip, pod, "demo", "cluster.local"),
		UserAgentName: "envoy",
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			xdsnode.MetadataClusterID:        structpb.NewStringValue(string(c)),
			xdsnode.MetadataNamespace:        structpb.NewStringValue("demo"),
			xdsnode.MetadataInterceptionMode: structpb.NewStringValue(interception),
		}},
	}
}

// resourceNames returns the sorted names of the resources of r.
func resourceNames(t *testing.T, r *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("response of %s: %v", r.GetTypeUrl(), err)
		}
		out = append(out, cachev3.GetResourceName(m))
	}
	slices.Sort(out)
	return out
}

// recvType reads responses, ACKing each, until one of typeURL arrives.
// Listeners and clusters are ACKed as wildcard subscriptions, other types
// with the names the response holds (what the client subscribed to).
func (a *adsClient) recvType(typeURL string) *discoveryv3.DiscoveryResponse {
	a.t.Helper()
	for {
		r := a.recv()
		var subscribed []string
		if t := r.GetTypeUrl(); t != resourcev3.ListenerType && t != resourcev3.ClusterType {
			subscribed = resourceNames(a.t, r)
		}
		a.request(r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), subscribed...)
		if r.GetTypeUrl() == typeURL {
			return r
		}
	}
}

// names returns the sorted names of generated resources.
func names[R types.Resource](rs []R) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = cachev3.GetResourceName(r)
	}
	slices.Sort(out)
	return out
}

// TestEnvoySidecar: an Envoy node gets Istio-shaped listeners and clusters
// of its own, with the inbound side of the pod it runs in (found by its IP
// among the endpoints of its cluster), and shared routes named by port;
// a proxyless client of the same server keeps its own resources. When the
// pod stops being an endpoint, its inbound side is withdrawn; when its
// stream closes, its state is freed.
func TestEnvoySidecar(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.0.0.5", "10.0.0.6")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st})
	addr := s.Addr().String()

	envoy := newADS(t, addr, "c1", "r1")
	envoy.node = envoyNode("10.0.0.5", "echo-1", "c1", "NONE")
	want := xdsgen.Sidecar{
		IP: netip.MustParseAddr("10.0.0.5"), Namespace: "demo", Interception: xdsgen.InterceptNone,
		Inbound: []xdsgen.InboundPort{{Port: 9000, Protocol: model.ProtocolGRPC}},
	}
	services := st.Services()
	wantListeners := names(xdsgen.SidecarListeners(services, want, xdsgen.Options{}))
	wantClusters := names(xdsgen.SidecarClusters(services, nil, want, xdsgen.Options{}))
	if got := resourceNames(t, envoy.subscribe(resourcev3.ListenerType)); !slices.Equal(got, wantListeners) {
		t.Errorf("Envoy listeners %v, want %v", got, wantListeners)
	}
	if got := resourceNames(t, envoy.subscribe(resourcev3.ClusterType)); !slices.Equal(got, wantClusters) {
		t.Errorf("Envoy clusters %v, want %v", got, wantClusters)
	}
	if !slices.Contains(wantClusters, "inbound|9000||") || !slices.Contains(wantClusters, xdsgen.ClusterName(echo, 8080)) {
		t.Fatalf("generator gave clusters %v: want the pod's inbound and the service's outbound", wantClusters)
	}
	if got := resourceNames(t, envoy.subscribe(resourcev3.RouteType, "8080")); !slices.Equal(got, []string{"8080"}) {
		t.Errorf("Envoy routes %v, want [8080]", got)
	}
	if got := resourceNames(t, envoy.subscribe(resourcev3.EndpointType, xdsgen.ClusterName(echo, 8080))); len(got) != 1 {
		t.Errorf("Envoy load assignments %v, want one", got)
	}

	grpcClient := newADS(t, addr, "c1", "r1")
	listener := xdsgen.ListenerName(echo, 8080)
	if got := resourceNames(t, grpcClient.subscribe(resourcev3.ListenerType, listener)); !slices.Equal(got, []string{listener}) {
		t.Errorf("proxyless listeners %v, want [%s]", got, listener)
	}

	// The pod leaves the service: its inbound listener and cluster go.
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.0.0.6")); err != nil {
		t.Fatal(err)
	}
	outbound := want
	outbound.Inbound = nil
	wantListeners = names(xdsgen.SidecarListeners(st.Services(), outbound, xdsgen.Options{}))
	if got := resourceNames(t, envoy.recvType(resourcev3.ListenerType)); !slices.Equal(got, wantListeners) {
		t.Errorf("after the pod left: Envoy listeners %v, want %v", got, wantListeners)
	}

	if got := s.cache.held().sidecars; got != 1 {
		t.Errorf("sidecars held with one Envoy connected: %d", got)
	}
	envoy.disconnect()
	waitutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := s.cache.held().sidecars; n != 0 {
			return fmt.Errorf("%d sidecars held after the Envoy left", n)
		}
		if g := testutil.ToFloat64(s.metrics.sidecars); g != 0 {
			return fmt.Errorf("meshfed_xds_envoy_sidecars = %v", g)
		}
		return nil
	})
}

// TestEnvoyNodeRefused: an Envoy node the hub cannot serve (here an
// interception mode it does not know) has its stream ended with the
// cause; other proxies are served on.
func TestEnvoyNodeRefused(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	addr := runServer(t, Options{Registry: st}).Addr().String()
	bad := newADS(t, addr, "c1", "r1")
	bad.node = envoyNode("10.0.0.5", "echo-1", "c1", "SIDEWAYS")
	bad.request(resourcev3.ListenerType, "", "")
	_, err := bad.stream.Recv()
	if err == nil || !strings.Contains(err.Error(), "INTERCEPTION_MODE") || !strings.Contains(err.Error(), "SIDEWAYS") {
		t.Fatalf("stream of a bad Envoy node ended with %v, want the interception mode named", err)
	}
	good := newADS(t, addr, "c1", "r1")
	good.node = envoyNode("10.0.0.5", "echo-2", "c1", "")
	if got := resourceNames(t, good.subscribe(resourcev3.ClusterType)); !slices.Contains(got, "inbound|9000||") {
		t.Errorf("a good Envoy node next to it got clusters %v", got)
	}
}

// planFixture is a store holding echo with one endpoint at 10.0.0.5 in
// c1, a groupCache over it with an Envoy node attached (a pod of c1 at ip),
// and the function that replaces c1's shards.
func planFixture(t *testing.T, opts xdsgen.Options, ip string) (*store.Store, *groupCache, *corev3.Node, func(map[model.Hostname]*model.ServiceShard)) {
	t.Helper()
	st := store.New(store.Options{Self: "test"})
	write := storeWriter(t, st)
	write(shard("c1", "r1", "10.0.0.5"))
	c := newGroupCache(opts, st.Services, newMetrics(nil), xdsstatus.NewLedger("test"))
	node := envoyNode(ip, "pod-"+ip, "c1", "NONE")
	c.attach(attachment{}, node, xdsnode.MetadataOf(node.GetMetadata()))
	c.adoptBuilt() // as the push loop does
	return st, c, node, write
}

// TestSidecarReplannedOnlyWhenItChanges: an endpoint change that keeps
// every service's shape and the pod's own ports writes nothing to an Envoy
// sidecar's listeners and clusters (only load assignments change); a new
// service port, or the pod's own endpoint going, does.
func TestSidecarReplannedOnlyWhenItChanges(t *testing.T) {
	st, c, node, write := planFixture(t, xdsgen.Options{}, "10.0.0.5")
	c.plan([]model.Hostname{echo}, st.Service, nil, nil) // the first push records the shapes
	sidecarWrites := func() map[string][]string {
		got := map[string][]string{}
		for _, w := range c.plan([]model.Hostname{echo}, st.Service, nil, nil) {
			for _, typeURL := range xdsgen.SidecarTypes {
				if w.cache == c.sidecars[node.GetId()].caches[typeURL] {
					for name := range w.Upsert {
						got[typeURL] = append(got[typeURL], name)
					}
					got[typeURL] = append(got[typeURL], w.Delete...)
				}
			}
		}
		return got
	}

	sc := c.envoy.Node(node.GetId())
	before := sc.Replans()
	write(shard("c1", "r1", "10.0.0.5", "10.0.0.6"))
	if got := sidecarWrites(); len(got) != 0 {
		t.Errorf("another endpoint of the same service rewrote the sidecar: %v", got)
	}
	if sc.Replans() != before {
		t.Errorf("another endpoint of the same service regenerated the sidecar (%d times)", sc.Replans()-before)
	}

	wider := shard("c1", "r1", "10.0.0.5", "10.0.0.6")
	wider[echo].Service.Ports = append(wider[echo].Service.Ports, model.ServicePort{Name: "http", Port: 9090, Protocol: model.ProtocolHTTP})
	write(wider)
	if got := sidecarWrites()[resourcev3.ClusterType]; !slices.Contains(got, xdsgen.ClusterName(echo, 9090)) {
		t.Errorf("a new service port: sidecar cluster writes %v, want %s", got, xdsgen.ClusterName(echo, 9090))
	}

	gone := shard("c1", "r1", "10.0.0.6")
	gone[echo].Service = wider[echo].Service
	write(gone)
	if got := sidecarWrites()[resourcev3.ClusterType]; !slices.Equal(got, []string{"inbound|9000||"}) {
		t.Errorf("the pod's endpoint gone: sidecar cluster writes %v, want its inbound cluster deleted", got)
	}
}

// TestSidecarClusterChangeResendsAssignments: Envoy keeps an updated EDS
// cluster warming until it is sent the cluster's load assignment again,
// so when a sidecar's cluster changes (here its SAN check, as the
// service's meshed endpoints get a service account) the plan writes the
// cluster, and the answer that sends it to a stream names its assignment
// to be sent again after it (ads.Rewarming), even though the assignment
// itself did not change. The stream server does the sending
// (TestRewarmAfterHeldClusterACK).
func TestSidecarClusterChangeResendsAssignments(t *testing.T) {
	st, c, node, write := planFixture(t, xdsgen.Options{Security: true}, "10.0.0.9")
	if _, err := c.pick(resourcev3.EndpointType, c.attachmentOf(node, xdsnode.MetadataOf(node.GetMetadata())), nil); err != nil { // the group's assignments, as the stream asks
		t.Fatal(err)
	}
	// The endpoint's Pod was injected (tlsMode=istio), so sidecars speak
	// mTLS to it (auto mTLS) and check its SAN.
	meshed := model.NewLabels(map[string]string{xdsgen.TLSModeLabel: xdsgen.TLSModeIstio})
	labelled := shard("c1", "r1", "10.0.0.5")
	labelled[echo].Endpoints[0].Labels = meshed
	write(labelled)
	applyPlan(t, c.plan([]model.Hostname{echo}, st.Service, nil, nil))

	// A Delta stream of the sidecar's clusters, up to date.
	cds := c.sidecars[node.GetId()].caches[resourcev3.ClusterType]
	sub := ads.Subscription{Subscription: streamv3.NewDeltaSubscription(nil, nil, nil, true)}
	out := make(chan cachev3.DeltaResponse, 2)
	if _, err := cds.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType}, sub, out); err != nil {
		t.Fatal(err)
	}
	sub.SetReturnedResources((<-out).GetNextVersionMap())
	if _, err := cds.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: "1"}, sub, out); err != nil {
		t.Fatal(err)
	}

	withSA := shard("c1", "r1", "10.0.0.5")
	withSA[echo].Endpoints[0].Labels = meshed
	withSA[echo].Endpoints[0].ServiceAccount = "echo"
	write(withSA)
	name := xdsgen.ClusterName(echo, 8080)
	applyPlan(t, c.plan([]model.Hostname{echo}, st.Service, nil, nil))
	var r cachev3.DeltaResponse
	select {
	case r = <-out:
	default:
		t.Fatalf("the new SAN did not rewrite the sidecar's cluster %s", name)
	}
	typeURL, names := r.(ads.Rewarming).Rewarms()
	if typeURL != resourcev3.EndpointType || !slices.Contains(names, name) {
		t.Fatalf("the answer with cluster %s rewarms %s %v, want its assignment", name, typeURL, names)
	}
}

// applyPlan makes a plan's writes.
func applyPlan(t *testing.T, ws []write) {
	t.Helper()
	for _, w := range ws {
		if err := w.cache.UpdateResources(w.Upsert, w.Delete); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRewarmedAssignment: the assignment sent again to end a warming is
// the same to Envoy (the overprovisioning factor toggles between unset
// and Envoy's default) but other bytes, so a Delta stream, whose versions
// hash the resource, takes it; toggling twice gives the original back.
func TestRewarmedAssignment(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	cla := xdsgen.LoadAssignments(st.Service(echo), xdsgen.ProxyGroup{Cluster: "c1", Region: "r1"}, nil)[0]
	once := rewarmed(cla).(*endpointv3.ClusterLoadAssignment)
	if proto.Equal(once, cla) {
		t.Fatal("rewarmed assignment has the same bytes")
	}
	if got := once.GetPolicy().GetOverprovisioningFactor().GetValue(); got != envoyOverprovisioningFactor {
		t.Errorf("overprovisioning factor %d, want Envoy's default %d", got, envoyOverprovisioningFactor)
	}
	if !proto.Equal(proto.Clone(once).(*endpointv3.ClusterLoadAssignment).GetEndpoints()[0], cla.GetEndpoints()[0]) {
		t.Error("rewarming changed the endpoints")
	}
	if twice := rewarmed(once).(*endpointv3.ClusterLoadAssignment); twice.GetPolicy().GetOverprovisioningFactor() != nil {
		t.Errorf("rewarmed twice: policy %v, want the factor unset again", twice.GetPolicy())
	}
}
