package xdsgen

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Interception is how a sidecar's traffic reaches Envoy: the node metadata
// INTERCEPTION_MODE that pilot-agent sends.
type Interception string

// Interception modes, as Istio names them.
const (
	// InterceptRedirect: iptables REDIRECT sends outbound traffic to
	// virtualOutbound (15001) and inbound traffic to virtualInbound (15006).
	// The default, also for an empty or unknown mode.
	InterceptRedirect Interception = "REDIRECT"
	// InterceptTProxy: like REDIRECT, with the virtual listeners transparent
	// (IP_TRANSPARENT), as the TPROXY iptables rules need. The client's source
	// address is not preserved towards the app: the inbound clusters connect
	// to 127.0.0.1, which a foreign source address cannot reach.
	InterceptTProxy Interception = "TPROXY"
	// InterceptNone: no iptables. Listeners bind for real: outbound ones on
	// 127.0.0.1:<port> (the app dials localhost), inbound ones on the pod
	// IP, and there are no virtual listeners.
	InterceptNone Interception = "NONE"
)

// Names of the sidecar resources that do not belong to one service, as
// istiod writes them.
const (
	VirtualOutboundListenerName = "virtualOutbound"
	VirtualInboundListenerName  = "virtualInbound"
	// PassthroughClusterName sends a connection on to its original
	// destination (ORIGINAL_DST): traffic to no known service.
	PassthroughClusterName = "PassthroughCluster"
	// BlackHoleClusterName has no endpoints: traffic sent there is dropped.
	BlackHoleClusterName = "BlackHoleCluster"
)

// Ports of Envoy and pilot-agent in a sidecar (Istio's defaults).
const (
	// VirtualOutboundPort receives the outbound traffic iptables redirects
	// (Istio's proxyListenPort).
	VirtualOutboundPort uint32 = 15001
	// VirtualInboundPort receives the inbound traffic iptables redirects
	// (Istio's proxyInboundListenPort).
	VirtualInboundPort uint32 = 15006
)

// reservedPorts are taken in every sidecar by Envoy or pilot-agent (admin
// 15000, the virtual listeners, debug 15004, HBONE 15008, agent 15020,
// health 15021, DNS 15053, Prometheus 15090). A listener on one of them
// would collide with the listener or socket already there, so service and
// workload ports among them get no listener (their clusters are still
// built), as istiod skips ports that conflict with its static listeners.
var reservedPorts = []uint32{15000, 15001, 15004, 15006, 15008, 15020, 15021, 15053, 15090}

func reservedPort(p uint32) bool { return slices.Contains(reservedPorts, p) }

// Sidecar describes the Envoy sidecar that resources are generated for.
type Sidecar struct {
	// IP is the pod IP, from the Istio node ID
	// sidecar~<ip>~<pod>.<ns>~<ns>.svc.cluster.local. In NONE mode the
	// inbound listeners bind to it; an invalid IP gets no inbound listener.
	IP netip.Addr
	// Namespace is the pod's namespace. The generators do not use it yet:
	// routes are shared by all sidecars, so short names cannot be resolved
	// in the client's namespace (see SidecarRoutes).
	Namespace string
	// Interception is the node's INTERCEPTION_MODE; empty means REDIRECT.
	Interception Interception
	// Inbound lists the workload ports this pod serves, sorted by port and
	// without duplicates (SidecarInbound returns it so).
	Inbound []InboundPort
	// Security is the pod's policy (istioconfig.Snapshot.Workload of its
	// namespace and labels): its PeerAuthentications decide the mutual-TLS
	// mode of each inbound port, its AuthorizationPolicies the filters of
	// the inbound chains. The zero value leaves every port to
	// Options.DefaultMTLS and adds no authorization filter.
	Security istioconfig.WorkloadSecurity
	// Scope is the Sidecar object that applies to the pod
	// (istioconfig.Snapshot.SidecarScope), nil when none does: its egress
	// hosts limit the services whose outbound listeners and clusters the
	// sidecar gets (ScopedServices), and outboundTrafficPolicy
	// REGISTRY_ONLY sends what no listener takes to BlackHoleCluster
	// instead of PassthroughCluster.
	Scope *istioconfig.Sidecar
	// Routes is the pod's RouteClass (istioconfig.Snapshot.RouteClass):
	// its outbound HTTP listeners take the routes of its RouteSet (that
	// class under its Scope, SidecarRouteSetName), which hold the
	// VirtualService matches on clients that the pod satisfies. The zero
	// value is the default class.
	Routes istioconfig.RouteClass
	// Router says the proxy is a gateway (node type router, pilot-agent
	// `proxy router`): its listeners and routes are its Gateways' and
	// its own (RouterListeners, RouterRoutes), its clusters every
	// service's (RouterClusters); it has no inbound side, scope or route
	// class.
	Router bool
	// Gateways are the Gateways that select a router, oldest first
	// (istioconfig.Snapshot.GatewaysFor its Pod's labels).
	Gateways []*istioconfig.Gateway
	// Ports are a router's Services' target ports (RouterTargetPorts).
	Ports RouterPorts
}

