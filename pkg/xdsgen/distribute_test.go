package xdsgen

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Proxy groups of cluster-1 in two zones of us-east, and one of eu-west.
var (
	groupEast1a = ProxyGroup{Cluster: "cluster-1", Region: "us-east", Zone: "us-east-1a"}
	groupEast1b = ProxyGroup{Cluster: "cluster-1", Region: "us-east", Zone: "us-east-1b"}
	groupWest   = ProxyGroup{Cluster: "cluster-3", Region: "eu-west", Zone: "eu-west-1a"}
)

// fuzzDistributeSeeds are distribute specs for FuzzDestinationRuleClusters:
// valid, with wildcards, on a subset, beside failover, and with weights
// that overflow a uint32.
var fuzzDistributeSeeds = []string{
	`{"host":"echo","trafficPolicy":{"loadBalancer":{"localityLbSetting":{"distribute":[{"from":"us-east/us-east-1a/*","to":{"us-east/us-east-1a/*":70,"us-east/us-east-1b/*":20,"eu-west/*":10}}]}}}}`,
	`{"host":"echo","subsets":[{"name":"v1","labels":{"version":"v1"},"trafficPolicy":{"loadBalancer":{"simple":"LEAST_REQUEST","localityLbSetting":{"distribute":[{"from":"*","to":{"us-east":100}}]}}}}]}`,
	`{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user"},"localityLbSetting":{"failover":[{"from":"us-east","to":"eu-west"}],"distribute":[{"from":"us-east","to":{"*":4294967295,"us-east/*":4294967295}}]}}}}`,
}

// distributeEndpoints: two endpoints in us-east-1a, one each in us-east-1b,
// us-east-1c/rack-7, eu-west-1a and ap-south.
func distributeEndpoints() *model.MergedService {
	return merged(
		ep("cluster-1", "10.1.0.1", usEast1a, true),
		ep("cluster-1", "10.1.0.2", usEast1a, true),
		ep("cluster-2", "10.2.0.1", usEast1b, true),
		ep("cluster-2", "10.2.0.2", usEast1c, true),
		ep("cluster-3", "10.3.0.1", euWest1a, true),
		ep("cluster-4", "10.4.0.1", model.Locality{Region: "ap-south"}, true),
	)
}

// distributeRule is a rule of echo whose top-level localityLbSetting has
// only the distribute entries.
func distributeRule(entries ...*networking.LocalityLoadBalancerSetting_Distribute) *istioconfig.DestinationRule {
	return localityRule(&networking.LocalityLoadBalancerSetting{Distribute: entries})
}

