package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ClusterID names a remote Kubernetes cluster. It is the data key of an
// Istio-format remote secret and the CLUSTER_ID metadata of a proxy.
type ClusterID string

func (c ClusterID) String() string { return string(c) }

// Hostname is a service's fully qualified name, <svc>.<ns>.svc.<domain>.
type Hostname string

func (h Hostname) String() string { return string(h) }

// DefaultDomainSuffix is the cluster domain used to build hostnames.
const DefaultDomainSuffix = "cluster.local"

// ServiceHostname returns the hostname of the Service name in namespace ns.
func ServiceHostname(name, ns, domainSuffix string) Hostname {
	if domainSuffix == "" {
		domainSuffix = DefaultDomainSuffix
	}
	return Hostname(name + "." + ns + ".svc." + domainSuffix)
}

// NamespacedName identifies an object inside one cluster.
type NamespacedName struct {
	Namespace, Name string
}

func (n NamespacedName) String() string { return n.Namespace + "/" + n.Name }

// Locality is where an endpoint runs, from the topology labels of its Node.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"subZone,omitempty"`
}

func (l Locality) String() string {
	return strings.Join([]string{l.Region, l.Zone, l.SubZone}, "/")
}

// ParseLocality reads "region/zone/subzone", the form of String and of
// Istio's locality fields; missing parts are empty, parts after the third
// are ignored.
func ParseLocality(s string) Locality {
	parts := strings.Split(s, "/")
	var l Locality
	l.Region = parts[0]
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.SubZone = parts[2]
	}
	return l
}

// Protocol is the application protocol of a service port.
type Protocol string

// Protocols meshfed distinguishes. Everything that is not known is TCP.
const (
	ProtocolGRPC  Protocol = "GRPC"
	ProtocolHTTP  Protocol = "HTTP"
	ProtocolHTTP2 Protocol = "HTTP2"
	ProtocolTCP   Protocol = "TCP"
)

// ServicePort is one port of a Service.
type ServicePort struct {
	// Name is the port name, which EndpointSlice ports refer to.
	Name string `json:"name,omitempty"`
	// Port is the service port clients dial.
	Port uint32 `json:"port"`
	// Protocol is taken from appProtocol, or from Istio's port-name prefix
	// convention (grpc-, http-, http2-), else TCP.
	Protocol Protocol `json:"protocol"`
}

// Service is the cluster-independent description of a Kubernetes Service,
// or of the hosts of Istio ServiceEntries.
type Service struct {
	Hostname  Hostname      `json:"hostname"`
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"`
	Ports     []ServicePort `json:"ports"`
	// External: a MESH_EXTERNAL ServiceEntry's host, outside the mesh. Its
	// endpoints never speak mTLS.
	External bool `json:"external,omitempty"`
	// Resolution is how a proxy finds the service's endpoints:
	// ResolutionEndpoints (the zero value) for the registry's endpoints,
	// sent over EDS, as for every Kubernetes Service and a STATIC
	// ServiceEntry; ResolutionDNS or ResolutionDNSRoundRobin for the DNS
	// names of a ServiceEntry, which the proxy resolves.
	Resolution Resolution `json:"resolution,omitempty"`
	// DNSEndpoints are the names a DNS-resolved service's proxies resolve,
	// in the ServiceEntry's order.
	DNSEndpoints []DNSEndpoint `json:"dnsEndpoints,omitempty"`
}

// Resolution is how a proxy finds a service's endpoints.
type Resolution string

// The resolutions.
const (
	// ResolutionEndpoints: the registry's endpoints, by address (EDS).
	ResolutionEndpoints Resolution = ""
	// ResolutionDNS: every address every DNS name resolves to (Envoy's
	// STRICT_DNS).
	ResolutionDNS Resolution = "DNS"
	// ResolutionDNSRoundRobin: the first address a name resolves to, for
	// new connections (Envoy's LOGICAL_DNS).
	ResolutionDNSRoundRobin Resolution = "DNS_ROUND_ROBIN"
)

// DNSEndpoint is one DNS name of a DNS-resolved service.
type DNSEndpoint struct {
	// Host is the name resolved.
	Host string `json:"host"`
	// Ports maps a service port name to the port on Host; a port without
	// an entry is served on the service port's number.
	Ports    map[string]uint32 `json:"ports,omitempty"`
	Locality Locality          `json:"locality"`
	// Weight is the endpoint's load-balancing weight; 0 means 1.
	Weight uint32 `json:"weight,omitempty"`
}

// TargetPort returns the port on e that serves the service port sp.
func (e *DNSEndpoint) TargetPort(sp ServicePort) uint32 {
	if p, ok := e.Ports[sp.Name]; ok && p != 0 {
		return p
	}
	return sp.Port
}