// Types are the types the proxy gets from caches of its own, in the
// order a push writes them: SidecarTypes, or RouterTypes for a router.
func (sc Sidecar) Types() []string {
	if sc.Router {
		return RouterTypes
	}
	return SidecarTypes
}

// ScopedServices returns, of services, those the sidecar sc sees: every
// one without a Scope, else those some egress host of the Scope names (by
// namespace and hostname), each with only the ports its egress listeners
// name (an egress listener with a port names its hosts on that port
// only; istioconfig.Sidecar.Sees). The routes of its RouteSet are scoped
// alike. It is pure; a narrowed service is a copy.
func ScopedServices(services []*model.MergedService, sc Sidecar) []*model.MergedService {
	if sc.Scope == nil {
		return services
	}
	out := make([]*model.MergedService, 0, len(services))
	for _, ms := range services {
		if ms == nil || ms.Service == nil {
			continue
		}
		svc := ms.Service
		var ports []model.ServicePort
		for _, p := range svc.Ports {
			if sc.Scope.Sees(svc.Hostname, svc.Namespace, p.Port) {
				ports = append(ports, p)
			}
		}
		switch len(ports) {
		case 0:
		case len(svc.Ports):
			out = append(out, ms)
		default:
			narrowed := *svc
			narrowed.Ports = ports
			cp := *ms
			cp.Service = &narrowed
			out = append(out, &cp)
		}
	}
	return out
}

// InboundPort is one port a sidecar's workload serves.
type InboundPort struct {
	// Port is the port connections arrive on: the container (target)
	// port the app listens on, or a Sidecar ingress listener's port.
	Port uint32
	// Protocol is that of the service port that targets it, or of the
	// ingress listener.
	Protocol model.Protocol
	// Forward is where the sidecar sends what arrives on Port; the zero
	// value is the app on 127.0.0.1:Port. An ingress listener's
	// defaultEndpoint sets it (SidecarIngress).
	Forward netip.AddrPort
	// Socket is the path of the Unix domain socket the sidecar sends to
	// instead (defaultEndpoint unix:///path).
	Socket string
	// Bind is the address the port's listener binds without interception
	// (NONE); the zero value is the pod IP (an ingress listener's bind).
	Bind netip.Addr
}

