package xds

import (
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	waitutil "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// TestRewarmAfterHeldClusterACK: an Envoy sidecar on a Delta stream holds
// back its ACK of a cluster update while a second push changes the same
// cluster again. Envoy keeps an updated EDS cluster warming until it is
// sent the cluster's load assignment after the update, so the stream must
// carry that assignment after the answer with the second update, which
// leaves only once the first is ACKed. (A rewrite of the group's
// assignments at push time reached the stream before that answer, and
// nothing after it: the cluster warmed forever.)
func TestRewarmAfterHeldClusterACK(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	write := storeWriter(t, st)
	write(shard("c1", "r1", "10.0.0.5"))
	s := runServer(t, Options{Registry: st, Security: true})
	p := newDeltaProxy(t, s.Addr().String())
	node := envoyNode("10.0.0.9", "client", "c1", "NONE")
	name := xdsgen.ClusterName(echo, 8080)

	p.send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType})
	p.ack(p.next(resourcev3.ClusterType))
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{name}})
	p.ack(p.next(resourcev3.EndpointType))

	// Push 1: the endpoint's Pod is injected, so sidecars speak mTLS to
	// it (auto mTLS). Its cluster update arrives and is not ACKed yet.
	meshed := model.NewLabels(map[string]string{xdsgen.TLSModeLabel: xdsgen.TLSModeIstio})
	labelled := shard("c1", "r1", "10.0.0.5")
	labelled[echo].Endpoints[0].Labels = meshed
	write(labelled)
	first := p.nextWith(resourcev3.ClusterType, name)
	// Its assignment follows it, and is ACKed: the stream watches the
	// assignments again when the second push comes.
	p.ack(p.nextWith(resourcev3.EndpointType, name))

	// Push 2: the endpoint gets a service account, so the cluster's SAN
	// check changes. Its answer waits for the ACK of the first.
	withSA := shard("c1", "r1", "10.0.0.5")
	withSA[echo].Endpoints[0].Labels = meshed
	withSA[echo].Endpoints[0].ServiceAccount = "echo"
	written := sidecarClusterVersion(s, node.GetId(), name)
	write(withSA)
	waitutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if sidecarClusterVersion(s, node.GetId(), name) == written {
			return errors.New("the second push has not written the sidecar's cluster")
		}
		return nil
	})

	p.ack(first)
	p.nextWith(resourcev3.ClusterType, name)
	// What follows the second cluster update: its assignment.
	for {
		r := p.next(resourcev3.EndpointType)
		p.ack(r)
		if slices.ContainsFunc(r.GetResources(), func(res *discoveryv3.Resource) bool { return res.GetName() == name }) {
			return
		}
	}
}

// sidecarClusterVersion is the cache version that last wrote the cluster
// name of the Envoy node id.
func sidecarClusterVersion(s *Server, id, name string) string {
	s.cache.mu.Lock()
	sc := s.cache.sidecars[id]
	s.cache.mu.Unlock()
	if sc == nil {
		return ""
	}
	lc := sc.caches[resourcev3.ClusterType]
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if e := lc.resources[name]; e != nil {
		return e.version
	}
	return ""
}

// deltaProxy is a raw Delta ADS client that reads its answers in order.
type deltaProxy struct {
	t       *testing.T
	stream  discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	answers chan *discoveryv3.DeltaDiscoveryResponse
}

func newDeltaProxy(t *testing.T, addr string) *deltaProxy {
	t.Helper()
	client, ctx, _ := dialADS(t, addr)
	stream, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := &deltaProxy{t: t, stream: stream, answers: make(chan *discoveryv3.DeltaDiscoveryResponse, 64)}
	go func() {
		defer close(p.answers)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			p.answers <- r
		}
	}()
	return p
}

func (p *deltaProxy) send(req *discoveryv3.DeltaDiscoveryRequest) {
	p.t.Helper()
	if err := p.stream.Send(req); err != nil {
		p.t.Fatal(err)
	}
}

