package xdsgen

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Auto mTLS fixtures: echo (grpc 8080 → 50051, http 9090 → 8081) with
// endpoints of four kinds of Pods: injected v1 and v2 (the injector's
// label security.istio.io/tlsMode=istio), a labelled v3 Pod without a
// proxy, and an endpoint without labels (no Pod known).
const (
	autoV1      = "10.1.0.1"
	autoV2      = "10.1.0.2"
	autoV3      = "10.1.0.3"
	autoNoLabel = "10.1.0.4"
)

// autoEP is an endpoint at addr with Pod labels (nil: none).
func autoEP(addr string, labels map[string]string) model.Endpoint {
	e := ep("cluster-1", addr, usEast1a, true)
	e.ServiceAccount = "echo"
	e.Labels = model.NewLabels(labels)
	return e
}

// autoEndpoints returns the fixture endpoints named by their addresses.
func autoEndpoints(addrs ...string) []model.Endpoint {
	labels := map[string]map[string]string{
		autoV1:      {"app": "echo", "version": "v1", TLSModeLabel: TLSModeIstio},
		autoV2:      {"app": "echo", "version": "v2", TLSModeLabel: TLSModeIstio},
		autoV3:      {"app": "echo", "version": "v3"},
		autoNoLabel: nil,
	}
	var out []model.Endpoint
	for _, a := range addrs {
		out = append(out, autoEP(a, labels[a]))
	}
	return out
}

// autoRule has the subsets v1 and v3.
func autoRule(t testing.TB) *istioconfig.DestinationRule {
	return mustDR(t, "subsets: [{name: v1, labels: {version: v1}}, {name: v3, labels: {version: v3}}]")
}

// Cluster names of the fixture under autoRule.
var (
	autoGRPC   = "outbound|8080||echo.demo.svc.cluster.local"
	autoGRPCv1 = "outbound|8080|v1|echo.demo.svc.cluster.local"
	autoGRPCv3 = "outbound|8080|v3|echo.demo.svc.cluster.local"
	autoHTTP   = "outbound|9090||echo.demo.svc.cluster.local"
	autoHTTPv1 = "outbound|9090|v1|echo.demo.svc.cluster.local"
	autoHTTPv3 = "outbound|9090|v3|echo.demo.svc.cluster.local"
	autoAll    = []string{autoGRPC, autoGRPCv1, autoGRPCv3, autoHTTP, autoHTTPv1, autoHTTPv3}
)

// mtlsPolicy is a PeerAuthentication ns/name with mode m, a selector
// (nil: none) and port-level modes (by workload port).
func mtlsPolicy(ns, name string, selector map[string]string, m security.PeerAuthentication_MutualTLS_Mode, ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) *istioconfig.PeerAuthentication {
	spec := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: m}}
	if selector != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: selector}
	}
	if len(ports) > 0 {
		spec.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
		for p, pm := range ports {
			spec.PortLevelMtls[p] = &security.PeerAuthentication_MutualTLS{Mode: pm}
		}
	}
	return &istioconfig.PeerAuthentication{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "PeerAuthentication", Namespace: ns, Name: name}},
		Spec: spec,
	}
}

// policies is a Snapshot of the fixture DestinationRule autoRule (so that
// SidecarClusters sees the subsets) and pas.
func policies(t testing.TB, pas ...*istioconfig.PeerAuthentication) *istioconfig.Snapshot {
	objs := []istioconfig.Object{autoRule(t)}
	for _, p := range pas {
		objs = append(objs, p)
	}
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs)
}

const (
	modeStrict     = security.PeerAuthentication_MutualTLS_STRICT
	modePermissive = security.PeerAuthentication_MutualTLS_PERMISSIVE
	modeDisable    = security.PeerAuthentication_MutualTLS_DISABLE
)

