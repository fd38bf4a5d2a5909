package xdsgen

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

func TestCacheService(t *testing.T) {
	c := NewCache()
	svc := echoService()

	first, rebuilt := c.Service(svc, istioconfig.HostConfig{}, "")
	if !rebuilt || len(first.Listeners) != 2 || len(first.Routes) != 2 || len(first.Clusters) != 2 {
		t.Fatalf("first call: rebuilt=%v, %d/%d/%d resources", rebuilt, len(first.Listeners), len(first.Routes), len(first.Clusters))
	}

	// An equal Service (a different pointer) reuses the very same resources.
	again, rebuilt := c.Service(echoService(), istioconfig.HostConfig{}, "")
	if rebuilt || again.Listeners[0] != first.Listeners[0] || again.Clusters[1] != first.Clusters[1] {
		t.Errorf("equal service: rebuilt=%v, same resources=%v", rebuilt, again.Listeners[0] == first.Listeners[0])
	}

	// Mutating the caller's Service in place must not fool the cache.
	svc.Ports[0].Port = 8443
	changed, rebuilt := c.Service(svc, istioconfig.HostConfig{}, "")
	if !rebuilt || changed.Listeners[0].GetName() != ListenerName(echoHost, 8443) {
		t.Errorf("changed port: rebuilt=%v, listener %q", rebuilt, changed.Listeners[0].GetName())
	}

	// Another hostname is independent.
	other := echoService()
	other.Hostname = "other.demo.svc.cluster.local"
	if _, rebuilt := c.Service(other, istioconfig.HostConfig{}, ""); !rebuilt {
		t.Error("new hostname not built")
	}
	if _, rebuilt := c.Service(svc, istioconfig.HostConfig{}, ""); rebuilt {
		t.Error("unrelated hostname rebuilt")
	}

	c.Forget(echoHost)
	if _, rebuilt := c.Service(svc, istioconfig.HostConfig{}, ""); !rebuilt {
		t.Error("not rebuilt after Forget")
	}
	if res, rebuilt := c.Service(nil, istioconfig.HostConfig{}, ""); rebuilt || res.Listeners != nil {
		t.Error("nil service")
	}
}

// A host's Istio objects are part of the memo's key, by identity: the
// same objects reuse the resources, other ones (even equal) rebuild them.
func TestCacheServiceConfig(t *testing.T) {
	c := NewCache()
	rule := func() *istioconfig.DestinationRule {
		return &istioconfig.DestinationRule{Spec: &networking.DestinationRule{Host: "echo"}}
	}
	dr := rule()
	cfg := istioconfig.HostConfig{DestinationRule: dr}
	if _, rebuilt := c.Service(echoService(), cfg, ""); !rebuilt {
		t.Fatal("first call not built")
	}
	if _, rebuilt := c.Service(echoService(), istioconfig.HostConfig{DestinationRule: dr}, ""); rebuilt {
		t.Error("the same objects rebuilt")
	}
	if _, rebuilt := c.Service(echoService(), istioconfig.HostConfig{DestinationRule: rule()}, ""); !rebuilt {
		t.Error("a new object (a new generation) not rebuilt")
	}
	if _, rebuilt := c.Service(echoService(), istioconfig.HostConfig{}, ""); !rebuilt {
		t.Error("an object's removal not rebuilt")
	}
	ms := fleet(true)
	if _, rebuilt := c.LoadAssignments(ms, groupEast, dr, nil); !rebuilt {
		t.Fatal("first assignments not built")
	}
	if _, rebuilt := c.LoadAssignments(ms, groupEast, dr, nil); rebuilt {
		t.Error("the same rule rebuilt assignments")
	}
	if _, rebuilt := c.LoadAssignments(ms, groupEast, nil, nil); !rebuilt {
		t.Error("a removed rule did not rebuild assignments")
	}
}

