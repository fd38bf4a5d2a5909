package xdsgen

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// labelled returns e carrying Pod labels kv (key, value, ...).
func labelled(e model.Endpoint, kv ...string) model.Endpoint {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	e.Labels = model.NewLabels(m)
	return e
}

// labelSubsetRule is a DestinationRule of echo with the given subsets, each a
// name and its labels.
func labelSubsetRule(subsets ...*networking.Subset) *istioconfig.DestinationRule {
	return &istioconfig.DestinationRule{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "DestinationRule", Namespace: "demo", Name: "echo"}, Generation: 1},
		Spec: &networking.DestinationRule{Host: "echo", Subsets: subsets},
	}
}

func labelSubset(name string, labels map[string]string) *networking.Subset {
	return &networking.Subset{Name: name, Labels: labels}
}

// canaryFleet is echo in two clusters: v1 in cluster-1 (two zones) and one
// v1 in cluster-2, v2 in cluster-2 and cluster-3, and one endpoint without
// a Pod.
func canaryFleet() *model.MergedService {
	e := ep("cluster-3", "10.3.0.9", euWest1a, true)
	e.Pod = ""
	return merged(
		labelled(ep("cluster-1", "10.1.0.1", usEast1a, true), "app", "echo", "version", "v1"),
		labelled(ep("cluster-1", "10.1.1.1", usEast1b, true), "app", "echo", "version", "v1"),
		labelled(ep("cluster-1", "10.1.0.2", usEast1a, false), "app", "echo", "version", "v1"), // unready
		labelled(ep("cluster-2", "10.2.0.1", usEast1a, true), "app", "echo", "version", "v1"),
		labelled(ep("cluster-2", "10.2.0.2", usEast1a, true), "app", "echo", "version", "v2", "track", "canary"),
		labelled(ep("cluster-3", "10.3.0.1", euWest1a, true), "app", "echo", "version", "v2"),
		e,
	)
}

// TestGoldenSubsetAssignments: per port the default assignment, then one
// per subset in name order, each with only the endpoints the subset's
// labels select, prioritised and weighted as the default; a subset that
// selects nothing has an assignment without endpoints.
func TestGoldenSubsetAssignments(t *testing.T) {
	dr := labelSubsetRule(
		labelSubset("v2", map[string]string{"version": "v2"}),
		labelSubset("v1", map[string]string{"version": "v1", "app": "echo"}),
		labelSubset("v3", map[string]string{"version": "v3"}),
	)
	clas := LoadAssignments(canaryFleet(), groupEast, dr)
	var names []string
	for _, cla := range clas {
		names = append(names, cla.GetClusterName())
	}
	want := []string{
		"outbound|8080||echo.demo.svc.cluster.local", "outbound|8080|v1|echo.demo.svc.cluster.local",
		"outbound|8080|v2|echo.demo.svc.cluster.local", "outbound|8080|v3|echo.demo.svc.cluster.local",
		"outbound|9090||echo.demo.svc.cluster.local", "outbound|9090|v1|echo.demo.svc.cluster.local",
		"outbound|9090|v2|echo.demo.svc.cluster.local", "outbound|9090|v3|echo.demo.svc.cluster.local",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("names = %q\nwant %q", names, want)
	}
	// Clusters names the same EDS resources.
	var eds []string
	for _, c := range Clusters(echoService(), dr) {
		eds = append(eds, c.GetEdsClusterConfig().GetServiceName())
	}
	slices.Sort(eds)
	if sorted := slices.Sorted(slices.Values(names)); !slices.Equal(eds, sorted) {
		t.Errorf("Clusters' EDS names %q, assignments %q", eds, sorted)
	}
	if n := len(clas[3].GetEndpoints()); n != 0 {
		t.Errorf("subset v3 selects nothing, yet has %d localities", n)
	}
	checkGolden(t, "eds_subsets", render(t, section{"clusterLoadAssignments", asMessages(clas)}))
}

