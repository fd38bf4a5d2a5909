package xdsgen

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	originaldstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Names of the upstream Envoy extensions the sidecar listeners use (and
// no other: Istio's own filters do not exist in upstream Envoy).
const (
	filterHCM          = "envoy.filters.network.http_connection_manager"
	filterTCPProxy     = "envoy.filters.network.tcp_proxy"
	filterOriginalDst  = "envoy.filters.listener.original_dst"
	filterTLSInspector = "envoy.filters.listener.tls_inspector"
)

// Addresses the sidecar listeners use.
const (
	wildcard = "0.0.0.0"
	// transportProtocolTLS is what the TLS inspector reports for a TLS
	// ClientHello.
	transportProtocolTLS = "tls"
	// transportProtocolRaw is what it reports for anything else.
	transportProtocolRaw = "raw_buffer"
	// plaintextChainSuffix names the plaintext chain of a PERMISSIVE port
	// apart from its TLS chain: Envoy's API asks for names unique per
	// listener (Envoy 1.40 itself accepts duplicates, but a
	// filter_chain_matcher or a config dump could not tell them apart).
	plaintextChainSuffix = "-plaintext"
)

// SidecarListeners returns the listeners of an Envoy sidecar, sorted by
// name.
//
// Outbound, one listener per service port number of the services the
// sidecar sees (ScopedServices; reserved ports excepted): a port with an
// HTTP-family service gets an
// HttpConnectionManager that fetches route SidecarRouteSetName(port,
// sc.RouteSet()) over ADS and routes by authority, with the fault and CORS filters (inert unless
// a VirtualService route configures them) before the router; a port with only TCP services gets a TCP proxy
// to the first of them in hostname order (see outboundPort.tcpTarget). In
// REDIRECT and TPROXY mode the listeners are "0.0.0.0_<port>", not bound
// (bind_to_port false): virtualOutbound on 0.0.0.0:15001 accepts what
// iptables redirects and hands each connection to the listener of its
// original destination port (use_original_dst), or passes it through to
// PassthroughClusterName (BlackHoleClusterName under a Sidecar with
// outboundTrafficPolicy REGISTRY_ONLY; connections to 15001 itself go to
// BlackHoleClusterName, which breaks loops). In NONE mode the listeners
// bind for real on 127.0.0.1:<port> ("127.0.0.1_<port>", the app dials
// localhost) and there is no virtual listener; a port that the workload
// itself serves (sc.Inbound) gets no outbound listener there, because the
// app holds 127.0.0.1:<port>.
//
// Inbound, filter chains per sc.Inbound port (reserved ones excepted):
// HTTP-family ports an HttpConnectionManager to InboundClusterName(port)
// that sets x-forwarded-client-cert to the client's SPIFFE ID (and drops
// one the client sent), with the HTTP filters of
// AuthzHTTPFilters(sc.Security.AuthorizationPolicies, ProxyEnvoy, opts)
// before the router; TCP ports a TCP proxy to it, after the network
// filters of AuthzNetworkFilters. In REDIRECT and TPROXY mode the chains,
// named "0.0.0.0_<port>" and matched by destination port, belong to
// virtualInbound on 0.0.0.0:15006, whose original_dst listener filter
// restores the address iptables rewrote (use_original_dst is not set: it
// would hand inbound connections to the outbound listeners of the same
// port). In NONE mode each port is a listener "<ip>_<port>" bound on
// sc.IP:<port>; none when sc.IP is invalid.
//
// The mutual-TLS mode of a port, sc.Security.MTLS(port, opts.DefaultMTLS())
// (the PeerAuthentications of the pod, else the hub's default), decides
// its chains. STRICT: one chain that requires Istio mutual TLS, matched on
// transport "tls", so a plaintext connection matches no chain and is
// closed. DISABLE: one plaintext chain that matches any transport.
// PERMISSIVE: both, the TLS chain and a plaintext one named
// "<chain>-plaintext" that matches transport "raw_buffer". A listener with
// a chain that matches on transport has the TLS inspector. TPROXY differs
// from REDIRECT only in the virtual listeners being transparent.
//
// It is pure.
func SidecarListeners(services []*model.MergedService, sc Sidecar, opts Options) []*listenerv3.Listener {
	return SidecarListenersWith(services, nil, sc, opts)
}

// SidecarListenersWith is SidecarListeners under config: the outbound
// listener of a non-HTTP port follows the tcp[] and tls[] rules of its
// service's VirtualService (sidecar_l4.go). It is pure.
func SidecarListenersWith(services []*model.MergedService, config *istioconfig.Snapshot, sc Sidecar, opts Options) []*listenerv3.Listener {
	var out []*listenerv3.Listener
	for _, p := range outboundPorts(ScopedServices(services, sc)) {
		if sc.bindsPorts() && sc.serves(p.port) {
			continue
		}
		out = append(out, outboundListener(p, config, sc))
	}
	out = append(out, inboundListeners(sc, opts)...)
	if !sc.bindsPorts() {
		out = append(out, virtualOutboundListener(sc))
	}
	sortByName(out)
	return out
}

// outboundListener is the listener of one service port number.
func outboundListener(p outboundPort, config *istioconfig.Snapshot, sc Sidecar) *listenerv3.Listener {
	bind := wildcard
	if sc.bindsPorts() {
		bind = localhost
	}
	name := SidecarListenerName(bind, p.port)
	var filter *listenerv3.Filter
	if p.isHTTP() {
		hcm := sidecarHCM("outbound_" + name)
		// VirtualService routes may configure fault injection and CORS.
		hcm.HttpFilters = append([]*hcmv3.HttpFilter{faultFilter(), corsFilter()}, hcm.HttpFilters...)
		hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsWaitingConfigSource(),
			RouteConfigName: SidecarRouteSetName(p.port, sc.RouteSet()),
		}}
		filter = networkFilter(filterHCM, hcm)
	} else {
		filter = sidecarTCPFilter(p.tcpTarget(), config)
	}
	l := &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress(bind, p.port),
		FilterChains:     []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{filter}}},
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
	if !p.isHTTP() {
		if chains := sidecarTLSChains(p.tcpTarget(), config); len(chains) > 0 {
			// By SNI first; other names (and plaintext) take the default.
			l.ListenerFilters = []*listenerv3.ListenerFilter{tlsInspector()}
			l.FilterChains = append(chains, l.FilterChains...)
		}
	}
	if !sc.bindsPorts() {
		l.BindToPort = wrapperspb.Bool(false)
	}
	return l
}