func (p *deltaProxy) ack(r *discoveryv3.DeltaDiscoveryResponse) {
	p.t.Helper()
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

// next returns the next answer of typeURL, ACKing those of other types
// before it.
func (p *deltaProxy) next(typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	p.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case r, ok := <-p.answers:
			if !ok {
				p.t.Fatalf("stream ended waiting for %s", typeURL)
			}
			if r.GetTypeUrl() == typeURL {
				return r
			}
			p.ack(r)
		case <-timeout:
			p.t.Fatalf("no answer of %s", typeURL)
		}
	}
}

// nextWith returns the next answer of typeURL that carries name, ACKing
// those before it.
func (p *deltaProxy) nextWith(typeURL, name string) *discoveryv3.DeltaDiscoveryResponse {
	p.t.Helper()
	for {
		r := p.next(typeURL)
		if slices.ContainsFunc(r.GetResources(), func(res *discoveryv3.Resource) bool { return res.GetName() == name }) {
			return r
		}
		p.ack(r)
	}
}

// workloadType is what a ztunnel asks for first; the hub serves it no
// resources (yet).
const workloadType = "type.googleapis.com/istio.workload.Address"

// TestUnservedTypeKeepsTheStream: a request of a type the hub serves
// nothing of to the proxy (a ztunnel's workloads) gets no answer and
// ends nothing, as with istiod: the proxy's other types are served on
// the same stream, SotW and Delta, and the request is counted.
func TestUnservedTypeKeepsTheStream(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := runServer(t, Options{Registry: st, Metrics: reg})
	addr := s.Addr().String()
	name := xdsgen.ClusterName(echo, 8080)

	p := newDeltaProxy(t, addr)
	p.send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode("10.0.0.9", "client", "c1", "NONE"), TypeUrl: workloadType,
		ResourceNamesSubscribe: []string{"*"}})
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType})
	p.nextWith(resourcev3.ClusterType, name)

	a := newADS(t, addr, "c1", "r1")
	a.request(workloadType, "", "")
	a.request(resourcev3.EndpointType, "", "", name)
	if r := a.recv(); r.GetTypeUrl() != resourcev3.EndpointType {
		t.Fatalf("SotW answer of %s, want the load assignment", r.GetTypeUrl())
	}
	if got := promtest.ToFloat64(s.metrics.unserved.WithLabelValues("other")); got != 2 {
		t.Errorf("meshfed_xds_unserved_requests_total{type=other} = %v, want 2", got)
	}
}

// TestWatchesDoNotWaitForAPush: once a stream has asked for a type, its
// later requests of it (ACKs, new names) take no lock that a push holds
// while it plans: with the push lock held, as by a push stuck in the
// planner, an Envoy sidecar's cluster ACK is taken and its new
// subscription to a load assignment is answered.
func TestWatchesDoNotWaitForAPush(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	const echo2 = model.Hostname("echo2.demo.svc.cluster.local")
	sh := shard("c1", "r1", "10.0.0.5")
	second := *sh[echo]
	svc := *second.Service
	svc.Hostname, svc.Name = echo2, "echo2"
	second.Service = &svc
	sh[echo2] = &second
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), sh); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st})
	p := newDeltaProxy(t, s.Addr().String())
	p.send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode("10.0.0.9", "client", "c1", "NONE"), TypeUrl: resourcev3.ClusterType})
	cds := p.next(resourcev3.ClusterType)
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{xdsgen.ClusterName(echo, 8080)}})
	eds := p.next(resourcev3.EndpointType)

	s.cache.pushMu.Lock()
	locked := true
	defer func() {
		if locked {
			s.cache.pushMu.Unlock()
		}
	}()
	p.ack(cds)
	p.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: eds.GetNonce(),
		ResourceNamesSubscribe: []string{xdsgen.ClusterName(echo2, 8080)}})
	p.nextWith(resourcev3.EndpointType, xdsgen.ClusterName(echo2, 8080))
	locked = false
	s.cache.pushMu.Unlock()
}

