package xdsgen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// drCases are DestinationRules of echo, one per translated field (or group
// of fields), rendered for both proxy kinds into testdata/dr_<name>_grpc
// and dr_<name>_envoy goldens. They double as the fuzz seeds.
var drCases = []struct{ name, spec string }{
	{"lb_round_robin", `
trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}`},
	{"lb_least_request", `
trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}`},
	{"lb_random", `
trafficPolicy: {loadBalancer: {simple: RANDOM}}`},
	{"lb_passthrough", `
trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}`},
	{"hash_header", `
trafficPolicy:
  loadBalancer:
    consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 2048}}`},
	{"hash_cookie", `
trafficPolicy:
  loadBalancer:
    consistentHash: {httpCookie: {name: session, path: /, ttl: 60s}}`},
	{"hash_source_ip", `
trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true}}}`},
	{"hash_query", `
trafficPolicy: {loadBalancer: {consistentHash: {httpQueryParameterName: user}}}`},
	{"hash_maglev", `
trafficPolicy:
  loadBalancer:
    consistentHash: {httpHeaderName: x-user, maglev: {tableSize: 65521}}`},
	{"hash_bad_sizes", `
trafficPolicy:
  loadBalancer:
    consistentHash: {httpHeaderName: x-user, maglev: {tableSize: 1000}}
  portLevelSettings:
  - port: {number: 9090}
    loadBalancer:
      consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 100000000}}`},
	{"outlier_consecutive", `
trafficPolicy:
  outlierDetection:
    consecutive5xxErrors: 3
    consecutiveGatewayErrors: 2
    interval: 1s
    baseEjectionTime: 30s
    maxEjectionPercent: 50
    minHealthPercent: 20`},
	{"outlier_defaults", `
trafficPolicy: {outlierDetection: {interval: 5s}}`},
	{"outlier_local_origin", `
trafficPolicy:
  outlierDetection:
    splitExternalLocalOriginErrors: true
    consecutiveLocalOriginFailures: 4
    consecutive5xxErrors: 0`},
	{"outlier_failure_percentage", `
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 0, failurePercentageThreshold: 70}`},
	{"pool_http", `
trafficPolicy:
  connectionPool:
    http:
      http1MaxPendingRequests: 10
      http2MaxRequests: 100
      maxRequestsPerConnection: 5
      maxRetries: 2
      idleTimeout: 30s
      maxConcurrentStreams: 50
      http2KeepAlive: {interval: 10s, timeout: 2s}`},
	{"pool_tcp", `
trafficPolicy:
  connectionPool:
    tcp:
      maxConnections: 7
      connectTimeout: 2s
      maxConnectionDuration: 1h
      idleTimeout: 5m
      tcpKeepalive: {probes: 3, time: 60s, interval: 10s}`},
	{"pool_upgrade", `
trafficPolicy:
  connectionPool: {http: {h2UpgradePolicy: UPGRADE, useClientProtocol: true}}`},
	{"port_level", `
trafficPolicy:
  loadBalancer: {simple: LEAST_REQUEST}
  connectionPool: {http: {http2MaxRequests: 10}}
  portLevelSettings:
  - port: {number: 9090}
    loadBalancer: {simple: ROUND_ROBIN}`},
	{"subsets", `
trafficPolicy:
  loadBalancer: {simple: LEAST_REQUEST}
  outlierDetection: {consecutive5xxErrors: 1}
subsets:
- name: v2
  labels: {version: v2}
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
- name: v1
  labels: {version: v1}`},
	{"not_translated", `
trafficPolicy:
  loadBalancer:
    simple: ROUND_ROBIN
    localityLbSetting: {enabled: true, failoverPriority: [topology.istio.io/cluster]}
    warmup: {duration: 10s}
  tls: {mode: ISTIO_MUTUAL}
  tunnel: {protocol: CONNECT, targetHost: example.com, targetPort: 443}
  retryBudget: {percent: 10}`},
}

