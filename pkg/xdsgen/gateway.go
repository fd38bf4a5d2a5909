package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Gateways: what a router proxy (pilot-agent `proxy router`, an ingress
// gateway) gets from the Istio Gateways that select it and the
// VirtualServices bound to them, in istiod's shape:
//
//	LDS  0.0.0.0_<port>   one listener per server port, bound for real
//	      ├ plaintext HTTP: one chain, HCM with RDS http.<port>
//	      ├ TLS: tls_inspector, one chain per server (SNI = its hosts):
//	      │   terminated (SIMPLE, MUTUAL): DownstreamTlsContext with the
//	      │     SDS secret kubernetes://<credentialName> (and
//	      │     kubernetes://<credentialName>-cacert for MUTUAL), HCM with
//	      │     RDS https.<port>.<portName>.<gateway>.<namespace>
//	      │   PASSTHROUGH: one chain per tls[] route's SNI hosts, tcp_proxy
//	      ├ AUTO_PASSTHROUGH (east-west): tls_inspector, one chain per
//	      │   port and subset of every service the server's hosts admit,
//	      │   matching its SNI outbound_.<port>_.<subset>_.<fqdn> and
//	      │   Istio's mTLS ALPNs, tcp_proxy to the cluster of that name
//	      └ TCP: tcp_proxy by the first tcp[] route for the port
//	RDS  http.<port>, https.<port>.<portName>.<gw>.<ns>: one virtual host
//	     per host where a bound VirtualService's hosts meet a server's,
//	     the VirtualServices' HTTP rules in order, oldest first
//	CDS  every service's outbound clusters, as sidecars get them, and
//	     for AUTO_PASSTHROUGH the SNI clusters outbound_.<port>_.<subset>_.<fqdn>
//	     (plaintext: TLS passes through), whose load assignments hold
//	     the endpoints of the router's own network (ProxyGroup.EastWest)
//
// A server's port is the port of the gateway's Service: the listener binds
// its target port (RouterPorts), as istiod does.
//
// The servers of every Gateway that selects the proxy are merged by port,
// oldest Gateway first; a server whose protocol class (plaintext HTTP,
// TLS, TCP) differs from the port's first is left out with a note.

// Gateway server classes: what a port's listener does.
type serverClass int

const (
	classHTTP            serverClass = iota // plaintext HTTP (HTTP, HTTP2, GRPC, GRPC-WEB)
	classTLS                                // TLS: terminated (HTTPS, TLS) or passed through by SNI
	classTCP                                // plain TCP (and every other L4 protocol)
	classAutoPassthrough                    // AUTO_PASSTHROUGH: mesh mTLS routed by its SNI (east-west)
	classUnsupported                        // ISTIO_MUTUAL: not built here
)

// gatewayServer is one server of one Gateway.
type gatewayServer struct {
	gw    *istioconfig.Gateway
	index int
	srv   *networking.Server
	hosts []istioconfig.ServerHost
}

func (s gatewayServer) path() string { return fmt.Sprintf("spec.servers[%d]", s.index) }

func (s gatewayServer) tlsMode() networking.ServerTLSSettings_TLSmode {
	return s.srv.GetTls().GetMode()
}

func (s gatewayServer) terminates() bool {
	switch s.tlsMode() {
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
		return true
	}
	return false
}

func (s gatewayServer) class() serverClass {
	switch istioconfig.ClassOf(s.srv) {
	case istioconfig.ClassHTTP:
		return classHTTP
	case istioconfig.ClassTLS:
		switch s.tlsMode() {
		case networking.ServerTLSSettings_AUTO_PASSTHROUGH:
			return classAutoPassthrough
		case networking.ServerTLSSettings_ISTIO_MUTUAL:
			return classUnsupported
		}
		return classTLS
	}
	return classTCP
}

// gatewayPort is one listener of a router: the servers on its port.
type gatewayPort struct {
	port    uint32
	class   serverClass
	servers []gatewayServer
}

// GatewayNote says what of a Gateway a router proxy does not get, and why.
type GatewayNote struct {
	Object istioconfig.Key `json:"object"`
	Field  string          `json:"field"`
	Reason string          `json:"reason"`
}

func (n GatewayNote) String() string { return n.Object.String() + " " + n.Field + ": " + n.Reason }

// gatewayPorts merges the servers of gws (oldest first) by port.
func gatewayPorts(gws []*istioconfig.Gateway) ([]gatewayPort, []GatewayNote) {
	var ports []gatewayPort
	var notes []GatewayNote
	byPort := map[uint32]int{}
	for _, gw := range gws {
		for i, srv := range gw.Spec.GetServers() {
			s := gatewayServer{gw: gw, index: i, srv: srv, hosts: gw.ServerHosts(srv)}
			c := s.class()
			n := srv.GetPort().GetNumber()
			switch {
			case c == classUnsupported:
				notes = append(notes, GatewayNote{gw.Key, s.path() + ".tls.mode",
					fmt.Sprintf("%s servers are not served to gateways yet; server left out", s.tlsMode())})
				continue
			case !validPort(n) || reservedPort(n):
				notes = append(notes, GatewayNote{gw.Key, s.path() + ".port.number",
					fmt.Sprintf("port %d is taken by Envoy or pilot-agent; server left out", n)})
				continue
			}
			k, ok := byPort[n]
			if !ok {
				byPort[n] = len(ports)
				ports = append(ports, gatewayPort{port: n, class: c, servers: []gatewayServer{s}})
				continue
			}
			p := &ports[k]
			if p.class != c {
				first := p.servers[0]
				notes = append(notes, GatewayNote{gw.Key, s.path() + ".port",
					fmt.Sprintf("port %d is %s's, which %s %s with protocol %s; server left out",
						n, first.gw.Key, first.path(), "serves it", first.srv.GetPort().GetProtocol())})
				continue
			}
			p.servers = append(p.servers, s)
		}
	}
	slices.SortFunc(ports, func(a, b gatewayPort) int { return int(a.port) - int(b.port) })
	return ports, notes
}

// RouterPorts maps the ports of a router's Services to the ports its Pod
// serves them on (their target ports), where they differ: a server of a
// Gateway on port 80 of a Service whose targetPort is 8080 is a listener
// on 8080, as istiod binds it.
type RouterPorts map[uint32]uint32

// Bind is the port a server on port listens on.
func (r RouterPorts) Bind(port uint32) uint32 {
	if t, ok := r[port]; ok {
		return t
	}
	return port
}

// RouterTargetPorts returns the target ports of the Services whose
// endpoints include the router at ip in cluster (RouterPorts).
func RouterTargetPorts(services []*model.MergedService, cluster model.ClusterID, ip netip.Addr) RouterPorts {
	var out RouterPorts
	ip = ip.Unmap()
	for _, ms := range services {
		for i := range ms.Endpoints {
			e := &ms.Endpoints[i]
			if e.Cluster != cluster || e.Address.Unmap() != ip {
				continue
			}
			for _, sp := range ms.Service.Ports {
				if t := e.Ports[sp.Name]; t != 0 && t != sp.Port && validPort(t) {
					if out == nil {
						out = RouterPorts{}
					}
					out[sp.Port] = t
				}
			}
		}
	}
	return out
}

// GatewayHTTPRouteName is the name of the route configuration of a
// router's plaintext HTTP listener on port: "http.<port>", istiod's (the
// port the listener binds).
func GatewayHTTPRouteName(port uint32) string { return "http." + strconv.FormatUint(uint64(port), 10) }

// GatewayHTTPSRouteName is the name of the route configuration of the
// HTTPS server named portName of Gateway gw on port:
// "https.<port>.<portName>.<gw name>.<gw namespace>", istiod's.
func GatewayHTTPSRouteName(port uint32, portName string, gw istioconfig.Key) string {
	return "https." + strconv.FormatUint(uint64(port), 10) + "." + portName + "." + gw.Name + "." + gw.Namespace
}

// gatewayInputs is what a router's resources are generated from besides
// the services: its Gateways, under a configuration.
type gatewayInputs struct {
	gws      []*istioconfig.Gateway
	cfg      *istioconfig.Snapshot
	services map[model.Hostname]*model.Service
	opts     Options
}

func newGatewayInputs(gws []*istioconfig.Gateway, services []*model.MergedService, cfg *istioconfig.Snapshot, opts Options) *gatewayInputs {
	in := &gatewayInputs{gws: gws, cfg: cfg, opts: opts, services: make(map[model.Hostname]*model.Service, len(services))}
	for _, ms := range services {
		if ms != nil && ms.Service != nil {
			in.services[ms.Service.Hostname] = ms.Service
		}
	}
	return in
}

// RouterListeners returns the listeners of a router proxy selected by
// gws (oldest first) under cfg, sorted by name, and the notes on what of
// the Gateways it does not get. It is pure.
func RouterListeners(gws []*istioconfig.Gateway, ports RouterPorts, services []*model.MergedService, cfg *istioconfig.Snapshot, opts Options) ([]*listenerv3.Listener, []GatewayNote) {
	in := newGatewayInputs(gws, services, cfg, opts)
	served, notes := gatewayPorts(gws)
	var out []*listenerv3.Listener
	for _, p := range served {
		var chains []*listenerv3.FilterChain
		var filters []*listenerv3.ListenerFilter
		bind := ports.Bind(p.port)
		switch p.class {
		case classHTTP:
			chains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{gatewayHCM(bind, GatewayHTTPRouteName(bind))}}}
		case classTLS:
			chains = in.tlsChains(p)
			filters = []*listenerv3.ListenerFilter{tlsInspector()}
		case classTCP:
			if f := in.tcpFilter(p); f != nil {
				chains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{f}}}
			}
		case classAutoPassthrough:
			chains = in.autoPassthroughChains(p)
			filters = []*listenerv3.ListenerFilter{tlsInspector()}
		}
		if len(chains) == 0 {
			// Envoy refuses a listener without a chain; nothing routes
			// there yet.
			continue
		}
		out = append(out, &listenerv3.Listener{
			Name:             SidecarListenerName(wildcard, bind),
			Address:          socketAddress(wildcard, bind),
			ListenerFilters:  filters,
			FilterChains:     chains,
			TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		})
	}
	sortByName(out)
	return out, notes
}

