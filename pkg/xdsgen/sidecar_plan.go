package xdsgen

import (
	"maps"
	"slices"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// SidecarTypes are the types an Envoy sidecar gets from caches of its own,
// in the order a push writes them: its listeners and clusters include its
// inbound side, which depends on the ports its pod serves (and, without
// interception, on its address). Its routes are shared (SidecarPlan.Routes)
// and its load assignments are its proxy group's (Planner).
var SidecarTypes = []string{resourcev3.ListenerType, resourcev3.ClusterType}

// RouterTypes are the types a router (gateway) gets from caches of its
// own: its routes are its Gateways', named as istiod names them
// (http.<port>), which would collide between gateways in a shared cache.
var RouterTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType}

// NodeTypes are the types of every Envoy node's own caches, in the order
// a push writes them.
var NodeTypes = RouterTypes

// SidecarPlanner plans what Envoy sidecars get besides load assignments:
// each node's own listeners and clusters, and the route configurations
// they share (the default route set's, and those of the sets its nodes are
// in). Like Planner it remembers what it planned, which the caller
// promises to write, so each plan is a diff.
//
// It is pure (no I/O, clock or goroutines) and not safe for concurrent
// use; the zero value is not usable, call NewSidecarPlanner.
type SidecarPlanner struct {
	opts Options
	// shapes holds every service's shape as last planned, kept whether or
	// not a node is held, so that a plan can tell whether sidecars'
	// outbound side changed at all.
	shapes map[model.Hostname]shape
	// sets counts the nodes of each route set but the default (a route
	// class under a Sidecar scope): routes holds the routes of exactly
	// these sets besides the default's.
	sets   map[RouteSet]int
	routes map[string]types.Resource
	nodes  map[string]*SidecarNode
}

// SidecarNode is one Envoy node a SidecarPlanner plans for.
type SidecarNode struct {
	// Proxy is the sidecar as last generated: Inbound, Security, Scope
	// and Routes are the planner's; IP, Namespace and Interception the
	// node's.
	Proxy Sidecar
	// Cluster is the node's cluster.
	Cluster model.ClusterID
	// Claimed is the namespace and labels the node's metadata claim: its
	// route class when the registry does not know its Pod.
	Claimed Workload

	written map[string]map[string]types.Resource // by type URL (Proxy.Types)
	replans int
	// bound are a router's inputs from the configuration besides its
	// Gateways (Proxy.Gateways): the VirtualServices bound to each.
	bound []*istioconfig.VirtualService
}

// Replans counts the node's regenerations after its first, for tests of
// what a push costs.
func (n *SidecarNode) Replans() int { return n.replans }

// Written returns what was planned into the node's cache of typeURL. The
// map is the planner's record: the caller must not modify it.
func (n *SidecarNode) Written(typeURL string) map[string]types.Resource { return n.written[typeURL] }

// SidecarPlan is what one push must write for Envoy sidecars, in this
// order: Routes (new and changed shared routes, so that a node moved to a
// new route set finds them), then each node's Nodes changes by
// SidecarTypes, then RoutesGone (the routes of sets left empty, once no
// listener names them: Envoy would route by an empty configuration
// meanwhile). A load assignment of an EDS cluster written anew follows
// the cluster on each stream that is sent it (the hub's stream server).
type SidecarPlan struct {
	Routes     Changes
	Nodes      map[string]map[string]Changes // by node ID, then type URL
	RoutesGone []string
}

// NewSidecarPlanner returns a planner that holds no node.
func NewSidecarPlanner(opts Options) *SidecarPlanner {
	return &SidecarPlanner{
		opts:   opts,
		shapes: map[model.Hostname]shape{},
		sets:   map[RouteSet]int{},
		routes: map[string]types.Resource{},
		nodes:  map[string]*SidecarNode{},
	}
}

// Node returns the node id, nil when the planner does not hold it.
func (p *SidecarPlanner) Node(id string) *SidecarNode { return p.nodes[id] }

// Nodes returns how many nodes the planner holds.
func (p *SidecarPlanner) Nodes() int { return len(p.nodes) }

// RouteSets returns how many route sets besides the default the held
// nodes are in.
func (p *SidecarPlanner) RouteSets() int { return len(p.sets) }

// Routes returns the shared routes as planned. The map is the planner's
// record: the caller must not modify it.
func (p *SidecarPlanner) Routes() map[string]types.Resource { return p.routes }

