package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// Registry is what the xDS server reads: the merged services and the
// notification of which hostnames changed. *store.Store is one.
type Registry interface {
	Changed() <-chan struct{}
	TakeChanged() []model.Hostname
	Service(model.Hostname) *model.MergedService
	Services() []*model.MergedService
}

// Options configure a Server.
type Options struct {
	// Addr is the plaintext ADS listen address, e.g. ":15010".
	Addr     string
	Registry Registry
	Log      logr.Logger
	Metrics  prometheus.Registerer
	// Replica names this hub replica in proxy status (the HUB column).
	Replica string
	// Clock times proxy status; nil means the real clock.
	Clock clock.PassiveClock
	// Security turns on mTLS in the generated resources: clusters carry an
	// UpstreamTlsContext and inbound (server-side) listeners a
	// DownstreamTlsContext that requires client certificates. Every proxy
	// then needs the certificate provider instance "default" in its
	// bootstrap (grpc-go rejects the clusters otherwise), so it is off
	// unless asked for (the hub's --xds-mtls flag).
	Security bool
	// TrustDomain of the SPIFFE IDs that clusters accept; empty means
	// cluster.local.
	TrustDomain string
	// NACKBackoff holds back the answer to a proxy that keeps rejecting
	// what it is sent (see nackBackoff); zero values take the defaults.
	NACKBackoff Backoff
}

// genOptions are the xdsgen options of these server options.
func (o Options) genOptions() xdsgen.Options {
	return xdsgen.Options{Security: o.Security, TrustDomain: o.TrustDomain}
}

// Server is the hub's xDS server.
type Server struct {
	opts    Options
	cache   *groupCache
	gen     *xdsgen.Cache                     // guarded by cache.mu
	names   map[model.Hostname][]serviceNames // guarded by cache.mu
	metrics *metrics
	status  *StatusTracker
	nacks   *nackBackoff
	csds    *csdsServer
	ready   chan struct{}
	addr    net.Addr
}

// serviceNames are the names of a hostname's resources of one port, so a
// removed port or service can be deleted from the caches.
type serviceNames struct {
	listener, route, cluster string
}

// New returns a Server; Run serves it.
func New(opts Options) *Server {
	s := &Server{
		opts:    opts,
		gen:     xdsgen.NewCache(),
		names:   map[model.Hostname][]serviceNames{},
		metrics: newMetrics(opts.Metrics),
		ready:   make(chan struct{}),
	}
	s.status = NewStatusTracker(opts.Replica, opts.Clock, opts.Metrics)
	s.nacks = newNACKBackoff(opts.NACKBackoff)
	s.csds = newCSDS(s.status)
	s.cache = newGroupCache(s.buildGroup)
	genOpts := opts.genOptions()
	s.cache.inbound = func(name string) types.Resource {
		addr, err := xdsgen.ParseInboundListenerName(name)
		if err != nil {
			return nil
		}
		return xdsgen.InboundListener(addr, genOpts)
	}
	return s
}

// Status returns the tracker of this replica's proxies' sync status.
func (s *Server) Status() *StatusTracker { return s.status }

// SetStatusSource makes CSDS answer from src, the fleet-wide view, instead
// of this replica's tracker. It may be called at any time.
func (s *Server) SetStatusSource(src StatusSource) { s.csds.setSource(src) }

// Addr returns the address the server listens on, once Run has bound it.
func (s *Server) Addr() net.Addr {
	<-s.ready
	return s.addr
}

// Run serves ADS and pushes registry changes until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	s.addr = lis.Addr()
	close(s.ready)
	gs := grpc.NewServer(
		grpc.MaxConcurrentStreams(1<<20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	)
	xs := serverv3.NewServer(ctx, s.cache, s.callbacks())
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	statusv3.RegisterClientStatusDiscoveryServiceServer(gs, s.csds)

	s.pushAll()
	go s.pushLoop(ctx)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	s.opts.Log.Info("serving xDS", "addr", s.addr.String())
	select {
	case <-ctx.Done():
		// Streams end with ctx; give in-flight responses a moment, then cut.
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			gs.Stop()
		}
		return nil
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return fmt.Errorf("xds: %w", err)
	}
}

