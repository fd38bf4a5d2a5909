package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// peerAuthn is a PeerAuthentication of namespace demo with mode m, the
// port-level modes ports (keyed by workload port) and, when sel is set, a
// selector of app=echo.
func peerAuthn(name string, sel bool, m security.PeerAuthentication_MutualTLS_Mode, ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) *istioconfig.PeerAuthentication {
	spec := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: m}}
	if sel {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}
	}
	for p, pm := range ports {
		if spec.PortLevelMtls == nil {
			spec.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
		}
		spec.PortLevelMtls[p] = &security.PeerAuthentication_MutualTLS{Mode: pm}
	}
	return &istioconfig.PeerAuthentication{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "PeerAuthentication", Namespace: "demo", Name: name}},
		Spec: spec,
	}
}

// meshWide is the security of a workload under one mesh-wide policy.
func meshWide(m security.PeerAuthentication_MutualTLS_Mode) istioconfig.WorkloadSecurity {
	return istioconfig.WorkloadSecurity{Mesh: peerAuthn("default", false, m, nil)}
}

// denyEvil is an AuthorizationPolicy denying namespace evil.
func denyEvil() []*istioconfig.AuthorizationPolicy {
	return []*istioconfig.AuthorizationPolicy{{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "AuthorizationPolicy", Namespace: "demo", Name: "deny-evil"}},
		Spec: &security.AuthorizationPolicy{
			Action: security.AuthorizationPolicy_DENY,
			Rules:  []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{Namespaces: []string{"evil"}}}}}},
		},
	}}
}

// wantChain is what one inbound chain of a port must be.
type wantChain struct {
	suffix    string // of the chain's name, after "<bind>_<port>"
	transport string // its transport_protocol match
	mtls      bool   // DownstreamTlsContext requiring a client certificate
}

// chainsOfMode are the chains a port in mode m must have (Istio's
// semantics: STRICT mTLS only, DISABLE plaintext only, PERMISSIVE both,
// told apart by the TLS inspector).
func chainsOfMode(m istioconfig.MTLSMode) []wantChain {
	switch m {
	case istioconfig.MTLSStrict:
		return []wantChain{{"", "tls", true}}
	case istioconfig.MTLSPermissive:
		return []wantChain{{"", "tls", true}, {"-plaintext", "raw_buffer", false}}
	case istioconfig.MTLSDisable:
		return []wantChain{{"", "", false}}
	}
	panic("unknown mode " + m)
}