// virtualOutboundListener receives the outbound connections iptables
// redirects to 15001 and hands each to the listener of its original
// destination; what no listener takes is passed through (or refused, see
// catchAllCluster).
func virtualOutboundListener(sc Sidecar) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:           VirtualOutboundListenerName,
		Address:        socketAddress(wildcard, VirtualOutboundPort),
		UseOriginalDst: wrapperspb.Bool(true),
		Transparent:    transparent(sc),
		FilterChains: []*listenerv3.FilterChain{
			{
				// A connection whose destination was 15001 itself would
				// loop back here through the passthrough.
				Name:             VirtualOutboundListenerName + "-blackhole",
				FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualOutboundPort)},
				Filters:          []*listenerv3.Filter{tcpProxy(BlackHoleClusterName)},
			},
			{
				Name:    VirtualOutboundListenerName + "-catchall-tcp",
				Filters: []*listenerv3.Filter{tcpProxy(catchAllCluster(sc))},
			},
		},
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
}

// catchAllCluster is where virtualOutbound sends a connection no listener
// takes: PassthroughCluster, or BlackHoleCluster when the pod's Sidecar
// says outboundTrafficPolicy REGISTRY_ONLY.
func catchAllCluster(sc Sidecar) string {
	if sc.Scope.OutboundRegistryOnly() {
		return BlackHoleClusterName
	}
	return PassthroughClusterName
}

// transparent is the Transparent setting of the virtual listeners.
func transparent(sc Sidecar) *wrapperspb.BoolValue {
	if sc.mode() == InterceptTProxy {
		return wrapperspb.Bool(true)
	}
	return nil
}