// BuildSidecar returns node n (the node's IP, Namespace and Interception
// in n.Proxy, its Cluster and Claimed) in its state under services (the
// mesh's, sorted) and cfg, with its resources by type URL
// (SidecarTypes): what a new node's caches start with, built apart from
// the planner, which then adopts the node (Adopt). It is pure.
func BuildSidecar(n SidecarNode, services []*model.MergedService, cfg *istioconfig.Snapshot, opts Options) (SidecarNode, map[string]map[string]types.Resource) {
	n.apply(n.state(services, IndexPods(services), cfg))
	built := map[string]map[string]types.Resource{}
	for _, t := range n.Proxy.Types() {
		built[t] = byName(sidecarResources(t, services, cfg, n.Proxy, opts))
	}
	n.written, n.replans = nil, 0
	return n, built
}

// Adopt starts planning for node id as BuildSidecar built it, its caches
// holding written (which the planner keeps as its record: the caller must
// not modify it). stale says that plans ran since it was built: the node
// is then regenerated from services and cfg (the mesh's now). It returns
// the writes, in SidecarPlan's order: the shared routes the node brings
// (those of a new route set, or all of them for the first node: no plan
// keeps them while no node is held) and, when stale, the node's changes.
// A held id is left as it is.
func (p *SidecarPlanner) Adopt(id string, n SidecarNode, written map[string]map[string]types.Resource,
	services []*model.MergedService, cfg *istioconfig.Snapshot, stale bool) SidecarPlan {
	if _, ok := p.nodes[id]; ok {
		return SidecarPlan{}
	}
	node := &n
	node.written = written
	first := len(p.nodes) == 0
	p.nodes[id] = node
	var out SidecarPlan
	setsChanged := p.moveSet(RouteSet{}, node.Proxy.RouteSet())
	if stale {
		st := node.state(services, IndexPods(services), cfg)
		setsChanged = p.moveSet(node.Proxy.RouteSet(), st.routeSet()) || setsChanged
		p.replan(id, node, st, services, cfg, node.Proxy.Types(), &out)
	}
	if setsChanged || first {
		ch := Replace(p.routes, byName(p.allRoutes(services, cfg)))
		out.Routes.Upsert, out.RoutesGone = ch.Upsert, ch.Delete
	}
	return out
}

// Remove stops planning for node id, and returns the changes to the shared
// routes when its route set is left empty and other nodes remain;
// services and cfg are the mesh's now.
func (p *SidecarPlanner) Remove(id string, services []*model.MergedService, cfg *istioconfig.Snapshot) Changes {
	n, ok := p.nodes[id]
	if !ok {
		return Changes{}
	}
	delete(p.nodes, id)
	if p.moveSet(n.Proxy.RouteSet(), RouteSet{}) && len(p.nodes) > 0 {
		return Replace(p.routes, byName(p.allRoutes(services, cfg)))
	}
	return Changes{}
}

// Plan returns what the held nodes' caches and the shared routes must be
// written so that they follow updates (the services whose views changed)
// under cfg; services are the mesh's, sorted, as the updates leave them.
// securityChanged says that the security configuration changed, which
// every node's clusters (auto mTLS) and inbound chains follow.
//
// When nothing of the outbound side changed (endpoints moved, the common
// case), only the nodes whose pods started or stopped serving a port, or
// whose policy, Sidecar scope or route class changed, are regenerated; a
// VirtualService change regenerates the shared routes (and the listeners
// of the nodes whose route set it changes, which name their set's
// routes); a change of a router's Gateways or of the VirtualServices bound
// to them regenerates that router's listeners and routes; otherwise every node's listeners and clusters are, from all
// services, and the shared routes. Shapes are recorded whether or not a
// node is held.
func (p *SidecarPlanner) Plan(updates []ServiceUpdate, services []*model.MergedService, cfg *istioconfig.Snapshot, securityChanged bool) SidecarPlan {
	r := p.reshape(updates, cfg)
	if securityChanged {
		r.nodes = true
	}
	if len(p.nodes) == 0 {
		return SidecarPlan{}
	}
	pods := IndexPods(services)
	type replan struct {
		id string
		n  *SidecarNode
		st sidecarState
	}
	var replans []replan
	setsChanged := false
	for id, n := range p.nodes {
		st := n.state(services, pods, cfg)
		if !r.nodes && n.same(st) {
			continue
		}
		setsChanged = p.moveSet(n.Proxy.RouteSet(), st.routeSet()) || setsChanged
		replans = append(replans, replan{id, n, st})
	}
	var out SidecarPlan
	if r.routes || setsChanged {
		ch := Replace(p.routes, byName(p.allRoutes(services, cfg)))
		out.Routes.Upsert, out.RoutesGone = ch.Upsert, ch.Delete
	}
	for _, rp := range replans {
		types := rp.n.Proxy.Types()
		if rp.n.Proxy.Router && !r.nodes && !AutoPassthrough(rp.n.Proxy.Gateways) && !AutoPassthrough(rp.st.gateways) {
			// Only its Gateways or their VirtualServices changed: its
			// clusters (every service's) are as they were. (An
			// AUTO_PASSTHROUGH server has clusters of its own.)
			types = routerConfigTypes
		}
		p.replan(rp.id, rp.n, rp.st, services, cfg, types, &out)
	}
	return out
}

