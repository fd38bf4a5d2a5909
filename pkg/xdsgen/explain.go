package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Explanation is what ExplainEndpoints says of one load assignment (the
// hub serves it as debugdoc.Explainz).
type Explanation struct {
	// Assignment is the name of the load assignment (the EDS resource).
	Assignment string `json:"assignment"`
	// Group is the proxy group the assignment was built for.
	Group string `json:"group"`
	// Port is the service port explained.
	Port uint32 `json:"port"`
	// Network is the group's network.
	Network model.Network `json:"network,omitempty"`
	// Endpoints are the endpoints sent, in the assignment's order
	// (priority, then locality, then address), followed by the endpoints of
	// the service that were left out, in registry order.
	Endpoints []debugdoc.ExplainedEndpoint `json:"endpoints"`
}

// ExplainEndpoints tells which endpoints of ms proxies of group g are sent
// for port of the service (0: its first port) and subset ("" for the
// default assignment)
// under DestinationRule dr and the network gateways nets, in priority
// order, and why each has its priority or is left out; a gateway sent for
// another network's endpoints is listed as such. It reads the assignment
// NetworkLoadAssignments builds, so it explains exactly what is sent. It fails when the service has no
// such port or subset, or is resolved by DNS (its endpoints are inline in
// its cluster). It is pure.
func ExplainEndpoints(ms *model.MergedService, g ProxyGroup, dr *istioconfig.DestinationRule, nets *model.NetworkGateways, port uint32, subset string) (Explanation, error) {
	if ms == nil || ms.Service == nil {
		return Explanation{}, fmt.Errorf("no such service")
	}
	h := ms.Service.Hostname
	if dnsResolved(ms.Service) {
		return Explanation{}, fmt.Errorf("%s is resolved by DNS: its endpoints are inline in its clusters, not in a load assignment", h)
	}
	var sp model.ServicePort
	found := false
	for _, p := range servicePorts(ms.Service) {
		if p.Port == port || port == 0 {
			sp, found = p, true
			break
		}
	}
	switch {
	case !found && port == 0:
		return Explanation{}, fmt.Errorf("%s has no ports", h)
	case !found:
		return Explanation{}, fmt.Errorf("%s has no port %d", h, port)
	}
	port = sp.Port
	name := ClusterName(h, port)
	var member []bool
	if subset != "" {
		var s *networking.Subset
		if dr != nil {
			s = findSubset(dr, subset)
		}
		if s == nil {
			return Explanation{}, fmt.Errorf("no DestinationRule of %s has a subset %q", h, subset)
		}
		name = SubsetClusterName(h, port, subset)
		member = subsetMembers(ms.Endpoints, s.GetLabels())
	}
	var cla *endpointv3.ClusterLoadAssignment
	for _, c := range NetworkLoadAssignments(ms, g, dr, nets) {
		if c.GetClusterName() == name {
			cla = c
			break
		}
	}
	prox := newProximity(g, effectivePolicy(dr, port, subset).GetLoadBalancer().GetLocalityLbSetting())

	// The endpoint each sent address came from: the first in registry
	// order among those that share it, in the best class (as the builder
	// keeps it).
	byAddr := map[netip.AddrPort]int{}
	for i := range ms.Endpoints {
		ep := &ms.Endpoints[i]
		ap, ok := eligibleAddr(ep, sp, member, i, &prox)
		if !ok || !model.SameNetwork(g.Network, ep.Network) {
			continue
		}
		if j, dup := byAddr[ap]; !dup || prox.class(ep) < prox.class(&ms.Endpoints[j]) {
			byAddr[ap] = i
		}
	}

	// The gateway (and its network) each sent gateway address is.
	type gateway struct {
		model.GatewayAddress
		network model.Network
	}
	gateways := map[netip.AddrPort]gateway{}
	if nets != nil {
		for n, addrs := range nets.ByNetwork {
			for _, a := range addrs {
				gateways[netip.AddrPortFrom(a.Address, uint16(a.Port))] = gateway{a, n}
			}
		}
	}

	x := Explanation{Assignment: name, Group: g.String(), Port: port, Network: g.Network}
	sent := make([]bool, len(ms.Endpoints))
	for _, lle := range cla.GetEndpoints() {
		for _, lbe := range lle.GetLbEndpoints() {
			sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
			addr, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				continue
			}
			ap := netip.AddrPortFrom(addr, uint16(sa.GetPortValue()))
			i, ok := byAddr[ap]
			if !ok {
				if gw, isGW := gateways[ap]; isGW {
					n := gw.network
					x.Endpoints = append(x.Endpoints, debugdoc.ExplainedEndpoint{
						Address: ap.String(), Cluster: gw.Cluster, Network: string(n), Gateway: true,
						Locality: model.Locality{Region: lle.GetLocality().GetRegion(), Zone: lle.GetLocality().GetZone(), SubZone: lle.GetLocality().GetSubZone()},
						Sent:     true, Priority: int(lle.GetPriority()), LocalityWeight: lle.GetLoadBalancingWeight().GetValue(),
						Weight: lbe.GetLoadBalancingWeight().GetValue(),
						Reason: fmt.Sprintf("gateway %s of network %s, for its endpoints that take Istio mutual TLS (weight: their number over its %d address(es))", gw.Service, n, len(nets.Of(n))),
					})
				}
				continue
			}
			sent[i] = true
			ep := &ms.Endpoints[i]
			x.Endpoints = append(x.Endpoints, debugdoc.ExplainedEndpoint{
				Address: ap.String(), Cluster: ep.Cluster, Locality: ep.Locality, Pod: ep.Pod, Network: string(ep.Network),
				Sent: true, Priority: int(lle.GetPriority()), LocalityWeight: lle.GetLoadBalancingWeight().GetValue(),
				Weight: lbe.GetLoadBalancingWeight().GetValue(), Reason: prox.reason(ep),
			})
		}
	}
	for i := range ms.Endpoints {
		if sent[i] {
			continue
		}
		ep := &ms.Endpoints[i]
		e := debugdoc.ExplainedEndpoint{Address: ep.Address.String(), Cluster: ep.Cluster, Locality: ep.Locality, Pod: ep.Pod,
			Network: string(ep.Network), Priority: -1}
		if tp, ok := ep.TargetPort(sp); ok && validPort(tp) && ep.Address.IsValid() {
			e.Address = netip.AddrPortFrom(ep.Address.Unmap().WithZone(""), uint16(tp)).String()
		}
		e.Reason = leftOutReason(ep, sp, member, i, &prox, subset)
		if _, eligible := eligibleAddr(ep, sp, member, i, &prox); eligible && !model.SameNetwork(g.Network, ep.Network) {
			e.Reason = otherNetworkReason(ep, ms.Service, nets)
		}
		x.Endpoints = append(x.Endpoints, e)
	}
	return x, nil
}