// inboundByPort checks the listener-level rules of sc's inbound listeners
// (unique chain names and matches, no default chain, the TLS inspector
// exactly where a chain matches on transport) and returns their chains by
// workload port.
func inboundByPort(t *testing.T, sc Sidecar, opts Options) map[uint32][]*listenerv3.FilterChain {
	t.Helper()
	out := map[uint32][]*listenerv3.FilterChain{}
	n := 0
	for _, l := range SidecarListeners(sidecarServices(), sc, opts) {
		if l.GetName() != VirtualInboundListenerName && l.GetAddress().GetSocketAddress().GetAddress() != sidecarPodIP.String() {
			continue
		}
		n++
		if l.GetDefaultFilterChain() != nil {
			t.Errorf("%s has a default chain", l.GetName())
		}
		names := map[string]bool{}
		matches := map[string]string{}
		needsInspector := false
		for _, fc := range l.GetFilterChains() {
			if names[fc.GetName()] {
				t.Errorf("%s: two chains named %q (Envoy rejects the listener)", l.GetName(), fc.GetName())
			}
			names[fc.GetName()] = true
			m := fc.GetFilterChainMatch()
			key := fmt.Sprintf("%d/%s", m.GetDestinationPort().GetValue(), m.GetTransportProtocol())
			if other, dup := matches[key]; dup {
				t.Errorf("%s: chains %s and %s have the same match %s", l.GetName(), other, fc.GetName(), key)
			}
			matches[key] = fc.GetName()
			if m.GetTransportProtocol() != "" {
				needsInspector = true
			}
			port := m.GetDestinationPort().GetValue()
			if sc.bindsPorts() {
				port = l.GetAddress().GetSocketAddress().GetPortValue()
			}
			out[port] = append(out[port], fc)
		}
		inspectors := 0
		for _, f := range l.GetListenerFilters() {
			if f.GetName() == filterTLSInspector {
				inspectors++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[needsInspector]; inspectors != want {
			t.Errorf("%s: %d TLS inspectors, want %d (a chain matches on transport: %t)", l.GetName(), inspectors, want, needsInspector)
		}
	}
	if want := map[bool]int{false: 1, true: len(sc.Inbound)}[sc.bindsPorts()]; n != want {
		t.Fatalf("%d inbound listeners, want %d", n, want)
	}
	return out
}

// checkPortChains checks the chains of workload port p against want: names,
// matches, TLS, and what they serve.
func checkPortChains(t *testing.T, sc Sidecar, p InboundPort, got []*listenerv3.FilterChain, want []wantChain) {
	t.Helper()
	bind := wildcard
	if sc.bindsPorts() {
		bind = sidecarPodIP.String()
	}
	if len(got) != len(want) {
		t.Errorf("port %d: chains %v, want %d", p.Port, namesOf(got), len(want))
		return
	}
	for i, fc := range got {
		w := want[i]
		if name := fmt.Sprintf("%s_%d%s", bind, p.Port, w.suffix); fc.GetName() != name {
			t.Errorf("port %d: chain %q, want %q", p.Port, fc.GetName(), name)
		}
		m := fc.GetFilterChainMatch()
		if m.GetTransportProtocol() != w.transport {
			t.Errorf("%s: transport %q, want %q", fc.GetName(), m.GetTransportProtocol(), w.transport)
		}
		if want := map[bool]uint32{false: p.Port, true: 0}[sc.bindsPorts()]; m.GetDestinationPort().GetValue() != want {
			t.Errorf("%s: destination port %d, want %d", fc.GetName(), m.GetDestinationPort().GetValue(), want)
		}
		if (fc.GetTransportSocket() != nil) != w.mtls {
			t.Errorf("%s: TLS %t, want %t", fc.GetName(), fc.GetTransportSocket() != nil, w.mtls)
		}
		if w.mtls {
			dtc := &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(dtc); err != nil {
				t.Fatal(err)
			}
			if !dtc.GetRequireClientCertificate().GetValue() {
				t.Errorf("%s: client certificate not required", fc.GetName())
			}
			if got := dtc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(got) != 1 || got[0].GetName() != SDSDefaultSecret {
				t.Errorf("%s: certificate %v, want SDS %q", fc.GetName(), got, SDSDefaultSecret)
			}
		}
		if !isHTTP(p.Protocol) {
			if got := tcpOf(t, fc).GetCluster(); got != InboundClusterName(p.Port) {
				t.Errorf("%s: TCP proxy to %s", fc.GetName(), got)
			}
			continue
		}
		h := hcmOf(t, fc)
		if got := h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != InboundClusterName(p.Port) {
			t.Errorf("%s: routes to %s", fc.GetName(), got)
		}
		// Also over plaintext: a client must not pass its own XFCC on.
		if h.GetForwardClientCertDetails() != hcmv3.HttpConnectionManager_SANITIZE_SET {
			t.Errorf("%s: x-forwarded-client-cert %v, want SANITIZE_SET", fc.GetName(), h.GetForwardClientCertDetails())
		}
		if fs := h.GetHttpFilters(); len(fs) == 0 || fs[len(fs)-1].GetName() != routerFilterName {
			t.Errorf("%s: HTTP filters %v, want the router last", fc.GetName(), fs)
		}
	}
}

var allModes = []istioconfig.MTLSMode{istioconfig.MTLSStrict, istioconfig.MTLSPermissive, istioconfig.MTLSDisable}

func apiMode(m istioconfig.MTLSMode) security.PeerAuthentication_MutualTLS_Mode {
	return security.PeerAuthentication_MutualTLS_Mode(security.PeerAuthentication_MutualTLS_Mode_value[string(m)])
}

func TestOptionsDefaultMTLS(t *testing.T) {
	if got := (Options{Security: true}).DefaultMTLS(); got != istioconfig.MTLSStrict {
		t.Errorf("Security: %s, want STRICT", got)
	}
	if got := (Options{}).DefaultMTLS(); got != istioconfig.MTLSDisable {
		t.Errorf("no Security: %s, want DISABLE", got)
	}
}

// TestSidecarInboundPerMode: a mesh-wide PeerAuthentication decides every
// port's chains, whatever the hub's default; without one the default
// does.
func TestSidecarInboundPerMode(t *testing.T) {
	for _, icpt := range []Interception{InterceptRedirect, InterceptNone} {
		for _, m := range allModes {
			for _, sec := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/default-strict=%t", icpt, m, sec), func(t *testing.T) {
					sc := sidecarOf(icpt)
					sc.Security = meshWide(apiMode(m))
					byPort := inboundByPort(t, sc, Options{Security: sec})
					for _, p := range sc.Inbound {
						checkPortChains(t, sc, p, byPort[p.Port], chainsOfMode(m))
					}
				})
			}
		}
		for _, sec := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/no-policy/default-strict=%t", icpt, sec), func(t *testing.T) {
				sc := sidecarOf(icpt)
				// A policy that leaves the mode UNSET is no policy.
				sc.Security = meshWide(security.PeerAuthentication_MutualTLS_UNSET)
				want := chainsOfMode(map[bool]istioconfig.MTLSMode{false: istioconfig.MTLSDisable, true: istioconfig.MTLSStrict}[sec])
				byPort := inboundByPort(t, sc, Options{Security: sec})
				for _, p := range sc.Inbound {
					checkPortChains(t, sc, p, byPort[p.Port], want)
				}
			})
		}
	}
}

