package xdsgen

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
)

// DefaultTrustDomain is the trust domain of SPIFFE IDs when Options names none.
const DefaultTrustDomain = pki.DefaultTrustDomain

// CertProviderInstance is the certificate provider instance (in the client's
// or server's gRPC bootstrap "certificate_providers") that secure resources
// name for both the identity certificate and the root certificates.
const CertProviderInstance = "default"

// InboundListenerPrefix is the prefix of server-side listener names, Istio's
// "xds.istio.io/grpc/lds/inbound/%s" server_listener_resource_name_template
// with %s the listening address "IP:port".
const InboundListenerPrefix = "xds.istio.io/grpc/lds/inbound/"

// transportSocketTLS names the TLS transport socket; grpc-go requires this
// exact name.
const transportSocketTLS = "envoy.transport_sockets.tls"

// Options configure generation where it differs per hub. The zero value
// generates plaintext resources, exactly like Clusters.
type Options struct {
	// Security makes clusters carry an UpstreamTlsContext (mTLS with the
	// certificate provider instance CertProviderInstance and SAN matching of
	// the endpoints' SPIFFE IDs). Clients then need "certificate_providers" in
	// their bootstrap: grpc-go rejects a cluster naming an unknown instance.
	Security bool
	// TrustDomain of the SPIFFE IDs; empty means DefaultTrustDomain.
	TrustDomain pki.TrustDomain
}

func (o Options) trustDomain() pki.TrustDomain {
	if o.TrustDomain == "" {
		return DefaultTrustDomain
	}
	return o.TrustDomain
}

// SpiffeID returns "spiffe://<trust domain>/ns/<ns>/sa/<sa>". It is pure.
func SpiffeID(trustDomain pki.TrustDomain, ns, sa string) string {
	if trustDomain == "" {
		trustDomain = DefaultTrustDomain
	}
	return "spiffe://" + trustDomain.String() + "/ns/" + ns + "/sa/" + sa
}

// ServiceSANs returns the sorted, unique SPIFFE IDs of the service accounts
// of ms's endpoints (ready or not, so that readiness flaps do not change the
// clusters); endpoints without a service account are skipped. Pods of a
// Service live in its namespace. It is pure.
func ServiceSANs(ms *model.MergedService, opts Options) []string {
	if ms == nil || ms.Service == nil {
		return nil
	}
	var out []string
	for _, e := range ms.Endpoints {
		if e.ServiceAccount == "" {
			continue
		}
		out = append(out, SpiffeID(opts.trustDomain(), ms.Service.Namespace, e.ServiceAccount))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ServiceClusters returns the clusters of ms's service under DestinationRule
// dr (nil: none) and opts: without Security exactly Clusters(ms.Service,
// dr); with it, each cluster, subset clusters alike, also carries a TLS
// transport socket that presents the client's certificate and accepts only
// servers whose certificate has one of ServiceSANs(ms, opts) (dr's tls is
// not read yet). Unlike Clusters, the result depends on the endpoints
// (their service accounts). It is pure; a nil ms yields nil.
func ServiceClusters(ms *model.MergedService, dr *istioconfig.DestinationRule, opts Options) []*clusterv3.Cluster {
	if ms == nil {
		return nil
	}
	out := Clusters(ms.Service, dr)
	if !opts.Security {
		return out
	}
	ts := upstreamTLS(ServiceSANs(ms, opts))
	for _, c := range out {
		c.TransportSocket = ts
	}
	return out
}

// certProvider is the certificate provider instance of both identity and
// roots.
func certProvider(withCertName bool) *tlsv3.CertificateProviderPluginInstance {
	p := &tlsv3.CertificateProviderPluginInstance{InstanceName: CertProviderInstance}
	if withCertName {
		p.CertificateName = "default"
	}
	return p
}

// upstreamTLS is the client side of mTLS. grpc-go (v1.85) reads the SAN
// matchers only from the deprecated match_subject_alt_names, Envoy prefers
// match_typed_subject_alt_names; both are set, with the same URIs.
func upstreamTLS(sans []string) *corev3.TransportSocket {
	vc := &tlsv3.CertificateValidationContext{
		CaCertificateProviderInstance: certProvider(false),
	}
	for _, san := range sans {
		exact := &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}}
		vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: exact,
		})
		// grpc-go v1.85 reads SAN matchers only from the deprecated field
		// (DESIGN.md, measured facts): set both.
		//lint:ignore SA1019 grpc-go reads only this field
		vc.MatchSubjectAltNames = append(vc.MatchSubjectAltNames,
			&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}})
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: certProvider(true),
		ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
	}}
	return &corev3.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// downstreamTLS is the server side of mTLS: present the server's