// inboundListeners are virtualInbound (REDIRECT, TPROXY) or one bound
// listener per inbound port (NONE).
func inboundListeners(sc Sidecar, opts Options) []*listenerv3.Listener {
	var ports []InboundPort
	for _, p := range sc.Inbound {
		if validPort(p.Port) && !reservedPort(p.Port) {
			ports = append(ports, p)
		}
	}
	az := sidecarInboundAuthz(sc, opts)
	if !sc.bindsPorts() {
		return []*listenerv3.Listener{virtualInboundListener(sc, ports, az, opts)}
	}
	if !sc.IP.IsValid() {
		return nil
	}
	out := make([]*listenerv3.Listener, 0, len(ports))
	for _, p := range ports {
		bind := sc.IP
		if p.Bind.IsValid() {
			bind = p.Bind
		}
		ip := bind.Unmap().WithZone("").String()
		name := SidecarListenerName(ip, p.Port)
		l := &listenerv3.Listener{
			Name:             name,
			Address:          socketAddress(ip, p.Port),
			FilterChains:     inboundChains(name, p, sc.Security.MTLS(p.Port, opts.DefaultMTLS()), az),
			TrafficDirection: corev3.TrafficDirection_INBOUND,
		}
		if matchesTransport(l.FilterChains) {
			l.ListenerFilters = []*listenerv3.ListenerFilter{tlsInspector()}
		}
		out = append(out, l)
	}
	return out
}

// virtualInboundListener receives the inbound connections iptables
// redirects to 15006, with the filter chains of each workload port.
func virtualInboundListener(sc Sidecar, ports []InboundPort, az inboundAuthz, opts Options) *listenerv3.Listener {
	l := &listenerv3.Listener{
		Name:             VirtualInboundListenerName,
		Address:          socketAddress(wildcard, VirtualInboundPort),
		Transparent:      transparent(sc),
		ListenerFilters:  []*listenerv3.ListenerFilter{listenerFilter(filterOriginalDst, &originaldstv3.OriginalDst{})},
		TrafficDirection: corev3.TrafficDirection_INBOUND,
	}
	for _, p := range ports {
		for _, fc := range inboundChains(SidecarListenerName(wildcard, p.Port), p, sc.Security.MTLS(p.Port, opts.DefaultMTLS()), az) {
			if fc.FilterChainMatch == nil {
				fc.FilterChainMatch = &listenerv3.FilterChainMatch{}
			}
			fc.FilterChainMatch.DestinationPort = wrapperspb.UInt32(p.Port)
			l.FilterChains = append(l.FilterChains, fc)
		}
	}
	if matchesTransport(l.FilterChains) {
		l.ListenerFilters = append(l.ListenerFilters, tlsInspector())
	}
	if len(l.FilterChains) == 0 {
		// Envoy rejects a listener without filter chains.
		l.FilterChains = []*listenerv3.FilterChain{{
			Name:    VirtualInboundListenerName + "-blackhole",
			Filters: []*listenerv3.Filter{tcpProxy(BlackHoleClusterName)},
		}}
	}
	return l
}

// inboundAuthz holds the authorization filters of a sidecar's inbound
// chains, built once per sidecar.
type inboundAuthz struct {
	http    []*hcmv3.HttpFilter  // before the router of HTTP chains
	network []*listenerv3.Filter // before the TCP proxy of TCP chains
}

func sidecarInboundAuthz(sc Sidecar, opts Options) inboundAuthz {
	ps := sc.Security.AuthorizationPolicies
	return inboundAuthz{http: AuthzHTTPFilters(ps, ProxyEnvoy, opts), network: AuthzNetworkFilters(ps, opts)}
}

// inboundChains are the filter chains that serve workload port p in mode:
// one TLS chain named name (STRICT), one plaintext chain named name
// (DISABLE), or both, the plaintext one named name+plaintextChainSuffix and
// matched on transport "raw_buffer" (PERMISSIVE). Any other mode is taken
// as STRICT: an unknown mode must not open a port to plaintext.
func inboundChains(name string, p InboundPort, mode istioconfig.MTLSMode, az inboundAuthz) []*listenerv3.FilterChain {
	switch mode {
	case istioconfig.MTLSDisable:
		return []*listenerv3.FilterChain{inboundChain(name, p, false, az)}
	case istioconfig.MTLSPermissive:
		plain := inboundChain(name+plaintextChainSuffix, p, false, az)
		plain.FilterChainMatch = &listenerv3.FilterChainMatch{TransportProtocol: transportProtocolRaw}
		return []*listenerv3.FilterChain{inboundChain(name, p, true, az), plain}
	default:
		return []*listenerv3.FilterChain{inboundChain(name, p, true, az)}
	}
}

