package xdsgen

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// DNS fixtures: echo (grpc 8080, http 9090) as a ServiceEntry resolved by
// DNS, with two names: a.example.com (grpc on 50051, http on the service
// port, weight 3, in us-east-1a) and b.example.com (grpc on the service
// port, http on 8081, no weight, in eu-west-1a).
func dnsService(r model.Resolution) *model.Service {
	svc := echoService()
	svc.Resolution = r
	svc.DNSEndpoints = []model.DNSEndpoint{
		{Host: "a.example.com", Ports: map[string]uint32{"grpc": 50051}, Locality: usEast1a, Weight: 3},
		{Host: "b.example.com", Ports: map[string]uint32{"http": 8081}, Locality: euWest1a},
	}
	return svc
}

// dnsMerged is the registry's view of a DNS service: no endpoints.
func dnsMerged(r model.Resolution) *model.MergedService {
	return &model.MergedService{Service: dnsService(r)}
}

// dnsWant is one endpoint a DNS cluster should hold.
type dnsWant struct {
	addr   string // host:port
	loc    model.Locality
	weight uint32 // 0: unset
}

// Per port of the fixture, the endpoints in DNSEndpoints order.
var dnsWants = map[uint32][]dnsWant{
	8080: {{"a.example.com:50051", usEast1a, 3}, {"b.example.com:8080", euWest1a, 0}},
	9090: {{"a.example.com:9090", usEast1a, 3}, {"b.example.com:8081", euWest1a, 0}},
}

// dnsEndpointsOf flattens c's inline load assignment, checking that it is
// named after c and that each locality appears once, at priority 0.
func dnsEndpointsOf(t *testing.T, c *clusterv3.Cluster) []dnsWant {
	t.Helper()
	cla := c.GetLoadAssignment()
	if cla.GetClusterName() != c.GetName() {
		t.Errorf("%s: load assignment named %q", c.GetName(), cla.GetClusterName())
	}
	var out []dnsWant
	seen := map[model.Locality]bool{}
	for _, lle := range cla.GetEndpoints() {
		l := model.Locality{Region: lle.GetLocality().GetRegion(), Zone: lle.GetLocality().GetZone(), SubZone: lle.GetLocality().GetSubZone()}
		if seen[l] || lle.GetPriority() != 0 {
			t.Errorf("%s: locality %v repeated or at priority %d", c.GetName(), l, lle.GetPriority())
		}
		seen[l] = true
		for _, lb := range lle.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetProtocol() != corev3.SocketAddress_TCP || sa.GetResolverName() != "" {
				t.Errorf("%s: socket address %v", c.GetName(), sa)
			}
			out = append(out, dnsWant{
				addr:   net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))),
				loc:    l,
				weight: lb.GetLoadBalancingWeight().GetValue(),
			})
		}
	}
	return out
}

