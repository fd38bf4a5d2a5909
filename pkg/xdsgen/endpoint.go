package xdsgen

import (
	"cmp"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Auto mutual TLS: the Pod label by which Istio's injector marks a
// workload whose proxy (sidecar or agent) terminates Istio mutual TLS, and
// the endpoint metadata that tells Envoy so.
const (
	// TLSModeLabel is the Pod label "security.istio.io/tlsMode"; the
	// injector sets it to TLSModeIstio.
	TLSModeLabel = istioconfig.TLSModeLabel
	// TLSModeIstio is TLSModeLabel's value on a workload that can take
	// Istio mutual TLS.
	TLSModeIstio = istioconfig.TLSModeIstio
	// TransportSocketMatchKey is the filter_metadata namespace that
	// Envoy's transport_socket_matches of a cluster compare with.
	TransportSocketMatchKey = "envoy.transport_socket_match"
	// tlsModeKey is the field of TransportSocketMatchKey meshfed (as
	// istiod) writes and matches on.
	tlsModeKey = "tlsMode"
)

// injected reports whether e's Pod says it can take Istio mutual TLS.
func injected(e *model.Endpoint) bool {
	v, ok := e.Labels.Get(TLSModeLabel)
	return ok && v == TLSModeIstio
}

// tlsModeIstioStruct is {tlsMode: "istio"}: the metadata of an injected
// endpoint and the match of the clusters' mutual-TLS transport socket.
func tlsModeIstioStruct() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{tlsModeKey: structpb.NewStringValue(TLSModeIstio)}}
}

// Proximity classes of an endpoint relative to a proxy group, best first.
// Non-empty classes become the priorities 0, 1, ... of a load assignment.
const (
	classLocal  = iota // in the proxy's own cluster
	classRegion        // in another cluster of the proxy's region
	classRemote        // anywhere else
)

// classify returns the proximity class of ep for proxies of g. An
// endpoint of no cluster (a ServiceEntry's) ranks by its locality alone:
// in the proxies' region it is as close as their own cluster.
func classify(ep *model.Endpoint, g ProxyGroup) int {
	switch {
	case ep.Cluster == g.Cluster:
		return classLocal
	case ep.Cluster == "" && g.Region != "" && ep.Locality.Region == g.Region:
		return classLocal
	case g.Region != "" && ep.Locality.Region == g.Region:
		return classRegion
	default:
		return classRemote
	}
}