var (
	nsStrict     = mtlsPolicy("demo", "default", nil, modeStrict, nil)
	nsDisable    = mtlsPolicy("demo", "default", nil, modeDisable, nil)
	meshPermissv = mtlsPolicy(istioconfig.DefaultRootNamespace, "default", nil, modePermissive, nil)
	meshDisable  = mtlsPolicy(istioconfig.DefaultRootNamespace, "default", nil, modeDisable, nil)
	v1Disable    = mtlsPolicy("demo", "v1-plain", map[string]string{"version": "v1"}, modeDisable, nil)
	// httpDisable: STRICT for echo's Pods but DISABLE on the http target
	// port 8081 (port-level modes are by workload port).
	httpDisable = mtlsPolicy("demo", "http-plain", map[string]string{"app": "echo"}, modeStrict,
		map[uint32]security.PeerAuthentication_MutualTLS_Mode{8081: modeDisable})
)

// autoCase is one row of the decision tables: the endpoints, the
// PeerAuthentications and Security, and the clusters each proxy kind
// must send mutual TLS to (nil: none).
type autoCase struct {
	name      string
	eps       []string
	pas       []*istioconfig.PeerAuthentication
	security  bool
	envoy     []string
	proxyless []string
}

// autoCases are written from Istio's auto-mTLS rule (mutual TLS to an
// endpoint iff its Pod is labelled tlsMode=istio and its PeerAuthentication
// mode is not DISABLE), Envoy deciding per endpoint, grpc-go per cluster.
var autoCases = []autoCase{
	{
		name: "all injected", eps: []string{autoV1, autoV2}, security: true,
		// v3 selects no endpoint: nothing for Envoy to encrypt; for
		// grpc-go an empty cluster follows Security.
		envoy:     []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1},
		proxyless: autoAll,
	},
	{
		name: "injected and unlabelled", eps: []string{autoV1, autoNoLabel}, security: true,
		// Envoy: the unlabelled endpoint gets plaintext by its (missing)
		// metadata, the cluster still has the matches; grpc-go keeps
		// today's behaviour for endpoints without Pod labels.
		envoy:     []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1},
		proxyless: autoAll,
	},
	{
		name: "injected and uninjected", eps: []string{autoV1, autoV2, autoV3}, security: true,
		envoy: []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1},
		// grpc-go cannot mix: the v3 Pod has no proxy, so the default
		// clusters and v3's are plaintext; v1's has only injected Pods.
		proxyless: []string{autoGRPCv1, autoHTTPv1},
	},
	{
		name: "none injected", eps: []string{autoV3, autoNoLabel}, security: true,
		envoy: nil,
		// v1 selects nothing: an empty cluster follows Security.
		proxyless: []string{autoGRPCv1, autoHTTPv1},
	},
	{
		name: "unlabelled only", eps: []string{autoNoLabel}, security: true,
		envoy:     nil,
		proxyless: autoAll,
	},
	{
		name: "unlabelled only without security", eps: []string{autoNoLabel},
		envoy: nil, proxyless: nil,
	},
	{
		name: "namespace DISABLE", eps: []string{autoV1, autoV2, autoNoLabel}, pas: []*istioconfig.PeerAuthentication{nsDisable}, security: true,
		envoy: nil,
		// Subset v3 is empty and follows Security.
		proxyless: []string{autoGRPCv3, autoHTTPv3},
	},
	{
		name: "mesh DISABLE", eps: []string{autoV1}, pas: []*istioconfig.PeerAuthentication{meshDisable}, security: true,
		envoy: nil, proxyless: []string{autoGRPCv3, autoHTTPv3},
	},
	{
		name: "namespace STRICT overrides mesh DISABLE", eps: []string{autoV1}, pas: []*istioconfig.PeerAuthentication{meshDisable, nsStrict}, security: true,
		envoy: []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1}, proxyless: autoAll,
	},
	{
		name: "workload DISABLE for v1", eps: []string{autoV1, autoV2}, pas: []*istioconfig.PeerAuthentication{v1Disable}, security: true,
		// v2 still takes mTLS, so the default clusters keep the matches
		// (v1 gets TLS from Envoy regardless: metadata cannot say
		// DISABLE); the v1 subset has nobody who takes it.
		envoy:     []string{autoGRPC, autoHTTP},
		proxyless: []string{autoGRPCv3, autoHTTPv3},
	},
	{
		name: "port-level DISABLE on the http target port", eps: []string{autoV1, autoV2}, pas: []*istioconfig.PeerAuthentication{httpDisable}, security: true,
		envoy:     []string{autoGRPC, autoGRPCv1},
		proxyless: []string{autoGRPC, autoGRPCv1, autoGRPCv3, autoHTTPv3},
	},
	{
		name: "injected without security", eps: []string{autoV1, autoV2},
		envoy: nil, proxyless: nil,
	},
	{
		name: "namespace STRICT without security", eps: []string{autoV1, autoV2, autoNoLabel}, pas: []*istioconfig.PeerAuthentication{nsStrict},
		envoy: []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1},
		// Without Security an endpoint without labels is not known to
		// take mutual TLS, and an empty cluster stays plaintext.
		proxyless: []string{autoGRPCv1, autoHTTPv1},
	},
	{
		name: "mesh PERMISSIVE without security", eps: []string{autoV1, autoV2}, pas: []*istioconfig.PeerAuthentication{meshPermissv},
		envoy:     []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1},
		proxyless: []string{autoGRPC, autoGRPCv1, autoHTTP, autoHTTPv1},
	},
	{
		name: "no endpoints", security: true,
		envoy: nil, proxyless: autoAll,
	},
}