// certificate, require a client certificate signed by the roots. grpc-go
// rejects SAN matchers on the server side, so there are none.
func downstreamTLS() *corev3.TransportSocket {
	ctx := &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: certProvider(true),
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
				ValidationContext: &tlsv3.CertificateValidationContext{CaCertificateProviderInstance: certProvider(false)},
			},
		},
	}
	return &corev3.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// InboundListenerName returns the server-side listener name of addr,
// InboundListenerPrefix + "IP:port" (IPv6 in brackets), the name grpc-go's
// xDS server subscribes to with Istio's name template. It is pure.
func InboundListenerName(addr netip.AddrPort) string {
	return InboundListenerPrefix + addr.String()
}

// ParseInboundListenerName is the inverse of InboundListenerName. It accepts
// only canonical addresses (so that the name round-trips) and ports in
// 1..65535. Errors wrap ErrMalformedName. It is pure.
func ParseInboundListenerName(name string) (netip.AddrPort, error) {
	rest, ok := strings.CutPrefix(name, InboundListenerPrefix)
	if !ok {
		return netip.AddrPort{}, malformed(name, "want prefix %q", InboundListenerPrefix)
	}
	host, portStr, err := net.SplitHostPort(rest)
	if err != nil {
		return netip.AddrPort{}, malformed(name, "%v", err)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return netip.AddrPort{}, malformed(name, "%v", err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, malformed(name, "bad IP %q", host)
	}
	ap := netip.AddrPortFrom(ip, uint16(port))
	if ap.String() != rest {
		return netip.AddrPort{}, malformed(name, "address %q is not canonical", rest)
	}
	return ap, nil
}

// InboundListener returns the server-side listener that a grpc-go xDS server
// (xds.NewGRPCServer) listening on addr needs: address addr, one filter chain
// with an HttpConnectionManager whose inline route configuration accepts
// every RPC (virtual host "*", prefix "/", non-forwarding action) and ends
// with the router filter; with opts.Security the chain also requires mTLS
// (DownstreamTlsContext, client certificate required, certificate provider
// instance CertProviderInstance). Without Security the server serves
// plaintext. It is pure.
func InboundListener(addr netip.AddrPort, opts Options) *listenerv3.Listener {
	name := InboundListenerName(addr)
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound_" + addr.String(),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "inbound|" + strconv.Itoa(int(addr.Port())),
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|all",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       routerFilterName,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	fc := &listenerv3.FilterChain{
		Name: "inbound|" + strconv.Itoa(int(addr.Port())),
		Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}},
	}
	if opts.Security {
		fc.TransportSocket = downstreamTLS()
	}
	return &listenerv3.Listener{
		Name: name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Protocol:      corev3.SocketAddress_TCP,
			Address:       addr.Addr().String(),
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(addr.Port())},
		}}},
		FilterChains:     []*listenerv3.FilterChain{fc},
		TrafficDirection: corev3.TrafficDirection_INBOUND,
	}
}

// String describes opts for logs.
func (o Options) String() string {
	return fmt.Sprintf("security=%t trustDomain=%s", o.Security, o.trustDomain())
}