// otherNetworkReason says why ep, eligible but on another network than the
// proxy's, is not sent itself.
func otherNetworkReason(ep *model.Endpoint, svc *model.Service, nets *model.NetworkGateways) string {
	switch {
	case !injected(ep) || svc.External:
		return fmt.Sprintf("on network %s and takes no Istio mutual TLS: only mutual TLS crosses a network's gateway", ep.Network)
	case len(nets.Of(ep.Network)) == 0:
		return fmt.Sprintf("on network %s, which has no usable gateway (see /debug/registryz): other networks cannot reach it", ep.Network)
	}
	return fmt.Sprintf("on network %s: reached through its gateway, sent in its place", ep.Network)
}

// eligibleAddr returns the address:port ep is sent at for sp, and whether
// it is eligible at all (the builder's filter).
func eligibleAddr(ep *model.Endpoint, sp model.ServicePort, member []bool, i int, prox *proximity) (netip.AddrPort, bool) {
	if !ep.Ready || !ep.Address.IsValid() || member != nil && !member[i] {
		return netip.AddrPort{}, false
	}
	tp, ok := ep.TargetPort(sp)
	if !ok || !validPort(tp) {
		return netip.AddrPort{}, false
	}
	if prox.dist != nil && prox.dist.target(ep.Locality) < 0 {
		return netip.AddrPort{}, false
	}
	return newHostPort(ep.Address, uint16(tp)).addrPort(), true
}

// leftOutReason says why ep is not in the assignment.
func leftOutReason(ep *model.Endpoint, sp model.ServicePort, member []bool, i int, prox *proximity, subset string) string {
	tp, hasPort := ep.TargetPort(sp)
	switch {
	case !ep.Ready:
		return "not ready"
	case !ep.Address.IsValid():
		return "no valid address"
	case member != nil && !member[i]:
		return fmt.Sprintf("not selected by the labels of subset %q", subset)
	case !hasPort:
		return fmt.Sprintf("does not serve port %q", sp.Name)
	case !validPort(tp):
		return fmt.Sprintf("target port %d is out of range", tp)
	case prox.dist != nil && prox.dist.target(ep.Locality) < 0:
		return fmt.Sprintf("locality %s is not among the weighted localities of the distribute entry for the proxy's locality", ep.Locality)
	}
	return "another endpoint has the same address and port"
}

// reason says why ep has the class it has for the proxies of p.
func (p *proximity) reason(ep *model.Endpoint) string {
	switch {
	case p.flat:
		return "locality load balancing is off (localityLbSetting.enabled: false): one priority for all"
	case p.dist != nil:
		return fmt.Sprintf("distribute: the entry for the proxy's locality weighs locality %s", ep.Locality)
	case p.priority != nil:
		c := p.class(ep)
		return fmt.Sprintf("shares %d of the %d failoverPriority keys with the proxy", len(p.priority)-c, len(p.priority))
	}
	switch c := classify(ep, p.g); {
	case c == classLocal && ep.Cluster == p.g.Cluster:
		return fmt.Sprintf("in the proxy's own cluster %s", p.g.Cluster)
	case c == classLocal:
		return fmt.Sprintf("of no cluster, in the proxy's region %s", p.g.Region)
	case c == classRegion:
		return fmt.Sprintf("another cluster (%s) in the proxy's region %s", ep.Cluster, p.g.Region)
	case len(p.failoverTo) > 0:
		if i := slices.Index(p.failoverTo, ep.Locality.Region); i >= 0 {
			return fmt.Sprintf("failover region %s (choice %d of failover from %s)", ep.Locality.Region, i+1, p.g.Region)
		}
		return "outside the proxy's region and its failover regions"
	case p.g.Region == "":
		return "another cluster; the proxy's region is unknown"
	}
	return fmt.Sprintf("another cluster (%s) outside the proxy's region %s", ep.Cluster, p.g.Region)
}
