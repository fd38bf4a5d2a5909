package model

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Networks, as Istio defines them: the Pods of one network reach each
// other's addresses; another network's Pods are reached only through that
// network's gateways.
const (
	// LabelTopologyNetwork names a workload's network: on a remote
	// cluster's system namespace for the whole cluster, on a Pod for that
	// Pod, and on a Service to make it a gateway of that network.
	LabelTopologyNetwork = "topology.istio.io/network"
	// AnnotationGatewayPort, on a gateway Service, names the port that
	// carries traffic into its network, when it is not DefaultGatewayPort.
	AnnotationGatewayPort = "networking.istio.io/gatewayPort"
	// DefaultGatewayPort is the port of a network's gateways: where
	// clients of other networks send mutual TLS, routed by its SNI.
	DefaultGatewayPort = 15443
)

// Network names a network. The empty network is unknown, and Istio treats
// it as reaching every network (SameNetwork).
type Network string

func (n Network) String() string { return string(n) }

// SameNetwork reports whether a proxy on network a reaches an endpoint on
// network b directly: they are the same, or either is unknown (a fleet
// without network labels is one flat network).
func SameNetwork(a, b Network) bool { return a == "" || b == "" || a == b }

// NetworkGateway is what a Service labelled LabelTopologyNetwork says of
// its network's way in: the addresses clients of other networks dial, on
// Port. A ServiceShard carries it; it is immutable once handed to a
// Registry.
type NetworkGateway struct {
	Network Network `json:"network"`
	// Port is the gateway Service's port that AnnotationGatewayPort names,
	// else DefaultGatewayPort.
	Port uint32 `json:"port"`
	// Addresses are the load balancer's (status.loadBalancer.ingress, a
	// hostname resolved) or else the Service's spec.externalIPs, sorted.
	Addresses []netip.Addr `json:"addresses,omitempty"`
	// Problem says why the gateway has no address to use; empty when it
	// has.
	Problem string `json:"problem,omitempty"`
}

// Equal reports whether two gateways say the same.
func (g *NetworkGateway) Equal(o *NetworkGateway) bool {
	if g == nil || o == nil {
		return g == o
	}
	return g.Network == o.Network && g.Port == o.Port && slices.Equal(g.Addresses, o.Addresses) && g.Problem == o.Problem
}

// GatewayAddress is one address of a network's gateway.
type GatewayAddress struct {
	Cluster ClusterID  `json:"cluster"`
	Service Hostname   `json:"service"`
	Address netip.Addr `json:"address"`
	Port    uint32     `json:"port"`
}

// NetworkProblem is something wrong with a network's gateways: a gateway
// without an address, an address two networks claim, a network whose
// endpoints no gateway reaches.
type NetworkProblem struct {
	Network Network `json:"network"`
	// Cluster and Service name the gateway at fault; empty for a network
	// without gateways.
	Cluster ClusterID `json:"cluster,omitempty"`
	Service Hostname  `json:"service,omitempty"`
	// Reason is one of the NetworkProblem reasons.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Reasons of a NetworkProblem (the label of
// meshfed_network_gateway_problems).
const (
	ProblemNoAddress       = "no_address"
	ProblemAddressConflict = "address_conflict"
	ProblemNoGateway       = "no_gateway"
)

// NetworkGateways is the fleet's view of its networks: the usable
// addresses of each network's gateways and what is wrong with the rest.
// It is immutable.
type NetworkGateways struct {
	// ByNetwork lists each network's gateway addresses, sorted by
	// cluster, service, then address; a network without a usable gateway
	// has no entry.
	ByNetwork map[Network][]GatewayAddress `json:"byNetwork,omitempty"`
	// Networks are every network some endpoint or gateway is on, sorted.
	Networks []Network `json:"networks,omitempty"`
	// Problems, sorted by network, cluster, service.
	Problems []NetworkProblem `json:"problems,omitempty"`
}

// SameRoutes reports whether g and o route the same: the same addresses
// for every network. (Problems and the networks' list are for people.)
func (g *NetworkGateways) SameRoutes(o *NetworkGateways) bool {
	if g == nil || o == nil {
		return len(g.routes()) == 0 && len(o.routes()) == 0
	}
	return maps.EqualFunc(g.ByNetwork, o.ByNetwork, slices.Equal)
}

func (g *NetworkGateways) routes() map[Network][]GatewayAddress {
	if g == nil {
		return nil
	}
	return g.ByNetwork
}

// Of returns network n's gateway addresses (nil: none).
func (g *NetworkGateways) Of(n Network) []GatewayAddress {
	if g == nil {
		return nil
	}
	return g.ByNetwork[n]
}

// buildNetworkGateways makes the view from every gateway shard and the
// networks the endpoints are on. An address claimed by gateways of two
// networks is used by neither: which network a connection to it enters
// cannot be known.
func buildNetworkGateways(gws map[ClusterID]map[Hostname]*NetworkGateway, endpointNetworks []Network) *NetworkGateways {
	out := &NetworkGateways{}
	nets := map[Network]bool{}
	for _, n := range endpointNetworks {
		if n != "" {
			nets[n] = true
		}
	}
	claims := map[netip.Addr]map[Network]bool{}
	for _, byHost := range gws {
		for _, gw := range byHost {
			nets[gw.Network] = true
			for _, a := range gw.Addresses {
				if claims[a] == nil {
					claims[a] = map[Network]bool{}
				}
				claims[a][gw.Network] = true
			}
		}
	}
	for c, byHost := range gws {
		for h, gw := range byHost {
			if gw.Problem != "" {
				out.Problems = append(out.Problems, NetworkProblem{Network: gw.Network, Cluster: c, Service: h,
					Reason: ProblemNoAddress, Message: gw.Problem})
				continue
			}
			for _, a := range gw.Addresses {
				if len(claims[a]) > 1 {
					others := slices.Sorted(maps.Keys(claims[a]))
					out.Problems = append(out.Problems, NetworkProblem{Network: gw.Network, Cluster: c, Service: h,
						Reason: ProblemAddressConflict,
						Message: fmt.Sprintf("address %s is claimed by the gateways of networks %s; no network uses it",
							a, joinNetworks(others))})
					continue
				}
				if out.ByNetwork == nil {
					out.ByNetwork = map[Network][]GatewayAddress{}
				}
				out.ByNetwork[gw.Network] = append(out.ByNetwork[gw.Network], GatewayAddress{Cluster: c, Service: h, Address: a, Port: gw.Port})
			}
		}
	}
	for n, addrs := range out.ByNetwork {
		slices.SortFunc(addrs, func(a, b GatewayAddress) int {
			return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Service, b.Service), a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
		})
		out.ByNetwork[n] = addrs
	}
	out.Networks = slices.Sorted(maps.Keys(nets))
	for _, n := range out.Networks {
		if len(out.ByNetwork[n]) == 0 && !slices.ContainsFunc(out.Problems, func(p NetworkProblem) bool { return p.Network == n }) {
			out.Problems = append(out.Problems, NetworkProblem{Network: n, Reason: ProblemNoGateway,
				Message: fmt.Sprintf("no Service labelled %s=%s with port %d (or the port %s names) in any cluster: other networks cannot reach its endpoints",
					LabelTopologyNetwork, n, DefaultGatewayPort, AnnotationGatewayPort)})
		}
	}
	slices.SortFunc(out.Problems, func(a, b NetworkProblem) int {
		return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Service, b.Service), strings.Compare(a.Message, b.Message))
	})
	return out
}

func joinNetworks(ns []Network) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