// LoadAssignments returns the ClusterLoadAssignments of ms.Service as
// proxies of group g should see them, under DestinationRule dr (nil: none):
// per port of ms.Service (same ports and order as Clusters' default
// clusters), the default assignment named ClusterName, then one per subset
// of dr, in name order, named SubsetClusterName: the names of Clusters' EDS
// resources. Every assignment follows the same rules:
//
//   - only ready endpoints that map the service port to a target port
//     (model.Endpoint.TargetPort) in 1..65535 and have a valid address;
//   - a subset's only the endpoints its labels select: every key/value of
//     the subset's labels is one of the endpoint's Pod labels, or of its
//     topology (topology.istio.io/cluster, topology.kubernetes.io/region and
//     zone, topology.istio.io/subzone), which comes from the endpoint's
//     cluster and locality as Istio derives it; a subset without labels
//     selects every endpoint;
//   - priority by proximity to g: the proxies' own cluster, then other
//     clusters of their region, then the rest, unless the effective
//     localityLbSetting of the port and subset says otherwise (see
//     proximity); empty classes are skipped and priorities numbered
//     contiguously from 0, as grpc-go requires;
//   - in each priority, one LocalityLbEndpoints per (region, zone, subzone),
//     with a non-nil Locality and a weight equal to its number of endpoints
//     (grpc-go drops localities of weight 0), except where a distribute
//     entry of the localityLbSetting applies to g (its from matches g's
//     locality): then one priority, only the localities its to patterns
//     match, weighted as they say (see distribute.go);
//   - each endpoint HEALTHY with weight 1, at "<address>:<target port>"
//     (IPv4-mapped IPv6 addresses are unmapped, IPv6 zones dropped);
//   - an endpoint whose Pod carries TLSModeLabel=TLSModeIstio (of a
//     service that is not External) has the
//     metadata filter_metadata[TransportSocketMatchKey] = {tlsMode:
//     "istio"}, which an Envoy cluster's transport_socket_matches select
//     mutual TLS by (see SidecarClusters); other endpoints have no
//     metadata. grpc-go keeps filter_metadata it does not know unread (it
//     reads only "envoy.lb"), so proxyless clients take the same
//     assignments. The metadata depends on the labels alone, never on
//     PeerAuthentications, so that assignments stay free of security
//     configuration;
//   - each address:port at most once, since grpc-go NACKs an assignment with
//     duplicates: when several endpoints share one, the one in the best
//     priority is kept (among equals, the first locality in sorted order,
//     then an injected one);
//   - localities sorted by priority, region, zone, subzone, endpoints by
//     address and port, so equal inputs give proto.Equal outputs.
//
// An assignment without eligible endpoints (a port nobody serves, a subset
// that selects nothing) has no endpoints: valid, and grpc-go fails its RPCs
// with UNAVAILABLE, Envoy answers 503. With a nil dr, or one without
// subsets, the result depends on ms and g alone; g's Zone and SubZone
// matter only to a distribute entry whose from matches g. A DNS-resolved service
// (model.ResolutionDNS, ResolutionDNSRoundRobin) has none: its clusters
// carry their DNS endpoints inline and subscribe to no assignment. The
// endpoints of a model.Service.External service never have the tlsMode
// metadata: they are outside the mesh. LoadAssignments is pure and
// does not modify ms or dr; nil ms (or ms.Service) yields nil.
//
// LoadAssignments knows no network gateways: endpoints on a network other
// than g's are left out (NetworkLoadAssignments).
func LoadAssignments(ms *model.MergedService, g ProxyGroup, dr *istioconfig.DestinationRule) []*endpointv3.ClusterLoadAssignment {
	return loadAssignments(ms, g, dr, nil, nil)
}

// NetworkLoadAssignments is LoadAssignments across networks, nets being
// the fleet's gateways. For proxies of a known network g.Network, an
// endpoint on another known network M (model.SameNetwork) is not sent:
// M's gateways stand for it, as Istio's multi-network meshes do:
//
//   - only endpoints that take Istio mutual TLS (TLSModeLabel) cross a
//     gateway, which routes by the SNI of their TLS (SNIClusterName)
//     without terminating it; others are left out, as are all of M's
//     when M has no usable gateway in nets;
//   - per class (priority) and network M, every gateway address of M once,
//     at its gateway port, with the tlsMode metadata and weight
//     round(n/k) (at least 1) for the n endpoints of M in the class and
//     the k gateway addresses of M, in the locality of the best-ranked of
//     those endpoints; a locality's weight is the sum of its endpoints'
//     weights. An address is sent once per assignment, in its best class.
//
// For g.EastWest groups each assignment is followed by its SNI cluster's
// (named SNIClusterName of the port and subset): the same rules over the
// endpoints of g.Network alone, never a gateway (a gateway does not send
// to another).
func NetworkLoadAssignments(ms *model.MergedService, g ProxyGroup, dr *istioconfig.DestinationRule, nets *model.NetworkGateways) []*endpointv3.ClusterLoadAssignment {
	return loadAssignments(ms, g, dr, nets, nil)
}