func TestCacheLoadAssignments(t *testing.T) {
	c := NewCache()
	ms := fleet(true)

	first, rebuilt := c.LoadAssignments(ms, groupEast, nil, nil)
	if !rebuilt || len(first) != 2 {
		t.Fatalf("first call: rebuilt=%v, %d assignments", rebuilt, len(first))
	}
	if again, rebuilt := c.LoadAssignments(ms, groupEast, nil, nil); rebuilt || again[0] != first[0] {
		t.Errorf("same view: rebuilt=%v", rebuilt)
	}
	if _, rebuilt := c.LoadAssignments(ms, groupNoZone, nil, nil); !rebuilt {
		t.Error("other group not built")
	}
	// A new view (as the registry hands out after a shard change) rebuilds.
	if _, rebuilt := c.LoadAssignments(fleet(false), groupEast, nil, nil); !rebuilt {
		t.Error("new view not rebuilt")
	}

	ms2 := fleet(false)
	c.LoadAssignments(ms2, groupEast, nil, nil)
	c.ForgetGroup(groupEast)
	if _, rebuilt := c.LoadAssignments(ms2, groupEast, nil, nil); !rebuilt {
		t.Error("not rebuilt after ForgetGroup")
	}
	if _, rebuilt := c.LoadAssignments(ms2, groupNoZone, nil, nil); !rebuilt {
		t.Error("groupNoZone still holds the old view") // it saw ms, not ms2
	}
	if _, rebuilt := c.LoadAssignments(ms2, groupNoZone, nil, nil); rebuilt {
		t.Error("groupNoZone rebuilt twice")
	}
	c.Forget(echoHost)
	if _, rebuilt := c.LoadAssignments(ms2, groupNoZone, nil, nil); !rebuilt {
		t.Error("not rebuilt after Forget")
	}
	if res, rebuilt := c.LoadAssignments(nil, groupEast, nil, nil); rebuilt || res != nil {
		t.Error("nil view")
	}
	if res, rebuilt := c.LoadAssignments(&model.MergedService{}, groupEast, nil, nil); rebuilt || res != nil {
		t.Error("view without service")
	}
}

// TestCacheSharesLbEndpoints: the assignments of two groups that see the
// endpoints in other priorities hold the very same LbEndpoint of each
// endpoint, equal to what a build without the cache makes; a new view of
// the service starts a new pool, and the pool goes with the hostname's
// last group.
func TestCacheSharesLbEndpoints(t *testing.T) {
	c := NewCache()
	ms := fleet(true)
	groupEU := ProxyGroup{Cluster: "cluster-3", Region: "eu-west"}
	east, _ := c.LoadAssignments(ms, groupEast, nil, nil)
	eu, _ := c.LoadAssignments(ms, groupEU, nil, nil)
	for i := range east {
		if !proto.Equal(east[i], LoadAssignments(ms, groupEast, nil)[i]) || !proto.Equal(eu[i], LoadAssignments(ms, groupEU, nil)[i]) {
			t.Fatalf("assignment %d differs from a build without the pool", i)
		}
	}
	byAddr := func(cla *endpointv3.ClusterLoadAssignment) map[string]*endpointv3.LbEndpoint {
		out := map[string]*endpointv3.LbEndpoint{}
		for _, lle := range cla.GetEndpoints() {
			for _, lb := range lle.GetLbEndpoints() {
				out[lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = lb
			}
		}
		return out
	}
	a, b := byAddr(east[0]), byAddr(eu[0])
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("%d and %d endpoints", len(a), len(b))
	}
	if east[0].GetEndpoints()[0].GetPriority() == eu[0].GetEndpoints()[0].GetPriority() &&
		east[0].GetEndpoints()[0].GetLocality().GetRegion() == eu[0].GetEndpoints()[0].GetLocality().GetRegion() {
		t.Fatal("the two groups should see different localities first")
	}
	for addr, lb := range a {
		if b[addr] != lb {
			t.Errorf("endpoint %s: each group has its own LbEndpoint", addr)
		}
	}

	next := fleet(false)
	east2, _ := c.LoadAssignments(next, groupEast, nil, nil)
	if lb := byAddr(east2[0])["10.2.0.1"]; lb == nil || lb == a["10.2.0.1"] {
		t.Error("a new view of the service reused the old view's LbEndpoints")
	}
	c.ForgetGroup(groupEast)
	c.ForgetGroup(groupEU)
	if len(c.pools) != 0 {
		t.Errorf("%d pools left after the last group", len(c.pools))
	}
}