// TestSidecarInboundPortLevel: the workload policy's port-level modes,
// keyed by the workload (target) port, override the rest per port; a key
// that is a service port (7070 targets 7071) applies to nothing.
func TestSidecarInboundPortLevel(t *testing.T) {
	ws := istioconfig.WorkloadSecurity{
		Mesh:      peerAuthn("mesh", false, security.PeerAuthentication_MutualTLS_STRICT, nil),
		Namespace: peerAuthn("ns", false, security.PeerAuthentication_MutualTLS_DISABLE, nil),
		Workload: peerAuthn("echo", true, security.PeerAuthentication_MutualTLS_PERMISSIVE, map[uint32]security.PeerAuthentication_MutualTLS_Mode{
			7070: security.PeerAuthentication_MutualTLS_DISABLE,
			8081: security.PeerAuthentication_MutualTLS_DISABLE,
			9001: security.PeerAuthentication_MutualTLS_STRICT,
		}),
	}
	want := map[uint32]istioconfig.MTLSMode{7071: istioconfig.MTLSPermissive, 8081: istioconfig.MTLSDisable, 9001: istioconfig.MTLSStrict}
	for _, icpt := range []Interception{InterceptRedirect, InterceptTProxy, InterceptNone} {
		t.Run(string(icpt), func(t *testing.T) {
			sc := sidecarOf(icpt)
			sc.Security = ws
			byPort := inboundByPort(t, sc, Options{Security: true})
			if len(byPort) != len(want) {
				t.Fatalf("chains for ports %v, want %v", byPort, want)
			}
			for _, p := range sc.Inbound {
				checkPortChains(t, sc, p, byPort[p.Port], chainsOfMode(want[p.Port]))
			}
		})
	}
}

// TestSidecarInboundTLSInspector: the inspector is there when a chain
// matches on transport and only then; in NONE mode per bound listener.
func TestSidecarInboundTLSInspector(t *testing.T) {
	hasInspector := func(l *listenerv3.Listener) bool {
		return slices.ContainsFunc(l.GetListenerFilters(), func(f *listenerv3.ListenerFilter) bool { return f.GetName() == filterTLSInspector })
	}
	onePermissive := istioconfig.WorkloadSecurity{
		Workload: peerAuthn("echo", true, security.PeerAuthentication_MutualTLS_DISABLE, map[uint32]security.PeerAuthentication_MutualTLS_Mode{
			9001: security.PeerAuthentication_MutualTLS_PERMISSIVE,
		}),
	}
	for _, tc := range []struct {
		name string
		ws   istioconfig.WorkloadSecurity
		want map[string]bool // listener name → inspector
	}{
		{"all-disable", meshWide(security.PeerAuthentication_MutualTLS_DISABLE), map[string]bool{
			VirtualInboundListenerName: false, "10.1.0.1_7071": false, "10.1.0.1_8081": false, "10.1.0.1_9001": false,
		}},
		{"one-permissive", onePermissive, map[string]bool{
			VirtualInboundListenerName: true, "10.1.0.1_7071": false, "10.1.0.1_8081": false, "10.1.0.1_9001": true,
		}},
		{"all-strict", meshWide(security.PeerAuthentication_MutualTLS_STRICT), map[string]bool{
			VirtualInboundListenerName: true, "10.1.0.1_7071": true, "10.1.0.1_8081": true, "10.1.0.1_9001": true,
		}},
	} {
		for _, icpt := range []Interception{InterceptRedirect, InterceptNone} {
			sc := sidecarOf(icpt)
			sc.Security = tc.ws
			seen := 0
			for _, l := range SidecarListeners(sidecarServices(), sc, Options{Security: true}) {
				want, ok := tc.want[l.GetName()]
				if !ok {
					if hasInspector(l) {
						t.Errorf("%s/%s: outbound %s has a TLS inspector", tc.name, icpt, l.GetName())
					}
					continue
				}
				seen++
				if hasInspector(l) != want {
					t.Errorf("%s/%s: %s TLS inspector %t, want %t", tc.name, icpt, l.GetName(), hasInspector(l), want)
				}
				if l.GetName() == VirtualInboundListenerName && l.GetListenerFilters()[0].GetName() != filterOriginalDst {
					t.Errorf("%s: virtualInbound's first listener filter is %s, want original_dst", tc.name, l.GetListenerFilters()[0].GetName())
				}
			}
			if want := map[bool]int{false: 1, true: 3}[icpt == InterceptNone]; seen != want {
				t.Errorf("%s/%s: %d inbound listeners, want %d", tc.name, icpt, seen, want)
			}
		}
	}
}

