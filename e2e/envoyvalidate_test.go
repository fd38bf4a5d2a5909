//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// TestEnvoyAcceptsSidecarConfig proves that upstream Envoy 1.40 accepts
// every resource and extension pkg/xdsgen generates for a sidecar, in each
// interception mode, with and without mTLS, by running
// `envoy --mode validate` on bootstraps built from the generated resources.
// Each case is checked twice:
//
//   - served: the listeners and clusters exactly as the hub sends them
//     (RDS and EDS over ADS, SDS from pilot-agent's "sds-grpc"), in a
//     bootstrap with pilot-agent's xds-grpc and sds-grpc clusters; this
//     checks every extension and config source as sent, but not the routes,
//     endpoints and secrets, which would arrive later (nor, measured, that
//     the clusters an SDS or ADS source names exist: validate mode resolves
//     those lazily);
//   - static: the same resources made self-contained, so that Envoy checks
//     their content too: each RDS reference replaced by the generated
//     RouteConfiguration (with validate_clusters on, so a route naming an
//     unknown cluster fails), each EDS cluster turned STATIC with the load
//     assignment LoadAssignments gives a proxy in cluster-1, and each SDS
//     reference turned into a reference to a static secret ("default": a
//     throwaway workload certificate from pkg/pki; "ROOTCA": its root).
func TestEnvoyAcceptsSidecarConfig(t *testing.T) {
	bin := framework.TestEnvoyBinary(t)
	secrets := throwawaySecrets(t)
	services := validateFixture()
	pod := netip.MustParseAddr("10.1.0.1")
	meshed, sec, scope := mixedPolicy(services)
	for _, mode := range []xdsgen.Interception{xdsgen.InterceptRedirect, xdsgen.InterceptTProxy, xdsgen.InterceptNone} {
		for _, security := range []bool{false, true} {
			for _, policy := range []bool{false, true} {
				svcs := services
				sc := xdsgen.Sidecar{
					IP:           pod,
					Namespace:    "demo",
					Interception: mode,
					Inbound:      xdsgen.SidecarInbound(services, "cluster-1", pod),
				}
				if policy {
					svcs, sc.Security, sc.Scope = meshed, sec, scope
					sc.Inbound, _ = xdsgen.SidecarIngress(scope, pod)
				}
				opts := xdsgen.Options{Security: security}
				listeners := xdsgen.SidecarListeners(svcs, sc, opts)
				clusters := xdsgen.SidecarClusters(svcs, nil, sc, opts)
				routes := xdsgen.SidecarSetRoutes(svcs, nil, sc.RouteSet(), opts)
				name := fmt.Sprintf("%s/security=%t/policy=%t", mode, security, policy)
				t.Run(name+"/served", func(t *testing.T) {
					runEnvoyValidate(t, bin, servedBootstrap(listeners, clusters))
				})
				t.Run(name+"/static", func(t *testing.T) {
					runEnvoyValidate(t, bin, staticBootstrap(t, svcs, listeners, clusters, routes, secrets))
				})
			}
		}
	}
}

