package xdsgen

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/model"
)

// Proximity classes of an endpoint relative to a proxy group, best first.
// Non-empty classes become the priorities 0, 1, ... of a load assignment.
const (
	classLocal  = iota // in the proxy's own cluster
	classRegion        // in another cluster of the proxy's region
	classRemote        // anywhere else
)

// classify returns the proximity class of ep for proxies of g.
func classify(ep *model.Endpoint, g ProxyGroup) int {
	switch {
	case ep.Cluster == g.Cluster:
		return classLocal
	case g.Region != "" && ep.Locality.Region == g.Region:
		return classRegion
	default:
		return classRemote
	}
}

// LoadAssignments returns one ClusterLoadAssignment per port of ms.Service
// (same ports and order as Clusters), named ClusterName, as proxies of group g
// should see it:
//
//   - only ready endpoints that map the service port to a target port
//     (model.Endpoint.TargetPort) in 1..65535 and have a valid address;
//   - priority by proximity to g: the proxies' own cluster, then other
//     clusters of their region, then the rest; empty classes are skipped and
//     priorities numbered contiguously from 0, as grpc-go requires;
//   - in each priority, one LocalityLbEndpoints per (region, zone, subzone),
//     with a non-nil Locality and a weight equal to its number of endpoints
//     (grpc-go drops localities of weight 0);
//   - each endpoint HEALTHY with weight 1, at "<address>:<target port>"
//     (IPv4-mapped IPv6 addresses unmapped);
//   - each address:port at most once, since grpc-go NACKs duplicates: when
//     several endpoints share one, the one in the best priority is kept (ties
//     broken by locality, then cluster ID);
//   - localities sorted by priority, region, zone, subzone, endpoints by
//     address and port, so equal inputs give proto.Equal outputs.
//
// A port without eligible endpoints yields an assignment with no endpoints,
// which grpc-go reports as "no endpoints" to RPCs. LoadAssignments is pure and
// does not modify ms; nil ms (or ms.Service) yields nil.
func LoadAssignments(ms *model.MergedService, g ProxyGroup) []*endpointv3.ClusterLoadAssignment {
	if ms == nil {
		return nil
	}
	ports := servicePorts(ms.Service)
	if len(ports) == 0 {
		return nil
	}
	out := make([]*endpointv3.ClusterLoadAssignment, 0, len(ports))
	var b assignmentBuilder
	for _, sp := range ports {
		out = append(out, b.build(ms, sp, g))
	}
	return out
}

// candidate is an endpoint eligible for one service port.
type candidate struct {
	class    int
	locality model.Locality
	addr     netip.AddrPort
	cluster  model.ClusterID
}

// compareCandidates orders candidates into the output order: by class, then
// locality, then address. The cluster ID only breaks ties between duplicates,
// making the choice among them deterministic.
func compareCandidates(a, b candidate) int {
	if c := cmp.Compare(a.class, b.class); c != 0 {
		return c
	}
	if c := compareLocality(a.locality, b.locality); c != 0 {
		return c
	}
	if c := a.addr.Compare(b.addr); c != 0 {
		return c
	}
	return strings.Compare(string(a.cluster), string(b.cluster))
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
	cands []candidate
	seen  map[netip.AddrPort]struct{}
}

// build computes the assignment of port sp of ms for group g.
func (b *assignmentBuilder) build(ms *model.MergedService, sp model.ServicePort, g ProxyGroup) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ClusterName(ms.Service.Hostname, sp.Port)}

	// Collect the eligible endpoints and put them in output order.
	cands := b.cands[:0]
	for i := range ms.Endpoints {
		ep := &ms.Endpoints[i]
		if !ep.Ready || !ep.Address.IsValid() {
			continue
		}
		tp, ok := ep.TargetPort(sp)
		if !ok || !validPort(tp) {
			continue
		}
		cands = append(cands, candidate{
			class:    classify(ep, g),
			locality: ep.Locality,
			addr:     netip.AddrPortFrom(ep.Address.Unmap(), uint16(tp)),
			cluster:  ep.Cluster,
		})
	}
	b.cands = cands
	if len(cands) == 0 {
		return cla
	}
	slices.SortFunc(cands, compareCandidates)

	// Drop repeated addresses, keeping the first (best) occurrence, and count
	// the localities that remain.
	if b.seen == nil {
		b.seen = make(map[netip.AddrPort]struct{}, len(cands))
	}
	clear(b.seen)
	kept := cands[:0]
	groups := 0
	for _, c := range cands {
		if _, dup := b.seen[c.addr]; dup {
			continue
		}
		b.seen[c.addr] = struct{}{}
		if n := len(kept); n == 0 || kept[n-1].class != c.class || kept[n-1].locality != c.locality {
			groups++
		}
		kept = append(kept, c)
	}

	// Emit one LocalityLbEndpoints per run of equal (class, locality),
	// numbering the classes present 0, 1, ... The protos are carved out of
	// slabs, which turns about ten allocations per endpoint into a handful per
	// assignment; every element is used in place and belongs to this
	// assignment only.
	eps := make([]endpointBlock, len(kept))
	lbs := make([]*endpointv3.LbEndpoint, len(kept))
	for i, c := range kept {
		lbs[i] = eps[i].init(c.addr)
	}
	locs := make([]localityBlock, groups)
	cla.Endpoints = make([]*endpointv3.LocalityLbEndpoints, groups)
	priority := uint32(0)
	for g, start := 0, 0; start < len(kept); g++ {
		end := start + 1
		for end < len(kept) && kept[end].class == kept[start].class && kept[end].locality == kept[start].locality {
			end++
		}
		if start > 0 && kept[start].class != kept[start-1].class {
			priority++
		}
		cla.Endpoints[g] = locs[g].init(kept[start].locality, priority, lbs[start:end:end])
		start = end
	}
	return cla
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