// sortedNames returns a sorted copy of names; nil for none.
func sortedNames(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}

func (c autoCase) service() *model.MergedService {
	return merged(autoEndpoints(c.eps...)...)
}

// sans are the SANs the clusters must check: every fixture endpoint runs
// as service account echo.
func (c autoCase) sans() []string {
	if len(c.eps) == 0 {
		return nil
	}
	return []string{"spiffe://example.org/ns/demo/sa/echo"}
}

func (c autoCase) opts() Options {
	return Options{Security: c.security, TrustDomain: "example.org"}
}

// sidecarEchoClusters are the outbound clusters of echo that a sidecar
// gets under config.
func sidecarEchoClusters(ms *model.MergedService, config *istioconfig.Snapshot, opts Options) []*clusterv3.Cluster {
	var out []*clusterv3.Cluster
	for _, c := range SidecarClusters([]*model.MergedService{ms}, config, Sidecar{}, opts) {
		if strings.HasPrefix(c.GetName(), "outbound|") {
			out = append(out, c)
		}
	}
	return out
}

func TestSidecarAutoMTLS(t *testing.T) {
	for _, tc := range autoCases {
		t.Run(tc.name, func(t *testing.T) {
			ms, cfg := tc.service(), policies(t, tc.pas...)
			cs := sidecarEchoClusters(ms, cfg, tc.opts())
			if got := namesOf(cs); !slices.Equal(got, sortedNames(autoAll)) {
				t.Fatalf("clusters %v, want %v", got, sortedNames(autoAll))
			}
			var secure []string
			for _, c := range cs {
				if c.GetTransportSocket() != nil {
					t.Errorf("%s: a transport socket besides the matches", c.GetName())
				}
				if len(c.GetTransportSocketMatches()) == 0 {
					continue
				}
				secure = append(secure, c.GetName())
				checkAutoMatches(t, c, tc.sans())
			}
			want := sortedNames(tc.envoy)
			if !slices.Equal(secure, want) {
				t.Errorf("mutual TLS on %v, want %v", secure, want)
			}
			if got := MTLSClusters(ProxyEnvoy, ms, autoRule(t), cfg, tc.opts()); !slices.Equal(got, want) {
				t.Errorf("MTLSClusters(ProxyEnvoy) = %v, want %v", got, want)
			}
		})
	}
}