// loadAssignments is NetworkLoadAssignments taking its LbEndpoints from
// pool, a pool of ms's (nil: none; each assignment then has its own).
func loadAssignments(ms *model.MergedService, g ProxyGroup, dr *istioconfig.DestinationRule, nets *model.NetworkGateways, pool *lbPool) []*endpointv3.ClusterLoadAssignment {
	if ms == nil || dnsResolved(ms.Service) {
		return nil
	}
	ports := servicePorts(ms.Service)
	if len(ports) == 0 {
		return nil
	}
	// Which endpoints each subset selects does not depend on the port.
	subsets := subsetNames(dr)
	members := make([][]bool, len(subsets))
	for i, s := range subsets {
		members[i] = subsetMembers(ms.Endpoints, findSubset(dr, s).GetLabels())
	}
	h := ms.Service.Hostname
	n := len(ports) * (1 + len(subsets))
	if g.EastWest {
		n *= 2
	}
	out := make([]*endpointv3.ClusterLoadAssignment, 0, n)
	b := assignmentBuilder{pool: pool, nets: nets}
	add := func(sp model.ServicePort, subset string, member []bool) {
		prox := newProximity(g, effectivePolicy(dr, sp.Port, subset).GetLoadBalancer().GetLocalityLbSetting())
		out = append(out, b.build(ms, sp, &prox, SubsetClusterName(h, sp.Port, subset), member, false))
		if g.EastWest {
			out = append(out, b.build(ms, sp, &prox, SNIClusterName(h, sp.Port, subset), member, true))
		}
	}
	for _, sp := range ports {
		add(sp, "", nil)
		for i, s := range subsets {
			add(sp, s, members[i])
		}
	}
	return out
}

// candidate is an endpoint eligible for one service port, reduced to
// integers so that sorting and de-duplicating thousands of them is cheap.
type candidate struct {
	// key is class<<32 | the locality's rank in sorted order, so that
	// candidates sort into output order by key, then address, and a run of
	// equal keys is one LocalityLbEndpoints.
	key uint64
	hostPort
	// injected: the endpoint's Pod carries TLSModeLabel=TLSModeIstio.
	injected bool
	// idx is the endpoint's index in its MergedService's Endpoints.
	idx uint32
	// weight, for a gateway standing for endpoints of another network,
	// is its load-balancing weight; 0 for an endpoint (weight 1).
	weight uint32
}

// lbWeight is the candidate's LbEndpoint weight.
func (c candidate) lbWeight() uint32 { return max(c.weight, 1) }

// farKey groups the endpoints of one class on one other network: a
// gateway stands for all of them.
type farKey struct {
	class   uint32
	network model.Network
}

// farGroup counts them, and keeps the id of the best-ranked locality among
// them (once ranks are known).
type farGroup struct {
	count      uint32
	localities []uint32
}

// hostPort is an IP address (IPv4 as IPv4-mapped IPv6, big-endian halves) and
// port.
type hostPort struct {
	hi, lo uint64
	port   uint16
}

func newHostPort(a netip.Addr, port uint16) hostPort {
	b := a.As16()
	return hostPort{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), port}
}

// addrPort converts back; IPv4 addresses come back unmapped.
func (h hostPort) addrPort() netip.AddrPort {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], h.hi)
	binary.BigEndian.PutUint64(b[8:], h.lo)
	return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), h.port)
}

func (c candidate) class() int { return int(c.key >> 32) }

// compareCandidates orders candidates into output order; of two that
// differ only in injected, the injected one comes first (and so wins a
// duplicate address), so that the output never depends on the input order.
func compareCandidates(a, b candidate) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo), cmp.Compare(a.port, b.port),
		compareBool(b.injected, a.injected))
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

func compareLocality(a, b model.Locality) int {
	if c := strings.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	if c := strings.Compare(a.Zone, b.Zone); c != 0 {
		return c
	}
	return strings.Compare(a.SubZone, b.SubZone)
}

// assignmentBuilder holds scratch space reused across the ports of a service.
type assignmentBuilder struct {
	// pool, when set, supplies the LbEndpoints (see lbPool).
	pool *lbPool
	// nets are the fleet's network gateways (nil: none known).
	nets  *model.NetworkGateways
	far   map[farKey]*farGroup
	cands []candidate
	seen  map[hostPort]struct{}
	// Distinct localities: ids in order of first appearance, and the rank of
	// each id in sorted order.
	localityID map[model.Locality]uint32
	localities []model.Locality
	rank       []uint32
	byRank     []model.Locality
	// keep[id]: the locality's endpoints are eligible (false only for
	// those a distribute entry leaves out).
	keep []bool
}