// gatewayHCM is the HTTP connection manager of a gateway's HTTP chain: as
// a sidecar's, but the client is the connection's peer
// (use_remote_address: the gateway is the edge), the Host header's port is
// ignored when matching virtual hosts (strip_any_host_port: a virtual
// host's domain is the bare host, wildcards included), with the fault and
// CORS filters VirtualService routes may configure, and RDS routes.
func gatewayHCM(port uint32, routeName string) *listenerv3.Filter {
	hcm := sidecarHCM("outbound_" + SidecarListenerName(wildcard, port))
	hcm.UseRemoteAddress = wrapperspb.Bool(true)
	hcm.StripPortMode = &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true}
	hcm.HttpFilters = append([]*hcmv3.HttpFilter{faultFilter(), corsFilter()}, hcm.HttpFilters...)
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
		ConfigSource:    adsWaitingConfigSource(),
		RouteConfigName: routeName,
	}}
	return networkFilter(filterHCM, hcm)
}

// sniHosts are the server names a chain of server s matches: its hosts,
// none when one of them is "*" (every name).
func (s gatewayServer) sniHosts() []string {
	var out []string
	for _, h := range s.hosts {
		if h.Host == "*" {
			return nil
		}
		if !slices.Contains(out, h.Host) {
			out = append(out, h.Host)
		}
	}
	return out
}