// grpcAcceptsCluster reports what of c grpc-go v1.85 NACKs, following
// validateClusterAndConstructClusterUpdate and dnsHostNameFromCluster
// (internal/xds/xdsclient/xdsresource/unmarshal_cds.go), which cannot be
// imported: lb_policy ROUND_ROBIN, RING_HASH (xxHash) or LEAST_REQUEST
// (choice_count >= 2); type EDS over ADS or self, or LOGICAL_DNS whose
// load_assignment has exactly one locality with exactly one endpoint with
// a socket address, no custom resolver, a host and a port; no
// transport_socket_matches (xdsclient rejects them).
func grpcAcceptsCluster(c *clusterv3.Cluster) error {
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_ROUND_ROBIN:
	case clusterv3.Cluster_RING_HASH:
		if c.GetRingHashLbConfig().GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
			return fmt.Errorf("ring hash function %v", c.GetRingHashLbConfig().GetHashFunction())
		}
	case clusterv3.Cluster_LEAST_REQUEST:
		if cc := c.GetLeastRequestLbConfig().GetChoiceCount(); cc != nil && cc.GetValue() < 2 {
			return fmt.Errorf("choice_count %d", cc.GetValue())
		}
	default:
		return fmt.Errorf("lb_policy %v", c.GetLbPolicy())
	}
	if len(c.GetTransportSocketMatches()) > 0 {
		return fmt.Errorf("transport_socket_matches")
	}
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		if cs := c.GetEdsClusterConfig().GetEdsConfig(); cs.GetAds() == nil && cs.GetSelf() == nil {
			return fmt.Errorf("EDS config source %v", cs)
		}
	case clusterv3.Cluster_LOGICAL_DNS:
		la := c.GetLoadAssignment()
		if la == nil || len(la.GetEndpoints()) != 1 || len(la.GetEndpoints()[0].GetLbEndpoints()) != 1 {
			return fmt.Errorf("LOGICAL_DNS load_assignment %v: want one locality with one endpoint", la)
		}
		sa := la.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if sa == nil || sa.GetResolverName() != "" || sa.GetAddress() == "" || sa.GetPortValue() == 0 {
			return fmt.Errorf("LOGICAL_DNS socket address %v", sa)
		}
	default:
		return fmt.Errorf("cluster type %v (%v)", c.GetType(), c.GetClusterType())
	}
	return nil
}