// checkAutoMatches checks Istio's auto-mTLS shape on c: first
// "tlsMode-istio" matching {tlsMode: istio} with Istio mutual TLS (SNI,
// ALPN, SANs, SDS), then "tlsMode-disabled" matching everything with a
// raw_buffer socket.
func checkAutoMatches(t *testing.T, c *clusterv3.Cluster, wantSANs []string) {
	t.Helper()
	m := c.GetTransportSocketMatches()
	if len(m) != 2 || m[0].GetName() != "tlsMode-istio" || m[1].GetName() != "tlsMode-disabled" {
		t.Fatalf("%s: matches %v", c.GetName(), m)
	}
	if f := m[0].GetMatch().GetFields(); len(f) != 1 || f["tlsMode"].GetStringValue() != "istio" {
		t.Errorf("%s: tlsMode-istio matches %v", c.GetName(), m[0].GetMatch())
	}
	if len(m[1].GetMatch().GetFields()) != 0 {
		t.Errorf("%s: tlsMode-disabled matches %v, want everything", c.GetName(), m[1].GetMatch())
	}
	if ts := m[1].GetTransportSocket(); ts.GetName() != "envoy.transport_sockets.raw_buffer" || !ts.GetTypedConfig().MessageIs(&rawbufferv3.RawBuffer{}) {
		t.Errorf("%s: tlsMode-disabled socket %v", c.GetName(), ts)
	}
	ts := m[0].GetTransportSocket()
	if ts.GetName() != "envoy.transport_sockets.tls" {
		t.Errorf("%s: tlsMode-istio socket %q", c.GetName(), ts.GetName())
	}
	host, port, subset, err := ParseSubsetClusterName(c.GetName())
	if err != nil {
		t.Fatal(err)
	}
	utc := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(utc); err != nil {
		t.Fatal(err)
	}
	// Istio's: a subset's SNI names it, so that an east-west gateway
	// routes to the subset's endpoints.
	if want := "outbound_." + strconv.Itoa(int(port)) + "_." + subset + "_." + string(host); utc.GetSni() != want {
		t.Errorf("%s: SNI %q, want %q", c.GetName(), utc.GetSni(), want)
	}
	ctx := utc.GetCommonTlsContext()
	wantALPN := []string{"istio"}
	if port == 8080 { // GRPC
		wantALPN = []string{"istio", "h2"}
	}
	if !slices.Equal(ctx.GetAlpnProtocols(), wantALPN) {
		t.Errorf("%s: ALPN %v, want %v", c.GetName(), ctx.GetAlpnProtocols(), wantALPN)
	}
	var sans []string
	for _, s := range ctx.GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
		sans = append(sans, s.GetMatcher().GetExact())
	}
	if !slices.Equal(sans, wantSANs) {
		t.Errorf("%s: SANs %v, want %v", c.GetName(), sans, wantSANs)
	}
	if got := ctx.GetTlsCertificateSdsSecretConfigs()[0].GetName(); got != SDSDefaultSecret {
		t.Errorf("%s: certificate %q", c.GetName(), got)
	}
}

func TestServiceClustersAutoMTLS(t *testing.T) {
	for _, tc := range autoCases {
		t.Run(tc.name, func(t *testing.T) {
			ms, cfg, dr := tc.service(), policies(t, tc.pas...), autoRule(t)
			cs := ServiceClusters(ms, dr, cfg, tc.opts())
			plain := Clusters(ms.Service, dr)
			if len(cs) != len(plain) {
				t.Fatalf("%d clusters, want %d", len(cs), len(plain))
			}
			var secure []string
			for i, c := range cs {
				if len(c.GetTransportSocketMatches()) != 0 {
					t.Errorf("%s: transport_socket_matches, which grpc-go NACKs", c.GetName())
				}
				if c.GetTransportSocket() != nil {
					secure = append(secure, c.GetName())
					h, port, subset, err := ParseSubsetClusterName(c.GetName())
					if err != nil {
						t.Fatal(err)
					}
					if !proto.Equal(c.GetTransportSocket(), meshUpstreamTLS(tc.sans(), SNIClusterName(h, port, subset))) {
						t.Errorf("%s: transport socket %v", c.GetName(), c.GetTransportSocket())
					}
				}
				// Apart from TLS, exactly Clusters.
				bare := proto.Clone(c).(*clusterv3.Cluster)
				bare.TransportSocket = nil
				if !proto.Equal(bare, plain[i]) {
					t.Errorf("%s differs from Clusters beyond TLS", c.GetName())
				}
			}
			want := sortedNames(tc.proxyless)
			if !slices.Equal(secure, want) {
				t.Errorf("mutual TLS on %v, want %v", secure, want)
			}
			if got := MTLSClusters(ProxyGRPC, ms, dr, cfg, tc.opts()); !slices.Equal(got, want) {
				t.Errorf("MTLSClusters(ProxyGRPC) = %v, want %v", got, want)
			}
		})
	}
}

