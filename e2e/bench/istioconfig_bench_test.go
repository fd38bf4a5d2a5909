//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

const (
	// vsRemotes is how many remote clusters run echo: subset v1 in the
	// first, v2 in the second, v3 (in no subset the route names) in the
	// third.
	vsRemotes = 3
	// vsClients is how many proxyless clients watch echo's route.
	vsClients = 100
	// vsWarmup changes run before measuring and are not counted.
	vsWarmup = 3
	// vsChanges is the number of measured changes per b.Loop iteration.
	vsChanges = 40
	// vsBudget bounds the benchmark after its fleet has started.
	vsBudget = 10 * time.Minute
)

// BenchmarkVirtualServiceChange measures how long a VirtualService change
// in the config cluster takes to reach every one of vsClients proxyless
// clients as a new route configuration.
//
// The fleet runs echo (2 replicas) in each of three remote clusters, its
// Pods labelled version v1, v2 and v3 by cluster, and one hub. The config
// cluster holds echo's DestinationRule (subsets v1 and v2) and a
// VirtualService splitting echo between them. 100 raw ADS streams
// (proxyless nodes, GENERATOR=grpc, spread over the three clusters, so
// three proxy groups) subscribe to what a grpc-go client dialing echo asks
// for: its listener, route, and the two subsets' clusters and load
// assignments; they ACK everything. Each change is a merge patch of the
// VirtualService's weights (v1 takes 1..99, never the weight it had);
// the benchmark takes the time just before the patch and, for every
// client, the receipt of the first route configuration of a new version
// that gives v1 its new weight. Changes are strictly one at a time; a few
// warm-up changes are not counted.
//
// Metrics:
//
//   - p50-ms, p99-ms: change → the last of the 100 clients has the route
//     (over vsChanges changes per iteration; at -benchtime 1x p99 is the
//     slowest).
//   - first-p50-ms: change → the first client has it; p50-ms minus it is
//     the fan-out to 100 streams.
//   - write-p50-ms: the patch call alone. The apiserver sends the watch
//     event about when it answers, so first-p50-ms close to (or below)
//     it means the hub adds almost nothing before its first send.
//   - hub-cpu-ms/change: the hub's process_cpu_seconds_total (10 ms
//     ticks) over the series, per change, with the clients connected. It
//     includes the hub's idle work over the series and its write of the
//     object's status.
//   - changes, clients.
func BenchmarkVirtualServiceChange(b *testing.B) {
	f := framework.NewTestFleet(b, framework.FleetOptions{Remotes: framework.Remotes(vsRemotes)})
	ctx, cancel := context.WithTimeout(b.Context(), vsBudget)
	defer cancel()

	var echo *framework.Workload // any of them: they share the hostname
	for i, r := range f.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
			Namespace: convNamespace, Service: convService, Replicas: convReplicas,
			PodLabels: map[string]string{"version": "v" + strconv.Itoa(i+1)},
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(w.Stop)
		echo = w
	}
	if err := f.Config().PutRemoteSecret(ctx, "bench-remotes", f.Remotes()...); err != nil {
		b.Fatal(err)
	}
	split := newWeightSplit(f.Config(), echo.Hostname(), uint32(echo.Options().ServicePort))
	if err := split.create(ctx); err != nil {
		b.Fatal(err)
	}
	hub := framework.StartTestHub(b, f, framework.HubOptions{PlaintextXDS: true})
	for _, r := range f.Remotes() {
		waitSynced(b, ctx, hub, r.ID)
	}

	// The clients are spread over the clusters, so the hub serves one
	// proxy group per cluster, as it would a real fleet.
	updates := make(chan routeUpdate, framework.ADSWatcherBuffer)
	clients := make([]*routeWatcher, vsClients)
	for i := range clients {
		r := f.Remotes()[i%vsRemotes]
		c, err := newRouteWatcher(context.WithoutCancel(ctx), hub.XDSAddr(), proxylessNode(r, "vs-client-"+strconv.Itoa(i)), i, updates)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		if err := c.watch(split.subscriptions()); err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	held := make([]string, vsClients) // the route version each client holds
	await := func(since time.Time, timeout time.Duration) (first, last time.Time, err error) {
		return awaitRoutes(ctx, updates, clients, held, split.host, split.port, since, split.v1, timeout)
	}
	if _, _, err := await(time.Time{}, settleTimeout); err != nil {
		b.Fatalf("initial route: %v", err)
	}

	// change writes the next weights and returns how long the apiserver
	// write took, and how long until the first and the last client had the
	// route.
	change := func() (write, first, all time.Duration, err error) {
		start := time.Now()
		if err := split.next(ctx); err != nil {
			return 0, 0, 0, err
		}
		write = time.Since(start)
		firstAt, lastAt, err := await(start, changeTimeout)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("change to %d/%d: %w", split.v1, 100-split.v1, err)
		}
		return write, firstAt.Sub(start), lastAt.Sub(start), nil
	}
	for range vsWarmup {
		if _, _, _, err := change(); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	var writes, firsts, alls []time.Duration
	var cpu float64
	for b.Loop() {
		before := mustCPU(b, ctx, hub)
		for range vsChanges {
			w, fst, all, err := change()
			if err != nil {
				b.Fatal(err)
			}
			writes, firsts, alls = append(writes, w), append(firsts, fst), append(alls, all)
		}
		cpu += mustCPU(b, ctx, hub) - before
	}

	b.ReportMetric(0, "ns/op") // one op is a whole series of changes
	b.ReportMetric(msOf(percentile(alls, 50)), "p50-ms")
	b.ReportMetric(msOf(percentile(alls, 99)), "p99-ms")
	b.ReportMetric(msOf(percentile(firsts, 50)), "first-p50-ms")
	b.ReportMetric(msOf(percentile(writes, 50)), "write-p50-ms")
	b.ReportMetric(float64(len(alls)), "changes")
	b.ReportMetric(vsClients, "clients")
	b.ReportMetric(cpu*1000/float64(len(alls)), "hub-cpu-ms/change")
}

