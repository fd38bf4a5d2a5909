package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
)

// TestServerAnswersAsGoControlPlane plays the same random streams against
// three stacks over real gRPC: go-control-plane's stream server (ordered
// SotW ADS, Delta) on LinearCaches, the hub's stream server (ads.Server)
// on LinearCaches, and the hub's stream server on the hub's watch caches,
// as the hub runs. Streams speak SotW or Delta, for load assignments and
// clusters on one stream (ADS), with named and wildcard (legacy and "*")
// subscriptions that change, ACKs, NACKs, stale nonces, reconnects with
// initial_resource_versions, and writes that update and remove resources.
// After each step every stream is probed (see probeCache) and the answers
// each stack sent meanwhile must be the same, byte for byte, with their
// versions and nonces.
func TestServerAnswersAsGoControlPlane(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { playStacks(t, seed) })
	}
}

// probeType is a type only probeCache serves.
const probeType = "type.googleapis.com/meshfed.test.Probe"

// probeCache answers every watch at once. Streams take requests in order
// and send answers in the order the caches gave them, so once a stream
// has the answer to a probe request, every answer due before it was sent.
type probeCache struct{}

func (probeCache) CreateWatch(req *cachev3.Request, _ cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	out <- &cachev3.RawResponse{Request: req, Version: "probe"}
	return func() {}, nil
}

func (probeCache) CreateDeltaWatch(req *cachev3.DeltaRequest, _ cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	out <- &cachev3.RawDeltaResponse{DeltaRequest: req, SystemVersionInfo: "probe"}
	return func() {}, nil
}

func (probeCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("no fetch")
}

// byType routes each watch to the cache of its type.
type byType map[string]cachev3.ConfigWatcher

func (b byType) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	return b[req.GetTypeUrl()].CreateWatch(req, sub, out)
}

func (b byType) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	return b[req.GetTypeUrl()].CreateDeltaWatch(req, sub, out)
}

func (b byType) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("no fetch")
}

// updater is what the test writes to: a LinearCache or a watch cache.
type updater interface {
	UpdateResources(map[string]types.Resource, []string) error
}

// stackTypes are the types the streams of playStacks ask for.
var stackTypes = []string{resourcev3.EndpointType, resourcev3.ClusterType}

// stack is one stream server on its caches, served on loopback.
type stack struct {
	name   string
	caches map[string]updater
	conn   *grpc.ClientConn
}

func startStack(t *testing.T, name string, linear bool, server func(context.Context, cachev3.Cache) discoveryv3.AggregatedDiscoveryServiceServer) *stack {
	t.Helper()
	s := &stack{name: name, caches: map[string]updater{}}
	route := byType{probeType: probeCache{}}
	for _, typeURL := range stackTypes {
		if linear {
			lc := cachev3.NewLinearCache(typeURL, cachev3.WithVersionPrefix("9."))
			s.caches[typeURL], route[typeURL] = lc, lc
		} else {
			wc := newWatchCache(typeURL, "9.", nil)
			s.caches[typeURL], route[typeURL] = wc, wc
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, server(t.Context(), route))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	s.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.conn.Close() })
	return s
}

func playStacks(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 28))
	stacks := []*stack{
		startStack(t, "go-control-plane on LinearCache", true, func(ctx context.Context, c cachev3.Cache) discoveryv3.AggregatedDiscoveryServiceServer {
			return serverv3.NewServer(ctx, c, nil, sotwv3.WithOrderedADS())
		}),
		startStack(t, "ads on LinearCache", true, func(ctx context.Context, c cachev3.Cache) discoveryv3.AggregatedDiscoveryServiceServer {
			return ads.NewServer(ctx, c, nil)
		}),
		startStack(t, "ads on watch caches", false, func(ctx context.Context, c cachev3.Cache) discoveryv3.AggregatedDiscoveryServiceServer {
			return ads.NewServer(ctx, c, nil)
		}),
	}
	names := []string{"a", "b", "c", "d", "e"}
	randomNames := func() []string {
		var out []string
		for _, n := range names {
			if rng.IntN(3) == 0 {
				out = append(out, n)
			}
		}
		if rng.IntN(6) == 0 {
			out = append(out, "*")
		}
		return out
	}
	var clients []*playClient
	for i := range 4 {
		c := &playClient{delta: i%2 == 1, id: i, stacks: stacks}
		for _, typeURL := range stackTypes {
			ct := &clientType{typeURL: typeURL}
			if rng.IntN(3) > 0 { // else legacy wildcard: no names at first
				ct.names = randomNames()
			}
			c.types = append(c.types, ct)
		}
		c.connect(t, nil)
		c.probe(t, -1) // the first requests are taken before any write
		clients = append(clients, c)
	}
	for step := range 120 {
		c := clients[rng.IntN(len(clients))]
		ct := c.types[rng.IntN(len(c.types))]
		switch op := rng.IntN(12); {
		case op < 4:
			typeURL := stackTypes[rng.IntN(len(stackTypes))]
			up := map[string]types.Resource{}
			for range 1 + rng.IntN(3) {
				n := names[rng.IntN(len(names))]
				up[n] = playResource(typeURL, n, rng.IntN(3))
			}
			var del []string
			if n := names[rng.IntN(len(names))]; rng.IntN(3) == 0 && up[n] == nil {
				del = append(del, n)
			}
			for _, s := range stacks {
				if err := s.caches[typeURL].UpdateResources(up, del); err != nil {
					t.Fatal(err)
				}
			}
		case op < 7:
			c.ack(t, ct, nil)
		case op < 8:
			c.nack(t, ct)
		case op < 10:
			c.ack(t, ct, randomNames())
		case op < 11:
			c.stale(t, ct)
		default:
			c.reconnect(t)
		}
		for _, c := range clients {
			c.probe(t, step)
		}
	}
}

