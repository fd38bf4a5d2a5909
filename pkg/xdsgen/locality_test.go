package xdsgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// priorities renders the default assignment of echo's first port as
// "priority: addresses" lines, best first.
func priorities(t *testing.T, ms *model.MergedService, g ProxyGroup, dr *istioconfig.DestinationRule) []string {
	t.Helper()
	byPriority := map[uint32][]string{}
	for _, loc := range LoadAssignments(ms, g, dr)[0].GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			byPriority[loc.GetPriority()] = append(byPriority[loc.GetPriority()], lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(byPriority)) {
		slices.Sort(byPriority[p])
		out = append(out, fmt.Sprintf("%d: %s", p, strings.Join(byPriority[p], " ")))
	}
	return out
}

func localityRule(ls *networking.LocalityLoadBalancerSetting) *istioconfig.DestinationRule {
	return &istioconfig.DestinationRule{Spec: &networking.DestinationRule{
		Host:          "echo",
		TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: ls}},
	}}
}

// TestLocalityLbSetting: failoverPriority, failover and enabled: false
// order a group's endpoints as Istio documents them.
func TestLocalityLbSetting(t *testing.T) {
	v2 := func(e model.Endpoint) model.Endpoint {
		e.Labels = model.NewLabels(map[string]string{"version": "v2"})
		return e
	}
	ms := merged(
		ep("cluster-1", "10.1.0.1", usEast1a, true),
		ep("cluster-2", "10.2.0.1", usEast1b, true),
		v2(ep("cluster-3", "10.3.0.1", euWest1a, true)),
		ep("cluster-4", "10.4.0.1", model.Locality{Region: "ap-south"}, true),
	)
	for _, tc := range []struct {
		name string
		ls   *networking.LocalityLoadBalancerSetting
		want []string
	}{
		{"default: cluster, region, rest", nil,
			[]string{"0: 10.1.0.1", "1: 10.2.0.1", "2: 10.3.0.1 10.4.0.1"}},
		{"failoverPriority cluster only", &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{model.LabelTopologyCluster}},
			[]string{"0: 10.1.0.1", "1: 10.2.0.1 10.3.0.1 10.4.0.1"}},
		{"failoverPriority region then cluster", &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{model.LabelTopologyRegion, model.LabelTopologyCluster}},
			[]string{"0: 10.1.0.1", "1: 10.2.0.1", "2: 10.3.0.1 10.4.0.1"}},
		{"failoverPriority with a value", &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{"version=v2"}},
			[]string{"0: 10.3.0.1", "1: 10.1.0.1 10.2.0.1 10.4.0.1"}},
		{"failoverPriority cut at a key the hub does not know", &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{model.LabelTopologyCluster, "topology.kubernetes.io/zone"}},
			[]string{"0: 10.1.0.1", "1: 10.2.0.1 10.3.0.1 10.4.0.1"}},
		{"failover us-east to ap-south", &networking.LocalityLoadBalancerSetting{Failover: []*networking.LocalityLoadBalancerSetting_Failover{
			{From: "eu-west", To: "us-east"}, {From: "us-east", To: "ap-south"}}},
			[]string{"0: 10.1.0.1", "1: 10.2.0.1", "2: 10.4.0.1", "3: 10.3.0.1"}},
		{"disabled", &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(false)},
			[]string{"0: 10.1.0.1 10.2.0.1 10.3.0.1 10.4.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dr *istioconfig.DestinationRule
			if tc.ls != nil {
				dr = localityRule(tc.ls)
			}
			if got := priorities(t, ms, groupEast, dr); !slices.Equal(got, tc.want) {
				t.Errorf("priorities\n  got  %q\n  want %q", got, tc.want)
			}
		})
	}
}

// TestLocalityNotes: what of a localityLbSetting is not applied is said.
func TestLocalityNotes(t *testing.T) {
	dr := localityRule(&networking.LocalityLoadBalancerSetting{
		FailoverPriority: []string{model.LabelTopologyCluster, "topology.kubernetes.io/zone"},
		Failover:         []*networking.LocalityLoadBalancerSetting_Failover{{From: "a", To: "b"}},
		Distribute:       []*networking.LocalityLoadBalancerSetting_Distribute{{From: "a/*", To: map[string]uint32{"b/*": 100}}},
	})
	var got []string
	for _, n := range ClusterNotes(ProxyGRPC, dr) {
		got = append(got, n.Field)
	}
	want := []string{
		"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute",
		"spec.trafficPolicy.loadBalancer.localityLbSetting.failover",
		"spec.trafficPolicy.loadBalancer.localityLbSetting.failoverPriority",
	}
	if !slices.Equal(got, want) {
		t.Errorf("notes on %v\n  got  %q\n  want %q", got, got, want)
	}
}
