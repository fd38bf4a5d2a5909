package xdsgen

import (
	"math"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// httpProtocolOptionsKey is the typed_extension_protocol_options key of the
// upstream HTTP protocol options.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// localhost is where a sidecar's app listens for the inbound clusters.
const localhost = "127.0.0.1"

// SidecarClusters returns the clusters of an Envoy sidecar, sorted by name:
//
//   - outbound|<port>||<hostname> for every port of every service the
//     sidecar sees (ScopedServices: all of them without a Sidecar scope): EDS over
//     ADS under the same name (the assignments are LoadAssignments, shared
//     with proxyless clients), least-request balancing, HTTP/2 towards
//     HTTP2 and GRPC ports, istiod's unlimited circuit breakers, and auto
//     mutual TLS as istiod builds it: when MTLSClusters(ProxyEnvoy, ...)
//     names the cluster, transport_socket_matches "tlsMode-istio" (Istio
//     mutual TLS, for endpoints whose metadata has {tlsMode: "istio"},
//     i.e. Pods labelled TLSModeLabel=TLSModeIstio: SDS secrets from
//     pilot-agent, SAN check against ServiceSANs, SNI SNIClusterName of
//     the cluster's subset, ALPN "istio"[, "h2"]) then "tlsMode-disabled" (plaintext, for every other
//     endpoint); otherwise plaintext, no transport socket;
//   - outbound|<port>|<subset>|<hostname> likewise for every subset of the
//     service's DestinationRule in config (config.Host(hostname)), mutual
//     TLS decided over the subset's endpoints;
//   - for a DNS-resolved service, under the same names, STRICT_DNS
//     (model.ResolutionDNS) or LOGICAL_DNS (ResolutionDNSRoundRobin, to
//     the first DNS endpoint only) clusters with an inline load assignment
//     of its DNS endpoints instead of EDS, subset clusters alike (DNS
//     endpoints have no labels to select), without auto mTLS (see dns.go
//     and ServiceNotes), as for a model.Service.External service;
//   - each of those under the DestinationRule's effective traffic policy
//     for its port and subset (load balancer, connection pool, outlier
//     detection, tls; ClusterNotes(ProxyEnvoy, dr) says what is left
//     out): tls DISABLE makes the cluster plaintext, ISTIO_MUTUAL gives it
//     the "tlsMode-istio" socket as its only transport_socket (the rule's
//     sni and subjectAltNames replacing SNIClusterName and ServiceSANs when
//     set), SIMPLE and MUTUAL a TLS origination socket (originationTLS),
//     External and DNS services included;
//   - PassthroughClusterName (ORIGINAL_DST) and BlackHoleClusterName
//     (STATIC, no endpoints);
//   - inbound|<port>|| for every port of sc.Inbound outside the reserved
//     ones: STATIC to 127.0.0.1:<port>, the app, in plaintext.
//
// The outbound clusters depend on the endpoints (labels, target ports,
// service accounts) and on config's PeerAuthentications: a change of
// either must re-plan them. A nil config applies no DestinationRule and no
// PeerAuthentication. It is pure.
func SidecarClusters(services []*model.MergedService, config *istioconfig.Snapshot, sc Sidecar, opts Options) []*clusterv3.Cluster {
	out := []*clusterv3.Cluster{passthroughCluster(), blackHoleCluster()}
	for _, ms := range sortedServices(ScopedServices(services, sc)) {
		out = append(out, outboundClusters(ms, config.Host(ms.Service.Hostname).DestinationRule, config, opts)...)
	}
	for _, p := range sc.Inbound {
		if validPort(p.Port) && !reservedPort(p.Port) {
			out = append(out, inboundCluster(p))
		}
	}
	sortByName(out)
	return out
}

// outboundClusters are the clusters of ms's ports and of dr's subsets,
// with auto mutual TLS under the PeerAuthentications of config, or the TLS
// of dr's effective tls settings (see drtls.go): ISTIO_MUTUAL as one
// transport_socket for every endpoint, SIMPLE and MUTUAL as originationTLS.
func outboundClusters(ms *model.MergedService, dr *istioconfig.DestinationRule, config *istioconfig.Snapshot, opts Options) []*clusterv3.Cluster {
	secure := mtlsClusterSet(ProxyEnvoy, ms, dr, config, opts)
	var sans []string
	if len(secure) > 0 {
		sans = ServiceSANs(ms, opts)
	}
	subsets := append([]string{""}, subsetNames(dr)...)
	var out []*clusterv3.Cluster
	for _, sp := range servicePorts(ms.Service) {
		for _, subset := range subsets {
			c := outboundCluster(ms.Service, sp, subset, dr)
			sni := SNIClusterName(ms.Service.Hostname, sp.Port, subset)
			switch t := drTLS(dr, sp.Port, subset); {
			case secure[c.GetName()] && t.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL:
				// The rule asks for mutual TLS to every endpoint.
				c.TransportSocket = sidecarUpstreamTLS(tlsSNI(t, sni), istioSANs(t, sans), isHTTP2(sp.Protocol))
			case secure[c.GetName()]:
				c.TransportSocketMatches = sidecarAutoMTLS(sni, sans, isHTTP2(sp.Protocol))
			case originates(t):
				c.TransportSocket = originationTLS(t, ms.Service.Hostname, sp.Protocol, discard)
			}
			out = append(out, c)
		}
	}
	return out
}

// edsCluster is an Envoy cluster named name whose endpoints are the load
// assignment of the same name, over ADS: least-request balancing,
// istiod's connect timeout and unlimited circuit breakers, plaintext.
func edsCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   adsWaitingConfigSource(),
			ServiceName: name,
		},
		ConnectTimeout: durationpb.New(connectTimeout),
		LbPolicy:       clusterv3.Cluster_LEAST_REQUEST,
		CircuitBreakers: &clusterv3.CircuitBreakers{
			Thresholds: []*clusterv3.CircuitBreakers_Thresholds{unlimitedThresholds()},
		},
	}
}