// decodeDR decodes and validates a DestinationRule spec of echo written in
// YAML; the host is filled in when absent.
func decodeDR(spec []byte) (*istioconfig.DestinationRule, error) {
	msg, errs := validate.DecodeSpec(validate.KindDestinationRule, spec)
	if len(errs) > 0 {
		return nil, fmt.Errorf("decode: %v", errs)
	}
	dr := msg.(*networking.DestinationRule)
	if errs := validate.Spec(dr); len(errs) > 0 {
		return nil, fmt.Errorf("validate: %v", errs)
	}
	return &istioconfig.DestinationRule{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindDestinationRule, Namespace: "demo", Name: "echo"}},
		Spec: dr,
	}, nil
}

func mustDR(t testing.TB, spec string) *istioconfig.DestinationRule {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte("host: echo\n" + strings.TrimPrefix(spec, "\n")))
	if err != nil {
		t.Fatalf("yaml: %v", err)
	}
	dr, err := decodeDR(j)
	if err != nil {
		t.Fatal(err)
	}
	return dr
}

// sidecarOutbound returns the outbound clusters a sidecar gets for echo
// under dr.
func sidecarOutbound(svc *model.Service, dr *istioconfig.DestinationRule) []*clusterv3.Cluster {
	var objs []istioconfig.Object
	if dr != nil {
		objs = append(objs, dr)
	}
	config := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs)
	var out []*clusterv3.Cluster
	for _, c := range SidecarClusters([]*model.MergedService{{Service: svc}}, config, Sidecar{}, Options{}) {
		if strings.HasPrefix(c.GetName(), clusterNamePrefix) {
			out = append(out, c)
		}
	}
	return out
}

// noteMessages renders notes as "<field>: <reason>" strings for goldens.
func noteMessages(notes []RouteNote) []proto.Message {
	out := make([]proto.Message, len(notes))
	for i, n := range notes {
		out[i] = structpb.NewStringValue(n.Field + ": " + n.Reason)
	}
	return out
}

func TestGoldenDestinationRules(t *testing.T) {
	svc := echoService()
	for _, tc := range drCases {
		t.Run(tc.name, func(t *testing.T) {
			dr := mustDR(t, tc.spec)
			grpc := Clusters(svc, dr)
			checkGolden(t, "dr_"+tc.name+"_grpc", render(t,
				section{"clusters", asMessages(grpc)},
				section{"notes", noteMessages(ClusterNotes(ProxyGRPC, dr))},
			))
			envoy := sidecarOutbound(svc, dr)
			checkGolden(t, "dr_"+tc.name+"_envoy", render(t,
				section{"clusters", asMessages(envoy)},
				section{"notes", noteMessages(ClusterNotes(ProxyEnvoy, dr))},
			))
			checkClusters(t, grpc, envoy)
		})
	}
}

// checkClusters validates every cluster (and its packed protocol options)
// and checks that proxyless clusters hold only what grpc-go accepts.
func checkClusters(t testing.TB, grpc, envoy []*clusterv3.Cluster) {
	t.Helper()
	for _, c := range append(slices.Clone(grpc), envoy...) {
		if err := c.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.GetName(), err)
		}
		for key, a := range c.GetTypedExtensionProtocolOptions() {
			var po httpv3.HttpProtocolOptions
			if err := a.UnmarshalTo(&po); err != nil {
				t.Fatalf("%s: %s: %v", c.GetName(), key, err)
			}
			if err := po.ValidateAll(); err != nil {
				t.Errorf("%s: %s: %v", c.GetName(), key, err)
			}
		}
	}
	for _, c := range grpc {
		switch c.GetLbPolicy() {
		case clusterv3.Cluster_ROUND_ROBIN, clusterv3.Cluster_RING_HASH, clusterv3.Cluster_LEAST_REQUEST:
		default:
			t.Errorf("%s: lb_policy %s, which grpc-go rejects", c.GetName(), c.GetLbPolicy())
		}
		if size := c.GetRingHashLbConfig().GetMinimumRingSize(); size != nil && size.GetValue() > maxRingSize {
			t.Errorf("%s: ring size %d, which grpc-go rejects", c.GetName(), size.GetValue())
		}
		if c.GetTypedExtensionProtocolOptions() != nil || c.GetCommonLbConfig() != nil || c.GetUpstreamConnectionOptions() != nil {
			t.Errorf("%s: carries Envoy-only settings", c.GetName())
		}
		for _, th := range c.GetCircuitBreakers().GetThresholds() {
			if !proto.Equal(th, &clusterv3.CircuitBreakers_Thresholds{MaxRequests: th.GetMaxRequests()}) {
				t.Errorf("%s: circuit breakers beyond max_requests: %v", c.GetName(), th)
			}
		}
		if od := c.GetOutlierDetection(); od != nil {
			if od.GetEnforcingSuccessRate().GetValue() != 0 || od.GetEnforcingSuccessRate() == nil {
				t.Errorf("%s: success-rate ejection left on", c.GetName())
			}
			if od.GetConsecutive_5Xx() != nil || od.GetConsecutiveGatewayFailure() != nil || od.GetSplitExternalLocalOriginErrors() {
				t.Errorf("%s: consecutive-error fields, which grpc-go ignores", c.GetName())
			}
		}
	}
}

