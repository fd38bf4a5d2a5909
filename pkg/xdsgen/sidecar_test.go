package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/pkg/model"
)

var sidecarModes = []Interception{InterceptRedirect, InterceptTProxy, InterceptNone}

// sidecarCase is one sidecar of the fixture under one set of options.
type sidecarCase struct {
	name string
	sc   Sidecar
	opts Options
}

// sidecarCases are the golden cases: every mode, with and without mTLS.
func sidecarCases() []sidecarCase {
	var out []sidecarCase
	for _, m := range sidecarModes {
		for _, sec := range []bool{false, true} {
			name := "sidecar_" + strings.ToLower(string(m))
			if sec {
				name += "_mtls"
			}
			out = append(out, sidecarCase{name, sidecarOf(m), Options{Security: sec}})
		}
	}
	return out
}

func TestGoldenSidecar(t *testing.T) {
	for _, tc := range sidecarCases() {
		t.Run(tc.name, func(t *testing.T) {
			services := sidecarServices()
			if tc.opts.Security {
				// Injected Pods, so that the outbound clusters show auto
				// mutual TLS.
				services = injectedServices(services)
			}
			got := render(t,
				section{"listeners", asMessages(SidecarListeners(services, tc.sc, tc.opts))},
				section{"routes", asMessages(SidecarRoutes(services, nil, tc.opts))},
				section{"clusters", asMessages(SidecarClusters(services, nil, tc.sc, tc.opts))},
			)
			checkGolden(t, tc.name, got)
		})
	}
}

func TestSidecarInbound(t *testing.T) {
	pod := netip.MustParseAddr("10.1.0.1")
	httpSvc := sidecarEcho()
	// A TCP service targeting the pod's 8081 too: HTTP wins the port.
	tcpOn8081 := mergedOf(&model.Service{
		Hostname: "aaa.demo.svc.cluster.local", Name: "aaa", Namespace: "demo",
		Ports: []model.ServicePort{{Name: "raw", Port: 1234, Protocol: model.ProtocolTCP}},
	},
		model.Endpoint{Cluster: "cluster-1", Address: pod, Ports: map[string]uint32{"raw": 8081}},
		// The same IP in another cluster is another pod.
		model.Endpoint{Cluster: "cluster-2", Address: pod, Ports: map[string]uint32{"raw": 5555}},
	)
	unready := mergedOf(&model.Service{
		Hostname: "zzz.demo.svc.cluster.local", Name: "zzz", Namespace: "demo",
		Ports: []model.ServicePort{
			{Name: "t", Port: 1, Protocol: model.ProtocolTCP},
			{Name: "absent", Port: 2, Protocol: model.ProtocolHTTP},
		},
	},
		// Unready still serves; a port name the endpoint lacks is no port.
		model.Endpoint{Cluster: "cluster-1", Address: netip.MustParseAddr("::ffff:10.1.0.1"), Ready: false, Ports: map[string]uint32{"t": 6000}},
	)
	services := []*model.MergedService{unready, httpSvc, tcpOn8081, sidecarTCPEcho()}
	got := SidecarInbound(services, "cluster-1", pod)
	want := []InboundPort{
		{Port: 6000, Protocol: model.ProtocolTCP},
		{Port: 7071, Protocol: model.ProtocolGRPC},
		{Port: 8081, Protocol: model.ProtocolHTTP},
		{Port: 9001, Protocol: model.ProtocolTCP},
	}
	if !slices.Equal(got, want) {
		t.Errorf("SidecarInbound = %v, want %v", got, want)
	}
	if got := SidecarInbound(services, "cluster-3", pod); len(got) != 0 {
		t.Errorf("pod in a cluster without endpoints serves %v, want nothing", got)
	}
	if got := SidecarInbound(services, "cluster-1", netip.Addr{}); len(got) != 0 {
		t.Errorf("invalid IP serves %v, want nothing", got)
	}
}

// namesOf returns the names of rs.
func namesOf[T named](rs []T) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.GetName()
	}
	return out
}