// fakeAuthz stands for the authorization filters: an HTTP and a network
// RBAC filter, each with an empty DENY rule set.
func fakeAuthz() inboundAuthz {
	rules := &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_DENY}
	return inboundAuthz{
		http: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.rbac",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&rbachttpv3.RBAC{Rules: rules})},
		}},
		network: []*listenerv3.Filter{networkFilter("envoy.filters.network.rbac", &rbacnetv3.RBAC{Rules: rules, StatPrefix: "rbac"})},
	}
}

// TestInboundChainsAuthzPlacement: the authorization filters run before
// the router (HTTP) and before the TCP proxy (TCP), on the TLS and the
// plaintext chain alike, and no two chains share a filter message.
func TestInboundChainsAuthzPlacement(t *testing.T) {
	az := fakeAuthz()
	for _, p := range []InboundPort{{Port: 8081, Protocol: model.ProtocolHTTP}, {Port: 7071, Protocol: model.ProtocolGRPC}, {Port: 9001, Protocol: model.ProtocolTCP}} {
		chains := inboundChains("0.0.0.0_"+fmt.Sprint(p.Port), p, istioconfig.MTLSPermissive, az)
		if len(chains) != 2 {
			t.Fatalf("port %d: %d chains, want 2", p.Port, len(chains))
		}
		for _, fc := range chains {
			if !isHTTP(p.Protocol) {
				got := namesOfFilters(fc.GetFilters())
				if want := []string{"envoy.filters.network.rbac", filterTCPProxy}; !slices.Equal(got, want) {
					t.Errorf("%s: network filters %v, want %v", fc.GetName(), got, want)
				}
				if fc.GetFilters()[0] == az.network[0] {
					t.Errorf("%s: network filter shared with the input", fc.GetName())
				}
				if !proto.Equal(fc.GetFilters()[0], az.network[0]) {
					t.Errorf("%s: network filter changed", fc.GetName())
				}
				continue
			}
			h := hcmOf(t, fc)
			var got []string
			for _, f := range h.GetHttpFilters() {
				got = append(got, f.GetName())
			}
			if want := []string{"envoy.filters.http.rbac", routerFilterName}; !slices.Equal(got, want) {
				t.Errorf("%s: HTTP filters %v, want %v", fc.GetName(), got, want)
			}
		}
		if !isHTTP(p.Protocol) && chains[0].GetFilters()[0] == chains[1].GetFilters()[0] {
			t.Errorf("port %d: TLS and plaintext chains share a filter", p.Port)
		}
	}
	// The inputs are untouched.
	if len(az.http) != 1 || len(az.network) != 1 {
		t.Errorf("inputs modified: %d HTTP, %d network filters", len(az.http), len(az.network))
	}
}

func namesOfFilters(fs []*listenerv3.Filter) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.GetName()
	}
	return out
}