// mixedPolicy is what makes every shape of a sidecar's security: the
// services with their Pods injected (auto mTLS: transport socket matches
// and endpoint metadata), a pod policy that is PERMISSIVE (TLS and
// plaintext chains) but DISABLE on 8081 and STRICT on 9001, AUDIT, DENY
// and ALLOW authorization on its HTTP and TCP chains, and a Sidecar with
// ingress listeners of every kind of defaultEndpoint, and REGISTRY_ONLY
// and an egress that names both namespaces of the fixture (its route
// set's routes are scoped alike, so every route names a cluster the
// sidecar holds, which the static check verifies).
func mixedPolicy(services []*model.MergedService) ([]*model.MergedService, istioconfig.WorkloadSecurity, *istioconfig.Sidecar) {
	injected := model.NewLabels(map[string]string{"app": "echo", xdsgen.TLSModeLabel: xdsgen.TLSModeIstio})
	var meshed []*model.MergedService
	for _, ms := range services {
		c := *ms
		c.Endpoints = slices.Clone(ms.Endpoints)
		for i := range c.Endpoints {
			c.Endpoints[i].Labels = injected
		}
		meshed = append(meshed, &c)
	}
	meta := func(kind string) istioconfig.Meta {
		return istioconfig.Meta{Key: istioconfig.Key{Kind: kind, Namespace: "demo", Name: "mixed"}}
	}
	pa := &istioconfig.PeerAuthentication{Meta: meta("PeerAuthentication"), Spec: &securityv1beta1.PeerAuthentication{
		Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}},
		Mtls:     &securityv1beta1.PeerAuthentication_MutualTLS{Mode: securityv1beta1.PeerAuthentication_MutualTLS_PERMISSIVE},
		PortLevelMtls: map[uint32]*securityv1beta1.PeerAuthentication_MutualTLS{
			8081: {Mode: securityv1beta1.PeerAuthentication_MutualTLS_DISABLE},
			9001: {Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT},
		},
	}}
	authz := func(name string, action securityv1beta1.AuthorizationPolicy_Action, rule *securityv1beta1.Rule) *istioconfig.AuthorizationPolicy {
		m := meta("AuthorizationPolicy")
		m.Name = name
		return &istioconfig.AuthorizationPolicy{Meta: m, Spec: &securityv1beta1.AuthorizationPolicy{Action: action, Rules: []*securityv1beta1.Rule{rule}}}
	}
	from := func(principals ...string) []*securityv1beta1.Rule_From {
		return []*securityv1beta1.Rule_From{{Source: &securityv1beta1.Source{Principals: principals, NotNamespaces: []string{"evil"}}}}
	}
	to := []*securityv1beta1.Rule_To{{Operation: &securityv1beta1.Operation{Paths: []string{"/ok", "/api/*"}, Methods: []string{"GET"}, Ports: []string{"8081"}}}}
	policies := []*istioconfig.AuthorizationPolicy{
		authz("allow", securityv1beta1.AuthorizationPolicy_ALLOW, &securityv1beta1.Rule{From: from("cluster.local/ns/demo/sa/*"), To: to}),
		authz("audit", securityv1beta1.AuthorizationPolicy_AUDIT, &securityv1beta1.Rule{To: to}),
		authz("deny", securityv1beta1.AuthorizationPolicy_DENY, &securityv1beta1.Rule{
			From: from("cluster.local/ns/demo/sa/bad"),
			When: []*securityv1beta1.Condition{{Key: "request.headers[x-bad]", Values: []string{"1"}}},
		}),
	}
	// Ingress listeners on the pod's own ports, forwarding elsewhere: to
	// another loopback port, the pod's IP, a Unix socket; and one bound
	// to another address (NONE mode).
	ingress := func(n uint32, proto, bind, ep string) *networking.IstioIngressListener {
		return &networking.IstioIngressListener{Port: &networking.SidecarPort{Number: n, Protocol: proto, Name: "p"}, Bind: bind, DefaultEndpoint: ep}
	}
	scope := &istioconfig.Sidecar{Meta: meta("Sidecar"), Spec: &networking.Sidecar{
		Ingress: []*networking.IstioIngressListener{
			ingress(7071, "GRPC", "", "0.0.0.0:17071"),
			ingress(8081, "HTTP", "", "127.0.0.1:18081"),
			ingress(9001, "TCP", "", "unix:///var/run/app.sock"),
			ingress(9002, "HTTP", "10.1.0.2", ""),
		},
		Egress:                []*networking.IstioEgressListener{{Hosts: []string{"./*", "other/*"}}},
		OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY},
	}}
	return meshed, istioconfig.WorkloadSecurity{Workload: pa, AuthorizationPolicies: policies, Injected: true}, scope
}

// TestEnvoyRejectsForkFilter shows that the check can fail, and why only
// upstream extensions may be generated: a listener carrying Istio's
// metadata-exchange network filter, which exists only in Istio's Envoy
// build, is rejected by upstream Envoy.
func TestEnvoyRejectsForkFilter(t *testing.T) {
	bin := framework.TestEnvoyBinary(t)
	l := &listenerv3.Listener{
		Name:    "0.0.0.0_9000",
		Address: framework.SocketAddress("0.0.0.0", 9000),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "istio.metadata_exchange",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{
				TypeUrl: "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange",
			}},
		}}}},
		BindToPort: wrapperspb.Bool(false),
	}
	out, err := envoyValidate(t, bin, servedBootstrap([]*listenerv3.Listener{l}, nil))
	if err == nil {
		t.Fatalf("Envoy accepted a listener with Istio's metadata-exchange filter:\n%s", out)
	}
	if !strings.Contains(out, "Didn't find a registered implementation for 'istio.metadata_exchange'") {
		t.Errorf("Envoy rejected the listener, but not for its filter:\n%s", out)
	}
}