func TestSidecarListenerNamesPerMode(t *testing.T) {
	for _, tc := range []struct {
		mode Interception
		want []string
	}{
		{InterceptRedirect, []string{"0.0.0.0_7070", "0.0.0.0_8080", "0.0.0.0_9000", "virtualInbound", "virtualOutbound"}},
		{InterceptTProxy, []string{"0.0.0.0_7070", "0.0.0.0_8080", "0.0.0.0_9000", "virtualInbound", "virtualOutbound"}},
		{"", []string{"0.0.0.0_7070", "0.0.0.0_8080", "0.0.0.0_9000", "virtualInbound", "virtualOutbound"}},
		{InterceptNone, []string{"10.1.0.1_7071", "10.1.0.1_8081", "10.1.0.1_9001", "127.0.0.1_7070", "127.0.0.1_8080", "127.0.0.1_9000"}},
	} {
		got := namesOf(SidecarListeners(sidecarServices(), sidecarOf(tc.mode), Options{}))
		if !slices.Equal(got, tc.want) {
			t.Errorf("mode %q: listeners %v, want %v", tc.mode, got, tc.want)
		}
	}
}

func TestSidecarBindingPerMode(t *testing.T) {
	for _, m := range sidecarModes {
		for _, l := range SidecarListeners(sidecarServices(), sidecarOf(m), Options{}) {
			bound := l.GetBindToPort() == nil || l.GetBindToPort().GetValue()
			virtual := l.GetName() == VirtualInboundListenerName || l.GetName() == VirtualOutboundListenerName
			addr := l.GetAddress().GetSocketAddress().GetAddress()
			switch {
			case m == InterceptNone && !bound:
				t.Errorf("NONE: %s does not bind", l.GetName())
			case m != InterceptNone && virtual != bound:
				t.Errorf("%s: %s bound=%t, want only the virtual listeners bound", m, l.GetName(), bound)
			case m == InterceptNone && l.GetTrafficDirection() == corev3.TrafficDirection_OUTBOUND && addr != "127.0.0.1":
				t.Errorf("NONE: outbound %s on %s, want 127.0.0.1", l.GetName(), addr)
			case m == InterceptNone && l.GetTrafficDirection() == corev3.TrafficDirection_INBOUND && addr != sidecarPodIP.String():
				t.Errorf("NONE: inbound %s on %s, want the pod IP", l.GetName(), addr)
			}
			if want := m == InterceptTProxy && virtual; l.GetTransparent().GetValue() != want {
				t.Errorf("%s: %s transparent=%t, want %t", m, l.GetName(), l.GetTransparent().GetValue(), want)
			}
			if l.GetUseOriginalDst().GetValue() != (l.GetName() == VirtualOutboundListenerName) {
				t.Errorf("%s: %s use_original_dst=%t, want it on virtualOutbound only", m, l.GetName(), l.GetUseOriginalDst().GetValue())
			}
		}
	}
}

// hcmOf and tcpOf unpack the single network filter of a chain.
func hcmOf(t *testing.T, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	t.Helper()
	h := &hcmv3.HttpConnectionManager{}
	if len(fc.GetFilters()) != 1 || fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(h) != nil {
		t.Fatalf("chain %q: want one HttpConnectionManager, have %v", fc.GetName(), fc.GetFilters())
	}
	return h
}

func tcpOf(t *testing.T, fc *listenerv3.FilterChain) *tcpproxyv3.TcpProxy {
	t.Helper()
	p := &tcpproxyv3.TcpProxy{}
	if len(fc.GetFilters()) != 1 || fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(p) != nil {
		t.Fatalf("chain %q: want one TcpProxy, have %v", fc.GetName(), fc.GetFilters())
	}
	return p
}

func listenerNamed(t *testing.T, ls []*listenerv3.Listener, name string) *listenerv3.Listener {
	t.Helper()
	for _, l := range ls {
		if l.GetName() == name {
			return l
		}
	}
	t.Fatalf("no listener %q among %v", name, namesOf(ls))
	return nil
}

