package xdsgen

import (
	"slices"
	"strings"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

func subsetRule(name string, subsets ...string) *istioconfig.DestinationRule {
	dr := &istioconfig.DestinationRule{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "DestinationRule", Namespace: "demo", Name: name}, Generation: 1, Created: time.Unix(0, 0)},
		Spec: &networking.DestinationRule{Host: "echo"},
	}
	for _, s := range subsets {
		dr.Spec.Subsets = append(dr.Spec.Subsets, &networking.Subset{Name: s, Labels: map[string]string{"version": s}})
	}
	return dr
}

// TestPlanConfig: a DestinationRule's subsets add clusters and (per group)
// load assignments to its host only; removing it deletes exactly those; and
// a config change names only the hosts it touches.
func TestPlanConfig(t *testing.T) {
	p := NewPlanner(Options{})
	p.AddGroup(groupEast, nil)
	p.Plan([]ServiceUpdate{upd(echoHost, fleet(true)), upd(otherHost, other())})
	hosts := []model.Hostname{echoHost, otherHost}

	withDR := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{subsetRule("echo", "v1", "v2")})
	if got := p.SetConfig(withDR, hosts); !slices.Equal(got, []model.Hostname{echoHost}) {
		t.Fatalf("SetConfig changed %v, want only echo", got)
	}
	plan := p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
	var subsetClusters []string
	for _, port := range []uint32{8080, 9090} {
		for _, s := range []string{"v1", "v2"} {
			subsetClusters = append(subsetClusters, SubsetClusterName(echoHost, port, s))
		}
	}
	slices.Sort(subsetClusters)
	for _, n := range subsetClusters {
		if _, ok := plan.Shared[resourcev3.ClusterType].Upsert[n]; !ok {
			t.Errorf("cluster %s not planned", n)
		}
		if _, ok := plan.Groups[groupEast].Upsert[n]; !ok {
			t.Errorf("load assignment %s not planned for %v", n, groupEast)
		}
	}
	for cache, ns := range names(plan) {
		for _, n := range ns {
			if strings.Contains(n, string(otherHost)) {
				t.Errorf("%s %s: the other service was touched", cache, n)
			}
		}
	}

	// The same rule in a new snapshot changes nothing; its removal deletes
	// the subsets' clusters and assignments, and only them.
	if got := p.SetConfig(istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, withDR.Objects()), hosts); got != nil {
		t.Errorf("an unchanged rule changed %v", got)
	}
	if got := p.SetConfig(nil, hosts); !slices.Equal(got, []model.Hostname{echoHost}) {
		t.Fatalf("removing the rule changed %v", got)
	}
	plan = p.Plan([]ServiceUpdate{upd(echoHost, fleet(true))})
	if got := plan.Shared[resourcev3.ClusterType].Delete; !slices.Equal(got, subsetClusters) {
		t.Errorf("clusters deleted %v, want %v", got, subsetClusters)
	}
	if got := plan.Groups[groupEast].Delete; !slices.Equal(got, subsetClusters) {
		t.Errorf("assignments deleted %v, want %v", got, subsetClusters)
	}
}

// TestPlanKeepsSecureClustersWhenRoutesChange: a VirtualService rebuilds
// the service's listeners and routes, whose plain clusters must not
// replace the secure ones while the endpoints and policies that made them
// secure stay as they were (ServiceClusters' memo is not rebuilt then).
func TestPlanKeepsSecureClustersWhenRoutesChange(t *testing.T) {
	p := NewPlanner(Options{Security: true, TrustDomain: "example.org"})
	p.AddGroup(groupEast, nil)
	first := p.Plan([]ServiceUpdate{upd(echoHost, secureFleet())})
	c8080 := ClusterName(echoHost, 8080)
	if first.Shared[resourcev3.ClusterType].Upsert[c8080] == nil {
		t.Fatalf("cluster %s not planned", c8080)
	}

	vs := &istioconfig.VirtualService{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: "demo", Name: "echo"}, Generation: 1, Created: time.Unix(0, 0)},
		Spec: &networking.VirtualService{Hosts: []string{"echo"}, Http: []*networking.HTTPRoute{{
			Timeout: durationpb.New(3 * time.Second),
			Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}},
		}}},
	}
	if got := p.SetConfig(istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{vs}), []model.Hostname{echoHost}); !slices.Equal(got, []model.Hostname{echoHost}) {
		t.Fatalf("SetConfig changed %v, want echo", got)
	}
	plan := p.Plan([]ServiceUpdate{upd(echoHost, secureFleet())})
	if len(plan.Shared[resourcev3.RouteType].Upsert) == 0 {
		t.Fatal("the VirtualService changed no route")
	}
	if got := plan.Shared[resourcev3.ClusterType]; !got.Empty() {
		t.Errorf("clusters rewritten by a route change: %v", names(plan))
	}
}