// outboundCluster is the plaintext cluster of subset ("" for the whole
// service) of port sp of svc: EDS, or for a DNS-resolved svc STRICT_DNS
// (ResolutionDNS) or LOGICAL_DNS (ResolutionDNSRoundRobin) over its DNS
// endpoints (see dns.go).
func outboundCluster(svc *model.Service, sp model.ServicePort, subset string, dr *istioconfig.DestinationRule) *clusterv3.Cluster {
	c := edsCluster(SubsetClusterName(svc.Hostname, sp.Port, subset))
	if dnsResolved(svc) {
		setDNS(c, svc, sp, ProxyEnvoy)
	}
	tp := effectivePolicy(dr, sp.Port, subset)
	if po := applyPolicy(c, tp, ProxyEnvoy, isHTTP2(sp.Protocol), discard); po != nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: mustAny(po)}
	}
	if !dnsResolved(svc) && distributes(tp.GetLoadBalancer().GetLocalityLbSetting()) {
		setLocalityWeighted(c)
	}
	return c
}

// setLocalityWeighted makes Envoy honour the load_balancing_weight of the
// localities of c's load assignments (common_lb_config
// locality_weighted_lb_config), which a distribute entry sets: without
// it, Envoy ignores locality weights. istiod sets it likewise. Only EDS
// clusters get it: the inline assignments of DNS clusters have no
// locality weights, and Envoy would send nothing to a locality without
// one.
func setLocalityWeighted(c *clusterv3.Cluster) {
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.LocalityConfigSpecifier = &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
		LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
	}
}

// adsWaitingConfigSource is ADS without an initial fetch timeout, istiod's
// source for a sidecar's RDS and EDS: a listener or cluster waits for its
// routes or endpoints instead of starting without them after 15 s.
func adsWaitingConfigSource() *corev3.ConfigSource {
	cs := adsConfigSource()
	cs.InitialFetchTimeout = durationpb.New(0)
	return cs
}

// unlimitedThresholds are istiod's default circuit breakers: Envoy's own
// defaults (1024 connections, 3 parallel retries) cause 503s during pod
// churn before the control plane has pushed the new endpoints.
func unlimitedThresholds() *clusterv3.CircuitBreakers_Thresholds {
	return &clusterv3.CircuitBreakers_Thresholds{
		MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
		MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
		MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
		MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
		TrackRemaining:     true,
	}
}

// http2Options makes a cluster speak HTTP/2 to its endpoints.
func http2Options() map[string]*anypb.Any {
	return map[string]*anypb.Any{
		httpProtocolOptionsKey: mustAny(&httpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
			}},
		}),
	}
}

// passthroughCluster connects to a connection's original destination.
func passthroughCluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 PassthroughClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
	}
}

// blackHoleCluster has no endpoints: a TCP proxy to it closes at once.
func blackHoleCluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 BlackHoleClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
}

// inboundCluster reaches the app on 127.0.0.1:<port> (Istio's localhost
// inbound; in NONE mode the pod IP is Envoy's own inbound listener), or
// where a Sidecar ingress listener forwards (inboundAddress).
func inboundCluster(p InboundPort) *clusterv3.Cluster {
	name := InboundClusterName(p.Port)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		CircuitBreakers: &clusterv3.CircuitBreakers{
			Thresholds: []*clusterv3.CircuitBreakers_Thresholds{unlimitedThresholds()},
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: inboundAddress(p),
					}},
				}},
			}},
		},
	}
	if isHTTP2(p.Protocol) {
		c.TypedExtensionProtocolOptions = http2Options()
	}
	return c
}

// inboundAddress is where the inbound cluster of p sends: its socket, its
// forward address, or the app on 127.0.0.1 on p's port.
func inboundAddress(p InboundPort) *corev3.Address {
	switch {
	case p.Socket != "":
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: p.Socket}}}
	case p.Forward.IsValid():
		return socketAddress(p.Forward.Addr().String(), uint32(p.Forward.Port()))
	}
	return socketAddress(localhost, p.Port)
}

// socketAddress is the TCP address ip:port.
func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