func TestSidecarPortSharing(t *testing.T) {
	services := []*model.MergedService{
		svcOn("b-tcp", "demo", 9000, model.ProtocolTCP),
		svcOn("a-tcp", "demo", 9000, model.ProtocolTCP),
		svcOn("z-http", "demo", 8080, model.ProtocolHTTP),
		svcOn("a-tcp-on-http", "demo", 8080, model.ProtocolTCP),
		svcOn("y-grpc", "demo", 8080, model.ProtocolGRPC),
	}
	ls := SidecarListeners(services, Sidecar{}, Options{})
	// Two TCP services on 9000: the first by hostname takes the port.
	if got := tcpOf(t, listenerNamed(t, ls, "0.0.0.0_9000").GetFilterChains()[0]).GetCluster(); got != "outbound|9000||a-tcp.demo.svc.cluster.local" {
		t.Errorf("TCP port 9000 goes to %s, want a-tcp", got)
	}
	// HTTP wins a port shared with TCP, and routes to each HTTP service.
	h := hcmOf(t, listenerNamed(t, ls, "0.0.0.0_8080").GetFilterChains()[0])
	if got := h.GetRds().GetRouteConfigName(); got != "8080" {
		t.Errorf("port 8080 route %q, want 8080", got)
	}
	rs := SidecarRoutes(services, nil, Options{})
	if got := namesOf(rs); !slices.Equal(got, []string{"8080"}) {
		t.Fatalf("routes %v, want [8080]", got)
	}
	if got := namesOf(rs[0].GetVirtualHosts()); !slices.Equal(got, []string{"y-grpc.demo.svc.cluster.local:8080", "z-http.demo.svc.cluster.local:8080"}) {
		t.Errorf("virtual hosts %v, want y-grpc and z-http", got)
	}
	// Every service port still has its cluster.
	cs := namesOf(SidecarClusters(services, nil, Sidecar{}, Options{}))
	for _, ms := range services {
		if name := ClusterName(ms.Service.Hostname, ms.Service.Ports[0].Port); !slices.Contains(cs, name) {
			t.Errorf("no cluster %s among %v", name, cs)
		}
	}
}

func TestSidecarRoutesAmbiguousShortNames(t *testing.T) {
	services := []*model.MergedService{
		svcOn("echo", "a", 8080, model.ProtocolHTTP),
		svcOn("echo", "b", 8080, model.ProtocolHTTP),
	}
	rs := SidecarRoutes(services, nil, Options{})
	if len(rs) != 1 || len(rs[0].GetVirtualHosts()) != 2 {
		t.Fatalf("want one route with two virtual hosts, got %v", rs)
	}
	seen := map[string]string{}
	for _, vh := range rs[0].GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			if other, dup := seen[d]; dup {
				t.Errorf("domain %q in %s and %s (Envoy rejects the route)", d, other, vh.GetName())
			}
			seen[d] = vh.GetName()
		}
	}
	for _, d := range []string{"echo", "echo:8080"} {
		if _, ok := seen[d]; ok {
			t.Errorf("ambiguous domain %q kept", d)
		}
	}
	for _, d := range []string{"echo.a", "echo.b:8080", "echo.a.svc", "echo.b.svc.cluster.local:8080"} {
		if _, ok := seen[d]; !ok {
			t.Errorf("unambiguous domain %q dropped", d)
		}
	}
}

