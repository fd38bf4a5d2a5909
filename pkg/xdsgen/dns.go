package xdsgen

import (
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// DNS-resolved services (ServiceEntries with resolution DNS or
// DNS_ROUND_ROBIN) have no registry endpoints: their proxies resolve the
// names of svc.DNSEndpoints themselves. Their clusters carry the names in
// an inline load assignment instead of fetching one over EDS, so
// LoadAssignments has nothing for them.
//
//   - Envoy: STRICT_DNS for ResolutionDNS (every address of every name is a
//     host), LOGICAL_DNS for ResolutionDNSRoundRobin (one name, whose
//     first address serves new connections). Envoy rejects a LOGICAL_DNS
//     cluster with more than one endpoint, so it gets the first one.
//   - proxyless gRPC: grpc-go (v1.85) has no STRICT_DNS; it takes
//     LOGICAL_DNS with exactly one locality holding exactly one endpoint
//     (internal/xds/xdsclient/xdsresource/unmarshal_cds.go,
//     dnsHostNameFromCluster), so both resolutions become LOGICAL_DNS to
//     the first name.
//
// DNS endpoints have no labels, so a DestinationRule subset of a DNS
// service, whose labels Istio applies only to endpoints that have labels,
// is the whole service: its cluster is the default cluster under another
// name (and the subset's traffic policy).

// dnsResolved reports whether svc's proxies find its endpoints by DNS.
// Any other resolution means the registry's endpoints, over EDS.
func dnsResolved(svc *model.Service) bool {
	return svc != nil && (svc.Resolution == model.ResolutionDNS || svc.Resolution == model.ResolutionDNSRoundRobin)
}

// dnsLookupFamily is the address family Envoy's DNS clusters resolve.
// V4_PREFERRED rather than ALL: with ALL a STRICT_DNS cluster makes a host
// of every AAAA address too, and Pods of the (common) IPv4-only Kubernetes
// clusters cannot reach them, so some connections would fail until
// outlier detection ejects them; V4_PREFERRED uses the A records when
// there are any and falls back to AAAA for IPv6-only names, which works on
// IPv4-only and dual-stack Pods alike. (Envoy 1.40 documents the field as
// superseded by the envoy.clusters.dns cluster_type extension, but still
// honours it and does not mark it deprecated; grpc-go accepts no
// cluster_type besides aggregate, and the Envoy clusters keep the shape of
// the proxyless ones.)
const dnsLookupFamily = clusterv3.Cluster_V4_PREFERRED

// dnsTarget is one name a DNS cluster of one service port resolves.
type dnsTarget struct {
	host     string
	port     uint32
	locality model.Locality
	weight   uint32 // 0: unset (Envoy's default, 1)
}

// dnsTargets are the names the DNS clusters of port sp of svc resolve, in
// svc.DNSEndpoints' order: each endpoint with a host and a target port in
// 1..65535 (the others are dropped, see ServiceNotes). Without any such
// endpoint the service's hostname itself is resolved on the service port,
// as Istio does for a ServiceEntry without endpoints.
func dnsTargets(svc *model.Service, sp model.ServicePort) []dnsTarget {
	var out []dnsTarget
	for i := range svc.DNSEndpoints {
		e := &svc.DNSEndpoints[i]
		tp := e.TargetPort(sp)
		if e.Host == "" || !validPort(tp) {
			continue
		}
		out = append(out, dnsTarget{host: e.Host, port: tp, locality: e.Locality, weight: e.Weight})
	}
	if len(out) == 0 {
		out = append(out, dnsTarget{host: string(svc.Hostname), port: sp.Port})
	}
	return out
}

// dnsLoadAssignment is the inline load assignment named name of a DNS
// cluster over targets: one LocalityLbEndpoints per distinct locality, in
// order of first appearance, each endpoint at host:port with its weight
// when it has one.
func dnsLoadAssignment(name string, targets []dnsTarget) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	var order []model.Locality
	byLocality := map[model.Locality]*endpointv3.LocalityLbEndpoints{}
	for _, t := range targets {
		lle, ok := byLocality[t.locality]
		if !ok {
			lle = &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{
				Region: t.locality.Region, Zone: t.locality.Zone, SubZone: t.locality.SubZone,
			}}
			byLocality[t.locality] = lle
			order = append(order, t.locality)
		}
		lb := &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: socketAddress(t.host, t.port),
		}}}
		if t.weight > 0 {
			lb.LoadBalancingWeight = wrapperspb.UInt32(t.weight)
		}
		lle.LbEndpoints = append(lle.LbEndpoints, lb)
	}
	for _, l := range order {
		cla.Endpoints = append(cla.Endpoints, byLocality[l])
	}
	return cla
}