// ---------------------------------------------------------------------------
// The VirtualService

// weightSplit is echo's DestinationRule (subsets v1 and v2 by the version
// label) and VirtualService (one rule splitting between them) in the
// config cluster; next changes the split.
type weightSplit struct {
	config *framework.ConfigCluster
	host   model.Hostname
	port   uint32
	vs     *unstructured.Unstructured // as last written
	// v1 is the weight of subset v1 as last written; v2 has the rest.
	v1 int64
}

func newWeightSplit(config *framework.ConfigCluster, host model.Hostname, port uint32) *weightSplit {
	return &weightSplit{config: config, host: host, port: port, v1: 90}
}

func istioObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1",
		"kind":       kind,
		"metadata":   map[string]any{"namespace": convNamespace, "name": name},
		"spec":       spec,
	}}
}

// create writes the DestinationRule and the VirtualService with the
// initial split.
func (s *weightSplit) create(ctx context.Context) error {
	if err := s.config.EnsureNamespace(ctx, convNamespace); err != nil {
		return err
	}
	dr := istioObject("DestinationRule", convService, map[string]any{
		"host": convService,
		"subsets": []any{
			map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}},
			map[string]any{"name": "v2", "labels": map[string]any{"version": "v2"}},
		},
	})
	if err := s.config.Client().Create(ctx, dr); err != nil {
		return fmt.Errorf("creating DestinationRule: %w", err)
	}
	s.vs = istioObject("VirtualService", convService, map[string]any{"hosts": []any{convService}})
	s.setWeights()
	if err := s.config.Client().Create(ctx, s.vs); err != nil {
		return fmt.Errorf("creating VirtualService: %w", err)
	}
	return nil
}

// setWeights writes s.v1 and its complement into the VirtualService.
func (s *weightSplit) setWeights() {
	dest := func(subset string, weight int64) any {
		return map[string]any{
			"destination": map[string]any{"host": convService, "subset": subset},
			"weight":      weight,
		}
	}
	route := []any{dest("v1", s.v1), dest("v2", 100-s.v1)}
	_ = unstructured.SetNestedSlice(s.vs.Object, []any{map[string]any{"route": route}}, "spec", "http")
}

// next changes the VirtualService to another split (v1 takes 1 to 99,
// never the weight it had). A merge patch of the spec: the hub writes the
// object's status in between, and a patch needs no resourceVersion, so
// every change is one write.
func (s *weightSplit) next(ctx context.Context) error {
	s.v1 = s.v1%99 + 1
	s.setWeights()
	http, _, _ := unstructured.NestedSlice(s.vs.Object, "spec", "http")
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"http": http}})
	if err != nil {
		return err
	}
	if err := s.config.Client().Patch(ctx, s.vs, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("patching VirtualService: %w", err)
	}
	return nil
}

// subscriptions are the names a grpc-go client dialing echo asks for, by
// type URL: the listener and route of its port, then the clusters the
// route names and their load assignments.
func (s *weightSplit) subscriptions() map[string][]string {
	clusters := []string{
		xdsgen.SubsetClusterName(s.host, s.port, "v1"),
		xdsgen.SubsetClusterName(s.host, s.port, "v2"),
	}
	return map[string][]string{
		resourcev3.ListenerType: {xdsgen.ListenerName(s.host, s.port)},
		resourcev3.RouteType:    {xdsgen.RouteName(s.host, s.port)},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: clusters,
	}
}