func TestClustersWithoutDestinationRule(t *testing.T) {
	svc := echoService()
	empty := mustDR(t, "") // a DestinationRule without policy or subsets
	for _, dr := range []*istioconfig.DestinationRule{nil, empty} {
		got := Clusters(svc, dr)
		if len(got) != 2 || got[0].GetName() != ClusterName(echoHost, 8080) || got[1].GetName() != ClusterName(echoHost, 9090) {
			t.Fatalf("Clusters(%v) = %v", dr != nil, drClusterNames(got))
		}
		for _, c := range got {
			if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || c.GetOutlierDetection() != nil || c.GetCircuitBreakers() != nil {
				t.Errorf("%s: not the plain default cluster", c.GetName())
			}
		}
	}
}

func TestSubsetClusters(t *testing.T) {
	dr := mustDR(t, drCases[slices.IndexFunc(drCases, func(c struct{ name, spec string }) bool { return c.name == "subsets" })].spec)
	want := []string{
		"outbound|8080||echo.demo.svc.cluster.local",
		"outbound|8080|v1|echo.demo.svc.cluster.local",
		"outbound|8080|v2|echo.demo.svc.cluster.local",
		"outbound|9090||echo.demo.svc.cluster.local",
		"outbound|9090|v1|echo.demo.svc.cluster.local",
		"outbound|9090|v2|echo.demo.svc.cluster.local",
	}
	slices.Sort(want)
	for kind, cs := range map[string][]*clusterv3.Cluster{"grpc": Clusters(echoService(), dr), "envoy": sidecarOutbound(echoService(), dr)} {
		if got := drClusterNames(cs); !slices.Equal(got, want) {
			t.Errorf("%s: clusters %v, want %v", kind, got, want)
		}
		for _, c := range cs {
			if c.GetEdsClusterConfig().GetServiceName() != c.GetName() {
				t.Errorf("%s: EDS service name %q", c.GetName(), c.GetEdsClusterConfig().GetServiceName())
			}
			_, _, subset, err := ParseSubsetClusterName(c.GetName())
			if err != nil {
				t.Fatal(err)
			}
			// v2 hashes; v1 and the default inherit LEAST_REQUEST.
			wantLB := clusterv3.Cluster_LEAST_REQUEST
			if subset == "v2" {
				wantLB = clusterv3.Cluster_RING_HASH
			}
			if c.GetLbPolicy() != wantLB {
				t.Errorf("%s %s: lb %s, want %s", kind, c.GetName(), c.GetLbPolicy(), wantLB)
			}
			// Every subset inherits the top-level outlier detection.
			if c.GetOutlierDetection() == nil {
				t.Errorf("%s %s: no outlier detection", kind, c.GetName())
			}
		}
	}
}

func TestSecureSubsetClusters(t *testing.T) {
	dr := mustDR(t, "subsets: [{name: v1, labels: {version: v1}}]")
	ms := &model.MergedService{Service: echoService(), Endpoints: []model.Endpoint{{ServiceAccount: "echo"}}}
	cs := ServiceClusters(ms, dr, nil, Options{Security: true})
	if len(cs) != 4 {
		t.Fatalf("ServiceClusters = %v", drClusterNames(cs))
	}
	// Every cluster is secure, each naming itself by SNI.
	for _, c := range cs {
		h, port, subset, err := ParseSubsetClusterName(c.GetName())
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(c.GetTransportSocket(), meshUpstreamTLS([]string{SpiffeID("", "demo", "echo")}, SNIClusterName(h, port, subset))) {
			t.Errorf("%s: TLS %v", c.GetName(), c.GetTransportSocket())
		}
	}
}