func TestSidecarNoneSkipsServedAndReservedPorts(t *testing.T) {
	services := []*model.MergedService{
		svcOn("self", "demo", 8080, model.ProtocolHTTP),
		svcOn("other", "demo", 9090, model.ProtocolHTTP),
		svcOn("agent", "demo", 15021, model.ProtocolHTTP),
	}
	sc := Sidecar{
		IP:           netip.MustParseAddr("10.0.0.7"),
		Interception: InterceptNone,
		Inbound:      []InboundPort{{Port: 8080, Protocol: model.ProtocolHTTP}, {Port: 15090, Protocol: model.ProtocolHTTP}},
	}
	got := namesOf(SidecarListeners(services, sc, Options{}))
	want := []string{"10.0.0.7_8080", "127.0.0.1_9090"}
	if !slices.Equal(got, want) {
		t.Errorf("NONE listeners %v, want %v (8080 is the app's, 15021 and 15090 are reserved)", got, want)
	}
	if got := namesOf(SidecarRoutes(services, nil, Options{})); !slices.Equal(got, []string{"8080", "9090"}) {
		t.Errorf("routes %v, want [8080 9090]", got)
	}
	cs := namesOf(SidecarClusters(services, nil, sc, Options{}))
	if slices.Contains(cs, InboundClusterName(15090)) || !slices.Contains(cs, InboundClusterName(8080)) {
		t.Errorf("clusters %v: want inbound|8080|| and no inbound cluster on reserved 15090", cs)
	}
	// Without a usable IP there is nothing to bind inbound.
	sc.IP = netip.Addr{}
	if got := namesOf(SidecarListeners(services, sc, Options{})); !slices.Equal(got, []string{"127.0.0.1_9090"}) {
		t.Errorf("NONE without IP: %v, want only the outbound 127.0.0.1_9090", got)
	}
	// REDIRECT has no such conflict: the pod's own port is outbound too.
	sc.Interception = InterceptRedirect
	if got := namesOf(SidecarListeners(services, sc, Options{})); !slices.Contains(got, "0.0.0.0_8080") {
		t.Errorf("REDIRECT listeners %v lack 0.0.0.0_8080", got)
	}
}

func TestSidecarInboundChains(t *testing.T) {
	for _, m := range sidecarModes {
		for _, sec := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/security=%t", m, sec), func(t *testing.T) {
				sc := sidecarOf(m)
				var chains []*listenerv3.FilterChain
				for _, l := range SidecarListeners(sidecarServices(), sc, Options{Security: sec}) {
					if l.GetTrafficDirection() != corev3.TrafficDirection_INBOUND {
						continue
					}
					if l.GetDefaultFilterChain() != nil {
						t.Errorf("%s has a default chain: unmatched (plaintext) traffic must be refused", l.GetName())
					}
					hasInspector := slices.ContainsFunc(l.GetListenerFilters(), func(f *listenerv3.ListenerFilter) bool { return f.GetName() == filterTLSInspector })
					if hasInspector != sec {
						t.Errorf("%s: TLS inspector %t, want %t", l.GetName(), hasInspector, sec)
					}
					chains = append(chains, l.GetFilterChains()...)
				}
				if len(chains) != len(sc.Inbound) {
					t.Fatalf("%d inbound chains for %d ports", len(chains), len(sc.Inbound))
				}
				for i, fc := range chains {
					p := sc.Inbound[i]
					if m != InterceptNone && fc.GetFilterChainMatch().GetDestinationPort().GetValue() != p.Port {
						t.Errorf("chain %s matches port %v, want %d", fc.GetName(), fc.GetFilterChainMatch().GetDestinationPort(), p.Port)
					}
					if got := fc.GetTransportSocket() != nil; got != sec {
						t.Errorf("chain %s: TLS %t, want %t", fc.GetName(), got, sec)
					}
					if sec {
						dtc := &tlsv3.DownstreamTlsContext{}
						if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(dtc); err != nil {
							t.Fatal(err)
						}
						if !dtc.GetRequireClientCertificate().GetValue() || fc.GetFilterChainMatch().GetTransportProtocol() != "tls" {
							t.Errorf("chain %s: client certificate not required on a TLS-only match", fc.GetName())
						}
					}
					if !isHTTP(p.Protocol) {
						if got := tcpOf(t, fc).GetCluster(); got != InboundClusterName(p.Port) {
							t.Errorf("TCP chain %s to %s", fc.GetName(), got)
						}
						continue
					}
					h := hcmOf(t, fc)
					if h.GetForwardClientCertDetails() != hcmv3.HttpConnectionManager_SANITIZE_SET || !h.GetSetCurrentClientCertDetails().GetUri() {
						t.Errorf("chain %s does not set x-forwarded-client-cert from the client's URI SAN", fc.GetName())
					}
					if got := h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != InboundClusterName(p.Port) {
						t.Errorf("HTTP chain %s routes to %s", fc.GetName(), got)
					}
				}
			})
		}
	}
}

