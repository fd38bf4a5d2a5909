package xdsgen

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// gatewayConfig is a snapshot of objs, each "kind ns/name age spec"
// (age in minutes: older objects win).
type gwObj struct {
	kind, ns, name string
	age            int
	spec           string
}

func gatewayConfig(t *testing.T, objs ...gwObj) *istioconfig.Snapshot {
	t.Helper()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []istioconfig.Object
	for _, o := range objs {
		meta := istioconfig.Meta{Key: istioconfig.Key{Kind: o.kind, Namespace: o.ns, Name: o.name}, Generation: 1,
			Created: base.Add(-time.Duration(o.age) * time.Minute)}
		switch o.kind {
		case validate.KindGateway:
			out = append(out, &istioconfig.Gateway{Meta: meta, Spec: decodeSpec(t, o.kind, o.spec).(*networking.Gateway)})
		case validate.KindVirtualService:
			out = append(out, &istioconfig.VirtualService{Meta: meta, Spec: decodeSpec(t, o.kind, o.spec).(*networking.VirtualService)})
		default:
			t.Fatalf("kind %s", o.kind)
		}
	}
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, out)
}

func routerOf(t *testing.T, cfg *istioconfig.Snapshot, labels map[string]string) ([]*listenerv3.Listener, []*routev3.RouteConfiguration, []GatewayNote) {
	t.Helper()
	gws := cfg.GatewaysFor("ingress", model.NewLabels(labels))
	services := []*model.MergedService{fleet(true)}
	ls, notes := RouterListeners(gws, nil, services, cfg, Options{})
	rs := RouterRoutes(gws, nil, services, cfg, Options{})
	for _, l := range ls {
		checkValid(t, "listener "+l.GetName(), l)
	}
	for _, r := range rs {
		checkValid(t, "route "+r.GetName(), r)
	}
	return ls, rs, notes
}

func resNames[T interface{ GetName() string }](rs []T) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	return out
}

func chainHCM(t *testing.T, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, f := range fc.GetFilters() {
		if f.GetName() == filterHCM {
			return unpackAny(t, f.GetTypedConfig()).(*hcmv3.HttpConnectionManager)
		}
	}
	t.Fatalf("chain %v has no HCM", fc.GetName())
	return nil
}