// build computes the assignment named name of port sp of ms for the group
// whose proximity is prox, over the endpoints member says (member[i] for
// ms.Endpoints[i]; nil: all). Endpoints on another network than the
// group's are replaced by that network's gateways, or with ownNetwork
// left out.
func (b *assignmentBuilder) build(ms *model.MergedService, sp model.ServicePort, prox *proximity, name string, member []bool, ownNetwork bool) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}

	// Collect the eligible endpoints, numbering their localities as they
	// come. Sorting by small integer keys is several times faster than by
	// locality strings.
	if b.cands == nil {
		b.cands = make([]candidate, 0, len(ms.Endpoints))
		b.localityID = map[model.Locality]uint32{}
	}
	cands := b.cands[:0]
	clear(b.localityID)
	b.localities = b.localities[:0]
	b.keep = b.keep[:0]
	var lastLocality model.Locality
	lastID := uint32(0)
	lastKeep := true
	// Endpoints of one Deployment share one interned label set: look the
	// label up once per run of equal sets.
	var lastLabels model.Labels
	lastInjected := false
	clear(b.far)
	for i := range ms.Endpoints {
		ep := &ms.Endpoints[i]
		if !ep.Ready || !ep.Address.IsValid() || member != nil && !member[i] {
			continue
		}
		tp, ok := ep.TargetPort(sp)
		if !ok || !validPort(tp) {
			continue
		}
		// Endpoints come mostly grouped by cluster and locality: skip the
		// map lookup when the locality repeats.
		if len(b.localities) == 0 || ep.Locality != lastLocality {
			id, ok := b.localityID[ep.Locality]
			if !ok {
				id = uint32(len(b.localities))
				b.localityID[ep.Locality] = id
				b.localities = append(b.localities, ep.Locality)
				b.keep = append(b.keep, prox.dist == nil || prox.dist.target(ep.Locality) >= 0)
			}
			lastLocality, lastID, lastKeep = ep.Locality, id, b.keep[id]
		}
		if !lastKeep {
			continue
		}
		if ep.Labels != lastLabels {
			lastLabels, lastInjected = ep.Labels, injected(ep) && !ms.Service.External
		}
		if !model.SameNetwork(prox.g.Network, ep.Network) {
			if !ownNetwork && lastInjected {
				b.addFar(uint32(prox.class(ep)), ep.Network, lastID)
			}
			continue
		}
		cands = append(cands, candidate{
			key:      uint64(prox.class(ep))<<32 | uint64(lastID),
			hostPort: newHostPort(ep.Address, uint16(tp)),
			injected: lastInjected,
			idx:      uint32(i),
		})
	}
	b.cands = cands
	if len(cands) == 0 && len(b.far) == 0 {
		return cla
	}

	// Replace locality ids by ranks and sort into output order.
	b.byRank = append(b.byRank[:0], b.localities...)
	slices.SortFunc(b.byRank, compareLocality)
	b.rank = slices.Grow(b.rank[:0], len(b.localities))[:len(b.localities)]
	for r, l := range b.byRank {
		b.rank[b.localityID[l]] = uint32(r)
	}
	for i := range cands {
		c := &cands[i]
		c.key = c.key&^0xffffffff | uint64(b.rank[uint32(c.key)])
	}
	cands = b.gatewayCandidates(cands)
	b.cands = cands
	slices.SortFunc(cands, compareCandidates)

	// Drop repeated addresses, keeping the first (best) occurrence, and count
	// the localities that remain. Repeats with the same key and injected
	// bit are identical in the output, so which one is kept does not
	// matter.
	if b.seen == nil {
		b.seen = make(map[hostPort]struct{}, len(cands))
	}
	clear(b.seen)
	kept := cands[:0]
	groups := 0
	for _, c := range cands {
		if _, dup := b.seen[c.hostPort]; dup {
			continue
		}
		b.seen[c.hostPort] = struct{}{}
		if n := len(kept); n == 0 || kept[n-1].key != c.key {
			groups++
		}
		kept = append(kept, c)
	}

	// Emit one LocalityLbEndpoints per run of equal keys, numbering the
	// classes present 0, 1, ... The protos are carved out of slabs, which
	// turns about ten allocations per endpoint into a handful per assignment;
	// every element is used in place and belongs to this assignment only.
	// The injected endpoints share one metadata message: read-only, like
	// the rest of the assignment.
	lbs := make([]*endpointv3.LbEndpoint, len(kept))
	if b.pool != nil {
		for i, c := range kept {
			if c.weight > 0 {
				lbs[i] = b.pool.gateway(c)
				continue
			}
			lbs[i] = b.pool.get(sp.Port, len(ms.Endpoints), c)
		}
	} else {
		var tlsMetadata *corev3.Metadata
		eps := make([]endpointBlock, len(kept))
		for i, c := range kept {
			lbs[i] = eps[i].init(c.addrPort())
			eps[i].weight.Value = c.lbWeight()
			if c.injected {
				if tlsMetadata == nil {
					tlsMetadata = newTLSMetadata()
				}
				lbs[i].Metadata = tlsMetadata
			}
		}
	}
	locs := make([]localityBlock, groups)
	cla.Endpoints = make([]*endpointv3.LocalityLbEndpoints, groups)
	priority := uint32(0)
	for i, start := 0, 0; start < len(kept); i++ {
		end := start + 1
		for end < len(kept) && kept[end].key == kept[start].key {
			end++
		}
		if start > 0 && kept[start].class() != kept[start-1].class() {
			priority++
		}
		l := b.byRank[uint32(kept[start].key)]
		cla.Endpoints[i] = locs[i].init(l, priority, lbs[start:end:end])
		if len(b.far) > 0 {
			w := uint32(0)
			for _, c := range kept[start:end] {
				w += c.lbWeight()
			}
			locs[i].weight.Value = w
		}
		start = end
	}
	if prox.dist != nil {
		distributeWeights(prox.dist, locs)
	}
	return cla
}