func TestEffectivePolicy(t *testing.T) {
	dr := mustDR(t, `
trafficPolicy:
  loadBalancer: {simple: LEAST_REQUEST}
  connectionPool: {http: {http2MaxRequests: 10}}
  portLevelSettings:
  - port: {number: 9090}
    outlierDetection: {consecutive5xxErrors: 9}
subsets:
- name: hash
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
- name: port
  trafficPolicy:
    portLevelSettings:
    - port: {number: 8080}
      connectionPool: {http: {http2MaxRequests: 20}}`)
	for _, tc := range []struct {
		port          uint32
		subset        string
		lb            string // "" none
		maxRequests   int32
		outlierErrors uint32
	}{
		// The top level applies to 8080.
		{8080, "", "LEAST_REQUEST", 10, 0},
		// 9090's port-level setting replaces the top level whole: no
		// load balancer, no pool are inherited.
		{9090, "", "", 0, 9},
		// A subset overrides only the parts it sets.
		{8080, "hash", "consistentHash", 10, 0},
		{9090, "hash", "consistentHash", 0, 9},
		// A subset's port-level setting replaces all four parts.
		{8080, "port", "", 20, 0},
		{9090, "port", "", 0, 9},
		// An unknown subset is the service's.
		{8080, "nope", "LEAST_REQUEST", 10, 0},
	} {
		tp := effectivePolicy(dr, tc.port, tc.subset)
		lb := ""
		switch {
		case tp.GetLoadBalancer().GetConsistentHash() != nil:
			lb = "consistentHash"
		case tp.GetLoadBalancer() != nil:
			lb = tp.GetLoadBalancer().GetSimple().String()
		}
		if lb != tc.lb || tp.GetConnectionPool().GetHttp().GetHttp2MaxRequests() != tc.maxRequests ||
			tp.GetOutlierDetection().GetConsecutive_5XxErrors().GetValue() != tc.outlierErrors {
			t.Errorf("effectivePolicy(%d, %q) = lb %q, maxRequests %d, 5xx %d; want %q, %d, %d", tc.port, tc.subset,
				lb, tp.GetConnectionPool().GetHttp().GetHttp2MaxRequests(), tp.GetOutlierDetection().GetConsecutive_5XxErrors().GetValue(),
				tc.lb, tc.maxRequests, tc.outlierErrors)
		}
	}
	if effectivePolicy(nil, 8080, "") != nil {
		t.Error("effectivePolicy(nil) is not nil")
	}
}

func TestHashPolicies(t *testing.T) {
	for _, tc := range []struct {
		spec string
		port uint32
		want string // protojson of the first policy, "" for none
	}{
		{"trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}", 8080, `header:{header_name:"x-user"}`},
		{"trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: s, path: /a, ttl: 10s}}}}", 8080, `cookie:{name:"s" ttl:{seconds:10} path:"/a"}`},
		{"trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true}}}", 8080, `connection_properties:{source_ip:true}`},
		{"trafficPolicy: {loadBalancer: {consistentHash: {httpQueryParameterName: u}}}", 8080, `query_parameter:{name:"u"}`},
		{"trafficPolicy: {loadBalancer: {simple: RANDOM}}", 8080, ""},
		// A header name Envoy would refuse makes no policy.
		{"trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: \"bad\\nheader\"}}}", 8080, ""},
		// Port-level settings win for their port only.
		{"trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: a}}, portLevelSettings: [{port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: b}}}]}", 9090, `header:{header_name:"b"}`},
		{"trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: a}}, portLevelSettings: [{port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: b}}}]}", 8080, `header:{header_name:"a"}`},
	} {
		got := HashPolicies(mustDR(t, tc.spec), tc.port, "")
		var s string
		if len(got) > 0 {
			s = strings.ReplaceAll(got[0].String(), "  ", " ")
		}
		if s != tc.want {
			t.Errorf("HashPolicies(%s, %d) = %s, want %s", tc.spec, tc.port, s, tc.want)
		}
	}
	dr := mustDR(t, "subsets: [{name: v1, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x}}}}]")
	if got := HashPolicies(dr, 8080, "v1"); len(got) != 1 || got[0].GetHeader().GetHeaderName() != "x" {
		t.Errorf("subset v1: %v", got)
	}
	if got := HashPolicies(dr, 8080, ""); got != nil {
		t.Errorf("default subset: %v", got)
	}
	if got := HashPolicies(nil, 8080, ""); got != nil {
		t.Errorf("nil: %v", got)
	}
}