// inboundChain is the filter chain named name that serves workload port p;
// with mtls it matches TLS only and requires a client certificate of the
// mesh.
func inboundChain(name string, p InboundPort, mtls bool, az inboundAuthz) *listenerv3.FilterChain {
	fc := &listenerv3.FilterChain{Name: name}
	if isHTTP(p.Protocol) {
		fc.Filters = []*listenerv3.Filter{networkFilter(filterHCM, inboundHCM(name, p, az.http))}
	} else {
		// Each chain gets its own copies: chains share no message.
		for _, f := range az.network {
			fc.Filters = append(fc.Filters, proto.CloneOf(f))
		}
		fc.Filters = append(fc.Filters, tcpProxy(InboundClusterName(p.Port)))
	}
	if mtls {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{TransportProtocol: transportProtocolTLS}
		fc.TransportSocket = sidecarDownstreamTLS()
	}
	return fc
}

// matchesTransport reports whether a chain matches on the transport
// protocol, which only the TLS inspector detects.
func matchesTransport(chains []*listenerv3.FilterChain) bool {
	return slices.ContainsFunc(chains, func(fc *listenerv3.FilterChain) bool {
		return fc.GetFilterChainMatch().GetTransportProtocol() != ""
	})
}

// inboundHCM serves requests to the app, authorized by the authz filters
// (which run before the router): it replaces any x-forwarded-client-cert
// the client sent by one naming the client certificate's URI SAN (its
// SPIFFE ID), so the app can trust the header; over plaintext it only
// drops the client's.
func inboundHCM(name string, p InboundPort, authz []*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	hcm := sidecarHCM("inbound_" + name)
	hcm.HttpFilters = append(slices.Clone(authz), hcm.HttpFilters...)
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: inboundRouteConfig(p)}
	hcm.ForwardClientCertDetails = hcmv3.HttpConnectionManager_SANITIZE_SET
	hcm.SetCurrentClientCertDetails = &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Uri: true}
	if isHTTP2(p.Protocol) {
		hcm.Http2ProtocolOptions = &corev3.Http2ProtocolOptions{}
	}
	return hcm
}

// sidecarHCM is istiod's HttpConnectionManager for sidecars, without a
// route: HTTP/1.1 or HTTP/2 detected, the connection's peer not taken as
// the client (no use_remote_address), paths normalized but escaped slashes
// kept, no idle timeout on streams (long-lived gRPC streams), websocket
// upgrades allowed, and the router as the only HTTP filter (outbound
// listeners add the fault and CORS filters before it).
func sidecarHCM(statPrefix string) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		CodecType:                    hcmv3.HttpConnectionManager_AUTO,
		StatPrefix:                   statPrefix,
		UseRemoteAddress:             wrapperspb.Bool(false),
		NormalizePath:                wrapperspb.Bool(true),
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_KEEP_UNCHANGED,
		StreamIdleTimeout:            durationpb.New(0),
		UpgradeConfigs:               []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}},
		HttpFilters:                  []*hcmv3.HttpFilter{routerFilter()},
	}
}

// tcpProxy forwards connections to cluster.
func tcpProxy(cluster string) *listenerv3.Filter {
	return networkFilter(filterTCPProxy, &tcpproxyv3.TcpProxy{
		StatPrefix:       cluster,
		ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster},
	})
}

// tlsInspector reads the ClientHello so that chains can match on TLS. Its
// 512-byte read buffer is istiod's (the default is 64 KiB per connection).
func tlsInspector() *listenerv3.ListenerFilter {
	return listenerFilter(filterTLSInspector, &tlsinspectorv3.TlsInspector{InitialReadBufferSize: wrapperspb.UInt32(512)})
}

func networkFilter(name string, m proto.Message) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(m)}}
}

func listenerFilter(name string, m proto.Message) *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{Name: name, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(m)}}
}