// TestServiceClustersAutoMTLSEndpointScope: only the endpoints of a
// cluster count, ready or not: those that serve its port.
func TestServiceClustersAutoMTLSEndpointScope(t *testing.T) {
	// The uninjected v3 Pod serves only grpc (and is not ready): the http
	// clusters have only injected endpoints.
	v3 := autoEP(autoV3, map[string]string{"app": "echo", "version": "v3"})
	v3.Ports = map[string]uint32{"grpc": 50051}
	v3.Ready = false
	ms := merged(append(autoEndpoints(autoV1, autoV2), v3)...)
	got := MTLSClusters(ProxyGRPC, ms, nil, nil, Options{Security: true})
	if want := []string{autoHTTP}; !slices.Equal(got, want) {
		t.Errorf("MTLSClusters = %v, want %v", got, want)
	}
	// The same for Envoy: both ports have injected endpoints.
	got = MTLSClusters(ProxyEnvoy, ms, nil, nil, Options{Security: true})
	if want := sortedNames([]string{autoGRPC, autoHTTP}); !slices.Equal(got, want) {
		t.Errorf("MTLSClusters(ProxyEnvoy) = %v, want %v", got, want)
	}
	if MTLSClusters(ProxyGRPC, nil, nil, nil, Options{Security: true}) != nil {
		t.Error("nil service: want no clusters")
	}
}

// tlsModeOf returns, by address, the endpoints' transport socket match
// metadata as "istio" or "" when there is none; it fails on any other
// metadata.
func tlsModeOf(t *testing.T, cla *endpointv3.ClusterLoadAssignment) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			addr := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			md := e.GetMetadata()
			if md == nil {
				out[addr] = ""
				continue
			}
			if len(md.GetTypedFilterMetadata()) != 0 || len(md.GetFilterMetadata()) != 1 {
				t.Errorf("%s %s: metadata %v", cla.GetClusterName(), addr, md)
			}
			f := md.GetFilterMetadata()["envoy.transport_socket_match"].GetFields()
			if len(f) != 1 {
				t.Errorf("%s %s: transport socket match %v", cla.GetClusterName(), addr, f)
			}
			out[addr] = f["tlsMode"].GetStringValue()
		}
	}
	return out
}