// TestProxylessOutlierEjectsFailingHost checks the translation's arithmetic
// against grpc-go's failure-percentage rule (eject when the failure
// percentage of a host with at least request_volume calls exceeds the
// threshold, if at least minimum_hosts such hosts exist): a host failing
// every call is ejected after the consecutive count of calls, a host with
// one success in its calls is not.
func TestProxylessOutlierEjectsFailingHost(t *testing.T) {
	ejects := func(od *clusterv3.OutlierDetection, hosts int, calls, failures uint32) bool {
		if od.GetEnforcingFailurePercentage().GetValue() != 100 {
			return false
		}
		volume, minHosts := uint32(50), uint32(5) // grpc-go's defaults
		if v := od.GetFailurePercentageRequestVolume(); v != nil {
			volume = v.GetValue()
		}
		if v := od.GetFailurePercentageMinimumHosts(); v != nil {
			minHosts = v.GetValue()
		}
		if calls < volume || uint32(hosts) < minHosts {
			return false
		}
		return float64(failures)/float64(calls)*100 > float64(od.GetFailurePercentageThreshold().GetValue())
	}
	for _, n := range []uint32{1, 2, 5, 100} {
		dr := mustDR(t, fmt.Sprintf("trafficPolicy: {outlierDetection: {consecutive5xxErrors: %d}}", n))
		od := Clusters(echoService(), dr)[0].GetOutlierDetection()
		if !ejects(od, 2, n, n) {
			t.Errorf("consecutive5xxErrors %d: a host failing its %d calls among 2 is not ejected (%v)", n, n, od)
		}
		if n > 1 && ejects(od, 2, n-1, n-1) {
			t.Errorf("consecutive5xxErrors %d: ejected after %d calls", n, n-1)
		}
		if ejects(od, 2, 100, 99) {
			t.Errorf("consecutive5xxErrors %d: a host with a success in 100 calls is ejected", n)
		}
	}
	dr := mustDR(t, "trafficPolicy: {outlierDetection: {consecutive5xxErrors: 0, failurePercentageThreshold: 100}}")
	if od := Clusters(echoService(), dr)[0].GetOutlierDetection(); !ejects(od, 5, 50, 50) {
		t.Errorf("failurePercentageThreshold 100: a host failing every call is not ejected (%v)", od)
	}
	dr = mustDR(t, "trafficPolicy: {outlierDetection: {consecutive5xxErrors: 0}}")
	if od := Clusters(echoService(), dr)[0].GetOutlierDetection(); od != nil {
		t.Errorf("consecutive errors off: outlier detection %v", od)
	}
}

func TestClusterNotes(t *testing.T) {
	dr := mustDR(t, `
trafficPolicy: {loadBalancer: {simple: RANDOM}}
subsets:
- name: v1
  trafficPolicy:
    portLevelSettings: [{port: {number: 8080}, loadBalancer: {simple: RANDOM}}]`)
	want := []RouteNote{
		{Object: dr.Key, Kind: ProxyGRPC, Field: "spec.trafficPolicy.loadBalancer.simple", Reason: "grpc-go has no RANDOM balancer; ROUND_ROBIN used"},
		{Object: dr.Key, Kind: ProxyGRPC, Field: "spec.subsets[0].trafficPolicy.portLevelSettings[0].loadBalancer.simple", Reason: "grpc-go has no RANDOM balancer; ROUND_ROBIN used"},
	}
	if got := ClusterNotes(ProxyGRPC, dr); !slices.Equal(got, want) {
		t.Errorf("ClusterNotes(ProxyGRPC) = %v, want %v", got, want)
	}
	if got := ClusterNotes(ProxyEnvoy, dr); got != nil {
		t.Errorf("ClusterNotes(ProxyEnvoy) = %v, want none", got)
	}
	if got := ClusterNotes(ProxyGRPC, nil); got != nil {
		t.Errorf("ClusterNotes(nil) = %v", got)
	}
}