// TestGRPCAcceptsClusterRejects: the checker rejects what grpc-go does
// with DNS clusters: STRICT_DNS, and LOGICAL_DNS with two endpoints.
func TestGRPCAcceptsClusterRejects(t *testing.T) {
	svc := dnsService(model.ResolutionDNS)
	strict := proxylessCluster(svc, svc.Ports[0], "", nil)
	strict.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
	two := proxylessCluster(svc, svc.Ports[0], "", nil)
	two.LoadAssignment = dnsLoadAssignment(two.GetName(), dnsTargets(svc, svc.Ports[0]))
	two.LoadAssignment.Endpoints = two.LoadAssignment.Endpoints[:1]
	two.LoadAssignment.Endpoints[0].LbEndpoints = append(two.LoadAssignment.Endpoints[0].LbEndpoints, two.LoadAssignment.Endpoints[0].LbEndpoints[0])
	for name, c := range map[string]*clusterv3.Cluster{"STRICT_DNS": strict, "two endpoints": two} {
		if grpcAcceptsCluster(c) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := grpcAcceptsCluster(proxylessCluster(svc, svc.Ports[0], "", nil)); err != nil {
		t.Errorf("LOGICAL_DNS: %v", err)
	}
}

// TestDNSClustersProxyless: both resolutions give proxyless clients
// LOGICAL_DNS clusters to the first name, on every port and subset, in
// plaintext even with Security, and grpc-go accepts them.
func TestDNSClustersProxyless(t *testing.T) {
	dr := autoRule(t)
	for _, r := range []model.Resolution{model.ResolutionDNS, model.ResolutionDNSRoundRobin} {
		t.Run(string(r), func(t *testing.T) {
			ms := dnsMerged(r)
			plain := Clusters(ms.Service, dr)
			secure := ServiceClusters(ms, dr, policies(t), Options{Security: true})
			for _, cs := range [][]*clusterv3.Cluster{plain, secure} {
				if got := namesOf(cs); !slices.Equal(got, sortedNames(autoAll)) {
					t.Fatalf("clusters %v, want %v", got, sortedNames(autoAll))
				}
				checkClusters(t, cs, nil)
				for _, c := range cs {
					if err := grpcAcceptsCluster(c); err != nil {
						t.Errorf("%s: grpc-go NACKs it: %v", c.GetName(), err)
					}
					_, port, _, err := ParseSubsetClusterName(c.GetName())
					if err != nil {
						t.Fatal(err)
					}
					if c.GetType() != clusterv3.Cluster_LOGICAL_DNS || c.GetEdsClusterConfig() != nil {
						t.Errorf("%s: type %v, EDS config %v", c.GetName(), c.GetType(), c.GetEdsClusterConfig())
					}
					if got, want := dnsEndpointsOf(t, c), dnsWants[port][:1]; !slices.Equal(got, want) {
						t.Errorf("%s: endpoints %v, want %v", c.GetName(), got, want)
					}
					if c.GetTransportSocket() != nil || c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN ||
						c.GetConnectTimeout().AsDuration() != connectTimeout || c.GetDnsLookupFamily() != clusterv3.Cluster_AUTO {
						t.Errorf("%s: not a plain proxyless cluster: %v", c.GetName(), c)
					}
				}
			}
			if got := MTLSClusters(ProxyGRPC, ms, dr, policies(t), Options{Security: true}); got != nil {
				t.Errorf("MTLSClusters = %v, want none", got)
			}
		})
	}
}

// TestDNSClustersEnvoy: a sidecar gets STRICT_DNS over every name for DNS
// and LOGICAL_DNS to the first for DNS_ROUND_ROBIN, subset clusters being
// the same cluster under another name, with everything an EDS cluster has
// besides (least request, circuit breakers, HTTP/2 towards gRPC).
func TestDNSClustersEnvoy(t *testing.T) {
	for _, tc := range []struct {
		r    model.Resolution
		typ  clusterv3.Cluster_DiscoveryType
		want func(port uint32) []dnsWant
	}{
		{model.ResolutionDNS, clusterv3.Cluster_STRICT_DNS, func(p uint32) []dnsWant { return dnsWants[p] }},
		{model.ResolutionDNSRoundRobin, clusterv3.Cluster_LOGICAL_DNS, func(p uint32) []dnsWant { return dnsWants[p][:1] }},
	} {
		t.Run(string(tc.r), func(t *testing.T) {
			ms := dnsMerged(tc.r)
			cs := sidecarEchoClusters(ms, policies(t), Options{Security: true})
			if got := namesOf(cs); !slices.Equal(got, sortedNames(autoAll)) {
				t.Fatalf("clusters %v, want %v", got, sortedNames(autoAll))
			}
			checkClusters(t, nil, cs)
			defaults := map[uint32]*clusterv3.Cluster{}
			for _, c := range cs {
				if _, errs := validateDeep(c); len(errs) > 0 {
					t.Errorf("%s: %v", c.GetName(), errs)
				}
				_, port, subset, err := ParseSubsetClusterName(c.GetName())
				if err != nil {
					t.Fatal(err)
				}
				if c.GetType() != tc.typ || c.GetEdsClusterConfig() != nil || c.GetDnsLookupFamily() != clusterv3.Cluster_V4_PREFERRED {
					t.Errorf("%s: type %v, EDS config %v, family %v", c.GetName(), c.GetType(), c.GetEdsClusterConfig(), c.GetDnsLookupFamily())
				}
				if got, want := dnsEndpointsOf(t, c), tc.want(port); !slices.Equal(got, want) {
					t.Errorf("%s: endpoints %v, want %v", c.GetName(), got, want)
				}
				if c.GetTransportSocket() != nil || c.GetTransportSocketMatches() != nil {
					t.Errorf("%s: TLS towards a DNS service", c.GetName())
				}
				if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || c.GetConnectTimeout().AsDuration() != connectTimeout ||
					!proto.Equal(c.GetCircuitBreakers().GetThresholds()[0], unlimitedThresholds()) {
					t.Errorf("%s: not istiod's outbound defaults: %v", c.GetName(), c)
				}
				_, h2 := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey]
				if h2 != (port == 8080) {
					t.Errorf("%s: HTTP/2 options %t, want %t", c.GetName(), h2, port == 8080)
				}
				if subset == "" {
					defaults[port] = c
				}
			}
			// A subset cluster is the default one under its own name.
			for _, c := range cs {
				_, port, subset, _ := ParseSubsetClusterName(c.GetName())
				if subset == "" {
					continue
				}
				d := proto.Clone(defaults[port]).(*clusterv3.Cluster)
				d.Name, d.LoadAssignment.ClusterName = c.GetName(), c.GetName()
				if !proto.Equal(c, d) {
					t.Errorf("%s differs from the default cluster:\n%v\n%v", c.GetName(), c, d)
				}
			}
			if got := MTLSClusters(ProxyEnvoy, ms, autoRule(t), policies(t), Options{Security: true}); got != nil {
				t.Errorf("MTLSClusters = %v, want none", got)
			}
		})
	}
}