func playResource(typeURL, name string, variant int) types.Resource {
	if typeURL == resourcev3.ClusterType {
		return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Duration(1+variant) * time.Second)}
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Policy: &endpointv3.ClusterLoadAssignment_Policy{
		OverprovisioningFactor: wrapperspb.UInt32(uint32(100 + variant))}}
}

// playClient is one proxy, connected to every stack alike. Its state is
// kept from the first stack's answers; the others' must be the same.
type playClient struct {
	id     int
	delta  bool
	stacks []*stack
	types  []*clientType
	sotw   []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dlt    []discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel []context.CancelFunc
	// probeNonce is the nonce of the last probe answer (SotW ignores a
	// probe with another).
	probeNonce string
}

// clientType is what a client knows and asks of one type.
type clientType struct {
	typeURL string
	names   []string // nil: legacy wildcard until names are sent
	asked   bool     // a request of the type was sent on the stream
	// the last answer: its nonce, its (SotW) version; acked, the
	// version last accepted; nonces, every nonce received.
	nonce, version, acked string
	nonces                []string
	known                 map[string]string // Delta: name -> version
}

func (c *playClient) node() *corev3.Node {
	return &corev3.Node{Id: fmt.Sprintf("sidecar~10.0.0.%d~p%d.ns~ns.svc.cluster.local", c.id+1, c.id)}
}

// connect opens the client's streams and asks for every type: a first
// connection, or a reconnection that declares what it knows.
func (c *playClient) connect(t *testing.T, known map[string]map[string]string) {
	t.Helper()
	c.sotw, c.dlt, c.cancel = nil, nil, nil
	for _, s := range c.stacks {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		t.Cleanup(cancel)
		c.cancel = append(c.cancel, cancel)
		client := discoveryv3.NewAggregatedDiscoveryServiceClient(s.conn)
		var err error
		if c.delta {
			var st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
			st, err = client.DeltaAggregatedResources(ctx)
			c.dlt = append(c.dlt, st)
		} else {
			var st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
			st, err = client.StreamAggregatedResources(ctx)
			c.sotw = append(c.sotw, st)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c.probeNonce = ""
	for _, ct := range c.types {
		ct.nonce, ct.nonces, ct.asked = "", nil, true
		if c.delta {
			c.send(t, &discoveryv3.DeltaDiscoveryRequest{Node: c.node(), TypeUrl: ct.typeURL,
				ResourceNamesSubscribe: ct.names, InitialResourceVersions: known[ct.typeURL]})
			ct.known = maps.Clone(known[ct.typeURL])
			continue
		}
		c.send(t, &discoveryv3.DiscoveryRequest{Node: c.node(), TypeUrl: ct.typeURL, ResourceNames: ct.names, VersionInfo: ct.acked})
	}
}

func (c *playClient) send(t *testing.T, req any) {
	t.Helper()
	for i := range c.stacks {
		var err error
		switch r := req.(type) {
		case *discoveryv3.DiscoveryRequest:
			err = c.sotw[i].Send(r)
		case *discoveryv3.DeltaDiscoveryRequest:
			err = c.dlt[i].Send(r)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.stacks[i].name, err)
		}
	}
}

// ack ACKs the type's last answer, with a new subscription if next is
// not nil.
func (c *playClient) ack(t *testing.T, ct *clientType, next []string) {
	t.Helper()
	if c.delta {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ct.typeURL, ResponseNonce: ct.nonce}
		if next != nil {
			req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe = diffNames(ct.names, next)
			ct.names = next
		}
		c.send(t, req)
		return
	}
	if next != nil {
		ct.names = next
	}
	ct.acked = ct.version
	c.send(t, &discoveryv3.DiscoveryRequest{TypeUrl: ct.typeURL, ResourceNames: ct.names, VersionInfo: ct.version, ResponseNonce: ct.nonce})
}