// tlsChains are the chains of a TLS port: per terminating server one,
// by its hosts; per PASSTHROUGH server one per tls[] route's SNI hosts.
// A chain whose match an earlier one has is left out (Envoy refuses the
// listener otherwise).
func (in *gatewayInputs) tlsChains(p gatewayPort) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	seen := map[string]bool{}
	add := func(names []string, fc *listenerv3.FilterChain) {
		key := strings.Join(slices.Sorted(slices.Values(names)), ",")
		if seen[key] {
			return
		}
		seen[key] = true
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: names}
		out = append(out, fc)
	}
	for _, s := range p.servers {
		if s.terminates() {
			fc := &listenerv3.FilterChain{
				TransportSocket: gatewayTLS(s.srv.GetTls()),
				Filters:         []*listenerv3.Filter{gatewayHCM(p.port, GatewayHTTPSRouteName(p.port, s.srv.GetPort().GetName(), s.gw.Key))},
			}
			add(s.sniHosts(), fc)
			continue
		}
		for _, vs := range in.cfg.GatewayRoutes(s.gw.Key) {
			for _, r := range vs.Spec.GetTls() {
				names, ok := in.tlsRouteSNI(s, vs, r, p.port)
				if !ok {
					continue
				}
				f := l4Filter(vs, r.GetRoute(), p.port, in.cfg.DomainSuffix(), in.onlyPort)
				if f == nil {
					continue
				}
				add(names, &listenerv3.FilterChain{Filters: []*listenerv3.Filter{f}})
			}
		}
	}
	return out
}