// validateFixture: echo (HTTP 8080, gRPC 7070) in cluster-1 and cluster-2,
// tcp-echo (TCP 9000) in cluster-1, and echo in namespace other on 8080
// (whose short name "echo" collides with demo's). The pod 10.1.0.1 in
// cluster-1 backs echo and tcp-echo.
func validateFixture() []*model.MergedService {
	ep := func(c model.ClusterID, ip, sa string, ports map[string]uint32) model.Endpoint {
		return model.Endpoint{
			Cluster: c, Address: netip.MustParseAddr(ip), Ready: true, ServiceAccount: sa, Ports: ports,
			Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"},
		}
	}
	merged := func(name, ns string, ports []model.ServicePort, eps ...model.Endpoint) *model.MergedService {
		ms := &model.MergedService{
			Service:   &model.Service{Hostname: model.ServiceHostname(name, ns, ""), Name: name, Namespace: ns, Ports: ports},
			Endpoints: eps,
		}
		model.SortEndpoints(ms.Endpoints)
		for _, e := range ms.Endpoints {
			if n := len(ms.Clusters); n == 0 || ms.Clusters[n-1] != e.Cluster {
				ms.Clusters = append(ms.Clusters, e.Cluster)
			}
		}
		return ms
	}
	echoPorts := map[string]uint32{"http": 8081, "grpc": 7071}
	return []*model.MergedService{
		merged("echo", "demo", []model.ServicePort{
			{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP},
			{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC},
		}, ep("cluster-1", "10.1.0.1", "echo", echoPorts), ep("cluster-2", "10.2.0.1", "echo", echoPorts)),
		merged("tcp-echo", "demo", []model.ServicePort{{Name: "tcp", Port: 9000, Protocol: model.ProtocolTCP}},
			ep("cluster-1", "10.1.0.1", "tcp-echo", map[string]uint32{"tcp": 9001})),
		merged("echo", "other", []model.ServicePort{{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP2}},
			ep("cluster-2", "10.2.0.9", "", map[string]uint32{"http": 8080})),
		// ServiceEntry hosts found by DNS: STRICT_DNS over two names, and
		// LOGICAL_DNS (DNS_ROUND_ROBIN).
		{Service: &model.Service{Hostname: "db.ext.test", Name: "db.ext.test", Namespace: "demo", External: true,
			Resolution: model.ResolutionDNS,
			Ports:      []model.ServicePort{{Name: "http", Port: 8088, Protocol: model.ProtocolHTTP}, {Name: "tcp", Port: 5432, Protocol: model.ProtocolTCP}},
			DNSEndpoints: []model.DNSEndpoint{
				{Host: "db-1.ext.test", Ports: map[string]uint32{"http": 18088}, Locality: model.Locality{Region: "us-east"}, Weight: 3},
				{Host: "db-2.ext.test"},
			}}},
		{Service: &model.Service{Hostname: "api.ext.test", Name: "api.ext.test", Namespace: "demo", External: true,
			Resolution:   model.ResolutionDNSRoundRobin,
			Ports:        []model.ServicePort{{Name: "grpc", Port: 9443, Protocol: model.ProtocolGRPC}},
			DNSEndpoints: []model.DNSEndpoint{{Host: "api.ext.test"}}}},
	}
}

// validateNode is the Istio node of the fixture's sidecar.
func validateNode() *corev3.Node {
	return &corev3.Node{Id: "sidecar~10.1.0.1~echo-1.demo~demo.svc.cluster.local", Cluster: "echo.demo"}
}

// servedBootstrap holds listeners and clusters as generated, next to the
// static clusters of pilot-agent's bootstrap that they depend on: xds-grpc
// (ADS, for RDS and EDS) and sds-grpc (SDS). Both reach pilot-agent over a
// Unix socket that validate mode never dials.
func servedBootstrap(listeners []*listenerv3.Listener, clusters []*clusterv3.Cluster) *bootstrapv3.Bootstrap {
	return &bootstrapv3.Bootstrap{
		Node: validateNode(),
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: listeners,
			Clusters: append([]*clusterv3.Cluster{
				framework.GRPCCluster("xds-grpc", framework.PipeAddress("./etc/istio/proxy/XDS")),
				framework.GRPCCluster(xdsgen.SDSClusterName, framework.PipeAddress("./var/run/secrets/workload-spiffe-uds/socket")),
			}, clusters...),
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: framework.ADSConfig("xds-grpc"),
		},
	}
}