// SidecarIngress returns the ports the pod at ip serves by the ingress
// listeners of its Sidecar scope, sorted by port, and whether the scope
// has any: as in Istio, they replace the ports its Services give
// (SidecarInbound). Each forwards to its defaultEndpoint: 127.0.0.1:PORT
// or [::1]:PORT to the app on localhost, 0.0.0.0:PORT or [::]:PORT to
// the pod's own IP, unix:///path to a Unix domain socket, and when unset
// to 127.0.0.1 on the listener's port (where Istio passes the original
// destination through, which is the same app). The scope is valid
// (validate.Sidecar), so every field parses. It is pure.
func SidecarIngress(scope *istioconfig.Sidecar, ip netip.Addr) ([]InboundPort, bool) {
	if scope == nil || len(scope.Spec.GetIngress()) == 0 {
		return nil, false
	}
	var out []InboundPort
	for _, in := range scope.Spec.GetIngress() {
		n := in.GetPort().GetNumber()
		if !validPort(n) || slices.ContainsFunc(out, func(p InboundPort) bool { return p.Port == n }) {
			continue
		}
		p := InboundPort{Port: n, Protocol: istioconfig.PortProtocol(in.GetPort().GetProtocol())}
		p.Bind, _ = netip.ParseAddr(in.GetBind())
		p.Forward, p.Socket = ingressForward(in.GetDefaultEndpoint(), ip)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b InboundPort) int { return int(a.Port) - int(b.Port) })
	return out, true
}

// ingressForward parses a defaultEndpoint (see SidecarIngress): the
// address to forward to, or a socket path; both zero for the default.
func ingressForward(ep string, ip netip.Addr) (netip.AddrPort, string) {
	if path, ok := strings.CutPrefix(ep, "unix://"); ok {
		return netip.AddrPort{}, path
	}
	ap, err := netip.ParseAddrPort(ep)
	if err != nil {
		return netip.AddrPort{}, ""
	}
	if ap.Addr().IsUnspecified() {
		// The pod's own address, of the family asked for; localhost of
		// that family when the pod has none.
		to := ip.Unmap()
		if !to.IsValid() || to.Is4() != ap.Addr().Is4() {
			to = netip.IPv6Loopback()
			if ap.Addr().Is4() {
				to = netip.AddrFrom4([4]byte{127, 0, 0, 1})
			}
		}
		return netip.AddrPortFrom(to, ap.Port()), ""
	}
	return ap, ""
}

// mode returns the interception mode, REDIRECT for empty or unknown ones.
func (sc Sidecar) mode() Interception {
	switch sc.Interception {
	case InterceptTProxy, InterceptNone:
		return sc.Interception
	default:
		return InterceptRedirect
	}
}

// bindsPorts reports whether the sidecar's listeners bind sockets of their
// own (NONE) instead of receiving redirected connections.
func (sc Sidecar) bindsPorts() bool { return sc.mode() == InterceptNone }

// serves reports whether the workload listens on port.
func (sc Sidecar) serves(port uint32) bool {
	return slices.ContainsFunc(sc.Inbound, func(ip InboundPort) bool { return ip.Port == port })
}

// SidecarRouteName returns the RDS name of the outbound HTTP routes on port,
// "<port>", as istiod names them. It is pure.
func SidecarRouteName(port uint32) string { return strconv.FormatUint(uint64(port), 10) }

// RouteSet says which outbound route configurations an Envoy sidecar
// takes: those of its route class, holding the virtual hosts of the
// services its Sidecar scope's egress sees. Sidecars of equal sets share
// their routes. The zero value is the default set: no match on clients
// holds, and every service is seen.
type RouteSet struct {
	// Class is the route class (istioconfig.Snapshot.RouteClass).
	Class istioconfig.RouteClass
	// Scope is the Sidecar whose egress hosts limit the virtual hosts; nil
	// when none does (no Sidecar, or one without egress listeners).
	Scope *istioconfig.Sidecar
}

// RouteSet returns the sidecar's: its Routes class and its Scope when
// that has egress listeners.
func (sc Sidecar) RouteSet() RouteSet {
	set := RouteSet{Class: sc.Routes}
	if sc.Scope != nil && len(sc.Scope.Spec.GetEgress()) > 0 {
		set.Scope = sc.Scope
	}
	return set
}

// IsDefault reports whether s is the default set.
func (s RouteSet) IsDefault() bool { return s.Class.IsDefault() && s.Scope == nil }

