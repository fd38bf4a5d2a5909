package xds

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// envoyUserAgent is the user_agent_name Envoy puts in its node.
const envoyUserAgent = "envoy"

// isEnvoy reports whether node is an Envoy proxy (Istio's sidecar data
// plane, run by pilot-agent) rather than a proxyless gRPC client. Envoy
// names itself in user_agent_name; proxyless clients bootstrapped by
// Istio's agent also say GENERATOR=grpc, which wins.
func isEnvoy(node *corev3.Node, md xdsnode.Metadata) bool {
	return node.GetUserAgentName() == envoyUserAgent && md.Generator != xdsnode.GeneratorGRPC
}

// sidecarOf reads from an Envoy node what the generator needs: the pod's
// IP (the node ID's second field, else the first of INSTANCE_IPS), its
// namespace (metadata NAMESPACE, else the node ID's) and how its traffic
// reaches Envoy (INTERCEPTION_MODE, REDIRECT when unset).
func sidecarOf(node *corev3.Node, md xdsnode.Metadata) (xdsgen.Sidecar, model.ClusterID, error) {
	id, err := xdsnode.ParseID(node.GetId())
	if err != nil {
		return xdsgen.Sidecar{}, "", fmt.Errorf("xds: Envoy node: %w", err)
	}
	ipText := id.IP
	if ipText == "" {
		ipText, _, _ = strings.Cut(md.InstanceIPs, ",")
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil {
		return xdsgen.Sidecar{}, "", fmt.Errorf("xds: Envoy node %q has no usable IP (node ID or %s): %w",
			node.GetId(), xdsnode.MetadataInstanceIPs, err)
	}
	sc := xdsgen.Sidecar{IP: ip, Namespace: md.Namespace, Interception: xdsgen.InterceptRedirect}
	if sc.Namespace == "" {
		sc.Namespace = id.Namespace
	}
	switch m := xdsgen.Interception(md.InterceptionMode); m {
	case "":
	case xdsgen.InterceptRedirect, xdsgen.InterceptTProxy, xdsgen.InterceptNone:
		sc.Interception = m
	default:
		return xdsgen.Sidecar{}, "", fmt.Errorf("xds: Envoy node %q: unknown %s %q (want %s, %s or %s)",
			node.GetId(), xdsnode.MetadataInterceptionMode, m,
			xdsgen.InterceptRedirect, xdsgen.InterceptTProxy, xdsgen.InterceptNone)
	}
	return sc, md.ClusterID, nil
}

// sidecarTypes are the types an Envoy sidecar gets from caches of its own:
// its listeners and clusters include its inbound side, which depends on
// the ports its pod serves (and, without interception, on its address).
var sidecarTypes = []string{resourcev3.ListenerType, resourcev3.ClusterType}

// sidecar is the hub's state for one Envoy proxy (one node ID), held while
// one of its streams is open.
type sidecar struct {
	proxy   xdsgen.Sidecar // Inbound as last generated
	cluster model.ClusterID
	group   xdsgen.ProxyGroup // whose load assignments it gets
	// node is the namespace and labels the node's metadata claim, for
	// its route class when the registry does not know its Pod.
	node    pod
	err     error // a node the hub cannot serve; its watches fail with it
	members int   // open streams of the node
	caches  map[string]*written
	replans int // regenerations after the first, for tests of what a push costs
}

// written is one watch cache and the resources last written to it, so that
// a push writes only what changed.
type written struct {
	lc   *versioned
	last map[string]types.Resource
}

func newWritten(l *Ledger, typeURL string, res []types.Resource) *written {
	w := &written{last: byName(res)}
	w.lc = l.newCache(typeURL, w.last)
	return w
}

// diff returns the write that turns what w holds into next, and records
// next as written. Resources equal to those written are left out.
func (w *written) diff(typeURL string, next []types.Resource) (write, bool) {
	ch := xdsgen.Replace(w.last, byName(next))
	return write{typeURL: typeURL, cache: w.lc, Changes: ch}, !ch.Empty()
}

func byName(res []types.Resource) map[string]types.Resource {
	m := make(map[string]types.Resource, len(res))
	for _, r := range res {
		m[cachev3.GetResourceName(r)] = r
	}
	return m
}

// sidecarResources generates what sc gets of typeURL from services under
// the Istio configuration cfg.
func sidecarResources(typeURL string, services []*model.MergedService, cfg *istioconfig.Snapshot, sc xdsgen.Sidecar, opts xdsgen.Options) []types.Resource {
	var out []types.Resource
	switch typeURL {
	case resourcev3.ListenerType:
		for _, l := range xdsgen.SidecarListeners(services, sc, opts) {
			out = append(out, l)
		}
	case resourcev3.ClusterType:
		for _, c := range xdsgen.SidecarClusters(services, cfg, sc, opts) {
			out = append(out, c)
		}
	}
	return out
}

// envoyRoutes generates the route configurations Envoy sidecars share,
// under the Istio configuration cfg: those of the default route set
// (named by port) and those of each of sets (named by port and set).
func envoyRoutes(services []*model.MergedService, cfg *istioconfig.Snapshot, sets map[xdsgen.RouteSet]int, opts xdsgen.Options) []types.Resource {
	var out []types.Resource
	add := func(set xdsgen.RouteSet) {
		for _, r := range xdsgen.SidecarSetRoutes(services, cfg, set, opts) {
			out = append(out, r)
		}
	}
	add(xdsgen.RouteSet{})
	for set := range sets {
		add(set)
	}
	return out
}

// newSidecar builds the state of the Envoy node, of metadata md and proxy
// group g, its caches filled from services under the Istio configuration
// cfg.
func newSidecar(l *Ledger, node *corev3.Node, md xdsnode.Metadata, g xdsgen.ProxyGroup, services []*model.MergedService,
	cfg *istioconfig.Snapshot, opts xdsgen.Options) *sidecar {
	sc, cluster, err := sidecarOf(node, md)
	s := &sidecar{proxy: sc, cluster: cluster, group: g, err: err, caches: map[string]*written{},
		node: pod{ns: sc.Namespace, labels: model.NewLabels(md.Labels)}}
	if err != nil {
		return s
	}
	st := s.state(services, indexPods(services), cfg)
	s.proxy.Inbound, s.proxy.Security, s.proxy.Scope, s.proxy.Routes = st.inbound, st.sec, st.scope, st.class
	for _, t := range sidecarTypes {
		s.caches[t] = newWritten(l, t, sidecarResources(t, services, cfg, s.proxy, opts))
	}
	s.caches[resourcev3.ClusterType].lc.rewarmsOf = rewarmsOf
	return s
}

// release gives the sidecar's caches back to l: it is freed.
func (s *sidecar) release(l *Ledger) {
	for _, w := range s.caches {
		l.release(w.lc)
	}
}

// inbound returns the ports the sidecar's pod serves now: its Sidecar
// scope's ingress listeners when it has any, else by services.
func (s *sidecar) inbound(services []*model.MergedService, scope *istioconfig.Sidecar) []xdsgen.InboundPort {
	if in, ok := xdsgen.SidecarIngress(scope, s.proxy.IP); ok {
		return in
	}
	return xdsgen.SidecarInbound(services, s.cluster, s.proxy.IP)
}

// policy returns the security policy, the Sidecar scope and the route
// class of the sidecar's pod under cfg, by the registry's Pods (else by
// the node's namespace, and for the class its labels).
func (s *sidecar) policy(x pods, cfg *istioconfig.Snapshot) (istioconfig.WorkloadSecurity, *istioconfig.Sidecar, istioconfig.RouteClass) {
	sec, scope := x.security(cfg, s.cluster, s.proxy.IP, s.proxy.Namespace)
	return sec, scope, x.routeClass(cfg, s.cluster, s.proxy.IP, s.node)
}

// sidecarState is what a sidecar's resources are generated from besides
// the services and the configuration: the ports its pod serves and its
// pod's policy, Sidecar scope and route class.
type sidecarState struct {
	inbound []xdsgen.InboundPort
	sec     istioconfig.WorkloadSecurity
	scope   *istioconfig.Sidecar
	class   istioconfig.RouteClass
}

// state returns the sidecar's state now, by services (indexed in x)
// under cfg.
func (s *sidecar) state(services []*model.MergedService, x pods, cfg *istioconfig.Snapshot) sidecarState {
	var st sidecarState
	st.sec, st.scope, st.class = s.policy(x, cfg)
	st.inbound = s.inbound(services, st.scope)
	return st
}

// routeSet returns the route set of a sidecar in state st.
func (st sidecarState) routeSet() xdsgen.RouteSet {
	return xdsgen.Sidecar{Scope: st.scope, Routes: st.class}.RouteSet()
}

// same reports whether st is the state the sidecar's resources were last
// generated from.
func (s *sidecar) same(st sidecarState) bool {
	return slices.Equal(st.inbound, s.proxy.Inbound) && st.sec.Same(s.proxy.Security) &&
		st.scope == s.proxy.Scope && st.class == s.proxy.Routes
}

// replan regenerates the sidecar's resources from services under cfg in
// state st, and returns the writes that bring its caches up to date.
func (s *sidecar) replan(services []*model.MergedService, cfg *istioconfig.Snapshot, st sidecarState, opts xdsgen.Options) []write {
	if s.err != nil {
		return nil
	}
	s.proxy.Inbound = st.inbound
	s.proxy.Security = st.sec
	s.proxy.Scope = st.scope
	s.proxy.Routes = st.class
	s.replans++
	var out []write
	for _, t := range sidecarTypes {
		if w, ok := s.caches[t].diff(t, sidecarResources(t, services, cfg, s.proxy, opts)); ok {
			out = append(out, w)
		}
	}
	return out
}

// shape is what a service gives Envoy sidecars apart from load
// assignments and their pods' inbound side: its definition (hostname,
// ports, protocols), the Istio objects of its host, which of its clusters
// speak mTLS (auto mTLS: its endpoints' tlsMode labels and
// PeerAuthentications) and the SPIFFE IDs those accept. An endpoint change
// that keeps every shape leaves every sidecar's outbound listeners,
// clusters and routes as they are.
type shape struct {
	svc  *model.Service
	cfg  istioconfig.HostConfig
	mtls []string
	sans []string
}

func shapeOf(ms *model.MergedService, cfg *istioconfig.Snapshot, opts xdsgen.Options) shape {
	hc := cfg.Host(ms.Service.Hostname)
	sh := shape{svc: ms.Service, cfg: hc, mtls: xdsgen.MTLSClusters(xdsgen.ProxyEnvoy, ms, hc.DestinationRule, cfg, opts)}
	if len(sh.mtls) > 0 {
		sh.sans = xdsgen.ServiceSANs(ms, opts)
	}
	return sh
}

// sameService reports whether a and b have the same definition and
// the same mTLS clusters and SANs.
func (a shape) sameService(b shape) bool {
	return a.svc.Equal(b.svc) && slices.Equal(a.mtls, b.mtls) && slices.Equal(a.sans, b.sans)
}

// rewarmsOf names the load assignment that an Envoy EDS cluster warms
// with, "" for another resource. Envoy keeps an updated EDS cluster
// warming, on its old version, until it is sent the cluster's load
// assignment again, even an unchanged one (it does not ask again for a
// name it is subscribed to): the stream server sends it after the
// cluster (ads.Rewarming).
func rewarmsOf(r types.Resource) string {
	c, ok := r.(*clusterv3.Cluster)
	if !ok || c.GetType() != clusterv3.Cluster_EDS {
		return ""
	}
	if name := c.GetEdsClusterConfig().GetServiceName(); name != "" {
		return name
	}
	return c.GetName()
}

// rewarmed returns a resource that means what r means in other bytes: for
// a load assignment, the overprovisioning factor set to Envoy's default
// where it was unset, or unset where it was set; any other resource as it
// is. It is what a stream that holds a load assignment is sent when it is
// to be sent it again (ads.Hints.Outdated): go-control-plane versions a
// Delta resource by a hash of it, and a proxy may take nothing again in a
// version it has (seen with pilot-agent's Delta xDS: the cluster stayed
// warming until the bytes differed).
func rewarmed(r types.Resource) types.Resource {
	cla, ok := r.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return r
	}
	out := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	if out.Policy == nil {
		out.Policy = &endpointv3.ClusterLoadAssignment_Policy{}
	}
	if out.Policy.OverprovisioningFactor == nil {
		out.Policy.OverprovisioningFactor = wrapperspb.UInt32(envoyOverprovisioningFactor)
	} else {
		out.Policy.OverprovisioningFactor = nil
	}
	return out
}

// envoyOverprovisioningFactor is Envoy's default overprovisioning factor
// (ClusterLoadAssignment.Policy.overprovisioning_factor), in percent.
const envoyOverprovisioningFactor = 140