func (s *Server) pushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Registry.Changed():
			s.push(s.opts.Registry.TakeChanged())
		}
	}
}

func (s *Server) pushAll() {
	var hs []model.Hostname
	for _, ms := range s.opts.Registry.Services() {
		hs = append(hs, ms.Service.Hostname)
	}
	s.push(hs)
}

// push brings the caches in line with the registry for hostnames hs.
func (s *Server) push(hs []model.Hostname) {
	if len(hs) == 0 {
		return
	}
	start := time.Now()
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()

	shared := map[string]*update{
		resourcev3.ListenerType: newUpdate(),
		resourcev3.RouteType:    newUpdate(),
		resourcev3.ClusterType:  newUpdate(),
	}
	eds := map[xdsgen.ProxyGroup]*update{}
	c.groupsLocked(func(g xdsgen.ProxyGroup, _ *trackedCache) { eds[g] = newUpdate() })

	for _, h := range hs {
		ms := s.opts.Registry.Service(h)
		old := s.names[h]
		if ms == nil {
			for _, n := range old {
				shared[resourcev3.ListenerType].del(n.listener)
				shared[resourcev3.RouteType].del(n.route)
				shared[resourcev3.ClusterType].del(n.cluster)
				for _, u := range eds {
					u.del(n.cluster)
				}
			}
			delete(s.names, h)
			s.gen.Forget(h)
			continue
		}
		res, rebuilt := s.gen.Service(ms.Service)
		if rebuilt {
			names := make([]serviceNames, 0, len(ms.Service.Ports))
			for _, p := range ms.Service.Ports {
				names = append(names, serviceNames{
					listener: xdsgen.ListenerName(h, p.Port),
					route:    xdsgen.RouteName(h, p.Port),
					cluster:  xdsgen.ClusterName(h, p.Port),
				})
			}
			for _, r := range res.Listeners {
				shared[resourcev3.ListenerType].put(r.GetName(), r)
			}
			for _, r := range res.Routes {
				shared[resourcev3.RouteType].put(r.GetName(), r)
			}
			for _, r := range res.Clusters {
				shared[resourcev3.ClusterType].put(r.GetName(), r)
			}
			for _, n := range old {
				if !containsNames(names, n) {
					shared[resourcev3.ListenerType].del(n.listener)
					shared[resourcev3.RouteType].del(n.route)
					shared[resourcev3.ClusterType].del(n.cluster)
					for _, u := range eds {
						u.del(n.cluster)
					}
				}
			}
			s.names[h] = names
		}
		if s.opts.Security {
			// Secure clusters also depend on the endpoints' service
			// accounts; apply skips them when they did not change.
			for _, r := range xdsgen.ServiceClusters(ms, s.opts.genOptions()) {
				shared[resourcev3.ClusterType].put(r.GetName(), r)
			}
		}
		for g, u := range eds {
			clas, rebuilt := s.gen.LoadAssignments(ms, g)
			if !rebuilt {
				continue
			}
			for _, cla := range clas {
				u.put(cla.GetClusterName(), cla)
			}
		}
	}

	for t, u := range shared {
		s.apply(t, c.shared[t], u)
	}
	c.groupsLocked(func(g xdsgen.ProxyGroup, tc *trackedCache) {
		s.apply(resourcev3.EndpointType, tc, eds[g])
	})
	s.metrics.pushDuration.Observe(time.Since(start).Seconds())
}

func containsNames(all []serviceNames, n serviceNames) bool {
	for _, m := range all {
		if m == n {
			return true
		}
	}
	return false
}

// update collects the changes of one cache in a push.
type update struct {
	up map[string]types.Resource
	rm []string
}