// v1Weight returns the weight a route configuration gives subset v1 of
// host:port in its weighted clusters, and false if it names none.
func v1Weight(rc *routev3.RouteConfiguration, host model.Hostname, port uint32) (uint32, bool) {
	want := xdsgen.SubsetClusterName(host, port, "v1")
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			for _, cw := range r.GetRoute().GetWeightedClusters().GetClusters() {
				if cw.GetName() == want {
					return cw.GetWeight().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// ---------------------------------------------------------------------------
// Proxyless route watchers

// proxylessNode is the identity of a proxyless gRPC client living in r.
func proxylessNode(r *framework.RemoteCluster, name string) *corev3.Node {
	n := watcherNode(r, name)
	n.Metadata = xdsnode.Metadata{ClusterID: r.ID, Namespace: convNamespace, Generator: xdsnode.GeneratorGRPC}.Struct()
	return n
}

// routeUpdate is one route configuration a routeWatcher received.
type routeUpdate struct {
	client   int
	version  string
	routes   *routev3.RouteConfiguration
	received time.Time
}

// routeWatcher is a raw state-of-the-world ADS stream subscribing to what
// a grpc-go client of one service asks for (listener, route, clusters,
// load assignments), ACKing every response; it hands each route
// configuration over with its receive time. framework.ADSWatcher reports
// load assignments only.
type routeWatcher struct {
	id      int
	conn    *grpc.ClientConn
	stream  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel  context.CancelFunc
	node    *corev3.Node
	updates chan<- routeUpdate

	sendMu   sync.Mutex
	nodeSent bool
	names    map[string][]string // subscribed names by type URL
	done     chan struct{}
	err      error // set before done is closed
}

func newRouteWatcher(ctx context.Context, hubAddr string, node *corev3.Node, id int, updates chan<- routeUpdate) (*routeWatcher, error) {
	conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("route watcher: dialing %s: %w", hubAddr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("route watcher: opening stream: %w", err)
	}
	w := &routeWatcher{
		id: id, conn: conn, stream: stream, cancel: cancel, node: node, updates: updates,
		names: map[string][]string{}, done: make(chan struct{}),
	}
	go w.recvLoop(sctx)
	return w, nil
}

// watch subscribes to names, by type URL, in grpc-go's order.
func (w *routeWatcher) watch(names map[string][]string) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	for _, t := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
		w.names[t] = names[t]
		if err := w.sendLocked(&discoveryv3.DiscoveryRequest{TypeUrl: t, ResourceNames: names[t]}); err != nil {
			return err
		}
	}
	return nil
}

func (w *routeWatcher) sendLocked(req *discoveryv3.DiscoveryRequest) error {
	if !w.nodeSent {
		req.Node = w.node
		w.nodeSent = true
	}
	if err := w.stream.Send(req); err != nil {
		return fmt.Errorf("route watcher %d: send: %w", w.id, err)
	}
	return nil
}

func (w *routeWatcher) ack(resp *discoveryv3.DiscoveryResponse) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	t := resp.GetTypeUrl()
	return w.sendLocked(&discoveryv3.DiscoveryRequest{
		TypeUrl: t, ResourceNames: w.names[t],
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
	})
}

func (w *routeWatcher) recvLoop(ctx context.Context) {
	defer close(w.done)
	for {
		resp, err := w.stream.Recv()
		received := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				w.err = fmt.Errorf("route watcher %d: stream ended: %w", w.id, err)
			}
			return
		}
		if err := w.ack(resp); err != nil {
			w.err = err
			return
		}
		if resp.GetTypeUrl() != resourcev3.RouteType {
			continue
		}
		for _, res := range resp.GetResources() {
			rc := &routev3.RouteConfiguration{}
			if err := res.UnmarshalTo(rc); err != nil {
				w.err = fmt.Errorf("route watcher %d: decoding %s: %w", w.id, res.GetTypeUrl(), err)
				return
			}
			select {
			case w.updates <- routeUpdate{client: w.id, version: resp.GetVersionInfo(), routes: rc, received: received}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Err returns why the stream ended: nil while it runs or after Close.
func (w *routeWatcher) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Close ends the stream and waits for the receiver to stop.
func (w *routeWatcher) Close() error {
	w.cancel()
	<-w.done
	return w.conn.Close()
}

// awaitRoutes waits until every client has received, no earlier than
// since, a route configuration of host:port giving subset v1 the weight v1
// under another version than the one it held (held, by client, updated),
// and returns when the first and the last of them had it. Other route
// configurations (an older split, one received before since) are skipped.
func awaitRoutes(ctx context.Context, updates <-chan routeUpdate, clients []*routeWatcher, held []string,
	host model.Hostname, port uint32, since time.Time, v1 int64, timeout time.Duration) (first, last time.Time, err error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	done := make([]bool, len(clients))
	pending := len(clients)
	for pending > 0 {
		select {
		case u := <-updates:
			if done[u.client] || u.received.Before(since) || u.version == held[u.client] {
				continue
			}
			if w, ok := v1Weight(u.routes, host, port); !ok || int64(w) != v1 {
				continue
			}
			done[u.client] = true
			held[u.client] = u.version
			pending--
			if first.IsZero() || u.received.Before(first) {
				first = u.received
			}
			last = maxTime(last, u.received)
		case <-timer.C:
			return first, last, fmt.Errorf("%d of %d clients lack the route within %s", pending, len(clients), timeout)
		case <-ctx.Done():
			return first, last, fmt.Errorf("%d of %d clients lack the route: %w", pending, len(clients), ctx.Err())
		}
		for _, c := range clients {
			if err := c.Err(); err != nil {
				return first, last, err
			}
		}
	}
	return first, last, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