// TestSidecarInboundAuthzFilters: every inbound chain carries exactly what
// AuthzHTTPFilters (ProxyEnvoy) or AuthzNetworkFilters make of the pod's
// policies, then the router or the TCP proxy; outbound listeners none.
func TestSidecarInboundAuthzFilters(t *testing.T) {
	opts := Options{Security: true}
	policies := denyEvil()
	wantHTTP := AuthzHTTPFilters(policies, ProxyEnvoy, opts)
	wantNet := AuthzNetworkFilters(policies, opts)
	if len(wantHTTP) == 0 || len(wantNet) == 0 {
		t.Fatalf("a DENY policy gives %d HTTP and %d network filters, want some of each", len(wantHTTP), len(wantNet))
	}
	for _, icpt := range []Interception{InterceptRedirect, InterceptNone} {
		sc := sidecarOf(icpt)
		sc.Security = istioconfig.WorkloadSecurity{Mesh: meshWide(security.PeerAuthentication_MutualTLS_PERMISSIVE).Mesh, AuthorizationPolicies: policies}
		byPort := inboundByPort(t, sc, opts)
		for _, p := range sc.Inbound {
			for _, fc := range byPort[p.Port] {
				if !isHTTP(p.Protocol) {
					fs := fc.GetFilters()
					if len(fs) != len(wantNet)+1 || fs[len(fs)-1].GetName() != filterTCPProxy {
						t.Errorf("%s: network filters %v, want %d authz filters and tcp_proxy", fc.GetName(), namesOfFilters(fs), len(wantNet))
						continue
					}
					for i, f := range wantNet {
						if !proto.Equal(fs[i], f) {
							t.Errorf("%s: network filter %d is not AuthzNetworkFilters' %s", fc.GetName(), i, f.GetName())
						}
					}
					continue
				}
				fs := hcmOf(t, fc).GetHttpFilters()
				if len(fs) != len(wantHTTP)+1 || fs[len(fs)-1].GetName() != routerFilterName {
					t.Errorf("%s: %d HTTP filters, want %d authz filters and the router", fc.GetName(), len(fs), len(wantHTTP))
					continue
				}
				for i, f := range wantHTTP {
					if !proto.Equal(fs[i], f) {
						t.Errorf("%s: HTTP filter %d is not AuthzHTTPFilters' %s", fc.GetName(), i, f.GetName())
					}
				}
			}
		}
	}
}

// proxylessTLS reports whether l's single chain requires mTLS, failing on
// anything grpc-go would not serve.
func proxylessTLS(t *testing.T, l *listenerv3.Listener) bool {
	t.Helper()
	if len(l.GetFilterChains()) != 1 || len(l.GetListenerFilters()) != 0 {
		t.Fatalf("%s: %d chains and listener filters %v, want one chain and none", l.GetName(), len(l.GetFilterChains()), l.GetListenerFilters())
	}
	fc := l.GetFilterChains()[0]
	// grpc-go drops a chain matching a transport other than "" or
	// "raw_buffer", and any destination_port match.
	if m := fc.GetFilterChainMatch(); m.GetTransportProtocol() != "" || m.GetDestinationPort() != nil {
		t.Errorf("%s: chain match %v, which grpc-go drops", l.GetName(), m)
	}
	ts := fc.GetTransportSocket()
	if ts == nil {
		return false
	}
	dtc := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(dtc); err != nil {
		t.Fatal(err)
	}
	if !dtc.GetRequireClientCertificate().GetValue() || dtc.GetCommonTlsContext().GetTlsCertificateProviderInstance().GetInstanceName() != xdsnode.CertProviderInstance {
		t.Errorf("%s: TLS without client certificates or without the %q provider", l.GetName(), xdsnode.CertProviderInstance)
	}
	return true
}