// staticBootstrap makes the generated resources self-contained (see
// TestEnvoyAcceptsSidecarConfig). It changes copies, not the originals.
func staticBootstrap(t *testing.T, services []*model.MergedService, listeners []*listenerv3.Listener,
	clusters []*clusterv3.Cluster, routes []*routev3.RouteConfiguration, secrets []*tlsv3.Secret,
) *bootstrapv3.Bootstrap {
	t.Helper()
	routeByName := map[string]*routev3.RouteConfiguration{}
	for _, r := range routes {
		r = proto.Clone(r).(*routev3.RouteConfiguration)
		r.ValidateClusters = wrapperspb.Bool(true)
		routeByName[r.GetName()] = r
	}
	assignments := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, ms := range services {
		for _, cla := range xdsgen.LoadAssignments(ms, xdsgen.ProxyGroup{Cluster: "cluster-1", Region: "us-east"}, nil) {
			assignments[cla.GetClusterName()] = cla
		}
	}
	inline := func(m proto.Message) {
		switch m := m.(type) {
		case *hcmv3.HttpConnectionManager:
			if rds := m.GetRds(); rds != nil {
				rc := routeByName[rds.GetRouteConfigName()]
				if rc == nil {
					t.Fatalf("listener names route %q, which SidecarRoutes did not generate", rds.GetRouteConfigName())
				}
				m.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
			}
		case *tlsv3.SdsSecretConfig:
			m.SdsConfig = nil // look the secret up in static_resources.secrets
		}
	}
	b := &bootstrapv3.Bootstrap{Node: validateNode(), StaticResources: &bootstrapv3.Bootstrap_StaticResources{Secrets: secrets}}
	for _, l := range listeners {
		l = proto.Clone(l).(*listenerv3.Listener)
		rewriteAll(t, l, inline)
		b.StaticResources.Listeners = append(b.StaticResources.Listeners, l)
	}
	for _, c := range clusters {
		c = proto.Clone(c).(*clusterv3.Cluster)
		rewriteAll(t, c, inline)
		if c.GetType() == clusterv3.Cluster_EDS {
			cla := assignments[c.GetEdsClusterConfig().GetServiceName()]
			if cla == nil {
				t.Fatalf("cluster %s: no load assignment %q", c.GetName(), c.GetEdsClusterConfig().GetServiceName())
			}
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
			c.EdsClusterConfig = nil
			c.LoadAssignment = cla
		}
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, c)
	}
	return b
}

// rewriteAll applies f to m and to every message inside it, including those
// packed in Any fields (which it unpacks, rewrites and packs again).
func rewriteAll(t *testing.T, m proto.Message, f func(proto.Message)) {
	t.Helper()
	var walk func(protoreflect.Message)
	walk = func(rm protoreflect.Message) {
		if a, ok := rm.Interface().(*anypb.Any); ok {
			mt, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl())
			if err != nil {
				t.Fatalf("Any of unknown type %s", a.GetTypeUrl())
			}
			inner := mt.New().Interface()
			if err := a.UnmarshalTo(inner); err != nil {
				t.Fatal(err)
			}
			walk(inner.ProtoReflect())
			if err := a.MarshalFrom(inner); err != nil {
				t.Fatal(err)
			}
			return
		}
		f(rm.Interface())
		rm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
}

// throwawaySecrets are the static twins of pilot-agent's SDS secrets for
// demo/echo, from a new root.
func throwawaySecrets(t *testing.T) []*tlsv3.Secret {
	t.Helper()
	return workloadSecrets(t, throwawayCA(t), "echo")
}