func TestRouterHTTPAndRoutes(t *testing.T) {
	cfg := gatewayConfig(t,
		gwObj{validate.KindGateway, "ingress", "public", 10, `{"selector":{"istio":"ingressgateway"},"servers":[
			{"port":{"number":80,"name":"http","protocol":"HTTP"},"hosts":["*/echo.example.com","./only-ingress.example.com"]},
			{"port":{"number":8443,"name":"redirect","protocol":"HTTP"},"hosts":["*"],"tls":{"httpsRedirect":true}}]}`},
		gwObj{validate.KindGateway, "ingress", "other", 5, `{"selector":{"istio":"other"},"servers":[
			{"port":{"number":81,"name":"http","protocol":"HTTP"},"hosts":["*"]}]}`},
		// Bound by short name in its own namespace? No: demo/public does
		// not exist; ingress/public does.
		gwObj{validate.KindVirtualService, "demo", "echo", 3, `{"hosts":["echo.example.com","*.example.com"],"gateways":["ingress/public"],
			"http":[{"match":[{"uri":{"prefix":"/a"},"gateways":["ingress/other"]}],"route":[{"destination":{"host":"echo"}}]},
			        {"route":[{"destination":{"host":"echo","port":{"number":9090}}}]}]}`},
		gwObj{validate.KindVirtualService, "demo", "mesh-only", 2, `{"hosts":["echo.example.com"],
			"http":[{"route":[{"destination":{"host":"echo"}}]}]}`},
		gwObj{validate.KindVirtualService, "demo", "wrong-ns", 1, `{"hosts":["only-ingress.example.com"],"gateways":["ingress/public"],
			"http":[{"route":[{"destination":{"host":"echo"}}]}]}`},
		gwObj{validate.KindVirtualService, "ingress", "right-ns", 1, `{"hosts":["only-ingress.example.com"],"gateways":["public"],
			"http":[{"route":[{"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":8080}}}]}]}`},
	)
	ls, rs, notes := routerOf(t, cfg, map[string]string{"istio": "ingressgateway", "app": "x"})
	if len(notes) != 0 {
		t.Errorf("notes: %v", notes)
	}
	if got, want := resNames(ls), []string{"0.0.0.0_80", "0.0.0.0_8443"}; !slices.Equal(got, want) {
		t.Fatalf("listeners %v, want %v", got, want)
	}
	if a := ls[0].GetAddress().GetSocketAddress(); a.GetAddress() != "0.0.0.0" || a.GetPortValue() != 80 || ls[0].GetBindToPort() != nil {
		t.Errorf("listener 80 binds %v (bind_to_port %v)", a, ls[0].GetBindToPort())
	}
	hcm := chainHCM(t, ls[0].GetFilterChains()[0])
	if hcm.GetRds().GetRouteConfigName() != "http.80" || !hcm.GetUseRemoteAddress().GetValue() {
		t.Errorf("HCM of 80: rds %q, use_remote_address %v", hcm.GetRds().GetRouteConfigName(), hcm.GetUseRemoteAddress())
	}
	if got, want := resNames(rs), []string{"http.80", "http.8443"}; !slices.Equal(got, want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	var vhosts []string
	for _, vh := range rs[0].GetVirtualHosts() {
		vhosts = append(vhosts, vh.GetName()+"="+strings.Join(vh.GetDomains(), ","))
	}
	if want := []string{"echo.example.com:80=echo.example.com", "only-ingress.example.com:80=only-ingress.example.com"}; !slices.Equal(vhosts, want) {
		t.Errorf("virtual hosts of http.80 %v, want %v", vhosts, want)
	}
	echo := rs[0].GetVirtualHosts()[0]
	// The first rule's match names another gateway: only the second
	// rule's route, to the port it names.
	if len(echo.GetRoutes()) != 1 || echo.GetRoutes()[0].GetRoute().GetCluster() != "outbound|9090||"+string(echoHost) {
		t.Errorf("echo.example.com routes %v", echo.GetRoutes())
	}
	// The ingress-scoped host takes only the VirtualService of the
	// Gateway's namespace; its destination names the port.
	only := rs[0].GetVirtualHosts()[1]
	if len(only.GetRoutes()) != 1 || only.GetRoutes()[0].GetRoute().GetCluster() != "outbound|8080||"+string(echoHost) {
		t.Errorf("only-ingress.example.com routes %v", only.GetRoutes())
	}
	// httpsRedirect: a virtual host requiring TLS for each bound host
	// (the wildcard one included).
	if vhs := rs[1].GetVirtualHosts(); len(vhs) != 3 || vhs[0].GetName() != "*.example.com:8443" || vhs[0].GetRequireTls() != routev3.VirtualHost_ALL {
		t.Errorf("http.8443 virtual hosts %v", vhs)
	}

	// The other Gateway's proxy gets its own port, and the rule that
	// names it; no VirtualService is bound to ingress/other by
	// spec.gateways, so none of it.
	ls, rs, _ = routerOf(t, cfg, map[string]string{"istio": "other"})
	if got := resNames(ls); !slices.Equal(got, []string{"0.0.0.0_81"}) {
		t.Errorf("other gateway's listeners %v", got)
	}
	if len(rs) != 1 || len(rs[0].GetVirtualHosts()) != 0 {
		t.Errorf("other gateway's routes %v", rs)
	}
	// A proxy no Gateway selects gets no listener.
	if ls, _, _ := routerOf(t, cfg, map[string]string{"app": "x"}); len(ls) != 0 {
		t.Errorf("unselected proxy gets %v", resNames(ls))
	}
}

func TestRouterTLS(t *testing.T) {
	cfg := gatewayConfig(t,
		gwObj{validate.KindGateway, "ingress", "tls", 10, `{"selector":{"istio":"ingressgateway"},"servers":[
			{"port":{"number":443,"name":"https-echo","protocol":"HTTPS"},"hosts":["echo.example.com"],"tls":{"mode":"SIMPLE","credentialName":"echo-cert"}},
			{"port":{"number":443,"name":"https-mtls","protocol":"HTTPS"},"hosts":["mtls.example.com"],"tls":{"mode":"MUTUAL","credentialName":"mtls-cert"}},
			{"port":{"number":443,"name":"tls-pass","protocol":"TLS"},"hosts":["pass.example.com"],"tls":{"mode":"PASSTHROUGH"}},
			{"port":{"number":443,"name":"http-clash","protocol":"HTTP"},"hosts":["*"]},
			{"port":{"number":15443,"name":"tls-auto","protocol":"TLS"},"hosts":["*.local"],"tls":{"mode":"AUTO_PASSTHROUGH"}},
			{"port":{"number":9000,"name":"tcp","protocol":"TCP"},"hosts":["*"]}]}`},
		gwObj{validate.KindVirtualService, "ingress", "pass", 3, `{"hosts":["pass.example.com"],"gateways":["tls"],
			"tls":[{"match":[{"sniHosts":["pass.example.com"]}],"route":[{"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":8080}}}]}]}`},
		gwObj{validate.KindVirtualService, "ingress", "tcp", 3, `{"hosts":["*"],"gateways":["tls"],
			"tcp":[{"match":[{"port":9001}],"route":[{"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":8080}}}]},
			       {"match":[{"port":9000}],"route":[{"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":9090}},"weight":30},
			                                          {"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":8080}},"weight":70}]}]}`},
	)
	ls, rs, notes := routerOf(t, cfg, map[string]string{"istio": "ingressgateway"})
	var fields []string
	for _, n := range notes {
		fields = append(fields, n.Field)
	}
	if want := []string{"spec.servers[3].port"}; !slices.Equal(fields, want) {
		t.Errorf("notes %v, want fields %v", notes, want)
	}
	if got, want := resNames(ls), []string{"0.0.0.0_15443", "0.0.0.0_443", "0.0.0.0_9000"}; !slices.Equal(got, want) {
		t.Fatalf("listeners %v, want %v", got, want)
	}
	checkAutoPassthrough(t, ls[0])
	ls = ls[1:]
	tls := ls[0]
	if len(tls.GetListenerFilters()) != 1 || tls.GetListenerFilters()[0].GetName() != filterTLSInspector {
		t.Errorf("443 listener filters %v", tls.GetListenerFilters())
	}
	chains := tls.GetFilterChains()
	if len(chains) != 3 {
		t.Fatalf("443 has %d chains, want 3", len(chains))
	}
	sni := func(fc *listenerv3.FilterChain) string {
		return strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")
	}
	if sni(chains[0]) != "echo.example.com" || chainHCM(t, chains[0]).GetRds().GetRouteConfigName() != "https.443.https-echo.tls.ingress" {
		t.Errorf("first chain %s → %s", sni(chains[0]), chainHCM(t, chains[0]).GetRds().GetRouteConfigName())
	}
	ctx := unpackAny(t, chains[0].GetTransportSocket().GetTypedConfig()).(*tlsv3.DownstreamTlsContext)
	if s := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(s) != 1 || s[0].GetName() != "kubernetes://echo-cert" {
		t.Errorf("SIMPLE secret %v", s)
	}
	if ctx.GetRequireClientCertificate().GetValue() || ctx.GetCommonTlsContext().GetValidationContextType() != nil {
		t.Errorf("SIMPLE asks for client certificates: %v", ctx)
	}
	mctx := unpackAny(t, chains[1].GetTransportSocket().GetTypedConfig()).(*tlsv3.DownstreamTlsContext)
	if !mctx.GetRequireClientCertificate().GetValue() ||
		mctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "kubernetes://mtls-cert-cacert" {
		t.Errorf("MUTUAL context %v", mctx)
	}
	if sni(chains[2]) != "pass.example.com" {
		t.Errorf("passthrough chain SNI %q", sni(chains[2]))
	}
	tp := unpackAny(t, chains[2].GetFilters()[0].GetTypedConfig()).(*tcpproxyv3.TcpProxy)
	if tp.GetCluster() != "outbound|8080||"+string(echoHost) {
		t.Errorf("passthrough to %v", tp)
	}
	tcp := unpackAny(t, ls[1].GetFilterChains()[0].GetFilters()[0].GetTypedConfig()).(*tcpproxyv3.TcpProxy)
	if w := tcp.GetWeightedClusters().GetClusters(); len(w) != 2 || w[0].GetName() != "outbound|9090||"+string(echoHost) || w[0].GetWeight() != 30 {
		t.Errorf("tcp 9000 proxies %v", tcp)
	}
	if got, want := resNames(rs), []string{"https.443.https-echo.tls.ingress", "https.443.https-mtls.tls.ingress"}; !slices.Equal(got, want) {
		t.Errorf("routes %v, want %v", got, want)
	}
}

// TestRouterPlanFollowsGateways: the planner regenerates a router when a
// Gateway or a bound VirtualService changes, and its caches include its
// routes.
func TestRouterPlanFollowsGateways(t *testing.T) {
	gw := gwObj{validate.KindGateway, "ingress", "public", 10, `{"selector":{"istio":"ingressgateway"},"servers":[
		{"port":{"number":80,"name":"http","protocol":"HTTP"},"hosts":["*"]}]}`}
	vs := gwObj{validate.KindVirtualService, "ingress", "echo", 3, `{"hosts":["echo.example.com"],"gateways":["public"],
		"http":[{"route":[{"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":9090}}}]}]}`}
	services := []*model.MergedService{fleet(true)}
	cfg0 := gatewayConfig(t)
	node := SidecarNode{Proxy: Sidecar{Router: true}, Cluster: "cluster-1",
		Claimed: Workload{Namespace: "ingress", Labels: model.NewLabels(map[string]string{"istio": "ingressgateway"})}}
	n, built := BuildSidecar(node, services, cfg0, Options{})
	if len(built[resourcev3.ListenerType]) != 0 || built[resourcev3.RouteType] == nil {
		t.Fatalf("router without Gateways built %v", built)
	}
	p := NewSidecarPlanner(Options{})
	p.Adopt("router~1", n, built, services, cfg0, false)

	cfg1 := gatewayConfig(t, gw)
	plan := p.Plan(nil, services, cfg1, false)
	if ch := plan.Nodes["router~1"][resourcev3.ListenerType]; len(ch.Upsert) != 1 {
		t.Errorf("a new Gateway wrote listeners %v", ch)
	}
	cfg2 := gatewayConfig(t, gw, vs)
	plan = p.Plan(nil, services, cfg2, false)
	ch := plan.Nodes["router~1"][resourcev3.RouteType]
	rc, _ := ch.Upsert["http.80"].(*routev3.RouteConfiguration)
	if len(rc.GetVirtualHosts()) != 1 {
		t.Errorf("a bound VirtualService wrote routes %v", ch)
	}
	if _, ok := plan.Nodes["router~1"][resourcev3.ListenerType]; ok {
		t.Errorf("a VirtualService rewrote the listeners")
	}
	if plan = p.Plan(nil, services, cfg2, false); len(plan.Nodes) != 0 {
		t.Errorf("an unchanged configuration replanned %v", plan.Nodes)
	}
}

// TestGatewayConfigNotes: what a gateway leaves out is said once per
// object: a Gateway's port clash, a bound
// VirtualService's match on clients; a gateway-only VirtualService gets
// no note for the mesh's kinds.
func TestGatewayConfigNotes(t *testing.T) {
	cfg := gatewayConfig(t,
		gwObj{validate.KindGateway, "ingress", "gw", 1, `{"servers":[
			{"port":{"number":15443,"name":"tls","protocol":"TLS"},"hosts":["*.local"],"tls":{"mode":"AUTO_PASSTHROUGH"}},
			{"port":{"number":80,"name":"http","protocol":"HTTP"},"hosts":["*"]},
			{"port":{"number":80,"name":"tcp","protocol":"TCP"},"hosts":["*"]}]}`},
		gwObj{validate.KindVirtualService, "ingress", "vs", 1, `{"hosts":["a.example.com"],"gateways":["gw"],
			"tcp":[{"route":[{"destination":{"host":"echo.demo.svc.cluster.local"}}]}],
			"http":[{"match":[{"sourceLabels":{"app":"x"}}],"route":[{"destination":{"host":"echo.demo.svc.cluster.local"}}]}]}`},
	)
	var got []string
	for _, o := range cfg.Objects() {
		for _, n := range ConfigNotes(o, "cluster.local") {
			got = append(got, n.Kind.String()+" "+n.Object.Name+" "+n.Field)
		}
	}
	want := []string{
		"Envoy gateway gw spec.servers[2].port",
		"Envoy gateway vs spec.http[0].match[0].sourceLabels",
	}
	if !slices.Equal(got, want) {
		t.Errorf("notes\n got %q\nwant %q", got, want)
	}
}

// TestRouterTargetPorts: a server on the Service port 80 of a gateway
// whose Pod serves it on 8080 is a listener on 8080 with routes
// http.8080, as istiod binds it; the Gateway's port still decides which
// matches apply.
func TestRouterTargetPorts(t *testing.T) {
	gwSvc := svcOn("ingressgateway", "ingress", 80, model.ProtocolHTTP)
	gwSvc.Service.Ports[0].Name = "http2"
	gwSvc.Endpoints = []model.Endpoint{{Cluster: "cluster-1", Address: netip.MustParseAddr("10.9.0.1"), Ready: true,
		Ports: map[string]uint32{"http2": 8080}}}
	services := []*model.MergedService{fleet(true), gwSvc}
	ports := RouterTargetPorts(services, "cluster-1", netip.MustParseAddr("10.9.0.1"))
	if ports.Bind(80) != 8080 || ports.Bind(443) != 443 {
		t.Fatalf("ports %v", ports)
	}
	if other := RouterTargetPorts(services, "cluster-2", netip.MustParseAddr("10.9.0.1")); len(other) != 0 {
		t.Errorf("another cluster's Pod at the address: %v", other)
	}
	cfg := gatewayConfig(t,
		gwObj{validate.KindGateway, "ingress", "public", 1, `{"selector":{"istio":"ingressgateway"},"servers":[
			{"port":{"number":80,"name":"http","protocol":"HTTP"},"hosts":["*"]}]}`},
		gwObj{validate.KindVirtualService, "ingress", "echo", 1, `{"hosts":["a.example.com"],"gateways":["public"],
			"http":[{"match":[{"port":80}],"route":[{"destination":{"host":"echo.demo.svc.cluster.local","port":{"number":9090}}}]}]}`},
	)
	gws := cfg.GatewaysFor("ingress", model.NewLabels(map[string]string{"istio": "ingressgateway"}))
	ls, _ := RouterListeners(gws, ports, services, cfg, Options{})
	if len(ls) != 1 || ls[0].GetName() != "0.0.0.0_8080" || ls[0].GetAddress().GetSocketAddress().GetPortValue() != 8080 ||
		chainHCM(t, ls[0].GetFilterChains()[0]).GetRds().GetRouteConfigName() != "http.8080" {
		t.Errorf("listener %v", ls)
	}
	rs := RouterRoutes(gws, ports, services, cfg, Options{})
	if len(rs) != 1 || rs[0].GetName() != "http.8080" || len(rs[0].GetVirtualHosts()) != 1 || len(rs[0].GetVirtualHosts()[0].GetRoutes()) != 1 {
		t.Errorf("routes %v", rs)
	}
}

// checkAutoPassthrough: the east-west listener of the fleet's services (echo
// on 8080 and 9090, tcp-echo on 9000, all in *.local): TLS inspected, one
// chain per port's SNI name and Istio's ALPNs, each a tcp_proxy to the
// SNI cluster of that name.
func checkAutoPassthrough(t *testing.T, l *listenerv3.Listener) {
	t.Helper()
	if len(l.GetListenerFilters()) != 1 || l.GetListenerFilters()[0].GetName() != filterTLSInspector {
		t.Errorf("15443 listener filters %v", l.GetListenerFilters())
	}
	var names []string
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) != 1 || m.GetServerNames()[0] != fc.GetName() || m.GetTransportProtocol() != "tls" ||
			!slices.Contains(m.GetApplicationProtocols(), "istio") {
			t.Errorf("chain %s matches %v", fc.GetName(), m)
		}
		tcp := unpackAny(t, fc.GetFilters()[0].GetTypedConfig()).(*tcpproxyv3.TcpProxy)
		if tcp.GetCluster() != fc.GetName() {
			t.Errorf("chain %s sends to %s", fc.GetName(), tcp.GetCluster())
		}
		names = append(names, fc.GetName())
	}
	if len(names) == 0 || !slices.Contains(names, "outbound_.8080_._.echo.demo.svc.cluster.local") {
		t.Errorf("15443 chains %v", names)
	}
}