// addFar counts an endpoint of class on another network, in the locality
// numbered id.
func (b *assignmentBuilder) addFar(class uint32, network model.Network, id uint32) {
	if b.far == nil {
		b.far = map[farKey]*farGroup{}
	}
	k := farKey{class, network}
	f := b.far[k]
	if f == nil {
		f = &farGroup{}
		b.far[k] = f
	}
	f.count++
	if n := len(f.localities); n == 0 || f.localities[n-1] != id {
		f.localities = append(f.localities, id)
	}
}

// gatewayCandidates appends to cands, whose keys hold locality ranks, the
// gateways that stand for the endpoints counted by addFar.
func (b *assignmentBuilder) gatewayCandidates(cands []candidate) []candidate {
	for k, f := range b.far {
		gws := b.nets.Of(k.network)
		if len(gws) == 0 {
			continue
		}
		best := uint32(math.MaxUint32)
		for _, id := range f.localities {
			best = min(best, b.rank[id])
		}
		w := max(1, uint32(math.Round(float64(f.count)/float64(len(gws)))))
		for _, gw := range gws {
			cands = append(cands, candidate{
				key:      uint64(k.class)<<32 | uint64(best),
				hostPort: newHostPort(gw.Address, uint16(gw.Port)),
				injected: true,
				idx:      math.MaxUint32,
				weight:   w,
			})
		}
	}
	return cands
}

// newTLSMetadata is the metadata of an endpoint whose Pod takes Istio mTLS.
func newTLSMetadata() *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{TransportSocketMatchKey: tlsModeIstioStruct()}}
}

// lbPool shares the LbEndpoint protos of one merged service between the
// assignments of every proxy group. An endpoint's LbEndpoint (address and
// target port, tlsMode metadata, health, weight) is the same whatever
// group it is built for: only the LocalityLbEndpoints around it (which
// locality, which priority) differ. Without the pool each group held its
// own copy of every endpoint, ~600 B per endpoint and group (the hub's
// largest cost with proxies in many clusters); with it, a group holds a
// pointer per endpoint. A pool belongs to one *model.MergedService (which
// is immutable): a new one starts with each change of the service. Its
// LbEndpoints are shared and never modified after they are made.
type lbPool struct {
	ms *model.MergedService
	// ports holds, by service port, the LbEndpoint of each endpoint (by its
	// index in ms.Endpoints), made when first needed.
	ports map[uint32][]*endpointv3.LbEndpoint
	tls   *corev3.Metadata // shared by the injected endpoints
}