// TestDNSClustersWithoutEndpoints: a DNS service without a usable name
// resolves its hostname on the service port, and says so.
func TestDNSClustersWithoutEndpoints(t *testing.T) {
	svc := dnsService(model.ResolutionDNS)
	svc.DNSEndpoints = []model.DNSEndpoint{{Host: ""}, {Host: "c.example.com", Ports: map[string]uint32{"grpc": 70000, "http": 70000}}}
	ms := &model.MergedService{Service: svc}
	cs := append(Clusters(svc, nil), sidecarEchoClusters(ms, nil, Options{})...)
	if len(cs) != 4 {
		t.Fatalf("clusters %v", namesOf(cs))
	}
	for _, c := range cs {
		_, port, _, _ := ParseSubsetClusterName(c.GetName())
		want := []dnsWant{{string(echoHost) + ":" + strconv.Itoa(int(port)), model.Locality{}, 0}}
		if got := dnsEndpointsOf(t, c); !slices.Equal(got, want) {
			t.Errorf("%s: endpoints %v, want %v", c.GetName(), got, want)
		}
		if err := c.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.GetName(), err)
		}
	}
	notes := ServiceNotes(ms, nil)
	for _, want := range []string{
		"dnsEndpoints[0]: no host; dropped (proxyless gRPC)",
		"dnsEndpoints[1].ports.grpc: port 70000 is not in 1..65535; dropped from port 8080 (Envoy)",
		"dnsEndpoints: no usable endpoint; the hostname echo.demo.svc.cluster.local itself is resolved (proxyless gRPC)",
	} {
		if !slices.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
}

// TestDNSNoLoadAssignments: nothing subscribes to assignments of DNS
// clusters, so neither LoadAssignments nor the Planner makes any, and a
// service that turns into a DNS one has its assignments deleted.
func TestDNSNoLoadAssignments(t *testing.T) {
	for _, r := range []model.Resolution{model.ResolutionDNS, model.ResolutionDNSRoundRobin} {
		t.Run(string(r), func(t *testing.T) {
			dns := dnsMerged(r)
			// Registry endpoints of the host do not matter either.
			dns.Endpoints = fleet(true).Endpoints
			if got := LoadAssignments(dns, groupEast, autoRule(t)); got != nil {
				t.Errorf("LoadAssignments = %v", got)
			}

			p := NewPlanner(Options{})
			p.SetConfig(policies(t), []model.Hostname{echoHost})
			if w := p.AddGroup(groupEast, []*model.MergedService{dns}); len(w) != 0 {
				t.Errorf("AddGroup wrote %v", w)
			}
			plan := p.Plan([]ServiceUpdate{upd(echoHost, dns)})
			if len(plan.Groups) != 0 {
				t.Errorf("plan writes assignments: %v", plan.Groups)
			}
			cds := plan.Shared[resourcev3.ClusterType].Upsert
			if len(cds) != len(autoAll) {
				t.Fatalf("CDS upserts %d clusters, want %d", len(cds), len(autoAll))
			}
			for name, res := range cds {
				if typ := res.(*clusterv3.Cluster).GetType(); typ == clusterv3.Cluster_EDS {
					t.Errorf("%s: EDS", name)
				}
			}

			// From endpoints to DNS: the group's assignments go.
			p = NewPlanner(Options{})
			p.SetConfig(policies(t), []model.Hostname{echoHost})
			eds := fleet(true)
			if w := p.AddGroup(groupEast, []*model.MergedService{eds}); len(w) != len(autoAll) {
				t.Fatalf("AddGroup wrote %d assignments, want %d", len(w), len(autoAll))
			}
			p.Plan([]ServiceUpdate{upd(echoHost, eds)})
			plan = p.Plan([]ServiceUpdate{upd(echoHost, dns)})
			if got := plan.Groups[groupEast]; len(got.Upsert) != 0 || !slices.Equal(got.Delete, sortedNames(autoAll)) {
				t.Errorf("group changes %v, want deletes of %v", got, sortedNames(autoAll))
			}
			if w := p.AddGroup(groupEast, nil); len(w) != 0 {
				t.Errorf("group still holds %d assignments", len(w))
			}
			// And back: they return.
			plan = p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
			if got := plan.Groups[groupEast]; len(got.Upsert) != len(autoAll) {
				t.Errorf("back to endpoints: group upserts %d, want %d", len(got.Upsert), len(autoAll))
			}
		})
	}
}