// nack rejects the type's last answer.
func (c *playClient) nack(t *testing.T, ct *clientType) {
	t.Helper()
	detail := &status.Status{Code: 3, Message: "rejected"}
	if c.delta {
		c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ct.typeURL, ResponseNonce: ct.nonce, ErrorDetail: detail})
		return
	}
	c.send(t, &discoveryv3.DiscoveryRequest{TypeUrl: ct.typeURL, ResourceNames: ct.names, VersionInfo: ct.acked,
		ResponseNonce: ct.nonce, ErrorDetail: detail})
}

// stale sends a request with a nonce older than the type's last.
func (c *playClient) stale(t *testing.T, ct *clientType) {
	t.Helper()
	if len(ct.nonces) < 2 {
		return
	}
	old := ct.nonces[len(ct.nonces)-2]
	if c.delta {
		c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ct.typeURL, ResponseNonce: old})
		return
	}
	c.send(t, &discoveryv3.DiscoveryRequest{TypeUrl: ct.typeURL, ResourceNames: ct.names, VersionInfo: ct.acked, ResponseNonce: old})
}

// reconnect ends the client's streams and opens new ones; a Delta client
// declares the versions it holds.
func (c *playClient) reconnect(t *testing.T) {
	t.Helper()
	for _, cancel := range c.cancel {
		cancel()
	}
	known := map[string]map[string]string{}
	for _, ct := range c.types {
		known[ct.typeURL] = ct.known
	}
	c.connect(t, known)
}

// probe sends a probe request on every stack's stream and requires the
// answers sent before the probe's to be the same on every stack.
func (c *playClient) probe(t *testing.T, step int) {
	t.Helper()
	if c.delta {
		c.send(t, &discoveryv3.DeltaDiscoveryRequest{Node: c.node(), TypeUrl: probeType, ResponseNonce: c.probeNonce})
	} else {
		c.send(t, &discoveryv3.DiscoveryRequest{Node: c.node(), TypeUrl: probeType, VersionInfo: "probe", ResponseNonce: c.probeNonce})
	}
	var want []string
	for i, s := range c.stacks {
		var got []string
		for {
			line, typeURL, nonce := c.recv(t, i)
			if typeURL == probeType {
				if i == 0 {
					c.probeNonce = nonce
				}
				break
			}
			got = append(got, line)
		}
		if i == 0 {
			want = got
			continue
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d, client %d (delta=%t): %s answered\n  %s\nwhere %s answered\n  %s", step, c.id, c.delta,
				s.name, strings.Join(got, "\n  "), c.stacks[0].name, strings.Join(want, "\n  "))
		}
	}
}

// recv takes one answer from stack i's stream and returns it as a line,
// recording it in the client's state when it is the first stack's.
func (c *playClient) recv(t *testing.T, i int) (line, typeURL, nonce string) {
	t.Helper()
	var ct *clientType
	find := func(typeURL string) {
		for _, x := range c.types {
			if x.typeURL == typeURL && i == 0 {
				ct = x
			}
		}
	}
	if c.delta {
		r, err := c.dlt[i].Recv()
		if err != nil {
			t.Fatalf("%s: %v", c.stacks[i].name, err)
		}
		find(r.GetTypeUrl())
		if ct != nil {
			ct.nonce, ct.nonces = r.GetNonce(), append(ct.nonces, r.GetNonce())
			if ct.known == nil {
				ct.known = map[string]string{}
			}
			for _, res := range r.GetResources() {
				ct.known[res.GetName()] = res.GetVersion()
			}
			for _, n := range r.GetRemovedResources() {
				delete(ct.known, n)
			}
		}
		removed := slices.Sorted(slices.Values(r.GetRemovedResources()))
		return fmt.Sprintf("%s %s nonce=%s %v removed=%v", xdsstatus.TypeLabel(r.GetTypeUrl()), r.GetSystemVersionInfo(), r.GetNonce(),
			deltaResources(r), removed), r.GetTypeUrl(), r.GetNonce()
	}
	r, err := c.sotw[i].Recv()
	if err != nil {
		t.Fatalf("%s: %v", c.stacks[i].name, err)
	}
	find(r.GetTypeUrl())
	if ct != nil {
		ct.nonce, ct.version, ct.nonces = r.GetNonce(), r.GetVersionInfo(), append(ct.nonces, r.GetNonce())
	}
	return fmt.Sprintf("%s %s nonce=%s %v", xdsstatus.TypeLabel(r.GetTypeUrl()), r.GetVersionInfo(), r.GetNonce(), sotwResources(r)),
		r.GetTypeUrl(), r.GetNonce()
}