// weights renders cla as "priority locality weight: addresses" lines, in
// assignment order.
func weights(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, loc := range cla.GetEndpoints() {
		var addrs []string
		for _, lb := range loc.GetLbEndpoints() {
			addrs = append(addrs, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
		l := loc.GetLocality()
		out = append(out, fmt.Sprintf("%d %s/%s/%s %d: %s", loc.GetPriority(), l.GetRegion(), l.GetZone(), l.GetSubZone(),
			loc.GetLoadBalancingWeight().GetValue(), strings.Join(addrs, " ")))
	}
	return out
}

// checkAssignments validates every assignment and checks what grpc-go
// requires of locality weights: none 0, and per priority a sum that fits
// in a uint32.
func checkAssignments(t testing.TB, clas []*endpointv3.ClusterLoadAssignment) {
	t.Helper()
	for _, cla := range clas {
		if err := cla.ValidateAll(); err != nil {
			t.Errorf("%s: %v", cla.GetClusterName(), err)
		}
		sums := map[uint32]uint64{}
		for _, loc := range cla.GetEndpoints() {
			w := loc.GetLoadBalancingWeight().GetValue()
			if w == 0 {
				t.Errorf("%s: locality %v of weight 0", cla.GetClusterName(), loc.GetLocality())
			}
			sums[loc.GetPriority()] += uint64(w)
		}
		for p, s := range sums {
			if s > math.MaxUint32 {
				t.Errorf("%s: priority %d weighs %d", cla.GetClusterName(), p, s)
			}
		}
	}
}

// TestDistributeWeights: proxies in a from locality get one priority of
// the localities the to patterns match, weighted by them; the others are
// left out.
func TestDistributeWeights(t *testing.T) {
	ms := distributeEndpoints()
	dr := distributeRule(&networking.LocalityLoadBalancerSetting_Distribute{
		From: "us-east/us-east-1a/*",
		To:   map[string]uint32{"us-east/us-east-1a/*": 70, "us-east/us-east-1b/*": 20, "eu-west/*": 10},
	})
	clas := LoadAssignments(ms, groupEast1a, dr)
	checkAssignments(t, clas)
	want := []string{
		"0 eu-west/eu-west-1a/ 10: 10.3.0.1",
		"0 us-east/us-east-1a/ 70: 10.1.0.1 10.1.0.2",
		"0 us-east/us-east-1b/ 20: 10.2.0.1",
	}
	for _, cla := range clas {
		if got := weights(cla); !slices.Equal(got, want) {
			t.Errorf("%s\n  got  %q\n  want %q", cla.GetClusterName(), got, want)
		}
	}
}

// TestDistributeElsewhere: proxies that no from matches, whatever their
// zone, get exactly the assignments of a rule without distribute.
func TestDistributeElsewhere(t *testing.T) {
	ms := distributeEndpoints()
	dr := distributeRule(&networking.LocalityLoadBalancerSetting_Distribute{
		From: "us-east/us-east-1a", To: map[string]uint32{"eu-west": 100},
	})
	for _, g := range []ProxyGroup{groupEast1b, groupEast, groupWest, {Cluster: "cluster-1", Region: "us-east", Zone: "us-east-1c", SubZone: "rack-7"}} {
		got := LoadAssignments(ms, g, dr)
		want := LoadAssignments(ms, g.coarse(), nil)
		if len(got) != len(want) {
			t.Fatalf("%v: %d assignments, want %d", g, len(got), len(want))
		}
		for i := range got {
			if !proto.Equal(got[i], want[i]) {
				t.Errorf("%v: %s\n  got  %q\n  want %q", g, got[i].GetClusterName(), weights(got[i]), weights(want[i]))
			}
		}
	}
	if got := priorities(t, ms, groupEast1b, dr); !slices.Equal(got, []string{"0: 10.1.0.1 10.1.0.2", "1: 10.2.0.1 10.2.0.2", "2: 10.3.0.1 10.4.0.1"}) {
		t.Errorf("priorities of us-east-1b: %q", got)
	}
}

// TestLocalityPatternMatch: "*" parts match anything, omitted zone and
// sub-zone too, an empty region only the empty region.
func TestLocalityPatternMatch(t *testing.T) {
	rack7 := usEast1c // us-east/us-east-1c/rack-7
	for _, tc := range []struct {
		pattern string
		l       model.Locality
		want    bool
	}{
		{"*", rack7, true},
		{"*", model.Locality{}, true},
		{"us-east", rack7, true},
		{"us-east/*", rack7, true},
		{"us-east/*/*", rack7, true},
		{"us-east/us-east-1c", rack7, true},
		{"us-east/us-east-1c/*", rack7, true},
		{"us-east/us-east-1c/rack-7", rack7, true},
		{"us-east/us-east-1c/rack-8", rack7, false},
		{"us-east/us-east-1a", rack7, false},
		{"us-east/us-east-1c/rack-7", model.Locality{Region: "us-east", Zone: "us-east-1c"}, false},
		{"*/us-east-1c", rack7, true},
		{"*/us-east-1c", euWest1a, false},
		{"eu-west", rack7, false},
		{"", model.Locality{}, true},
		{"", rack7, false},
		{"us-east/us-east-1c/rack-7/extra", rack7, true},
	} {
		if got := parseLocalityPattern(tc.pattern).matches(tc.l); got != tc.want {
			t.Errorf("%q matches %v = %v, want %v", tc.pattern, tc.l, got, tc.want)
		}
	}
}

// TestDistributeSplit: a pattern's weight is split over the localities it
// matches in proportion to their endpoints, each share rounded up, as
// istiod does.
func TestDistributeSplit(t *testing.T) {
	ms := distributeEndpoints()
	for _, tc := range []struct {
		name string
		to   map[string]uint32
		want []string
	}{
		{"region wildcard over three zones", map[string]uint32{"us-east/*": 90, "eu-west": 10}, []string{
			// us-east has 4 endpoints: 2 → ceil(45), 1 → ceil(22.5), 1 → ceil(22.5).
			"0 eu-west/eu-west-1a/ 10: 10.3.0.1",
			"0 us-east/us-east-1a/ 45: 10.1.0.1 10.1.0.2",
			"0 us-east/us-east-1b/ 23: 10.2.0.1",
			"0 us-east/us-east-1c/rack-7 23: 10.2.0.2",
		}},
		{"everything", map[string]uint32{"*": 100}, []string{
			// 6 endpoints: 1 → ceil(16.7), 2 → ceil(33.3).
			"0 ap-south// 17: 10.4.0.1",
			"0 eu-west/eu-west-1a/ 17: 10.3.0.1",
			"0 us-east/us-east-1a/ 34: 10.1.0.1 10.1.0.2",
			"0 us-east/us-east-1b/ 17: 10.2.0.1",
			"0 us-east/us-east-1c/rack-7 17: 10.2.0.2",
		}},
		{"overlap: the more specific pattern wins", map[string]uint32{"us-east": 50, "us-east/us-east-1a": 50}, []string{
			"0 us-east/us-east-1a/ 50: 10.1.0.1 10.1.0.2",
			"0 us-east/us-east-1b/ 25: 10.2.0.1",
			"0 us-east/us-east-1c/rack-7 25: 10.2.0.2",
		}},
		{"weight 0 leaves a locality out", map[string]uint32{"us-east/us-east-1a": 100, "eu-west": 0}, []string{
			"0 us-east/us-east-1a/ 100: 10.1.0.1 10.1.0.2",
		}},
		{"no to: nothing", map[string]uint32{}, nil},
		{"sum beyond uint32 is scaled down", map[string]uint32{"us-east/us-east-1a": math.MaxUint32, "eu-west": math.MaxUint32}, []string{
			"0 eu-west/eu-west-1a/ 2147483646: 10.3.0.1",
			"0 us-east/us-east-1a/ 2147483646: 10.1.0.1 10.1.0.2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dr := distributeRule(&networking.LocalityLoadBalancerSetting_Distribute{From: "us-east", To: tc.to})
			clas := LoadAssignments(ms, groupEast1a, dr)
			checkAssignments(t, clas)
			if got := weights(clas[0]); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestDistributeFirstEntryWins: the first entry whose from matches the
// proxies applies; enabled: false turns distribute off.
func TestDistributeFirstEntryWins(t *testing.T) {
	ms := distributeEndpoints()
	entries := []*networking.LocalityLoadBalancerSetting_Distribute{
		nil,
		{From: "us-east/us-east-1a", To: map[string]uint32{"eu-west": 100}},
		{From: "us-east/*", To: map[string]uint32{"us-east/us-east-1b": 100}},
		{From: "*", To: map[string]uint32{"ap-south": 100}},
	}
	dr := distributeRule(entries...)
	for _, tc := range []struct {
		g    ProxyGroup
		want []string
	}{
		{groupEast1a, []string{"0 eu-west/eu-west-1a/ 100: 10.3.0.1"}},
		{groupEast1b, []string{"0 us-east/us-east-1b/ 100: 10.2.0.1"}},
		{groupEast, []string{"0 us-east/us-east-1b/ 100: 10.2.0.1"}},
		{groupWest, []string{"0 ap-south// 100: 10.4.0.1"}},
	} {
		if got := weights(LoadAssignments(ms, tc.g, dr)[0]); !slices.Equal(got, tc.want) {
			t.Errorf("%v\n  got  %q\n  want %q", tc.g, got, tc.want)
		}
	}
	off := localityRule(&networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(false), Distribute: entries})
	if got := priorities(t, ms, groupEast1a, off); !slices.Equal(got, []string{"0: 10.1.0.1 10.1.0.2 10.2.0.1 10.2.0.2 10.3.0.1 10.4.0.1"}) {
		t.Errorf("disabled: %q", got)
	}
	for _, loc := range LoadAssignments(ms, groupEast1a, off)[0].GetEndpoints() {
		if w := loc.GetLoadBalancingWeight().GetValue(); w != uint32(len(loc.GetLbEndpoints())) {
			t.Errorf("disabled: %v weighs %d", loc.GetLocality(), w)
		}
	}
}

// TestDistributeOverFailover: with failover and failoverPriority beside
// distribute, distribute decides for the proxies it applies to, failover
// for the others, and a note says so.
func TestDistributeOverFailover(t *testing.T) {
	ms := distributeEndpoints()
	dr := localityRule(&networking.LocalityLoadBalancerSetting{
		Failover:         []*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "ap-south"}},
		FailoverPriority: []string{model.LabelTopologyCluster},
		Distribute:       []*networking.LocalityLoadBalancerSetting_Distribute{{From: "us-east/us-east-1a", To: map[string]uint32{"us-east": 100}}},
	})
	if got := priorities(t, ms, groupEast1a, dr); !slices.Equal(got, []string{"0: 10.1.0.1 10.1.0.2 10.2.0.1 10.2.0.2"}) {
		t.Errorf("us-east-1a: %q", got)
	}
	if got := priorities(t, ms, groupEast1b, dr); !slices.Equal(got, []string{"0: 10.1.0.1 10.1.0.2", "1: 10.2.0.1 10.2.0.2 10.3.0.1 10.4.0.1"}) {
		t.Errorf("us-east-1b (failoverPriority): %q", got)
	}
	found := false
	for _, n := range ClusterNotes(ProxyEnvoy, dr) {
		if n.Field == "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute" && strings.Contains(n.Reason, "failover") {
			found = true
		}
	}
	if !found {
		t.Errorf("no note on distribute beside failover: %v", ClusterNotes(ProxyEnvoy, dr))
	}
}

// TestDistributeNotes: distribute is no longer "not supported"; what
// Istio rejects, and what grpc-go's least_request ignores, is said.
func TestDistributeNotes(t *testing.T) {
	valid := distributeRule(&networking.LocalityLoadBalancerSetting_Distribute{From: "us-east", To: map[string]uint32{"us-east": 80, "eu-west": 20}})
	for _, k := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
		if n := ClusterNotes(k, valid); len(n) != 0 {
			t.Errorf("%v: notes on a valid distribute: %v", k, n)
		}
	}
	dr := localityRule(&networking.LocalityLoadBalancerSetting{Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{
		{From: "us-east", To: map[string]uint32{"us-east": 30, "us-east/us-east-1a": 30}},
		{From: "eu-west"},
	}})
	dr.Spec.TrafficPolicy.LoadBalancer.LbPolicy = &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}
	var got []string
	for _, n := range ClusterNotes(ProxyGRPC, dr) {
		got = append(got, n.Field+": "+n.Reason)
	}
	for _, want := range []string{
		"distribute: grpc-go's least_request",
		"distribute[0].to: weights sum to 60",
		`distribute[0].to: "us-east" and "us-east/us-east-1a" overlap`,
		"distribute[1].to: empty",
	} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no note %q in\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, s := range got {
		if strings.Contains(s, "not supported") {
			t.Errorf("note %q", s)
		}
	}
	for _, n := range ClusterNotes(ProxyEnvoy, dr) {
		if strings.Contains(n.Reason, "least_request") {
			t.Errorf("Envoy note %q", n.Reason)
		}
	}
}

// localityWeighted reports whether c has locality_weighted_lb_config.
func localityWeighted(c *clusterv3.Cluster) bool {
	return c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil
}

// TestDistributeClusters: Envoy clusters whose effective policy
// distributes carry locality_weighted_lb_config, the others (and every
// proxyless cluster, DNS clusters) do not; all are valid, and grpc-go
// accepts the proxyless ones.
func TestDistributeClusters(t *testing.T) {
	spec := `
trafficPolicy:
  portLevelSettings:
  - port: {number: 9090}
    loadBalancer:
      localityLbSetting:
        distribute: [{from: "us-east/*", to: {"us-east/*": 80, "eu-west/*": 20}}]
subsets:
- name: v1
  labels: {version: v1}
- name: v2
  labels: {version: v2}
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user}
      localityLbSetting:
        distribute: [{from: "*", to: {"*": 100}}]
- name: v3
  labels: {version: v3}
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        enabled: false
        distribute: [{from: "*", to: {"*": 100}}]`
	dr := mustDR(t, spec)
	svc := echoService()
	want := map[string]bool{
		ClusterName(svc.Hostname, 9090):             true,
		SubsetClusterName(svc.Hostname, 9090, "v1"): true, // inherits the port's policy
		SubsetClusterName(svc.Hostname, 8080, "v2"): true,
		SubsetClusterName(svc.Hostname, 9090, "v2"): true,
	}
	envoy := sidecarOutbound(svc, dr)
	grpc := Clusters(svc, dr)
	checkClusters(t, grpc, envoy)
	if len(envoy) != 8 {
		t.Fatalf("%d Envoy clusters: %v", len(envoy), drClusterNames(envoy))
	}
	for _, c := range envoy {
		if got := localityWeighted(c); got != want[c.GetName()] {
			t.Errorf("Envoy %s: locality_weighted_lb_config %v, want %v", c.GetName(), got, want[c.GetName()])
		}
	}
	for _, c := range grpc {
		if c.GetCommonLbConfig() != nil {
			t.Errorf("proxyless %s: common_lb_config %v", c.GetName(), c.GetCommonLbConfig())
		}
		if err := grpcAcceptsCluster(c); err != nil {
			t.Errorf("grpc-go rejects %s: %v", c.GetName(), err)
		}
	}
	for _, c := range sidecarOutbound(svc, nil) {
		if localityWeighted(c) {
			t.Errorf("Envoy %s without a rule: locality_weighted_lb_config", c.GetName())
		}
	}
	dns := dnsService(model.ResolutionDNS)
	for _, c := range sidecarOutbound(dns, dr) {
		if localityWeighted(c) {
			t.Errorf("DNS cluster %s: locality_weighted_lb_config", c.GetName())
		}
	}
	ms := distributeEndpoints()
	for _, g := range []ProxyGroup{groupEast1a, groupEast1b, groupEast, groupWest, groupNoZone} {
		checkAssignments(t, LoadAssignments(ms, g, dr))
	}
	// Port 9090 distributes for us-east; port 8080 keeps the priorities.
	clas := LoadAssignments(ms, groupEast1b, dr)
	if got := weights(clas[0]); len(got) != 5 || !strings.HasPrefix(got[len(got)-1], "2 ") {
		t.Errorf("port 8080: %q", got)
	}
	if got, want := weights(clas[4]), []string{
		"0 eu-west/eu-west-1a/ 20: 10.3.0.1",
		"0 us-east/us-east-1a/ 40: 10.1.0.1 10.1.0.2",
		"0 us-east/us-east-1b/ 20: 10.2.0.1",
		"0 us-east/us-east-1c/rack-7 20: 10.2.0.2",
	}; clas[4].GetClusterName() != ClusterName(svc.Hostname, 9090) || !slices.Equal(got, want) {
		t.Errorf("%s\n  got  %q\n  want %q", clas[4].GetClusterName(), got, want)
	}
}

// TestCacheZonesShareAssignments: groups that differ only in zone share
// one build of the assignments when no distribute entry applies to them,
// each still told it is new; a group a distribute entry applies to gets
// its own; ForgetGroup drops the shared build too.
func TestCacheZonesShareAssignments(t *testing.T) {
	ms := distributeEndpoints()
	dr := distributeRule(&networking.LocalityLoadBalancerSetting_Distribute{From: "us-east/us-east-1a", To: map[string]uint32{"us-east": 100}})
	for _, rule := range []*istioconfig.DestinationRule{nil, dr} {
		c := NewCache()
		east, rebuilt := c.LoadAssignments(ms, groupEast, rule, nil)
		if !rebuilt {
			t.Fatal("first call not rebuilt")
		}
		b, rebuilt := c.LoadAssignments(ms, groupEast1b, rule, nil)
		if !rebuilt || &b[0] != &east[0] {
			t.Errorf("rule %v: us-east-1b rebuilt %v, shares %v", rule != nil, rebuilt, &b[0] == &east[0])
		}
		if _, rebuilt := c.LoadAssignments(ms, groupEast1b, rule, nil); rebuilt {
			t.Errorf("rule %v: second call for us-east-1b rebuilt", rule != nil)
		}
		a, _ := c.LoadAssignments(ms, groupEast1a, rule, nil)
		if shares := &a[0] == &east[0]; shares != (rule == nil) {
			t.Errorf("rule %v: us-east-1a shares %v", rule != nil, shares)
		}
		if rule != nil && proto.Equal(a[0], east[0]) {
			t.Error("us-east-1a got the assignments of us-east")
		}
		if n := c.groups(); n != 3 {
			t.Errorf("groups() = %d, want 3", n)
		}
		for _, g := range []ProxyGroup{groupEast, groupEast1a, groupEast1b} {
			c.ForgetGroup(g)
		}
		if c.groups() != 0 || len(c.coarse) != 0 || len(c.endpoints) != 0 {
			t.Errorf("after ForgetGroup: %d groups, %d coarse, %d endpoints", c.groups(), len(c.coarse), len(c.endpoints))
		}
	}
}

// TestPlannerZoneGroups: a Planner tracks groups of one cluster and region
// but different zones apart, and plans each one's change.
func TestPlannerZoneGroups(t *testing.T) {
	p := NewPlanner(Options{})
	ms := distributeEndpoints()
	p.AddGroup(groupEast1b, nil)
	p.AddGroup(groupEast1a, nil)
	p.AddGroup(groupEast, nil)
	if got := p.Groups(); !slices.Equal(got, []ProxyGroup{groupEast, groupEast1a, groupEast1b}) {
		t.Errorf("Groups() = %v", got)
	}
	plan := p.Plan([]ServiceUpdate{{Hostname: ms.Service.Hostname, Service: ms}})
	for _, g := range []ProxyGroup{groupEast, groupEast1a, groupEast1b} {
		if len(plan.Groups[g].Upsert) != 2 {
			t.Errorf("%v: %d upserts", g, len(plan.Groups[g].Upsert))
		}
	}
}

// TestProxyGroupStringZones: zone and sub-zone follow the region when set.
func TestProxyGroupStringZones(t *testing.T) {
	for g, want := range map[ProxyGroup]string{
		groupEast:   "cluster-1/us-east",
		groupEast1a: "cluster-1/us-east/us-east-1a",
		{Cluster: "c", Region: "r", Zone: "z", SubZone: "s"}: "c/r/z/s",
		{Cluster: "c", SubZone: "s"}:                         "c///s",
	} {
		if got := g.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", g, got, want)
		}
	}
}