// tlsRouteSNI returns the SNI names a tls[] route r of vs takes on server
// s of port: those of its matches for this gateway and port that meet
// s's hosts.
func (in *gatewayInputs) tlsRouteSNI(s gatewayServer, vs *istioconfig.VirtualService, r *networking.TLSRoute, port uint32) ([]string, bool) {
	var names []string
	for _, m := range r.GetMatch() {
		if (m.GetPort() != 0 && m.GetPort() != port) || !appliesToGateway(m.GetGateways(), vs.Namespace, s.gw.Key) {
			continue
		}
		for _, sni := range m.GetSniHosts() {
			for _, h := range s.hosts {
				if !h.Admits(vs.Namespace) {
					continue
				}
				if name, ok := istioconfig.HostIntersection(sni, h.Host); ok && !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
	}
	return names, len(names) > 0
}

// tcpFilter is the tcp_proxy of a TCP port: the first tcp[] route, of
// the VirtualServices bound to its servers' Gateways (oldest first),
// whose match takes the port; nil when none does.
func (in *gatewayInputs) tcpFilter(p gatewayPort) *listenerv3.Filter {
	for _, s := range p.servers {
		for _, vs := range in.cfg.GatewayRoutes(s.gw.Key) {
			if !s.admitsAny(vs) {
				continue
			}
			for _, r := range vs.Spec.GetTcp() {
				if !tcpRouteTakes(r, vs.Namespace, s.gw.Key, p.port) {
					continue
				}
				if f := l4Filter(vs, r.GetRoute(), p.port, in.cfg.DomainSuffix(), in.onlyPort); f != nil {
					return f
				}
			}
		}
	}
	return nil
}

// tcpRouteTakes reports whether a tcp[] route takes connections on port
// of gateway gw: it has no match, or one for the port and gateway.
func tcpRouteTakes(r *networking.TCPRoute, vsNS string, gw istioconfig.Key, port uint32) bool {
	if len(r.GetMatch()) == 0 {
		return true
	}
	for _, m := range r.GetMatch() {
		if (m.GetPort() == 0 || m.GetPort() == port) && appliesToGateway(m.GetGateways(), vsNS, gw) {
			return true
		}
	}
	return false
}

// admitsAny reports whether one of vs's hosts meets one of s's hosts that
// vs's namespace may bind to.
func (s gatewayServer) admitsAny(vs *istioconfig.VirtualService) bool {
	for _, h := range s.hosts {
		if !h.Admits(vs.Namespace) {
			continue
		}
		for _, vh := range vs.Spec.GetHosts() {
			if _, ok := istioconfig.HostIntersection(vh, h.Host); ok {
				return true
			}
		}
	}
	return false
}

// appliesToGateway reports whether a match naming gateways (as written in
// a VirtualService of namespace ns) applies to gateway gw: it names none
// (the VirtualService's own gateways hold), or gw among them.
func appliesToGateway(gateways []string, ns string, gw istioconfig.Key) bool {
	if len(gateways) == 0 {
		return true
	}
	for _, name := range gateways {
		if k, ok := istioconfig.GatewayKey(name, ns); ok && k == gw {
			return true
		}
	}
	return false
}

// onlyPort is the only port of service h, else def.
func (in *gatewayInputs) onlyPort(h model.Hostname, def uint32) uint32 {
	if svc := in.services[h]; svc != nil && len(svc.Ports) == 1 {
		return svc.Ports[0].Port
	}
	return def
}

// gatewayTLS is the transport socket of a chain terminating TLS under
// a server's tls: the certificate of the SDS secret
// kubernetes://<credentialName> (which pilot-agent forwards to the hub),
// for MUTUAL and OPTIONAL_MUTUAL the client CA of
// kubernetes://<credentialName>-cacert, client certificates required for
// MUTUAL; ALPN h2 and http/1.1; the server's minimum and maximum TLS
// versions and cipher suites.
func gatewayTLS(t *networking.ServerTLSSettings) *corev3.TransportSocket {
	name := sdsSecretPrefix + t.GetCredentialName()
	common := &tlsv3.CommonTlsContext{
		AlpnProtocols:                  []string{"h2", "http/1.1"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{adsSecret(name)},
	}
	if p := tlsParams(t); p != nil {
		common.TlsParams = p
	}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
	switch t.GetMode() {
	case networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
		validation := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(t.GetSubjectAltNames())}
		common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         validation,
				ValidationContextSdsSecretConfig: adsSecret(name + sdsCACertSuffix),
			},
		}
		ctx.RequireClientCertificate = wrapperspb.Bool(t.GetMode() == networking.ServerTLSSettings_MUTUAL)
	}
	return &corev3.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// tlsParams are a server's TLS versions and cipher suites, nil for
// Envoy's defaults.
func tlsParams(t *networking.ServerTLSSettings) *tlsv3.TlsParameters {
	versions := map[networking.ServerTLSSettings_TLSProtocol]tlsv3.TlsParameters_TlsProtocol{
		networking.ServerTLSSettings_TLSV1_0: tlsv3.TlsParameters_TLSv1_0,
		networking.ServerTLSSettings_TLSV1_1: tlsv3.TlsParameters_TLSv1_1,
		networking.ServerTLSSettings_TLSV1_2: tlsv3.TlsParameters_TLSv1_2,
		networking.ServerTLSSettings_TLSV1_3: tlsv3.TlsParameters_TLSv1_3,
	}
	p := &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: versions[t.GetMinProtocolVersion()],
		TlsMaximumProtocolVersion: versions[t.GetMaxProtocolVersion()],
		CipherSuites:              t.GetCipherSuites(),
	}
	if p.TlsMinimumProtocolVersion == 0 && p.TlsMaximumProtocolVersion == 0 && len(p.CipherSuites) == 0 {
		return nil
	}
	return p
}