func TestSidecarClustersSecurity(t *testing.T) {
	cs := SidecarClusters(injectedServices(sidecarServices()), nil, sidecarOf(InterceptRedirect), Options{Security: true, TrustDomain: "example.org"})
	for _, c := range cs {
		outbound := strings.HasPrefix(c.GetName(), "outbound|")
		if c.GetTransportSocket() != nil {
			t.Errorf("cluster %s: a transport socket, want none (outbound: matches)", c.GetName())
		}
		if (c.GetTransportSocketMatches() != nil) != outbound {
			t.Errorf("cluster %s: TLS %t, want it on outbound clusters only", c.GetName(), c.GetTransportSocketMatches() != nil)
		}
		if !outbound {
			continue
		}
		// The rest of the shape: TestSidecarAutoMTLS (checkAutoMatches).
		m := c.GetTransportSocketMatches()
		if len(m) != 2 || m[0].GetName() != "tlsMode-istio" || m[1].GetTransportSocket().GetName() != "envoy.transport_sockets.raw_buffer" {
			t.Fatalf("%s: transport socket matches %v", c.GetName(), m)
		}
		host, port, err := ParseClusterName(c.GetName())
		if err != nil {
			t.Fatal(err)
		}
		utc := &tlsv3.UpstreamTlsContext{}
		if err := m[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(utc); err != nil {
			t.Fatal(err)
		}
		if want := SidecarSNI(host, port); utc.GetSni() != want {
			t.Errorf("%s: SNI %q, want %q", c.GetName(), utc.GetSni(), want)
		}
		ctx := utc.GetCommonTlsContext()
		wantALPN := []string{"istio"}
		if port == 7070 {
			wantALPN = []string{"istio", "h2"}
		}
		if !slices.Equal(ctx.GetAlpnProtocols(), wantALPN) {
			t.Errorf("%s: ALPN %v, want %v", c.GetName(), ctx.GetAlpnProtocols(), wantALPN)
		}
		sa := strings.Split(string(host), ".")[0]
		var sans []string
		for _, m := range ctx.GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
			sans = append(sans, m.GetMatcher().GetExact())
		}
		if want := []string{"spiffe://example.org/ns/demo/sa/" + sa}; !slices.Equal(sans, want) {
			t.Errorf("%s: SANs %v, want %v", c.GetName(), sans, want)
		}
		secrets := []string{ctx.GetTlsCertificateSdsSecretConfigs()[0].GetName(), ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName()}
		if !slices.Equal(secrets, []string{"default", "ROOTCA"}) {
			t.Errorf("%s: SDS secrets %v", c.GetName(), secrets)
		}
		cluster := ctx.GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
		if cluster != SDSClusterName {
			t.Errorf("%s: SDS from %q, want pilot-agent's %q", c.GetName(), cluster, SDSClusterName)
		}
	}
	// Without Security, and with Security towards Pods without a proxy
	// (no injector label), everything is plaintext.
	for _, tc := range []struct {
		name     string
		services []*model.MergedService
		opts     Options
	}{
		{"plaintext", injectedServices(sidecarServices()), Options{}},
		{"uninjected", sidecarServices(), Options{Security: true}},
	} {
		for _, c := range SidecarClusters(tc.services, nil, sidecarOf(InterceptRedirect), tc.opts) {
			if c.GetTransportSocket() != nil || c.GetTransportSocketMatches() != nil {
				t.Errorf("%s: cluster %s has TLS", tc.name, c.GetName())
			}
		}
	}
}