func newLBPool(ms *model.MergedService) *lbPool {
	return &lbPool{ms: ms, ports: map[uint32][]*endpointv3.LbEndpoint{}}
}

// get returns the LbEndpoint of candidate c of port, making it on first
// use; n is the number of the service's endpoints.
func (p *lbPool) get(port uint32, n int, c candidate) *endpointv3.LbEndpoint {
	byIdx := p.ports[port]
	if byIdx == nil {
		byIdx = make([]*endpointv3.LbEndpoint, n)
		p.ports[port] = byIdx
	}
	if lb := byIdx[c.idx]; lb != nil {
		return lb
	}
	lb := new(endpointBlock).init(c.addrPort())
	if c.injected {
		if p.tls == nil {
			p.tls = newTLSMetadata()
		}
		lb.Metadata = p.tls
	}
	byIdx[c.idx] = lb
	return lb
}

// gateway returns the LbEndpoint of gateway candidate c: made afresh (its
// weight depends on the group), sharing the pool's tlsMode metadata.
func (p *lbPool) gateway(c candidate) *endpointv3.LbEndpoint {
	b := new(endpointBlock)
	lb := b.init(c.addrPort())
	b.weight.Value = c.lbWeight()
	if p.tls == nil {
		p.tls = newTLSMetadata()
	}
	lb.Metadata = p.tls
	return lb
}

// distributeWeights replaces the weights of locs, the localities of one
// assignment (all in priority 0), by those dist gives them.
func distributeWeights(dist *distribution, locs []localityBlock) {
	counts := make([]uint32, len(locs))
	targets := make([]int, len(locs))
	weights := make([]uint32, len(locs))
	for i := range locs {
		counts[i] = locs[i].weight.Value
		l := &locs[i].locality
		targets[i] = dist.target(model.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone})
	}
	dist.weigh(counts, targets, weights)
	for i := range locs {
		locs[i].weight.Value = weights[i]
	}
}

// localityBlock holds the protos of one LocalityLbEndpoints.
type localityBlock struct {
	lle      endpointv3.LocalityLbEndpoints
	locality corev3.Locality
	weight   wrapperspb.UInt32Value
}

// init fills the block as locality l at priority p holding eps, weighted by
// their number, and returns the LocalityLbEndpoints.
func (b *localityBlock) init(l model.Locality, p uint32, eps []*endpointv3.LbEndpoint) *endpointv3.LocalityLbEndpoints {
	b.locality.Region, b.locality.Zone, b.locality.SubZone = l.Region, l.Zone, l.SubZone
	b.weight.Value = uint32(len(eps))
	b.lle.Locality = &b.locality
	b.lle.LbEndpoints = eps
	b.lle.LoadBalancingWeight = &b.weight
	b.lle.Priority = p
	return &b.lle
}

// endpointBlock holds the protos of one LbEndpoint.
type endpointBlock struct {
	lb     endpointv3.LbEndpoint
	oneof  endpointv3.LbEndpoint_Endpoint
	ep     endpointv3.Endpoint
	addr   corev3.Address
	sock   corev3.Address_SocketAddress
	sa     corev3.SocketAddress
	port   corev3.SocketAddress_PortValue
	weight wrapperspb.UInt32Value
}

// init fills the block as a healthy, weight 1 endpoint at ap and returns the
// LbEndpoint.
func (b *endpointBlock) init(ap netip.AddrPort) *endpointv3.LbEndpoint {
	b.port.PortValue = uint32(ap.Port())
	b.sa.Protocol = corev3.SocketAddress_TCP
	b.sa.Address = ap.Addr().String()
	b.sa.PortSpecifier = &b.port
	b.sock.SocketAddress = &b.sa
	b.addr.Address = &b.sock
	b.ep.Address = &b.addr
	b.oneof.Endpoint = &b.ep
	b.weight.Value = 1
	b.lb.HostIdentifier = &b.oneof
	b.lb.HealthStatus = corev3.HealthStatus_HEALTHY
	b.lb.LoadBalancingWeight = &b.weight
	return &b.lb
}