// RouterRoutes returns the route configurations of a router proxy
// selected by gws under cfg, sorted by name: http.<port> for each
// plaintext HTTP port, https.<port>.<portName>.<gw>.<ns> for each
// terminating server; each with one virtual host per host where a bound
// VirtualService's hosts meet a server's (by the server's namespace
// rule), holding the routes of those VirtualServices in order, oldest
// first. A server with httpsRedirect redirects its hosts' plaintext
// requests to HTTPS. It is pure.
func RouterRoutes(gws []*istioconfig.Gateway, ports RouterPorts, services []*model.MergedService, cfg *istioconfig.Snapshot, opts Options) []*routev3.RouteConfiguration {
	in := newGatewayInputs(gws, services, cfg, opts)
	served, _ := gatewayPorts(gws)
	var out []*routev3.RouteConfiguration
	for _, p := range served {
		switch p.class {
		case classHTTP:
			out = append(out, in.routeConfig(GatewayHTTPRouteName(ports.Bind(p.port)), p.port, p.servers))
		case classTLS:
			for _, s := range p.servers {
				if s.terminates() {
					out = append(out, in.routeConfig(GatewayHTTPSRouteName(p.port, s.srv.GetPort().GetName(), s.gw.Key), p.port, []gatewayServer{s}))
				}
			}
		}
	}
	sortByName(out)
	return out
}