// throwawayCA is a new root for one test.
func throwawayCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("meshfed envoy-validate root", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// workloadSecrets are the secrets pilot-agent would serve to the sidecar
// of service account sa in namespace demo: "default", a certificate for
// its SPIFFE ID signed by ca, and "ROOTCA", ca's root.
func workloadSecrets(t *testing.T, ca *pki.CA, sa string) []*tlsv3.Secret {
	t.Helper()
	id, err := url.Parse(xdsgen.SpiffeID("", "demo", sa))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueOptions{URIs: []*url.URL{id}, Validity: time.Hour, Server: true, Client: true, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	inline := func(b []byte) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
	}
	return []*tlsv3.Secret{
		{Name: xdsgen.SDSDefaultSecret, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inline(certPEM), PrivateKey: inline(keyPEM),
		}}},
		{Name: xdsgen.SDSRootSecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(ca.CertPEM),
		}}},
	}
}

// runEnvoyValidate fails t unless Envoy accepts b.
func runEnvoyValidate(t *testing.T, bin string, b *bootstrapv3.Bootstrap) {
	t.Helper()
	if out, err := envoyValidate(t, bin, b); err != nil {
		t.Fatalf("Envoy rejected the configuration: %v\n%s", err, out)
	}
}

// envoyValidate runs `envoy --mode validate` on b and returns Envoy's
// output.
func envoyValidate(t *testing.T, bin string, b *bootstrapv3.Bootstrap) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	return framework.ValidateEnvoy(ctx, framework.EnvoyOptions{
		Binary: bin, Dir: t.TempDir(), Bootstrap: b, LogLevel: "warn",
	})
}

// TestEnvoySidecarsCarryTraffic runs two real Envoy 1.40 sidecars on the
// generated configuration, made static as in TestEnvoyAcceptsSidecarConfig,
// both in NONE mode on this machine's loopback: a client sidecar
// (demo/sleep, pod IP 127.0.0.3) whose outbound listeners the test dials on
// 127.0.0.1, and a server sidecar (demo/echo, pod IP 127.0.0.2) in front of
// an HTTP, a TCP echo and a gRPC app on 127.0.0.1. HTTP/1.1, TCP and gRPC
// (HTTP/2) calls flow through both; with mTLS the app sees the client's
// SPIFFE ID in x-forwarded-client-cert and a plaintext call to the server
// sidecar's inbound port is refused, without it the call is served. Both
// sidecars share one network namespace, so the server sidecar gets only
// its inbound listeners (its outbound ones would be the client's
// addresses). It checks the generator's shape, independent of the hub and
// pilot-agent.
func TestEnvoySidecarsCarryTraffic(t *testing.T) {
	bin := framework.TestEnvoyBinary(t)
	for _, security := range []bool{false, true} {
		t.Run(fmt.Sprintf("security=%t", security), func(t *testing.T) {
			testSidecarTraffic(t, bin, xdsgen.Options{Security: security})
		})
	}
}