// fuzzExtremes are seeds with values at and past the limits that the
// spec's validation leaves unchecked.
var fuzzExtremes = []string{
	`{"host":"echo","trafficPolicy":{"outlierDetection":{"failurePercentageThreshold":500,"consecutive5xxErrors":4294967295,"maxEjectionPercent":100,"minHealthPercent":100}}}`,
	`{"host":"echo","trafficPolicy":{"connectionPool":{"http":{"http2KeepAlive":{"interval":"0s"},"maxConcurrentStreams":2147483647,"http2MaxRequests":2147483647},"tcp":{"tcpKeepalive":{"time":"87600h"}}}}}`,
	`{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpCookie":{"name":"","ttl":"-5s"},"maglev":{"tableSize":18446744073709551615}}}}}`,
	`{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpHeaderName":"","minimumRingSize":18446744073709551615}}}}`,
	`{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"useSourceIp":false}}},"subsets":[{"name":"a","trafficPolicy":{"portLevelSettings":[{"port":{"number":8080},"loadBalancer":{"simple":"PASSTHROUGH"}}]}}]}`,
}

func FuzzDestinationRuleClusters(f *testing.F) {
	for _, s := range slices.Concat(fuzzExtremes, fuzzTLSSeeds, fuzzDistributeSeeds) {
		f.Add([]byte(s))
	}
	for _, tc := range drCases {
		j, err := yaml.YAMLToJSON([]byte("host: echo\n" + strings.TrimPrefix(tc.spec, "\n")))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j)
	}
	svc := echoService()
	f.Fuzz(func(t *testing.T, spec []byte) {
		dr, err := decodeDR(spec)
		if err != nil {
			t.Skip()
		}
		grpc := Clusters(svc, dr)
		envoy := sidecarOutbound(svc, dr)
		checkClusters(t, grpc, envoy)
		// With endpoints and Security, so that the tls settings and auto
		// mTLS make TLS sockets for both kinds.
		ms := merged(autoEndpoints(autoV1, autoV3)...)
		secureGRPC := ServiceClusters(ms, dr, nil, Options{Security: true})
		secureEnvoy := outboundClusters(ms, dr, nil, Options{Security: true})
		checkClusters(t, secureGRPC, secureEnvoy)
		for _, c := range secureGRPC {
			if err := grpcAcceptsCluster(c); err != nil {
				t.Errorf("grpc-go rejects %s: %v", c.GetName(), err)
			}
		}
		for _, c := range append(secureGRPC, secureEnvoy...) {
			if ts := c.GetTransportSocket(); ts != nil {
				var ctx tlsv3.UpstreamTlsContext
				if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
					t.Fatal(err)
				}
				if err := ctx.ValidateAll(); err != nil {
					t.Errorf("%s: %v", c.GetName(), err)
				}
			}
		}
		_ = ClusterNotes(ProxyGRPC, dr)
		_ = ClusterNotes(ProxyEnvoy, dr)
		// Load assignments, distribute weights included, for groups in
		// and out of the seeds' from localities.
		wide := merged(ep("cluster-1", "10.1.0.1", usEast1a, true), ep("cluster-2", "10.2.0.1", usEast1c, true), ep("cluster-3", "10.3.0.1", euWest1a, true))
		for _, g := range []ProxyGroup{groupEast1a, groupEast, groupWest} {
			checkAssignments(t, LoadAssignments(wide, g, dr))
		}
		for _, p := range svc.Ports {
			for _, s := range append([]string{""}, subsetNames(dr)...) {
				for _, hp := range HashPolicies(dr, p.Port, s) {
					if err := hp.ValidateAll(); err != nil {
						t.Errorf("hash policy %v: %v", hp, err)
					}
				}
			}
		}
	})
}

func drClusterNames(cs []*clusterv3.Cluster) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.GetName()
	}
	return out
}

// TestFuzzExtremesAreValid keeps the extreme seeds meaningful: each must
// pass the spec's validation, or the fuzz target would skip it.
func TestFuzzExtremesAreValid(t *testing.T) {
	for _, s := range fuzzExtremes {
		if _, err := decodeDR([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}