// TestExternalNoMTLS: the endpoints of a MESH_EXTERNAL service get no
// mutual TLS on either proxy kind, even when labelled as injected, and
// their assignments carry no tlsMode metadata; the same service inside
// the mesh does get mutual TLS (so that the test tests something).
func TestExternalNoMTLS(t *testing.T) {
	opts := Options{Security: true}
	for _, external := range []bool{false, true} {
		ms := merged(autoEndpoints(autoV1, autoV2)...)
		ms.Service.External = external
		cfg := policies(t)
		dr := autoRule(t)
		grpc := MTLSClusters(ProxyGRPC, ms, dr, cfg, opts)
		envoy := MTLSClusters(ProxyEnvoy, ms, dr, cfg, opts)
		var proxyless, sidecar []string
		for _, c := range ServiceClusters(ms, dr, cfg, opts) {
			if c.GetTransportSocket() != nil {
				proxyless = append(proxyless, c.GetName())
			}
		}
		for _, c := range sidecarEchoClusters(ms, cfg, opts) {
			if c.GetTransportSocketMatches() != nil || c.GetTransportSocket() != nil {
				sidecar = append(sidecar, c.GetName())
			}
		}
		tlsMode := map[string]bool{}
		for _, cla := range LoadAssignments(ms, groupEast, dr) {
			for addr, m := range tlsModeOf(t, cla) {
				if m != "" {
					tlsMode[addr] = true
				}
			}
		}
		if external {
			if grpc != nil || envoy != nil || proxyless != nil || sidecar != nil || len(tlsMode) != 0 {
				t.Errorf("external: mTLS on grpc %v envoy %v, sockets proxyless %v sidecar %v, tlsMode %v",
					grpc, envoy, proxyless, sidecar, tlsMode)
			}
			continue
		}
		// Inside the mesh: v1 and v2 are injected, so the default and v1
		// clusters are secure; v3 selects nobody (secure for grpc-go with
		// Security, not for Envoy, which needs one endpoint taking it).
		if len(grpc) == 0 || len(envoy) == 0 || !slices.Equal(proxyless, grpc) || !slices.Equal(sidecar, envoy) || len(tlsMode) != 2 {
			t.Errorf("in the mesh: mTLS on grpc %v envoy %v, sockets proxyless %v sidecar %v, tlsMode %v",
				grpc, envoy, proxyless, sidecar, tlsMode)
		}
	}
}

// TestExternalDNSClusters: a MESH_EXTERNAL DNS service (the usual
// ServiceEntry) is plaintext DNS on both kinds, and nothing panics
// without endpoints.
func TestExternalDNSClusters(t *testing.T) {
	ms := dnsMerged(model.ResolutionDNS)
	ms.Service.External = true
	for _, c := range ServiceClusters(ms, nil, nil, Options{Security: true}) {
		if c.GetTransportSocket() != nil || c.GetType() != clusterv3.Cluster_LOGICAL_DNS {
			t.Errorf("%s: %v", c.GetName(), c)
		}
	}
	for _, c := range sidecarEchoClusters(ms, nil, Options{Security: true}) {
		if c.GetTransportSocketMatches() != nil || c.GetType() != clusterv3.Cluster_STRICT_DNS {
			t.Errorf("%s: %v", c.GetName(), c)
		}
	}
	if got := ServiceSANs(ms, Options{}); got != nil {
		t.Errorf("ServiceSANs = %v", got)
	}
}