// TestSubsetsLeaveDefaultsUnchanged: without a rule, with a rule without
// subsets, and in front of the subsets of a rule that has some, the default
// assignments are the same.
func TestSubsetsLeaveDefaultsUnchanged(t *testing.T) {
	ms := canaryFleet()
	base := LoadAssignments(ms, groupEast, nil)
	for _, dr := range []*istioconfig.DestinationRule{
		labelSubsetRule(),
		{Spec: nil},
		labelSubsetRule(labelSubset("v1", map[string]string{"version": "v1"})),
	} {
		got := LoadAssignments(ms, groupEast, dr)
		var defaults []*endpointv3.ClusterLoadAssignment
		for _, cla := range got {
			if h, _, s, err := ParseSubsetClusterName(cla.GetClusterName()); err == nil && h == echoHost && s == "" {
				defaults = append(defaults, cla)
			}
		}
		if len(defaults) != len(base) {
			t.Fatalf("%d default assignments, want %d", len(defaults), len(base))
		}
		for i := range base {
			if !proto.Equal(defaults[i], base[i]) {
				t.Errorf("default assignment %s changed under a rule", base[i].GetClusterName())
			}
		}
	}
}

// TestSubsetMatching: the selector semantics on single endpoints.
func TestSubsetMatching(t *testing.T) {
	v1 := labelled(ep("cluster-1", "10.1.0.1", usEast1a, true), "app", "echo", "version", "v1")
	v2 := labelled(ep("cluster-2", "10.2.0.1", euWest1a, true), "version", "v2", model.LabelTopologyCluster, "stale")
	bare := ep("cluster-2", "10.2.0.2", model.Locality{}, true)
	bare.Labels = model.NewLabels(map[string]string{model.LabelTopologyRegion: "from-pod"})
	for _, tc := range []struct {
		labels map[string]string
		want   string // which of v1 v2 bare it selects
	}{
		{nil, "v1 v2 bare"},
		{map[string]string{"version": "v1"}, "v1"},
		{map[string]string{"version": "v1", "app": "echo"}, "v1"},
		{map[string]string{"version": "v1", "app": "other"}, ""},
		{map[string]string{"app": ""}, ""}, // absent is not empty
		// Topology comes from where the endpoint runs, over its Pod's labels.
		{map[string]string{model.LabelTopologyCluster: "cluster-2"}, "v2 bare"},
		{map[string]string{model.LabelTopologyCluster: "stale"}, ""},
		{map[string]string{model.LabelTopologyRegion: "us-east", "version": "v1"}, "v1"},
		{map[string]string{model.LabelTopologyZone: "eu-west-1a"}, "v2"},
		// ... unless it has none: then the Pod's label counts.
		{map[string]string{model.LabelTopologyRegion: "from-pod"}, "bare"},
	} {
		eps := []model.Endpoint{v1, v2, bare}
		m := subsetMembers(eps, tc.labels)
		var got []string
		for i, name := range []string{"v1", "v2", "bare"} {
			if m == nil || m[i] {
				got = append(got, name)
			}
		}
		if g := fmt.Sprint(got); g != fmt.Sprint(strings.Fields(tc.want)) {
			t.Errorf("labels %v select %v, want [%s]", tc.labels, got, tc.want)
		}
	}
}