// gatewayHost is one virtual host of a gateway route configuration.
type gatewayHost struct {
	vh       *routev3.VirtualHost
	catchAll bool // a route matches every request: later ones are unreachable
}

// routeConfig is the route configuration of servers on port.
func (in *gatewayInputs) routeConfig(name string, port uint32, servers []gatewayServer) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)}
	hosts := map[string]*gatewayHost{}
	var order []string
	for _, s := range servers {
		redirect := s.srv.GetTls().GetHttpsRedirect()
		for _, vs := range in.cfg.GatewayRoutes(s.gw.Key) {
			if len(vs.Spec.GetHttp()) == 0 {
				continue
			}
			for _, domain := range vsServerHosts(vs, s, in.cfg.DomainSuffix()) {
				gh := hosts[domain]
				if gh == nil {
					gh = &gatewayHost{vh: &routev3.VirtualHost{
						Name:    domain + ":" + strconv.FormatUint(uint64(port), 10),
						Domains: []string{domain},
					}}
					if redirect {
						gh.vh.RequireTls = routev3.VirtualHost_ALL
					}
					hosts[domain] = gh
					order = append(order, domain)
				}
				if gh.catchAll {
					continue
				}
				routes, catchAll := in.httpRoutes(vs, s.gw.Key, port)
				gh.vh.Routes = append(gh.vh.Routes, routes...)
				gh.catchAll = catchAll
			}
		}
	}
	for _, d := range order {
		if gh := hosts[d]; len(gh.vh.Routes) > 0 || gh.vh.RequireTls != routev3.VirtualHost_NONE {
			rc.VirtualHosts = append(rc.VirtualHosts, gh.vh)
		}
	}
	slices.SortFunc(rc.VirtualHosts, func(a, b *routev3.VirtualHost) int { return strings.Compare(a.Name, b.Name) })
	return rc
}