func newUpdate() *update { return &update{up: map[string]types.Resource{}} }

func (u *update) put(name string, r types.Resource) { u.up[name] = r }

func (u *update) del(name string) {
	delete(u.up, name)
	u.rm = append(u.rm, name)
}

// apply writes u into tc, skipping resources equal to what tc holds so that
// no proxy is sent a no-op update. The cache's mu must be held.
func (s *Server) apply(typeURL string, tc *trackedCache, u *update) {
	if u == nil || (len(u.up) == 0 && len(u.rm) == 0) {
		return
	}
	current := tc.current
	for n, r := range u.up {
		if cur, ok := current[n]; ok && proto.Equal(cur, r) {
			delete(u.up, n)
		}
	}
	rm := u.rm[:0]
	for _, n := range u.rm {
		if _, ok := current[n]; ok {
			rm = append(rm, n)
		}
	}
	if len(u.up) == 0 && len(rm) == 0 {
		return
	}
	if err := tc.updateLocked(u.up, rm); err != nil {
		s.opts.Log.Error(err, "updating xDS cache", "type", typeURL)
		return
	}
	s.metrics.pushes.WithLabelValues(shortType(typeURL)).Inc()
}

// buildGroup computes every load assignment for a new proxy group. It runs
// with the cache's mu held.
func (s *Server) buildGroup(g xdsgen.ProxyGroup) map[string]types.Resource {
	out := map[string]types.Resource{}
	for _, ms := range s.opts.Registry.Services() {
		clas, _ := s.gen.LoadAssignments(ms, g)
		for _, cla := range clas {
			out[cla.GetClusterName()] = cla
		}
	}
	s.metrics.groups.Inc()
	return out
}

// shortType is the metric label of a type URL: proxystatus's short name,
// or "other" for a type the hub does not know, so that a proxy cannot grow
// the label set by asking for made-up types.
func shortType(typeURL string) string {
	if short := proxystatus.ShortType(typeURL); short != typeURL {
		return short
	}
	return "other"
}

// onRequest counts and logs a NACK, and holds back the stream's answer to
// it (nackBackoff). Only the first NACK in a row is logged at the default
// level: a proxy stuck on a bad config would otherwise flood the log.
func (s *Server) onRequest(k streamKey, node, typeURL, nackMsg string, nack bool) {
	if nack {
		s.metrics.nacks.WithLabelValues(shortType(typeURL)).Inc()
	}
	d := s.nacks.wait(k, typeURL, nack)
	switch {
	case !nack:
	case d == s.nacks.policy.Initial:
		s.opts.Log.Info("proxy rejected config", "node", node, "type", typeURL, "error", nackMsg)
	default:
		s.opts.Log.V(1).Info("proxy rejected config again", "node", node, "type", typeURL, "error", nackMsg, "heldBack", d)
	}
}

func (s *Server) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			s.metrics.proxies.Inc()
			s.status.StreamOpened(false, id)
			s.nacks.opened(ctx, streamKey{false, id})
			return nil
		},
		StreamClosedFunc: func(id int64, _ *corev3.Node) {
			s.metrics.proxies.Dec()
			s.status.StreamClosed(false, id)
			s.nacks.closed(streamKey{false, id})
		},
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			s.metrics.proxies.Inc()
			s.status.StreamOpened(true, id)
			s.nacks.opened(ctx, streamKey{true, id})
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) {
			s.metrics.proxies.Dec()
			s.status.StreamClosed(true, id)
			s.nacks.closed(streamKey{true, id})
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			s.status.OnResponse(id, resp)
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			s.status.OnDeltaResponse(id, resp)
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			s.status.OnRequest(id, req)
			s.onRequest(streamKey{false, id}, req.GetNode().GetId(), req.GetTypeUrl(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			s.status.OnDeltaRequest(id, req)
			s.onRequest(streamKey{true, id}, req.GetNode().GetId(), req.GetTypeUrl(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
			return nil
		},
	}
}