func TestSidecarClustersShape(t *testing.T) {
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range SidecarClusters(sidecarServices(), nil, sidecarOf(InterceptNone), Options{}) {
		byName[c.GetName()] = c
	}
	want := []string{
		"BlackHoleCluster", "PassthroughCluster",
		"inbound|7071||", "inbound|8081||", "inbound|9001||",
		"outbound|7070||echo.demo.svc.cluster.local", "outbound|8080||echo.demo.svc.cluster.local",
		"outbound|9000||tcp-echo.demo.svc.cluster.local",
	}
	if got := namesOf(SidecarClusters(sidecarServices(), nil, sidecarOf(InterceptNone), Options{})); !slices.Equal(got, want) {
		t.Fatalf("clusters %v, want %v", got, want)
	}
	for name, c := range byName {
		h2 := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey] != nil
		if want := strings.Contains(name, "|7070|") || strings.Contains(name, "|7071|"); h2 != want {
			t.Errorf("%s: HTTP/2 %t, want %t", name, h2, want)
		}
		if strings.HasPrefix(name, "outbound|") && c.GetEdsClusterConfig().GetServiceName() != name {
			t.Errorf("%s: EDS service name %q", name, c.GetEdsClusterConfig().GetServiceName())
		}
	}
	ep := byName["inbound|8081||"].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if ep.GetAddress() != "127.0.0.1" || ep.GetPortValue() != 8081 {
		t.Errorf("inbound|8081|| reaches %s:%d, want 127.0.0.1:8081", ep.GetAddress(), ep.GetPortValue())
	}
	// The EDS names are those of the proxyless clusters, so one
	// LoadAssignments serves both kinds.
	for _, c := range Clusters(sidecarEcho().Service, nil) {
		if byName[c.GetName()] == nil {
			t.Errorf("proxyless cluster %s has no sidecar twin", c.GetName())
		}
	}
}

// TestSidecarDeterministic: the services in any order, with a nil and a
// duplicate among them, give the same resources.
func TestSidecarDeterministic(t *testing.T) {
	orders := [][]*model.MergedService{
		{sidecarEcho(), sidecarTCPEcho()},
		{sidecarTCPEcho(), sidecarEcho()},
		{sidecarTCPEcho(), nil, sidecarEcho(), sidecarEcho()},
	}
	for _, tc := range sidecarCases() {
		var first []proto.Message
		for i, services := range orders {
			var got []proto.Message
			got = append(got, asMessages(SidecarListeners(services, tc.sc, tc.opts))...)
			got = append(got, asMessages(SidecarRoutes(services, nil, tc.opts))...)
			got = append(got, asMessages(SidecarClusters(services, nil, tc.sc, tc.opts))...)
			if i == 0 {
				first = got
				continue
			}
			if !slices.EqualFunc(first, got, proto.Equal) {
				t.Errorf("%s: order %d gives other resources than order 0", tc.name, i)
			}
		}
	}
}

// TestSidecarValidateAll checks every sidecar resource, and every message
// packed in an Any anywhere inside it, against the envoy protos'
// validation rules.
func TestSidecarValidateAll(t *testing.T) {
	extra := []*model.MergedService{
		svcOn("echo", "other", 8080, model.ProtocolHTTP2),
		svcOn("db", "demo", 5432, model.ProtocolTCP),
	}
	for _, tc := range sidecarCases() {
		services := append(sidecarServices(), extra...)
		var msgs []proto.Message
		msgs = append(msgs, asMessages(SidecarListeners(services, tc.sc, tc.opts))...)
		msgs = append(msgs, asMessages(SidecarRoutes(services, nil, tc.opts))...)
		msgs = append(msgs, asMessages(SidecarClusters(services, nil, tc.sc, tc.opts))...)
		// A sidecar serving nothing still gets a valid virtualInbound.
		empty := tc.sc
		empty.Inbound = nil
		msgs = append(msgs, asMessages(SidecarListeners(nil, empty, tc.opts))...)
		n := 0
		for _, m := range msgs {
			k, errs := validateDeep(m)
			for _, err := range errs {
				t.Errorf("%s: %v", tc.name, err)
			}
			n += k
		}
		if n <= len(msgs) {
			t.Fatalf("%s: validated %d messages in %d resources: the walk missed the packed ones", tc.name, n, len(msgs))
		}
	}
}