// Name returns a short name of s for resource names, 16 hex digits of a
// hash of its class and its scope's key and generation; "" for the
// default set.
func (s RouteSet) Name() string {
	if s.IsDefault() {
		return ""
	}
	h := fnv.New64a()
	h.Write([]byte(s.Class.Name()))
	if s.Scope != nil {
		fmt.Fprintf(h, "|%s@%d", s.Scope.Key, s.Scope.Generation)
	}
	return strconv.FormatUint(h.Sum64()|1<<63, 16)
}

// String describes s for logs and debug documents.
func (s RouteSet) String() string {
	out := "class " + s.Class.String()
	if s.Scope != nil {
		out += ", scope " + s.Scope.Key.String()
	}
	return out
}

// SidecarRouteSetName returns the RDS resource name of the outbound routes
// of port for the Envoy sidecars of set: SidecarRouteName(port) for the
// default set, else "<port>~<set name>", e.g. "8080~9c3e55a1f0d2b7e4".
// It is pure.
func SidecarRouteSetName(port uint32, set RouteSet) string {
	if set.IsDefault() {
		return SidecarRouteName(port)
	}
	return SidecarRouteName(port) + "~" + set.Name()
}

// InboundClusterName returns the name of the cluster that reaches the local
// app on port, "inbound|<port>||". It is pure.
func InboundClusterName(port uint32) string {
	return "inbound|" + strconv.FormatUint(uint64(port), 10) + "||"
}

// SidecarListenerName returns "<bind>_<port>", istiod's name of a listener
// (or inbound filter chain) for bind address and port, e.g. "0.0.0.0_8080".
// It is pure.
func SidecarListenerName(bind string, port uint32) string {
	return bind + "_" + strconv.FormatUint(uint64(port), 10)
}

// SidecarSNI returns the SNI a sidecar sends to port of service h,
// "outbound_.<port>_._.<hostname>": SNIClusterName(h, port, ""). It is
// pure.
func SidecarSNI(h model.Hostname, port uint32) string { return SNIClusterName(h, port, "") }

// SNIClusterName returns "outbound_.<port>_.<subset>_.<hostname>" (Istio's
// DNS SRV form of the cluster name; "outbound_.<port>_._.<hostname>" for
// no subset): the SNI a sidecar
// sends to subset of port of service h under Istio mutual TLS, which an
// east-west gateway routes by without terminating TLS, and the name of
// that gateway's cluster (and load assignment) of the same endpoints on
// its own network. It is pure.
func SNIClusterName(h model.Hostname, port uint32, subset string) string {
	return "outbound_." + strconv.FormatUint(uint64(port), 10) + "_." + subset + "_." + string(h)
}

// isHTTP reports whether p is served by an HttpConnectionManager (HTTP/1.1,
// HTTP/2 or gRPC) rather than a TCP proxy.
func isHTTP(p model.Protocol) bool {
	return p == model.ProtocolHTTP || p == model.ProtocolHTTP2 || p == model.ProtocolGRPC
}

// isHTTP2 reports whether p needs HTTP/2 towards the upstream.
func isHTTP2(p model.Protocol) bool { return p == model.ProtocolHTTP2 || p == model.ProtocolGRPC }

// sortedServices returns the usable services sorted by hostname, the first
// of each hostname kept. Every sidecar generator iterates this order, which
// also decides the ties documented on them.
func sortedServices(services []*model.MergedService) []*model.MergedService {
	out := make([]*model.MergedService, 0, len(services))
	for _, ms := range services {
		if ms != nil && ms.Service != nil && ms.Service.Hostname != "" {
			out = append(out, ms)
		}
	}
	slices.SortStableFunc(out, func(a, b *model.MergedService) int {
		return strings.Compare(string(a.Service.Hostname), string(b.Service.Hostname))
	})
	return slices.CompactFunc(out, func(a, b *model.MergedService) bool {
		return a.Service.Hostname == b.Service.Hostname
	})
}