// setDNS turns c, a cluster of port sp of the DNS-resolved svc, from EDS
// into a DNS cluster of kind k: LOGICAL_DNS to the first target for
// proxyless clients and for Envoy with ResolutionDNSRoundRobin,
// STRICT_DNS to every target for Envoy with ResolutionDNS.
func setDNS(c *clusterv3.Cluster, svc *model.Service, sp model.ServicePort, k ProxyKind) {
	targets := dnsTargets(svc, sp)
	typ := clusterv3.Cluster_LOGICAL_DNS
	if k.Can().StrictDNS.Can() && svc.Resolution == model.ResolutionDNS {
		typ = clusterv3.Cluster_STRICT_DNS
	}
	if typ == clusterv3.Cluster_LOGICAL_DNS {
		targets = targets[:1]
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: typ}
	c.EdsClusterConfig = nil
	c.LoadAssignment = dnsLoadAssignment(c.GetName(), targets)
	if k.Can().envoy() {
		// grpc-go ignores the family (its DNS resolver asks for both).
		c.DnsLookupFamily = dnsLookupFamily
	}
}

// ServiceNotes returns what the generators leave out of ms's service,
// under its DestinationRule dr (nil: none), for each proxy kind, as
// "<field>: <reason> (<proxy kind>)", the fields being those of the
// service (dnsEndpoints, resolution) or of dr (subsets): the names of a
// DNS-resolved service that a LOGICAL_DNS cluster does not resolve, the
// endpoints without a usable host or port, and the subsets whose labels
// cannot select DNS endpoints. The hub shows them with ConfigNotes. It is
// pure; a nil ms (or ms.Service) yields nil, and so does a service whose
// endpoints come from the registry.
func ServiceNotes(ms *model.MergedService, dr *istioconfig.DestinationRule) []string {
	if ms == nil || !dnsResolved(ms.Service) {
		return nil
	}
	svc := ms.Service
	var out []string
	add := func(field string, k ProxyKind, format string, args ...any) {
		n := field + ": " + fmt.Sprintf(format, args...) + " (" + k.String() + ")"
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	// every adds a note for every kind.
	every := func(field string, format string, args ...any) {
		for _, k := range Kinds {
			add(field, k, format, args...)
		}
	}
	ports := servicePorts(svc)
	usable := 0 // endpoints that serve every port
	for i := range svc.DNSEndpoints {
		e := &svc.DNSEndpoints[i]
		field := fmt.Sprintf("dnsEndpoints[%d]", i)
		ok := true
		if e.Host == "" {
			ok = false
			every(field, "no host; dropped")
		} else {
			for _, sp := range ports {
				if tp := e.TargetPort(sp); !validPort(tp) {
					ok = false
					every(field+".ports."+sp.Name, "port %d is not in 1..65535; dropped from port %d", tp, sp.Port)
				}
			}
		}
		if ok {
			usable++
		}
	}
	if len(ports) > 0 {
		if usable == 0 {
			every("dnsEndpoints", "no usable endpoint; the hostname %s itself is resolved", svc.Hostname)
		}
		for _, k := range Kinds {
			strict := k.Can().StrictDNS
			switch {
			case usable > 1 && !strict.Can():
				add("dnsEndpoints[1:]", k, "LOGICAL_DNS resolves only the first endpoint")
			case usable > 1 && svc.Resolution == model.ResolutionDNSRoundRobin:
				add("dnsEndpoints[1:]", k, "LOGICAL_DNS (DNS_ROUND_ROBIN) resolves only the first endpoint")
			}
			if svc.Resolution == model.ResolutionDNS && !strict.Can() {
				add("resolution", k, "%s; DNS is resolved as LOGICAL_DNS, one name whose addresses are tried in turn, not balanced across", strict)
			}
		}
	}
	if dr != nil {
		for i, s := range dr.Spec.GetSubsets() {
			if len(s.GetLabels()) == 0 {
				continue
			}
			field := fmt.Sprintf("subsets[%d].labels", i)
			every(field, "DNS endpoints have no labels; subset %q takes every endpoint", s.GetName())
		}
	}
	return out
}