// TestServiceNotes: what each kind leaves out of a DNS service's names
// and of its DestinationRule's subsets; nothing for services resolved by
// endpoints.
func TestServiceNotes(t *testing.T) {
	dr := autoRule(t)
	subsets := []string{
		`subsets[0].labels: DNS endpoints have no labels; subset "v1" takes every endpoint (proxyless gRPC)`,
		`subsets[0].labels: DNS endpoints have no labels; subset "v1" takes every endpoint (Envoy)`,
		`subsets[1].labels: DNS endpoints have no labels; subset "v3" takes every endpoint (proxyless gRPC)`,
		`subsets[1].labels: DNS endpoints have no labels; subset "v3" takes every endpoint (Envoy)`,
	}
	for _, tc := range []struct {
		ms   *model.MergedService
		want []string
	}{
		{dnsMerged(model.ResolutionDNS), append([]string{
			"dnsEndpoints[1:]: LOGICAL_DNS resolves only the first endpoint (proxyless gRPC)",
			"resolution: grpc-go has no STRICT_DNS; DNS is resolved as LOGICAL_DNS, one name whose addresses are tried in turn, not balanced across (proxyless gRPC)",
		}, subsets...)},
		{dnsMerged(model.ResolutionDNSRoundRobin), append([]string{
			"dnsEndpoints[1:]: LOGICAL_DNS resolves only the first endpoint (proxyless gRPC)",
			"dnsEndpoints[1:]: LOGICAL_DNS (DNS_ROUND_ROBIN) resolves only the first endpoint (Envoy)",
		}, subsets...)},
		{fleet(true), nil},
		{nil, nil},
	} {
		if got := ServiceNotes(tc.ms, dr); !slices.Equal(got, tc.want) {
			t.Errorf("ServiceNotes(%v)\n  got  %q\n  want %q", tc.ms != nil && tc.ms.Service != nil && dnsResolved(tc.ms.Service), got, tc.want)
		}
	}
	one := dnsMerged(model.ResolutionDNSRoundRobin)
	one.Service.DNSEndpoints = one.Service.DNSEndpoints[:1]
	if got := ServiceNotes(one, nil); got != nil {
		t.Errorf("one name, no subsets: %q", got)
	}
}

// TestCacheServiceDNSEndpoints: the cache keeps its own copy of the DNS
// endpoints, so a caller changing them is seen as a change.
func TestCacheServiceDNSEndpoints(t *testing.T) {
	c := NewCache()
	svc := dnsService(model.ResolutionDNS)
	if _, rebuilt := c.Service(svc, istioconfig.HostConfig{}, ""); !rebuilt {
		t.Fatal("first call not built")
	}
	svc.DNSEndpoints[0].Ports["grpc"] = 50052
	res, rebuilt := c.Service(svc, istioconfig.HostConfig{}, "")
	if !rebuilt {
		t.Fatal("changed DNS endpoint ports not rebuilt")
	}
	addr := res.Clusters[0].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if addr.GetPortValue() != 50052 || !strings.HasPrefix(addr.GetAddress(), "a.") {
		t.Errorf("cluster %s resolves %v", res.Clusters[0].GetName(), addr)
	}
}

// TestGoldenDNSClusters records the DNS clusters of both kinds.
func TestGoldenDNSClusters(t *testing.T) {
	for _, r := range []model.Resolution{model.ResolutionDNS, model.ResolutionDNSRoundRobin} {
		ms := dnsMerged(r)
		name := "dns_" + strings.ToLower(string(r))
		checkGolden(t, name+"_grpc", render(t, section{"clusters", asMessages(Clusters(ms.Service, nil))}))
		checkGolden(t, name+"_envoy", render(t, section{"clusters", asMessages(sidecarEchoClusters(ms, nil, Options{}))}))
	}
}