func testSidecarTraffic(t *testing.T, bin string, opts xdsgen.Options) {
	serverIP := netip.MustParseAddr("127.0.0.2")
	apps := startSidecarApps(t)
	// The service ports are where the client sidecar listens on 127.0.0.1.
	ports := freeLoopbackPorts(t, 3)
	httpPort, tcpPort, grpcPort := ports[0], ports[1], ports[2]
	ep := func(name string, target uint32) []model.Endpoint {
		return []model.Endpoint{{Cluster: "cluster-1", Address: serverIP, Ready: true, ServiceAccount: "echo", Ports: map[string]uint32{name: target},
			Labels: model.NewLabels(map[string]string{xdsgen.TLSModeLabel: xdsgen.TLSModeIstio})}}
	}
	service := func(name string, port uint32, p model.Protocol, target uint32) *model.MergedService {
		return &model.MergedService{
			Service: &model.Service{
				Hostname: model.ServiceHostname(name, "demo", ""), Name: name, Namespace: "demo",
				Ports: []model.ServicePort{{Name: "p", Port: port, Protocol: p}},
			},
			Endpoints: ep("p", target),
			Clusters:  []model.ClusterID{"cluster-1"},
		}
	}
	services := []*model.MergedService{
		service("echo", httpPort, model.ProtocolHTTP, apps.http),
		service("tcp-echo", tcpPort, model.ProtocolTCP, apps.tcp),
		service("greeter", grpcPort, model.ProtocolGRPC, apps.grpc),
	}
	ca := throwawayCA(t)
	routes := xdsgen.SidecarRoutes(services, nil, opts)

	server := xdsgen.Sidecar{IP: serverIP, Namespace: "demo", Interception: xdsgen.InterceptNone,
		Inbound: xdsgen.SidecarInbound(services, "cluster-1", serverIP)}
	var inbound []*listenerv3.Listener
	for _, l := range xdsgen.SidecarListeners(services, server, opts) {
		if l.GetTrafficDirection() == corev3.TrafficDirection_INBOUND {
			inbound = append(inbound, l)
		}
	}
	startEnvoy(t, bin, "server", staticBootstrap(t, services, inbound,
		xdsgen.SidecarClusters(services, nil, server, opts), routes, workloadSecrets(t, ca, "echo")))

	client := xdsgen.Sidecar{IP: netip.MustParseAddr("127.0.0.3"), Namespace: "demo", Interception: xdsgen.InterceptNone}
	startEnvoy(t, bin, "client", staticBootstrap(t, services, xdsgen.SidecarListeners(services, client, opts),
		xdsgen.SidecarClusters(services, nil, client, opts), routes, workloadSecrets(t, ca, "sleep")))

	// HTTP/1.1, by a short name: the client sidecar routes by authority.
	var body string
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		var err error
		body, err = httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/hello", httpPort), fmt.Sprintf("echo.demo:%d", httpPort))
		return err
	})
	wantXFCC := "URI=" + xdsgen.SpiffeID("", "demo", "sleep")
	if opts.Security != strings.Contains(body, wantXFCC) {
		t.Errorf("app saw %q; want %q in x-forwarded-client-cert: %t", body, wantXFCC, opts.Security)
	}
	// TCP.
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		return tcpEcho(fmt.Sprintf("127.0.0.1:%d", tcpPort))
	})
	// gRPC over HTTP/2.
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority(fmt.Sprintf("greeter.demo.svc.cluster.local:%d", grpcPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = fmt.Errorf("status %s", r.GetStatus())
		}
		return err
	})
	// A plaintext call straight to the server sidecar's inbound port.
	direct := fmt.Sprintf("http://%s/", netip.AddrPortFrom(serverIP, uint16(apps.http)))
	_, err = httpGet(t, direct, "")
	if opts.Security && err == nil {
		t.Errorf("plaintext call to %s was served; want it refused under mTLS", direct)
	}
	if !opts.Security && err != nil {
		t.Errorf("plaintext call to %s: %v; want it served without mTLS", direct, err)
	}
}

// sidecarApps are the server pod's apps, each on 127.0.0.1:<port>.
type sidecarApps struct{ http, tcp, grpc uint32 }

// startSidecarApps starts an HTTP app that answers with the
// x-forwarded-client-cert it received, a TCP echo and a gRPC health server,
// stopped when t ends.
func startSidecarApps(t *testing.T) sidecarApps {
	t.Helper()
	listen := func() (net.Listener, uint32) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l, uint32(l.Addr().(*net.TCPAddr).Port)
	}
	var apps sidecarApps
	hl, hp := listen()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xfcc=%s", r.Header.Get("X-Forwarded-Client-Cert"))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	apps.http = hp

	tl, tp := listen()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { _ = tl.Close() })
	apps.tcp = tp

	gl, gp := listen()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(gs.Stop)
	apps.grpc = gp
	return apps
}

// freeLoopbackPorts returns n distinct ports that were free on 127.0.0.1
// a moment ago.
func freeLoopbackPorts(t *testing.T, n int) []uint32 {
	t.Helper()
	addrs, err := framework.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]uint32, n)
	for i, a := range addrs {
		ports[i] = uint32(netip.MustParseAddrPort(a).Port())
	}
	return ports
}

// startEnvoy runs Envoy on b until t ends; its log is shown when t fails.
func startEnvoy(t *testing.T, bin, name string, b *bootstrapv3.Bootstrap) {
	t.Helper()
	framework.StartTestEnvoy(t, framework.EnvoyOptions{Binary: bin, Name: name, Bootstrap: b})
}

// httpGet returns the body of a 200 answer to GET url with Host host (the
// URL's when empty).
func httpGet(t *testing.T, url, host string) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	b, err := framework.HTTPGet(ctx, nil, url, host)
	return string(b), err
}

// tcpEcho sends a line to addr and expects it back.
func tcpEcho(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("TCP echo answered %q", line)
	}
	return nil
}