// routerConfigTypes are what a router's Gateways and the VirtualServices
// bound to them decide.
var routerConfigTypes = []string{resourcev3.ListenerType, resourcev3.RouteType}

// replan regenerates node id's resources of types in state st from
// services under cfg, and adds the changes of its caches to out.
func (p *SidecarPlanner) replan(id string, n *SidecarNode, st sidecarState, services []*model.MergedService, cfg *istioconfig.Snapshot, types []string, out *SidecarPlan) {
	n.apply(st)
	n.replans++
	for _, t := range types {
		ch := Replace(n.written[t], byName(sidecarResources(t, services, cfg, n.Proxy, p.opts)))
		if ch.Empty() {
			continue
		}
		if out.Nodes == nil {
			out.Nodes = map[string]map[string]Changes{}
		}
		if out.Nodes[id] == nil {
			out.Nodes[id] = map[string]Changes{}
		}
		out.Nodes[id][t] = ch
	}
}

// moveSet counts one held node as of route set to rather than from, and
// reports whether that changed the sets whose routes the planner holds.
func (p *SidecarPlanner) moveSet(from, to RouteSet) bool {
	if from == to {
		return false
	}
	changed := false
	if !from.IsDefault() {
		if p.sets[from]--; p.sets[from] == 0 {
			delete(p.sets, from)
			changed = true
		}
	}
	if !to.IsDefault() {
		changed = changed || p.sets[to] == 0
		p.sets[to]++
	}
	return changed
}

// allRoutes generates the route configurations the held nodes share under
// cfg: those of the default route set (named by port) and those of each
// held set (named by port and set).
func (p *SidecarPlanner) allRoutes(services []*model.MergedService, cfg *istioconfig.Snapshot) []types.Resource {
	var out []types.Resource
	add := func(set RouteSet) {
		for _, r := range SidecarSetRoutes(services, cfg, set, p.opts) {
			out = append(out, r)
		}
	}
	add(RouteSet{})
	for set := range p.sets {
		add(set)
	}
	return out
}

// reshape says what of Envoy sidecars' outbound side a plan changes.
type reshape struct {
	// routes: the shared route configurations (a service's definition, a
	// VirtualService, or a DestinationRule's hash policy changed).
	routes bool
	// nodes: every node's listeners and clusters (a service's definition
	// or service accounts, or a DestinationRule, changed, or a
	// VirtualService with tcp[] or tls[] rules). A VirtualService of HTTP
	// rules alone leaves them as they are.
	nodes bool
}

