package xdsgen

import (
	"fmt"
	"slices"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// VirtualService tcp[] and tls[] rules on Envoy sidecars, as istiod
// applies them to the outbound listener of a non-HTTP service port: the
// first tcp[] rule whose match takes the port (or that has none) replaces
// the service's cluster by its destinations (weighted); each tls[] rule's
// SNI hosts become a chain of their own (the listener gets the TLS
// inspector), the service's cluster staying the default for other names.
// A match on the client (sourceLabels, sourceNamespace, sourceSubnet) or
// on destinationSubnets is not evaluated on sidecars: such a match is left
// out (L4Notes).

// hasL4 reports whether vs has tcp[] or tls[] rules.
func hasL4(vs *istioconfig.VirtualService) bool {
	return vs != nil && (len(vs.Spec.GetTcp()) > 0 || len(vs.Spec.GetTls()) > 0)
}

// l4Unsupported names the first field of a tcp[] or tls[] match that
// sidecars do not evaluate, "" for none.
func l4Unsupported(labels map[string]string, ns, sourceSubnet string, destSubnets []string) string {
	switch {
	case len(labels) > 0:
		return "sourceLabels"
	case ns != "":
		return "sourceNamespace"
	case sourceSubnet != "":
		return "sourceSubnet"
	case len(destSubnets) > 0:
		return "destinationSubnets"
	}
	return ""
}

// meshMatch reports whether a tcp[] or tls[] match naming gateways applies
// to the mesh's sidecars.
func meshMatch(gateways []string) bool {
	return len(gateways) == 0 || slices.Contains(gateways, istioconfig.MeshGateway)
}

// sidecarTCPFilter is the network filter of the outbound TCP listener of
// target's port: the first tcp[] rule of its host's VirtualService that
// takes the port, else the service's cluster.
func sidecarTCPFilter(target servicePortRef, config *istioconfig.Snapshot) *listenerv3.Filter {
	port := target.port.Port
	vs := config.Host(target.svc.Hostname).VirtualService
	if vs != nil {
		for _, r := range vs.Spec.GetTcp() {
			if !sidecarTCPTakes(r, port) {
				continue
			}
			if f := l4Filter(vs, r.GetRoute(), port, config.DomainSuffix(), nil); f != nil {
				return f
			}
		}
	}
	return tcpProxy(ClusterName(target.svc.Hostname, port))
}

// sidecarTCPTakes reports whether a tcp[] rule applies to a sidecar's
// connections to port.
func sidecarTCPTakes(r *networking.TCPRoute, port uint32) bool {
	if len(r.GetMatch()) == 0 {
		return true
	}
	for _, m := range r.GetMatch() {
		if (m.GetPort() == 0 || m.GetPort() == port) && meshMatch(m.GetGateways()) &&
			l4Unsupported(m.GetSourceLabels(), m.GetSourceNamespace(), m.GetSourceSubnet(), m.GetDestinationSubnets()) == "" {
			return true
		}
	}
	return false
}

// sidecarTLSChains are the chains of target's port's outbound listener
// for the tls[] rules of its host's VirtualService, one per rule (SNI
// hosts of its matches that take the port), in order; nil without such
// rules. An SNI set an earlier chain has is left out.
func sidecarTLSChains(target servicePortRef, config *istioconfig.Snapshot) []*listenerv3.FilterChain {
	port := target.port.Port
	vs := config.Host(target.svc.Hostname).VirtualService
	if vs == nil {
		return nil
	}
	var out []*listenerv3.FilterChain
	seen := map[string]bool{}
	for _, r := range vs.Spec.GetTls() {
		var names []string
		for _, m := range r.GetMatch() {
			if (m.GetPort() != 0 && m.GetPort() != port) || !meshMatch(m.GetGateways()) ||
				l4Unsupported(m.GetSourceLabels(), m.GetSourceNamespace(), "", m.GetDestinationSubnets()) != "" {
				continue
			}
			for _, h := range m.GetSniHosts() {
				if !seen[h] {
					seen[h] = true
					names = append(names, h)
				}
			}
		}
		if len(names) == 0 {
			continue
		}
		if f := l4Filter(vs, r.GetRoute(), port, config.DomainSuffix(), nil); f != nil {
			out = append(out, &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: names},
				Filters:          []*listenerv3.Filter{f},
			})
		}
	}
	return out
}

// l4Filter is the tcp_proxy of an L4 rule's destinations (one cluster, or
// weighted ones), nil when none has a weight. A destination's host is
// resolved in vs's namespace; its port is its own, else onlyPort's (nil:
// port).
func l4Filter(vs *istioconfig.VirtualService, dests []*networking.RouteDestination, port uint32, domainSuffix string,
	onlyPort func(model.Hostname, uint32) uint32) *listenerv3.Filter {
	var weighted []*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight
	for _, d := range dests {
		if len(dests) > 1 && d.GetWeight() == 0 {
			continue
		}
		host := istioconfig.ResolveHost(d.GetDestination().GetHost(), vs.Namespace, domainSuffix)
		p := d.GetDestination().GetPort().GetNumber()
		switch {
		case p != 0:
		case onlyPort != nil:
			p = onlyPort(host, port)
		default:
			p = port
		}
		weighted = append(weighted, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{
			Name: SubsetClusterName(host, p, d.GetDestination().GetSubset()), Weight: uint32(max(d.GetWeight(), 1)),
		})
	}
	switch len(weighted) {
	case 0:
		return nil
	case 1:
		return tcpProxy(weighted[0].Name)
	}
	return networkFilter(filterTCPProxy, &tcpproxyv3.TcpProxy{
		StatPrefix:       fmt.Sprintf("%s.%d", vs.Key, port),
		ClusterSpecifier: &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: weighted}},
	})
}

// L4Notes says what of vs's tcp[] and tls[] rules a proxy kind does not
// get: proxyless gRPC none of them (grpc-go has no TCP proxy); Envoy
// sidecars not the matches on the client or on destination subnets.
func L4Notes(vs *istioconfig.VirtualService) []RouteNote {
	var out []RouteNote
	for field, n := range map[string]int{"spec.tcp": len(vs.Spec.GetTcp()), "spec.tls": len(vs.Spec.GetTls())} {
		if n > 0 {
			out = append(out, RouteNote{Object: vs.Key, Kind: ProxyGRPC, Field: field,
				Reason: "proxyless gRPC clients have no TCP proxy: these rules do not apply to them"})
		}
	}
	note := func(p, f string) {
		out = append(out, RouteNote{Object: vs.Key, Kind: ProxyEnvoy, Field: p + "." + f,
			Reason: "not evaluated on sidecars; match left out"})
	}
	for i, r := range vs.Spec.GetTcp() {
		for j, m := range r.GetMatch() {
			if f := l4Unsupported(m.GetSourceLabels(), m.GetSourceNamespace(), m.GetSourceSubnet(), m.GetDestinationSubnets()); f != "" {
				note(fmt.Sprintf("spec.tcp[%d].match[%d]", i, j), f)
			}
		}
	}
	for i, r := range vs.Spec.GetTls() {
		for j, m := range r.GetMatch() {
			if f := l4Unsupported(m.GetSourceLabels(), m.GetSourceNamespace(), "", m.GetDestinationSubnets()); f != "" {
				note(fmt.Sprintf("spec.tls[%d].match[%d]", i, j), f)
			}
		}
	}
	slices.SortFunc(out, func(a, b RouteNote) int {
		if a.Field != b.Field {
			if a.Field < b.Field {
				return -1
			}
			return 1
		}
		return int(a.Kind) - int(b.Kind)
	})
	return out
}