// vsServerHosts returns the hosts where vs's hosts meet server s's, for
// the server hosts vs's namespace may bind to, in vs's order.
func vsServerHosts(vs *istioconfig.VirtualService, s gatewayServer, domainSuffix string) []string {
	var out []string
	for _, vh := range vs.Spec.GetHosts() {
		host := string(istioconfig.ResolveHost(vh, vs.Namespace, domainSuffix))
		for _, h := range s.hosts {
			if !h.Admits(vs.Namespace) {
				continue
			}
			if name, ok := istioconfig.HostIntersection(host, h.Host); ok && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// httpRoutes translates the HTTP rules of vs for gateway gw on port, and
// reports whether a route matches every request.
func (in *gatewayInputs) httpRoutes(vs *istioconfig.VirtualService, gw istioconfig.Key, port uint32) ([]*routev3.Route, bool) {
	t := &translator{kind: ProxyRouter, can: ProxyRouter.Can(), port: port, vs: vs,
		domainSuffix: in.cfg.DomainSuffix(), gateway: gw, destPort: in.onlyPort,
		drs: func(d model.Hostname) *istioconfig.DestinationRule { return in.cfg.Host(d).DestinationRule }}
	var out []*routev3.Route
	for i, rule := range vs.Spec.GetHttp() {
		routes, catchAll := t.rule(fmt.Sprintf("spec.http[%d]", i), rule)
		out = append(out, routes...)
		if catchAll {
			return out, true
		}
	}
	return out, false
}

// RouterClusters returns the clusters of a router proxy selected by gws:
// every service's outbound clusters, as a sidecar without a Sidecar scope
// gets them, with auto mTLS to sidecar backends, and the SNI clusters of
// its AUTO_PASSTHROUGH servers (sniClusters). It is pure.
func RouterClusters(gws []*istioconfig.Gateway, services []*model.MergedService, cfg *istioconfig.Snapshot, opts Options) []*clusterv3.Cluster {
	out := SidecarClusters(services, cfg, Sidecar{}, opts)
	served, _ := gatewayPorts(gws)
	in := newGatewayInputs(gws, services, cfg, opts)
	seen := map[string]bool{}
	for _, p := range served {
		if p.class != classAutoPassthrough {
			continue
		}
		for _, sc := range in.sniClusters(p) {
			if !seen[sc.name] {
				seen[sc.name] = true
				// Plaintext: the client's TLS passes through untouched.
				out = append(out, edsCluster(sc.name))
			}
		}
	}
	sortByName(out)
	return out
}

// AutoPassthrough reports whether a server of gws is AUTO_PASSTHROUGH:
// a router they select gets SNI clusters.
func AutoPassthrough(gws []*istioconfig.Gateway) bool {
	served, _ := gatewayPorts(gws)
	return slices.ContainsFunc(served, func(p gatewayPort) bool { return p.class == classAutoPassthrough })
}

// alpnMeshTLS are the ALPNs of Istio's mutual TLS between proxies, which
// an AUTO_PASSTHROUGH chain requires: a gateway passes only the mesh's own
// traffic. Proxyless gRPC offers only "h2" (alpnH2), accepted on gRPC and
// HTTP/2 ports.
var (
	alpnMeshTLS = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}
	alpnMeshH2  = append(slices.Clone(alpnMeshTLS), "h2")
)

// sniTarget is one SNI cluster an AUTO_PASSTHROUGH port routes to.
type sniTarget struct {
	name string
	h2   bool // an HTTP/2 or gRPC port
}

// sniClusters returns the SNI clusters (SNIClusterName) of every port and
// subset of every service a server of p admits (its hosts meet the
// service's hostname, in a namespace the host admits), sorted by name. A
// service outside the mesh or resolved by DNS has none: it has no
// endpoints on the router's network to pass to.
func (in *gatewayInputs) sniClusters(p gatewayPort) []sniTarget {
	var out []sniTarget
	for h, svc := range in.services {
		if svc.External || dnsResolved(svc) || !in.admits(p, svc) {
			continue
		}
		subsets := append([]string{""}, subsetNames(in.cfg.Host(h).DestinationRule)...)
		for _, sp := range servicePorts(svc) {
			for _, s := range subsets {
				out = append(out, sniTarget{name: SNIClusterName(h, sp.Port, s), h2: isHTTP2(sp.Protocol)})
			}
		}
	}
	slices.SortFunc(out, func(a, b sniTarget) int { return strings.Compare(a.name, b.name) })
	return out
}

// admits reports whether a server of p admits svc.
func (in *gatewayInputs) admits(p gatewayPort, svc *model.Service) bool {
	for _, s := range p.servers {
		for _, h := range s.hosts {
			if _, ok := istioconfig.HostIntersection(string(svc.Hostname), h.Host); ok && h.Admits(svc.Namespace) {
				return true
			}
		}
	}
	return false
}

// autoPassthroughChains are the chains of an AUTO_PASSTHROUGH port: one
// per SNI cluster, matching its name and the mesh's ALPNs over TLS, each a
// tcp_proxy to that cluster.
func (in *gatewayInputs) autoPassthroughChains(p gatewayPort) []*listenerv3.FilterChain {
	targets := in.sniClusters(p)
	out := make([]*listenerv3.FilterChain, 0, len(targets))
	for _, t := range targets {
		alpn := alpnMeshTLS
		if t.h2 {
			alpn = alpnMeshH2
		}
		out = append(out, &listenerv3.FilterChain{
			Name: t.name,
			FilterChainMatch: &listenerv3.FilterChainMatch{
				ServerNames:          []string{t.name},
				TransportProtocol:    "tls",
				ApplicationProtocols: slices.Clone(alpn),
			},
			Filters: []*listenerv3.Filter{tcpProxy(t.name)},
		})
	}
	return out
}
