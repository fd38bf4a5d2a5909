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

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// DefaultTrustDomain is the trust domain of SPIFFE IDs when Options names none.
const DefaultTrustDomain = pki.DefaultTrustDomain

// transportSocketTLS names the TLS transport socket; grpc-go requires this
// exact name.
const transportSocketTLS = "envoy.transport_sockets.tls"

// Options configure generation where it differs per hub. The zero value
// generates plaintext resources, exactly like Clusters.
type Options struct {
	// Security makes clusters carry an UpstreamTlsContext (mTLS with the
	// certificate provider instance xdsnode.CertProviderInstance and SAN matching of
	// the endpoints' SPIFFE IDs). Clients then need "certificate_providers" in
	// their bootstrap: grpc-go rejects a cluster naming an unknown instance.
	//
	// On the inbound side it is only the mesh-wide default (DefaultMTLS):
	// the PeerAuthentications of a workload decide the mode of its ports,
	// and Security that of the ports none of them sets.
	Security bool
	// TrustDomain of the SPIFFE IDs; empty means DefaultTrustDomain.
	TrustDomain pki.TrustDomain
}

// DefaultMTLS returns the inbound mutual-TLS mode of a server port that no
// PeerAuthentication sets (none applies, or each leaves the mode UNSET):
// MTLSStrict with Security, else MTLSDisable. It is what
// istioconfig.WorkloadSecurity.MTLS falls back to.
func (o Options) DefaultMTLS() istioconfig.MTLSMode {
	if o.Security {
		return istioconfig.MTLSStrict
	}
	return istioconfig.MTLSDisable
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

// ServiceClusters returns the clusters of ms's service for proxyless
// clients under DestinationRule dr (nil: none), the PeerAuthentications of
// cfg (nil: none) and opts: those of Clusters(ms.Service, dr), where each
// cluster that MTLSClusters(ProxyGRPC, ms, dr, cfg, opts) names (subset
// clusters alike) also carries a TLS transport socket that presents the
// client's certificate and accepts only servers whose certificate has one
// of ServiceSANs(ms, opts), or, under a tls of mode ISTIO_MUTUAL in dr
// that sets them, with its sni and subjectAltNames. grpc-go has no
// transport_socket_matches (it NACKs a cluster that has them), so a
// cluster is secure or plaintext as a whole. With no Pod labels, no
// PeerAuthentication and no tls in sight this is Clusters with TLS on every
// cluster with Security, and exactly Clusters without. The clusters of an
// External or DNS-resolved service are plaintext unless dr's tls says
// ISTIO_MUTUAL (MTLSClusters); SIMPLE and MUTUAL are left to auto mTLS
// (see drtls.go, and ClusterNotes).
//
// Unlike Clusters, the result depends on the endpoints (their labels,
// target ports and service accounts) and on cfg's PeerAuthentications: a
// change of either must re-plan it. It is pure; a nil ms yields nil.
func ServiceClusters(ms *model.MergedService, dr *istioconfig.DestinationRule, cfg *istioconfig.Snapshot, opts Options) []*clusterv3.Cluster {
	if ms == nil {
		return nil
	}
	secure, sans := serviceClusterInputs(ms, dr, cfg, opts)
	return securedClusters(ms.Service, dr, secure, sans)
}

// serviceClusterInputs returns what ServiceClusters reads of ms's
// endpoints and cfg: the names of the secure clusters and, when there are
// any, the endpoints' SANs. The clusters are a function of these, ms's
// service and dr (securedClusters).
func serviceClusterInputs(ms *model.MergedService, dr *istioconfig.DestinationRule, cfg *istioconfig.Snapshot, opts Options) (secure map[string]bool, sans []string) {
	secure = mtlsClusterSet(ProxyGRPC, ms, dr, cfg, opts)
	if len(secure) > 0 {
		sans = ServiceSANs(ms, opts)
	}
	return secure, sans
}

// securedClusters is ServiceClusters from its inputs (serviceClusterInputs).
func securedClusters(svc *model.Service, dr *istioconfig.DestinationRule, secure map[string]bool, sans []string) []*clusterv3.Cluster {
	out := Clusters(svc, dr)
	if len(secure) == 0 {
		return out
	}
	// Each cluster's socket names it by SNI (SNIClusterName), as a
	// sidecar's does: grpc-go sends it when GRPC_EXPERIMENTAL_XDS_SNI is
	// true, which is what lets an east-west gateway route a proxyless
	// client's mutual TLS to another network. A DestinationRule's
	// ISTIO_MUTUAL may name its own SNI and SANs.
	sockets := map[string]*corev3.TransportSocket{}
	for _, sp := range servicePorts(svc) {
		for _, s := range append([]string{""}, subsetNames(dr)...) {
			name, sni := SubsetClusterName(svc.Hostname, sp.Port, s), SNIClusterName(svc.Hostname, sp.Port, s)
			if t := drTLS(dr, sp.Port, s); t.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL && (t.GetSni() != "" || len(t.GetSubjectAltNames()) > 0) {
				sockets[name] = meshUpstreamTLS(istioSANs(t, sans), tlsSNI(t, sni))
				continue
			}
			sockets[name] = meshUpstreamTLS(sans, sni)
		}
	}
	for _, c := range out {
		if secure[c.GetName()] {
			c.TransportSocket = sockets[c.GetName()]
		}
	}
	return out
}

// MTLSClusters returns, sorted, the names of the clusters of ms's service
// (each port's default cluster and one per subset of dr) to which proxies
// of kind k send Istio mutual TLS: Istio's auto mTLS, decided from each
// cluster's endpoints, those that serve its port and that its subset
// selects, ready or not (so that readiness flaps do not change clusters).
//
// An endpoint can take mutual TLS when its Pod carries
// TLSModeLabel=TLSModeIstio and its mode, cfg.Workload(namespace,
// labels).MTLS(target port, opts.DefaultMTLS()), is not DISABLE. Then:
//
//   - ProxyEnvoy: a cluster is secure when at least one of its endpoints
//     can take mutual TLS. Envoy picks per endpoint by the metadata that
//     LoadAssignments gives injected endpoints: those get mutual TLS, the
//     others plaintext. The metadata cannot say DISABLE (assignments do not
//     depend on configuration), so an injected endpoint whose mode is
//     DISABLE gets mutual TLS when another endpoint of its cluster can
//     take it, and plaintext when none can.
//   - ProxyGRPC: a cluster is secure when none of its endpoints refuses
//     mutual TLS: each endpoint with labels can take it, and each one
//     without (no Pod known, as in tests or for a registry entry without
//     Pod) has Security and a mode other than DISABLE (the namespace's and
//     the mesh's PeerAuthentications apply to it). A cluster without
//     endpoints is secure with Security.
//
// DestinationRule dr's tls, from the effective policy of the cluster's
// port and subset, overrides that: ISTIO_MUTUAL makes the cluster secure
// whatever its endpoints, DISABLE plaintext; SIMPLE and MUTUAL (TLS
// origination, not Istio mutual TLS) leave it out for ProxyEnvoy and to
// auto mTLS for ProxyGRPC (which cannot originate TLS from files).
//
// Auto mTLS names none for a nil ms (or ms.Service), for a
// model.Service.External service (a MESH_EXTERNAL ServiceEntry's hosts are
// outside the mesh, whatever its endpoints' labels say) and for a
// DNS-resolved one (its DNS endpoints have no Pod labels, and its registry
// endpoints, if any, are not the ones its clusters reach); dr's
// ISTIO_MUTUAL still applies to these. It is pure.
func MTLSClusters(k ProxyKind, ms *model.MergedService, dr *istioconfig.DestinationRule, cfg *istioconfig.Snapshot, opts Options) []string {
	var out []string
	for name := range mtlsClusterSet(k, ms, dr, cfg, opts) {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// mtlsClusterSet is MTLSClusters as a set; nil when there are none.
func mtlsClusterSet(k ProxyKind, ms *model.MergedService, dr *istioconfig.DestinationRule, cfg *istioconfig.Snapshot, opts Options) map[string]bool {
	if ms == nil || ms.Service == nil {
		return nil
	}
	ports := servicePorts(ms.Service)
	if len(ports) == 0 {
		return nil
	}
	// Auto mTLS never applies to External and DNS-resolved services; a
	// DestinationRule's tls still does.
	auto := !ms.Service.External && !dnsResolved(ms.Service)
	subsets := append([]string{""}, subsetNames(dr)...)
	members := make([][]bool, len(subsets))
	if auto {
		for i, s := range subsets[1:] {
			members[i+1] = subsetMembers(ms.Endpoints, findSubset(dr, s).GetLabels())
		}
	}
	j := peerJudge{ns: ms.Service.Namespace, cfg: cfg, opts: opts}
	var out map[string]bool
	for _, sp := range ports {
		for i, s := range subsets {
			secure, decided := tlsOverride(k, drTLS(dr, sp.Port, s))
			if !decided && auto {
				secure = j.secure(k, ms.Endpoints, sp, members[i])
			}
			if secure {
				if out == nil {
					out = map[string]bool{}
				}
				out[SubsetClusterName(ms.Service.Hostname, sp.Port, s)] = true
			}
		}
	}
	return out
}

// peerTLS is whether one endpoint, as a server, takes Istio mutual TLS.
type peerTLS int

const (
	peerRefuses peerTLS = iota // plaintext only
	peerTakes                  // injected, mode not DISABLE
	peerUnknown                // no labels, mode not DISABLE, with Security
)

// peerJudge decides what the endpoints of one service take, memoizing the
// policy per distinct label set (endpoints of one Deployment share one).
type peerJudge struct {
	ns   string
	cfg  *istioconfig.Snapshot
	opts Options
	memo map[model.Labels]istioconfig.WorkloadSecurity
	// The last label set looked up, and its policy: endpoints of one
	// Deployment tend to come together.
	last       model.Labels
	lastPolicy istioconfig.WorkloadSecurity
	looked     bool
}

// workload returns the security policy of a Pod of j's namespace with
// labels.
func (j *peerJudge) workload(labels model.Labels) istioconfig.WorkloadSecurity {
	if j.looked && labels == j.last {
		return j.lastPolicy
	}
	w, ok := j.memo[labels]
	if !ok {
		if j.memo == nil {
			j.memo = map[model.Labels]istioconfig.WorkloadSecurity{}
		}
		w = j.cfg.Workload(j.ns, labels)
		j.memo[labels] = w
	}
	j.last, j.lastPolicy, j.looked = labels, w, true
	return w
}

// peer says what e takes on its target port tp.
func (j *peerJudge) peer(e *model.Endpoint, tp uint32) peerTLS {
	if j.workload(e.Labels).MTLS(tp, j.opts.DefaultMTLS()) == istioconfig.MTLSDisable {
		return peerRefuses
	}
	switch {
	case injected(e):
		return peerTakes
	case e.Labels.IsZero() && j.opts.Security:
		return peerUnknown
	}
	return peerRefuses
}

// secure reports whether the cluster of port sp over the endpoints of eps
// that member selects (nil: all) is secure for proxies of kind k.
func (j *peerJudge) secure(k ProxyKind, eps []model.Endpoint, sp model.ServicePort, member []bool) bool {
	// Envoy picks TLS per endpoint (by its metadata), so it needs one
	// endpoint that takes mutual TLS; grpc-go picks per cluster, so it
	// needs none that refuses it.
	perEndpoint := k.Can().envoy()
	n := 0
	for i := range eps {
		e := &eps[i]
		if member != nil && !member[i] {
			continue
		}
		tp, ok := e.TargetPort(sp)
		if !ok || !validPort(tp) {
			continue
		}
		n++
		switch p := j.peer(e, tp); {
		case perEndpoint && p == peerTakes:
			return true
		case !perEndpoint && p == peerRefuses:
			return false
		}
	}
	if perEndpoint {
		return false
	}
	// No endpoint refuses it; none at all follows the default.
	return n > 0 || j.opts.Security
}

// certProvider is the certificate provider instance of both identity and
// roots.
func certProvider(withCertName bool) *tlsv3.CertificateProviderPluginInstance {
	p := &tlsv3.CertificateProviderPluginInstance{InstanceName: xdsnode.CertProviderInstance}
	if withCertName {
		p.CertificateName = "default"
	}
	return p
}

// meshUpstreamTLS is the client side of mutual TLS with SNI sni ("": none)
// and sans typed by sanMatcher (a SPIFFE ID is a URI; a DestinationRule
// may name DNS SANs, which grpc-go's untyped matchers compare with every
// SAN of the server). grpc-go (v1.85) reads the SAN matchers only from the
// deprecated match_subject_alt_names, Envoy prefers
// match_typed_subject_alt_names: both are set, with the same values.
func meshUpstreamTLS(sans []string, sni string) *corev3.TransportSocket {
	vc := &tlsv3.CertificateValidationContext{
		CaCertificateProviderInstance: certProvider(false),
	}
	for _, san := range sans {
		vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, sanMatcher(san))
		// grpc-go v1.85 reads SAN matchers only from the deprecated field
		// (DESIGN.md, measured facts): set both.
		//lint:ignore SA1019 grpc-go reads only this field
		vc.MatchSubjectAltNames = append(vc.MatchSubjectAltNames,
			&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}})
	}
	ctx := &tlsv3.UpstreamTlsContext{Sni: sni, CommonTlsContext: &tlsv3.CommonTlsContext{
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
// xdsnode.InboundListenerPrefix + "IP:port" (IPv6 in brackets), the name grpc-go's
// xDS server subscribes to with Istio's name template. It is pure.
func InboundListenerName(addr netip.AddrPort) string {
	return xdsnode.InboundListenerPrefix + addr.String()
}

// ParseInboundListenerName is the inverse of InboundListenerName. It accepts
// only canonical addresses (so that the name round-trips) and ports in
// 1..65535. Errors wrap ErrMalformedName. It is pure.
func ParseInboundListenerName(name string) (netip.AddrPort, error) {
	rest, ok := strings.CutPrefix(name, xdsnode.InboundListenerPrefix)
	if !ok {
		return netip.AddrPort{}, malformed(name, "want prefix %q", xdsnode.InboundListenerPrefix)
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
// (xds.NewGRPCServer) listening on addr needs, under the security policy sec
// of its workload: address addr, one filter chain "inbound|<port>" with an
// HttpConnectionManager whose inline route configuration accepts every RPC
// (virtual host "*", prefix "/", non-forwarding action), whose HTTP filters
// are AuthzHTTPFilters(sec.AuthorizationPolicies, ProxyGRPC, opts) and then
// the router.
//
// The port's mode, sec.MTLS(port, opts.DefaultMTLS()), decides the chain's
// TLS. MTLSStrict: a DownstreamTlsContext requires a client certificate
// (certificate provider instance xdsnode.CertProviderInstance, no SAN matchers:
// grpc-go rejects them on the server side). MTLSDisable: plaintext.
// grpc-go cannot accept both on one port, because its filter chain match
// has no TLS inspector (gRFC A36: it drops chains whose transport_protocol
// is not "" or "raw_buffer", so it cannot tell a ClientHello from
// plaintext). So MTLSPermissive is served as istiod serves it: as
// MTLSStrict when the Pod is injected (sec.Injected: mesh clients speak
// mTLS to it, auto mTLS), a plaintext client being refused; as
// MTLSDisable otherwise (clients speak plaintext to it). The server
// must have the certificate providers in its bootstrap whenever the mode is
// not MTLSDisable, whatever opts.Security says.
//
// It is pure.
func InboundListener(addr netip.AddrPort, sec istioconfig.WorkloadSecurity, opts Options) *listenerv3.Listener {
	name := InboundListenerName(addr)
	port := uint32(addr.Port())
	filters := AuthzHTTPFilters(sec.AuthorizationPolicies, ProxyGRPC, opts)
	filters = append(slices.Clip(filters), &hcmv3.HttpFilter{
		Name:       routerFilterName,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
	})
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound_" + addr.String(),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "inbound|" + strconv.Itoa(int(port)),
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|all",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: filters,
	}
	fc := &listenerv3.FilterChain{
		Name: "inbound|" + strconv.Itoa(int(port)),
		Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}},
	}
	if proxylessMTLS(sec.MTLS(port, opts.DefaultMTLS()), sec.Injected) {
		fc.TransportSocket = downstreamTLS()
	}
	return &listenerv3.Listener{
		Name: name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Protocol:      corev3.SocketAddress_TCP,
			Address:       addr.Addr().String(),
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains:     []*listenerv3.FilterChain{fc},
		TrafficDirection: corev3.TrafficDirection_INBOUND,
	}
}

// proxylessMTLS reports whether a grpc-go server port in mode m requires
// mTLS: STRICT; PERMISSIVE when the Pod is injected (see InboundListener).
func proxylessMTLS(m istioconfig.MTLSMode, injected bool) bool {
	switch m {
	case istioconfig.MTLSDisable:
		return false
	case istioconfig.MTLSPermissive:
		return injected
	}
	return true
}

// String describes opts for logs.
func (o Options) String() string {
	return fmt.Sprintf("security=%t trustDomain=%s", o.Security, o.trustDomain())
}