// reshape records the shapes of the updated services and reports what of
// the sidecars' outbound side their changes touch.
func (p *SidecarPlanner) reshape(updates []ServiceUpdate, cfg *istioconfig.Snapshot) reshape {
	var r reshape
	for _, u := range updates {
		old, had := p.shapes[u.Hostname]
		if u.Service == nil {
			delete(p.shapes, u.Hostname)
			if had {
				r = reshape{routes: true, nodes: true}
			}
			continue
		}
		sh := shapeOf(u.Service, cfg, p.opts)
		switch {
		case !had || !old.sameService(sh) || old.cfg.DestinationRule != sh.cfg.DestinationRule:
			r = reshape{routes: true, nodes: true}
		case old.cfg.VirtualService != sh.cfg.VirtualService:
			r.routes = true
			// tcp[] and tls[] rules shape the listeners.
			r.nodes = r.nodes || hasL4(old.cfg.VirtualService) || hasL4(sh.cfg.VirtualService)
		}
		p.shapes[u.Hostname] = sh
	}
	return r
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

func shapeOf(ms *model.MergedService, cfg *istioconfig.Snapshot, opts Options) shape {
	hc := cfg.Host(ms.Service.Hostname)
	sh := shape{svc: ms.Service, cfg: hc, mtls: MTLSClusters(ProxyEnvoy, ms, hc.DestinationRule, cfg, opts)}
	if len(sh.mtls) > 0 {
		sh.sans = ServiceSANs(ms, opts)
	}
	return sh
}

// sameService reports whether a and b have the same definition and the
// same mTLS clusters and SANs.
func (a shape) sameService(b shape) bool {
	return a.svc.Equal(b.svc) && slices.Equal(a.mtls, b.mtls) && slices.Equal(a.sans, b.sans)
}

// sidecarState is what a node's resources are generated from besides the
// services and the configuration: the ports its pod serves and its pod's
// policy, Sidecar scope and route class.
type sidecarState struct {
	inbound []InboundPort
	sec     istioconfig.WorkloadSecurity
	scope   *istioconfig.Sidecar
	class   istioconfig.RouteClass
	// A router's Gateways and the VirtualServices bound to them.
	gateways []*istioconfig.Gateway
	bound    []*istioconfig.VirtualService
	ports    RouterPorts
}

// state returns the node's state now, by services (indexed in pods) under
// cfg: its policy, Sidecar scope and route class by the registry's Pods
// (else by the node's namespace, and for the class its claimed labels),
// and the ports its pod serves (its Sidecar scope's ingress listeners when
// it has any, else by services).
func (n *SidecarNode) state(services []*model.MergedService, pods Pods, cfg *istioconfig.Snapshot) sidecarState {
	var st sidecarState
	if n.Proxy.Router {
		w := pods.Workload(n.Cluster, n.Proxy.IP, n.Claimed)
		st.gateways = cfg.GatewaysFor(w.Namespace, w.Labels)
		for _, gw := range st.gateways {
			st.bound = append(st.bound, cfg.GatewayRoutes(gw.Key)...)
		}
		st.ports = RouterTargetPorts(services, n.Cluster, n.Proxy.IP)
		return st
	}
	st.sec, st.scope = pods.Security(cfg, n.Cluster, n.Proxy.IP, n.Proxy.Namespace)
	st.class = pods.RouteClass(cfg, n.Cluster, n.Proxy.IP, n.Claimed)
	if in, ok := SidecarIngress(st.scope, n.Proxy.IP); ok {
		st.inbound = in
	} else {
		st.inbound = SidecarInbound(services, n.Cluster, n.Proxy.IP)
	}
	return st
}

// apply makes st the node's state.
func (n *SidecarNode) apply(st sidecarState) {
	n.Proxy.Inbound, n.Proxy.Security, n.Proxy.Scope, n.Proxy.Routes = st.inbound, st.sec, st.scope, st.class
	n.Proxy.Gateways, n.bound, n.Proxy.Ports = st.gateways, st.bound, st.ports
}

// routeSet returns the route set of a node in state st.
func (st sidecarState) routeSet() RouteSet {
	return Sidecar{Scope: st.scope, Routes: st.class}.RouteSet()
}

// same reports whether st is the state the node's resources were last
// generated from.
func (n *SidecarNode) same(st sidecarState) bool {
	return slices.Equal(st.inbound, n.Proxy.Inbound) && st.sec.Same(n.Proxy.Security) &&
		st.scope == n.Proxy.Scope && st.class == n.Proxy.Routes &&
		slices.Equal(st.gateways, n.Proxy.Gateways) && slices.Equal(st.bound, n.bound) && maps.Equal(st.ports, n.Proxy.Ports)
}

// sidecarResources generates what sc gets of typeURL from services under
// cfg.
func sidecarResources(typeURL string, services []*model.MergedService, cfg *istioconfig.Snapshot, sc Sidecar, opts Options) []types.Resource {
	if sc.Router {
		return routerResources(typeURL, services, cfg, sc, opts)
	}
	var out []types.Resource
	switch typeURL {
	case resourcev3.ListenerType:
		for _, l := range SidecarListenersWith(services, cfg, sc, opts) {
			out = append(out, l)
		}
	case resourcev3.ClusterType:
		for _, c := range SidecarClusters(services, cfg, sc, opts) {
			out = append(out, c)
		}
	}
	return out
}

// routerResources generates what router sc gets of typeURL from
// services under cfg.
func routerResources(typeURL string, services []*model.MergedService, cfg *istioconfig.Snapshot, sc Sidecar, opts Options) []types.Resource {
	var out []types.Resource
	switch typeURL {
	case resourcev3.ListenerType:
		ls, _ := RouterListeners(sc.Gateways, sc.Ports, services, cfg, opts)
		for _, l := range ls {
			out = append(out, l)
		}
	case resourcev3.RouteType:
		for _, r := range RouterRoutes(sc.Gateways, sc.Ports, services, cfg, opts) {
			out = append(out, r)
		}
	case resourcev3.ClusterType:
		for _, c := range RouterClusters(sc.Gateways, services, cfg, opts) {
			out = append(out, c)
		}
	}
	return out
}

func byName(res []types.Resource) map[string]types.Resource {
	m := make(map[string]types.Resource, len(res))
	for _, r := range res {
		m[cachev3.GetResourceName(r)] = r
	}
	return m
}