func TestLoadAssignmentsTLSModeMetadata(t *testing.T) {
	ms := merged(autoEndpoints(autoV1, autoV2, autoV3, autoNoLabel)...)
	clas := LoadAssignments(ms, ProxyGroup{Cluster: "cluster-1", Region: "us-east"}, autoRule(t))
	want := map[string]map[string]string{
		autoGRPC:   {autoV1: "istio", autoV2: "istio", autoV3: "", autoNoLabel: ""},
		autoGRPCv1: {autoV1: "istio"},
		autoGRPCv3: {autoV3: ""},
		autoHTTP:   {autoV1: "istio", autoV2: "istio", autoV3: "", autoNoLabel: ""},
		autoHTTPv1: {autoV1: "istio"},
		autoHTTPv3: {autoV3: ""},
	}
	if len(clas) != len(want) {
		t.Fatalf("%d assignments, want %d", len(clas), len(want))
	}
	for _, cla := range clas {
		if got := tlsModeOf(t, cla); !maps.Equal(got, want[cla.GetClusterName()]) {
			t.Errorf("%s: tlsMode %v, want %v", cla.GetClusterName(), got, want[cla.GetClusterName()])
		}
		if err := cla.ValidateAll(); err != nil {
			t.Error(err)
		}
	}
	// The metadata depends on the labels, not on the configuration: the
	// value "istio" only, never anything else than the injector's label.
	other := autoEP(autoV3, map[string]string{"app": "echo", TLSModeLabel: "disabled"})
	clas = LoadAssignments(merged(other), ProxyGroup{Cluster: "cluster-1"}, nil)
	if got := tlsModeOf(t, clas[0]); got[autoV3] != "" {
		t.Errorf("tlsMode=disabled Pod has metadata %q", got[autoV3])
	}
}

// TestLoadAssignmentsTLSModeDuplicate: of two endpoints at one address in
// one locality and priority, the injected one is kept, whichever comes
// first, so the output does not depend on the order of the input.
func TestLoadAssignmentsTLSModeDuplicate(t *testing.T) {
	for _, injectedCluster := range []model.ClusterID{"cluster-1", "cluster-2"} {
		var eps []model.Endpoint
		for _, c := range []model.ClusterID{"cluster-1", "cluster-2"} {
			e := autoEP(autoV1, map[string]string{"app": "echo"})
			if c == injectedCluster {
				e = autoEP(autoV1, map[string]string{"app": "echo", TLSModeLabel: TLSModeIstio})
			}
			e.Cluster = c
			eps = append(eps, e)
		}
		for _, order := range [][]model.Endpoint{eps, {eps[1], eps[0]}} {
			ms := &model.MergedService{Service: echoService(), Endpoints: slices.Clone(order)}
			// A client elsewhere: both clusters are equally far.
			clas := LoadAssignments(ms, ProxyGroup{Cluster: "cluster-9", Region: "eu-west"}, nil)
			if got := tlsModeOf(t, clas[0]); !maps.Equal(got, map[string]string{autoV1: "istio"}) {
				t.Errorf("injected in %s: got %v, want the injected endpoint kept", injectedCluster, got)
			}
		}
	}
}

// TestAutoMTLSValidateAll checks every resource of the decision tables,
// and every message packed inside them, against the envoy protos' rules.
func TestAutoMTLSValidateAll(t *testing.T) {
	for _, tc := range autoCases {
		ms, cfg, dr := tc.service(), policies(t, tc.pas...), autoRule(t)
		var msgs []proto.Message
		msgs = append(msgs, asMessages(SidecarClusters([]*model.MergedService{ms}, cfg, sidecarOf(InterceptRedirect), tc.opts()))...)
		msgs = append(msgs, asMessages(ServiceClusters(ms, dr, cfg, tc.opts()))...)
		msgs = append(msgs, asMessages(LoadAssignments(ms, ProxyGroup{Cluster: "cluster-1"}, dr))...)
		for _, m := range msgs {
			_, errs := validateDeep(m)
			for _, err := range errs {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	}
}

// injectedServices returns services with every endpoint's Pod labelled by
// the injector (TLSModeLabel=TLSModeIstio), as in a mesh.
func injectedServices(services []*model.MergedService) []*model.MergedService {
	out := make([]*model.MergedService, len(services))
	for i, ms := range services {
		c := *ms
		c.Endpoints = slices.Clone(ms.Endpoints)
		for j := range c.Endpoints {
			m := c.Endpoints[j].Labels.Map()
			if m == nil {
				m = map[string]string{}
			}
			m[TLSModeLabel] = TLSModeIstio
			c.Endpoints[j].Labels = model.NewLabels(m)
		}
		out[i] = &c
	}
	return out
}