// validateDeep validates m and every message packed in an Any inside it
// (ValidateAll descends into plain fields, not into Anys), returning how
// many messages it validated and what was wrong. A message without
// validation rules is an error: it is not an Envoy type.
func validateDeep(m proto.Message) (int, []error) {
	n := 0
	errs := walkMessages(m, func(x proto.Message, packed bool) error {
		if !packed {
			return nil
		}
		v, ok := x.(validator)
		if !ok {
			return fmt.Errorf("%T has no validation rules", x)
		}
		n++
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%T: %w", x, err)
		}
		return nil
	})
	return n, errs
}

// walkMessages calls f on m and every message inside it, unpacking Anys;
// packed is true for m itself and for each message unpacked from an Any.
// It returns f's errors and those of Anys of unknown types (a type that is
// not linked in is one Envoy would not know either).
func walkMessages(m proto.Message, f func(x proto.Message, packed bool) error) []error {
	var errs []error
	var walk func(rm protoreflect.Message, packed bool)
	walk = func(rm protoreflect.Message, packed bool) {
		if a, ok := rm.Interface().(*anypb.Any); ok {
			mt, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl())
			if err != nil {
				errs = append(errs, fmt.Errorf("Any of unknown type %s", a.GetTypeUrl()))
				return
			}
			inner := mt.New().Interface()
			if err := a.UnmarshalTo(inner); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
				return
			}
			walk(inner.ProtoReflect(), true)
			return
		}
		if err := f(rm.Interface(), packed); err != nil {
			errs = append(errs, err)
		}
		rm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message(), false)
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), false)
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message(), false)
			}
			return true
		})
	}
	walk(m.ProtoReflect(), true)
	return errs
}

// TestSidecarReferencesResolve: every route a listener fetches is among
// SidecarRoutes, and every cluster a route or TCP proxy names is among
// SidecarClusters (Envoy would send such traffic nowhere, and validates
// neither RDS names nor TCP proxy clusters up front).
func TestSidecarReferencesResolve(t *testing.T) {
	for _, tc := range sidecarCases() {
		services := append(sidecarServices(), svcOn("db", "demo", 5432, model.ProtocolTCP))
		routes := namesOf(SidecarRoutes(services, nil, tc.opts))
		clusters := namesOf(SidecarClusters(services, nil, tc.sc, tc.opts))
		check := func(kind, name string, known []string) {
			if !slices.Contains(known, name) {
				t.Errorf("%s: %s %q is not generated", tc.name, kind, name)
			}
		}
		var msgs []proto.Message
		msgs = append(msgs, asMessages(SidecarListeners(services, tc.sc, tc.opts))...)
		msgs = append(msgs, asMessages(SidecarRoutes(services, nil, tc.opts))...)
		refs := 0
		for _, m := range msgs {
			walkMessages(m, func(x proto.Message, _ bool) error {
				switch x := x.(type) {
				case *hcmv3.Rds:
					check("route", x.GetRouteConfigName(), routes)
				case *tcpproxyv3.TcpProxy:
					check("cluster", x.GetCluster(), clusters)
				case *routev3.RouteAction:
					check("cluster", x.GetCluster(), clusters)
				default:
					return nil
				}
				refs++
				return nil
			})
		}
		if refs == 0 {
			t.Fatalf("%s: found no reference to check", tc.name)
		}
	}
}

// TestValidateDeepFindsNested proves the walk descends into Anys: an
// invalid router filter packed inside an HCM inside a listener is
// reported.
func TestValidateDeepFindsNested(t *testing.T) {
	l := SidecarListeners(sidecarServices(), sidecarOf(InterceptNone), Options{})[0]
	if _, errs := validateDeep(l); len(errs) != 0 {
		t.Fatalf("valid listener: %v", errs)
	}
	h := hcmOf(t, l.GetFilterChains()[0])
	h.HttpFilters[0].Name = "" // HttpFilter.name must not be empty
	l.FilterChains[0].Filters[0] = networkFilter(filterHCM, h)
	if _, errs := validateDeep(l); len(errs) == 0 {
		t.Error("an empty HTTP filter name inside an HCM inside a listener was not reported")
	}
}