// TestProxylessInboundModes: a gRPC server's port needs mTLS under STRICT,
// and under PERMISSIVE when its Pod is injected (grpc-go cannot serve
// both on one port; an uninjected Pod's clients speak plaintext), plaintext
// under DISABLE, the hub's default where no policy sets a mode; the
// workload policy's port level counts for the listening port.
func TestProxylessInboundModes(t *testing.T) {
	addr := netip.MustParseAddrPort("10.2.0.1:50051")
	for _, sec := range []bool{false, true} {
		opts := Options{Security: sec}
		for _, tc := range []struct {
			name string
			ws   istioconfig.WorkloadSecurity
			mtls bool
		}{
			{"strict", meshWide(security.PeerAuthentication_MutualTLS_STRICT), true},
			{"permissive", asInjected(meshWide(security.PeerAuthentication_MutualTLS_PERMISSIVE)), true},
			{"permissive-uninjected", meshWide(security.PeerAuthentication_MutualTLS_PERMISSIVE), false},
			{"disable", meshWide(security.PeerAuthentication_MutualTLS_DISABLE), false},
			{"unset", meshWide(security.PeerAuthentication_MutualTLS_UNSET), sec},
			{"none", istioconfig.WorkloadSecurity{}, sec},
			{"port-level-disable", istioconfig.WorkloadSecurity{
				Workload: peerAuthn("echo", true, security.PeerAuthentication_MutualTLS_STRICT, map[uint32]security.PeerAuthentication_MutualTLS_Mode{50051: security.PeerAuthentication_MutualTLS_DISABLE}),
			}, false},
			{"port-level-other-port", istioconfig.WorkloadSecurity{
				Workload: peerAuthn("echo", true, security.PeerAuthentication_MutualTLS_STRICT, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: security.PeerAuthentication_MutualTLS_DISABLE}),
			}, true},
		} {
			l := InboundListener(addr, tc.ws, opts)
			if got := proxylessTLS(t, l); got != tc.mtls {
				t.Errorf("%s, default-strict=%t: mTLS %t, want %t", tc.name, sec, got, tc.mtls)
			}
			if _, errs := validateDeep(l); len(errs) != 0 {
				t.Errorf("%s: %v", tc.name, errs)
			}
		}
	}
}

// TestProxylessInboundAuthzFilters: the inline HCM carries
// AuthzHTTPFilters(ProxyGRPC) and then the router, which grpc-go requires
// last.
func TestProxylessInboundAuthzFilters(t *testing.T) {
	opts := Options{Security: true}
	policies := denyEvil()
	want := AuthzHTTPFilters(policies, ProxyGRPC, opts)
	if len(want) == 0 {
		t.Fatal("a DENY policy gives no HTTP filter")
	}
	l := InboundListener(netip.MustParseAddrPort("10.2.0.1:50051"), istioconfig.WorkloadSecurity{AuthorizationPolicies: policies}, opts)
	h := hcmOf(t, l.GetFilterChains()[0])
	fs := h.GetHttpFilters()
	if len(fs) != len(want)+1 || fs[len(fs)-1].GetName() != routerFilterName {
		t.Fatalf("%d HTTP filters ending in %q, want %d authz filters and the router", len(fs), fs[len(fs)-1].GetName(), len(want))
	}
	for i, f := range want {
		if !proto.Equal(fs[i], f) {
			t.Errorf("HTTP filter %d is not AuthzHTTPFilters' %s", i, f.GetName())
		}
	}
}

// TestInboundSecurityValidateAll checks the inbound listeners of every
// mode mix, and every message packed inside them, against the envoy
// protos' validation rules.
func TestInboundSecurityValidateAll(t *testing.T) {
	mixed := istioconfig.WorkloadSecurity{
		Workload: peerAuthn("echo", true, security.PeerAuthentication_MutualTLS_PERMISSIVE, map[uint32]security.PeerAuthentication_MutualTLS_Mode{
			8081: security.PeerAuthentication_MutualTLS_DISABLE, 9001: security.PeerAuthentication_MutualTLS_STRICT,
		}),
		AuthorizationPolicies: denyEvil(),
	}
	cases := []istioconfig.WorkloadSecurity{mixed}
	for _, m := range allModes {
		ws := meshWide(apiMode(m))
		ws.AuthorizationPolicies = denyEvil()
		cases = append(cases, ws)
	}
	for _, ws := range cases {
		for _, icpt := range sidecarModes {
			for _, sec := range []bool{false, true} {
				sc := sidecarOf(icpt)
				sc.Security = ws
				for _, l := range SidecarListeners(sidecarServices(), sc, Options{Security: sec}) {
					if _, errs := validateDeep(l); len(errs) != 0 {
						t.Errorf("%s %s: %v", icpt, l.GetName(), errs)
					}
				}
			}
		}
		for _, sec := range []bool{false, true} {
			l := InboundListener(netip.MustParseAddrPort("[fd00::1]:8080"), ws, Options{Security: sec})
			if _, errs := validateDeep(l); len(errs) != 0 {
				t.Errorf("proxyless %s: %v", l.GetName(), errs)
			}
		}
	}
}

// asInjected is ws for a Pod labelled TLSModeLabel=TLSModeIstio.
func asInjected(ws istioconfig.WorkloadSecurity) istioconfig.WorkloadSecurity {
	ws.Injected = true
	return ws
}