// Port returns the service port numbered p.
func (s *Service) Port(p uint32) (ServicePort, bool) {
	for _, sp := range s.Ports {
		if sp.Port == p {
			return sp, true
		}
	}
	return ServicePort{}, false
}

// Equal reports whether two services describe the same thing.
func (s *Service) Equal(o *Service) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Hostname == o.Hostname && s.Name == o.Name && s.Namespace == o.Namespace &&
		slices.Equal(s.Ports, o.Ports) && s.External == o.External && s.Resolution == o.Resolution &&
		slices.EqualFunc(s.DNSEndpoints, o.DNSEndpoints, func(a, b DNSEndpoint) bool {
			return a.Host == b.Host && a.Locality == b.Locality && a.Weight == b.Weight && mapsEqual(a.Ports, b.Ports)
		})
}

// Endpoint is one address of a service in one cluster.
type Endpoint struct {
	Cluster  ClusterID  `json:"cluster"`
	Address  netip.Addr `json:"address"`
	Locality Locality   `json:"locality"`
	// Network is the network the endpoint is on: its Pod's
	// LabelTopologyNetwork, else its cluster's network (ServiceShard.Network).
	// Empty when unknown.
	Network Network `json:"network,omitempty"`
	Ready   bool    `json:"ready"`
	// ServiceAccount is the Kubernetes service account of the backing Pod,
	// empty when the endpoint has no Pod (or the Pod is not known yet).
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// Pod names the backing Pod, when there is one.
	Pod string `json:"pod,omitempty"`
	// Labels are the backing Pod's labels, all of them (DestinationRule
	// subsets select on any key); empty when the endpoint has no Pod or the
	// Pod is not known yet. Interned: endpoints of one Deployment share them.
	Labels Labels `json:"labels,omitzero"`
	// Ports maps a service port name to the target port number on this
	// endpoint, as the EndpointSlice says.
	Ports map[string]uint32 `json:"ports"`
}

// TargetPort returns the endpoint port serving the service port sp.
func (e *Endpoint) TargetPort(sp ServicePort) (uint32, bool) {
	p, ok := e.Ports[sp.Name]
	return p, ok
}

// Key orders endpoints deterministically.
func (e *Endpoint) Key() string {
	return fmt.Sprintf("%s/%s", e.Cluster, e.Address)
}

// Equal reports whether two endpoints are the same.
func (e *Endpoint) Equal(o *Endpoint) bool {
	return e.Cluster == o.Cluster && e.Address == o.Address && e.Locality == o.Locality &&
		e.Network == o.Network && e.Ready == o.Ready && e.ServiceAccount == o.ServiceAccount && e.Pod == o.Pod &&
		e.Labels == o.Labels && mapsEqual(e.Ports, o.Ports)
}

func mapsEqual(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ServiceShard is what one cluster knows of one service: the Service itself
// and that cluster's endpoints of it. A shard is immutable once handed to a
// Registry.
type ServiceShard struct {
	Service   *Service   `json:"service"`
	Endpoints []Endpoint `json:"endpoints"`
	// Network is the network of the shard's cluster (its system
	// namespace's LabelTopologyNetwork, else the remote secret's default):
	// the network of its Pods that do not say theirs, and of the cluster's
	// proxies that do not say theirs. Empty when unknown.
	Network Network `json:"network,omitempty"`
	// Gateway, when the Service is a gateway of a network (labelled
	// LabelTopologyNetwork, with the gateway port), is what it says.
	Gateway *NetworkGateway `json:"gateway,omitempty"`
}

// Equal reports whether two shards carry the same information.
func (s *ServiceShard) Equal(o *ServiceShard) bool {
	if s == nil || o == nil {
		return s == o
	}
	if !s.Service.Equal(o.Service) || len(s.Endpoints) != len(o.Endpoints) || s.Network != o.Network || !s.Gateway.Equal(o.Gateway) {
		return false
	}
	for i := range s.Endpoints {
		if !s.Endpoints[i].Equal(&o.Endpoints[i]) {
			return false
		}
	}
	return true
}

// SortEndpoints orders endpoints by cluster and address, the canonical order
// of a shard.
func SortEndpoints(eps []Endpoint) { slices.SortFunc(eps, compareEndpoints) }

// endpointsSorted reports whether eps is in canonical order.
func endpointsSorted(eps []Endpoint) bool { return slices.IsSortedFunc(eps, compareEndpoints) }

func compareEndpoints(a, b Endpoint) int {
	if c := strings.Compare(string(a.Cluster), string(b.Cluster)); c != 0 {
		return c
	}
	return a.Address.Compare(b.Address)
}