// blockingRegistry is a Registry whose Service blocks while hold is set:
// a push that plans an update is stuck in the planner, holding the push
// lock, until release is closed.
type blockingRegistry struct {
	*store.Store
	hold    atomic.Bool
	entered chan struct{} // a Service call is blocked (capacity 1)
	release chan struct{}
}

func (r *blockingRegistry) Service(h model.Hostname) *model.MergedService {
	if r.hold.Load() {
		select {
		case r.entered <- struct{}{}:
		default:
		}
		<-r.release
	}
	return r.Store.Service(h)
}

// TestFirstRequestDoesNotWaitForAPush: while a push is stuck in the
// planner (its registry lookup blocks, the push lock held), the first
// requests of new proxies are answered: a proxyless client of a new proxy
// group gets its load assignment, a new Envoy sidecar its clusters and
// load assignments, a proxyless server its inbound listener. Once the push
// goes on, what they were built apart is adopted: the planner tracks the
// new group, and the next push reaches it.
func TestFirstRequestDoesNotWaitForAPush(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	write := storeWriter(t, st)
	write(shard("c1", "r1", "10.0.0.5"))
	reg := &blockingRegistry{Store: st, entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := runServer(t, Options{Registry: reg})
	addr := s.Addr().String()
	released := false
	defer func() {
		if !released {
			close(reg.release)
		}
	}()

	// Served (the first push is done) before the push that sticks.
	newADS(t, addr, "c1", "r1").subscribe(resourcev3.EndpointType, xdsgen.ClusterName(echo, 8080))
	reg.hold.Store(true)
	write(shard("c1", "r1", "10.0.0.5", "10.0.0.6"))
	select {
	case <-reg.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no push started")
	}
	if s.cache.pushMu.TryLock() {
		s.cache.pushMu.Unlock()
		t.Fatal("the push lock is free: the push is not stuck in the planner")
	}

	// A proxyless client of a group nobody held.
	grpc := newADS(t, addr, "c1", "r9")
	if got := countEndpoints(cla(t, grpc.subscribe(resourcev3.EndpointType, xdsgen.ClusterName(echo, 8080)))); got == 0 {
		t.Errorf("the new group's first assignment has no endpoint")
	}
	// A new Envoy sidecar: its clusters, then a load assignment.
	envoy := newDeltaProxy(t, addr)
	envoy.send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode("10.0.0.7", "pod-x", "c1", "NONE"), TypeUrl: resourcev3.ClusterType})
	cds := envoy.nextWith(resourcev3.ClusterType, xdsgen.ClusterName(echo, 8080))
	envoy.ack(cds)
	envoy.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{xdsgen.ClusterName(echo, 8080)}})
	envoy.nextWith(resourcev3.EndpointType, xdsgen.ClusterName(echo, 8080))
	// A proxyless server's inbound listener.
	server := newADS(t, addr, "c1", "r1")
	inbound := xdsgen.InboundListenerName(netip.MustParseAddrPort("10.0.0.5:9000"))
	if r := server.subscribe(resourcev3.ListenerType, inbound); len(r.GetResources()) != 1 {
		t.Errorf("inbound listener answer holds %d resources, want 1", len(r.GetResources()))
	}
	if s.cache.pushMu.TryLock() {
		s.cache.pushMu.Unlock()
		t.Fatal("the push went on before the proxies were answered")
	}

	released = true
	reg.hold.Store(false)
	close(reg.release)
	// The planners adopt the new group and sidecar ...
	deadline := time.Now().Add(10 * time.Second)
	for !s.cache.adopted(xdsgen.ProxyGroup{Cluster: "c1", Region: "r9"}, envoyNode("10.0.0.7", "pod-x", "c1", "NONE").GetId()) {
		if time.Now().After(deadline) {
			t.Fatalf("not adopted: held %+v", s.cache.held())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ... and the next push reaches the new group.
	write(shard("c1", "r1", "10.0.0.5", "10.0.0.6", "10.0.0.8"))
	for {
		if n := countEndpoints(cla(t, grpc.recv())); n == 3 {
			break
		}
	}
}