// SidecarInbound returns the ports the pod at ip in cluster serves: the
// target ports, on every endpoint of services whose cluster is cluster and
// whose address is ip (ready or not, so that a readiness flap does not
// rebuild listeners), of each service port. The result is sorted by port,
// one entry per port. When services disagree on a port's protocol, an
// HTTP-family protocol (HTTP, HTTP2, GRPC) wins over TCP, and among equals
// the service first in hostname order. It is pure.
func SidecarInbound(services []*model.MergedService, cluster model.ClusterID, ip netip.Addr) []InboundPort {
	if !ip.IsValid() {
		return nil
	}
	ip = ip.Unmap()
	var out []InboundPort
	for _, ms := range sortedServices(services) {
		ports := servicePorts(ms.Service)
		for i := range ms.Endpoints {
			e := &ms.Endpoints[i]
			if e.Cluster != cluster || e.Address.Unmap() != ip {
				continue
			}
			for _, sp := range ports {
				tp, ok := e.TargetPort(sp)
				if !ok || !validPort(tp) {
					continue
				}
				out = addInbound(out, InboundPort{Port: tp, Protocol: sp.Protocol})
			}
		}
	}
	slices.SortFunc(out, func(a, b InboundPort) int { return int(a.Port) - int(b.Port) })
	return out
}

// addInbound adds p to ports unless its port is there; an HTTP-family
// protocol replaces a TCP one.
func addInbound(ports []InboundPort, p InboundPort) []InboundPort {
	i := slices.IndexFunc(ports, func(q InboundPort) bool { return q.Port == p.Port })
	switch {
	case i < 0:
		return append(ports, p)
	case !isHTTP(ports[i].Protocol) && isHTTP(p.Protocol):
		ports[i] = p
	}
	return ports
}

// servicePortRef is one port of one service.
type servicePortRef struct {
	svc  *model.Service
	port model.ServicePort
}

// outboundPort is everything declared on one service port number: what the
// outbound listener on that port serves.
type outboundPort struct {
	port uint32
	// http are the services with an HTTP-family protocol on the port, in
	// hostname order: one virtual host each in route "<port>".
	http []servicePortRef
	// tcp are the TCP services on the port, in hostname order.
	tcp []servicePortRef
}

// isHTTP reports whether the port's listener is an HttpConnectionManager.
// HTTP wins a port shared with TCP services: it can tell services apart by
// their authority, a TCP proxy cannot.
func (p outboundPort) isHTTP() bool { return len(p.http) > 0 }

// tcpTarget is the one service a TCP listener forwards to. Without service
// VIPs (the model has none) connections to different TCP services on one
// port look alike, so the first service in hostname order takes the port.
func (p outboundPort) tcpTarget() servicePortRef { return p.tcp[0] }

// outboundPorts groups the ports of services by number, sorted, leaving out
// reserved ports.
func outboundPorts(services []*model.MergedService) []outboundPort {
	var out []outboundPort
	for _, ms := range sortedServices(services) {
		for _, sp := range servicePorts(ms.Service) {
			if reservedPort(sp.Port) {
				continue
			}
			i := slices.IndexFunc(out, func(p outboundPort) bool { return p.port == sp.Port })
			if i < 0 {
				out = append(out, outboundPort{port: sp.Port})
				i = len(out) - 1
			}
			ref := servicePortRef{svc: ms.Service, port: sp}
			if isHTTP(sp.Protocol) {
				out[i].http = append(out[i].http, ref)
			} else {
				out[i].tcp = append(out[i].tcp, ref)
			}
		}
	}
	slices.SortFunc(out, func(a, b outboundPort) int { return int(a.port) - int(b.port) })
	return out
}

// named is a resource with a name (every xDS resource type).
type named interface{ GetName() string }

// sortByName sorts resources by name, the order of every sidecar
// generator's output.
func sortByName[T named](rs []T) {
	slices.SortFunc(rs, func(a, b T) int { return strings.Compare(a.GetName(), b.GetName()) })
}