// TestSubsetAssignmentsInvariants: on random fleets with random labels, a
// subset's assignment is exactly the default's endpoints that the subset
// selects, and passes every check a default assignment does.
func TestSubsetAssignmentsInvariants(t *testing.T) {
	dr := labelSubsetRule(
		labelSubset("a", map[string]string{"version": "a"}),
		labelSubset("b", map[string]string{"version": "b", "track": "canary"}),
		labelSubset("c2", map[string]string{model.LabelTopologyCluster: "c2"}),
	)
	for seed := range uint64(20) {
		ms := randomService(seed, 1+int(seed)*11)
		for i := range ms.Endpoints {
			e := &ms.Endpoints[i]
			switch (int(seed) + i) % 4 {
			case 0:
				*e = labelled(*e, "version", "a")
			case 1:
				*e = labelled(*e, "version", "b", "track", "canary")
			case 2:
				*e = labelled(*e, "version", "b")
			}
		}
		for _, g := range []ProxyGroup{groupEast, {Cluster: "c3", Region: "eu-west"}} {
			clas := LoadAssignments(ms, g, dr)
			ports := servicePorts(ms.Service)
			if len(clas) != len(ports)*4 {
				t.Fatalf("seed %d: %d assignments for %d ports and 3 subsets", seed, len(clas), len(ports))
			}
			for pi, sp := range ports {
				for si, s := range dr.Spec.GetSubsets() {
					// The subset's assignment is the default's of the
					// endpoints the subset selects.
					var sel []model.Endpoint
					m := subsetMembers(ms.Endpoints, s.GetLabels())
					for i := range ms.Endpoints {
						if m[i] {
							sel = append(sel, ms.Endpoints[i])
						}
					}
					sub := *ms
					sub.Endpoints = sel
					want := LoadAssignments(&sub, g, nil)[pi]
					want.ClusterName = SubsetClusterName(ms.Service.Hostname, sp.Port, s.GetName())
					got := clas[pi*4+1+si]
					if !proto.Equal(got, want) {
						t.Fatalf("seed %d group %s port %d subset %s: not the default over the selected endpoints", seed, g, sp.Port, s.GetName())
					}
					for _, lle := range got.GetEndpoints() {
						for _, lb := range lle.GetLbEndpoints() {
							addr := lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
							if !selectedAddr(ms, s.GetLabels(), netip.MustParseAddr(addr)) {
								t.Fatalf("seed %d subset %s: %s not selected", seed, s.GetName(), addr)
							}
						}
					}
				}
			}
		}
	}
}

// selectedAddr reports whether some endpoint at a is selected by labels,
// by the plainest reading of the rule.
func selectedAddr(ms *model.MergedService, labels map[string]string, a netip.Addr) bool {
	for _, e := range ms.Endpoints {
		if e.Address != a {
			continue
		}
		all := e.Labels.Map()
		if all == nil {
			all = map[string]string{}
		}
		all[model.LabelTopologyCluster] = string(e.Cluster)
		ok := true
		for k, v := range labels {
			if all[k] != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func benchSubsetService(n int) *model.MergedService {
	ms := benchService(n)
	sets := []model.Labels{
		model.NewLabels(map[string]string{"app": "echo", "version": "v1", "pod-template-hash": "7d9f8c"}),
		model.NewLabels(map[string]string{"app": "echo", "version": "v2", "pod-template-hash": "5b6a1e"}),
	}
	for i := range ms.Endpoints {
		ms.Endpoints[i].Labels = sets[i%10/9] // 90 % v1, 10 % v2
	}
	return ms
}

// BenchmarkSubsetAssignments10k: the cost of two subsets on 10k endpoints,
// against BenchmarkLoadAssignments10k (no rule).
func BenchmarkSubsetAssignments10k(b *testing.B) {
	ms := benchSubsetService(10_000)
	dr := labelSubsetRule(labelSubset("v1", map[string]string{"version": "v1"}), labelSubset("v2", map[string]string{"version": "v2"}))
	b.ReportAllocs()
	for b.Loop() {
		LoadAssignments(ms, groupEast, dr)
	}
}

// BenchmarkSubsetMembers10k: the label match alone, per subset.
func BenchmarkSubsetMembers10k(b *testing.B) {
	ms := benchSubsetService(10_000)
	sel := map[string]string{"version": "v1"}
	b.ReportAllocs()
	for b.Loop() {
		subsetMembers(ms.Endpoints, sel)
	}
}
