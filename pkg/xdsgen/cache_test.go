package xdsgen

import (
	"testing"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestCacheService(t *testing.T) {
	c := NewCache()
	svc := echoService()

	first, rebuilt := c.Service(svc)
	if !rebuilt || len(first.Listeners) != 2 || len(first.Routes) != 2 || len(first.Clusters) != 2 {
		t.Fatalf("first call: rebuilt=%v, %d/%d/%d resources", rebuilt, len(first.Listeners), len(first.Routes), len(first.Clusters))
	}

	// An equal Service (a different pointer) reuses the very same resources.
	again, rebuilt := c.Service(echoService())
	if rebuilt || again.Listeners[0] != first.Listeners[0] || again.Clusters[1] != first.Clusters[1] {
		t.Errorf("equal service: rebuilt=%v, same resources=%v", rebuilt, again.Listeners[0] == first.Listeners[0])
	}

	// Mutating the caller's Service in place must not fool the cache.
	svc.Ports[0].Port = 8443
	changed, rebuilt := c.Service(svc)
	if !rebuilt || changed.Listeners[0].GetName() != ListenerName(echoHost, 8443) {
		t.Errorf("changed port: rebuilt=%v, listener %q", rebuilt, changed.Listeners[0].GetName())
	}

	// Another hostname is independent.
	other := echoService()
	other.Hostname = "other.demo.svc.cluster.local"
	if _, rebuilt := c.Service(other); !rebuilt {
		t.Error("new hostname not built")
	}
	if _, rebuilt := c.Service(svc); rebuilt {
		t.Error("unrelated hostname rebuilt")
	}

	c.Forget(echoHost)
	if _, rebuilt := c.Service(svc); !rebuilt {
		t.Error("not rebuilt after Forget")
	}
	if res, rebuilt := c.Service(nil); rebuilt || res.Listeners != nil {
		t.Error("nil service")
	}
}

func TestCacheLoadAssignments(t *testing.T) {
	c := NewCache()
	ms := fleet(true)

	first, rebuilt := c.LoadAssignments(ms, groupEast)
	if !rebuilt || len(first) != 2 {
		t.Fatalf("first call: rebuilt=%v, %d assignments", rebuilt, len(first))
	}
	if again, rebuilt := c.LoadAssignments(ms, groupEast); rebuilt || again[0] != first[0] {
		t.Errorf("same view: rebuilt=%v", rebuilt)
	}
	if _, rebuilt := c.LoadAssignments(ms, groupNoZone); !rebuilt {
		t.Error("other group not built")
	}
	// A new view (as the registry hands out after a shard change) rebuilds.
	if _, rebuilt := c.LoadAssignments(fleet(false), groupEast); !rebuilt {
		t.Error("new view not rebuilt")
	}

	ms2 := fleet(false)
	c.LoadAssignments(ms2, groupEast)
	c.ForgetGroup(groupEast)
	if _, rebuilt := c.LoadAssignments(ms2, groupEast); !rebuilt {
		t.Error("not rebuilt after ForgetGroup")
	}
	if _, rebuilt := c.LoadAssignments(ms2, groupNoZone); !rebuilt {
		t.Error("groupNoZone still holds the old view") // it saw ms, not ms2
	}
	if _, rebuilt := c.LoadAssignments(ms2, groupNoZone); rebuilt {
		t.Error("groupNoZone rebuilt twice")
	}
	c.Forget(echoHost)
	if _, rebuilt := c.LoadAssignments(ms2, groupNoZone); !rebuilt {
		t.Error("not rebuilt after Forget")
	}
	if res, rebuilt := c.LoadAssignments(nil, groupEast); rebuilt || res != nil {
		t.Error("nil view")
	}
	if res, rebuilt := c.LoadAssignments(&model.MergedService{}, groupEast); rebuilt || res != nil {
		t.Error("view without service")
	}
}
