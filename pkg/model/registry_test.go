package model

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

const echo = Hostname("echo.demo.svc.cluster.local")

func shard(c ClusterID, addrs ...string) *ServiceShard {
	s := &ServiceShard{Service: &Service{
		Hostname: echo, Name: "echo", Namespace: "demo",
		Ports: []ServicePort{{Name: "grpc", Port: 8080, Protocol: ProtocolGRPC}},
	}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, Endpoint{
			Cluster: c, Address: netip.MustParseAddr(a), Ready: true, Ports: map[string]uint32{"grpc": 18080},
		})
	}
	return s
}

func addrs(m *MergedService) []string {
	if m == nil {
		return nil
	}
	var out []string
	for _, e := range m.Endpoints {
		out = append(out, string(e.Cluster)+"="+e.Address.String())
	}
	return out
}

func TestRegistryMergesClusters(t *testing.T) {
	r := NewRegistry()
	mustChange(t)(r.ReplaceCluster("c2", map[Hostname]*ServiceShard{echo: shard("c2", "10.0.2.1")}))
	mustChange(t)(r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: shard("c1", "10.0.1.2", "10.0.1.1")}))
	got := addrs(r.Service(echo))
	want := []string{"c1=10.0.1.1", "c1=10.0.1.2", "c2=10.0.2.1"}
	if !slices.Equal(got, want) {
		t.Fatalf("merged = %v, want %v", got, want)
	}
	if cs := r.Service(echo).Clusters; !slices.Equal(cs, []ClusterID{"c1", "c2"}) {
		t.Fatalf("clusters = %v", cs)
	}

	// An identical update changes nothing; a real one invalidates the memo.
	if changed, err := r.UpdateShard("c2", echo, shard("c2", "10.0.2.1")); err != nil || changed {
		t.Fatalf("no-op update: changed=%v err=%v", changed, err)
	}
	if changed, err := r.UpdateShard("c2", echo, shard("c2")); err != nil || !changed {
		t.Fatalf("scale down: changed=%v err=%v", changed, err)
	}
	if got := addrs(r.Service(echo)); len(got) != 2 {
		t.Fatalf("after scale down = %v", got)
	}

	if changed := r.RemoveCluster("c1"); !slices.Equal(changed, []Hostname{echo}) {
		t.Fatalf("remove changed = %v", changed)
	}
	if got := addrs(r.Service(echo)); len(got) != 0 {
		t.Fatalf("after removing c1 = %v", got)
	}
	r.UpdateShard("c2", echo, nil)
	if r.Service(echo) != nil || len(r.Hostnames()) != 0 {
		t.Fatalf("hostname should be gone: %v", r.Hostnames())
	}
}

// TestRegistryReplaceAndUnknown: the registry stores what it is told; which
// write is current is federation.State's to decide (its tests cover stale
// terms and tombstones).
func TestRegistryReplaceAndUnknown(t *testing.T) {
	r := NewRegistry()
	mustChange(t)(r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: shard("c1", "10.0.0.1")}))
	if _, err := r.UpdateShard("c9", echo, nil); !errors.Is(err, ErrUnknownCluster) {
		t.Fatalf("unknown cluster: %v", err)
	}

	// A rotated secret: the new watcher replaces the state in one step; the
	// hostname is reported changed only because its endpoints differ.
	if changed := r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: shard("c1", "10.0.0.1")}); len(changed) != 0 {
		t.Fatalf("same state replaced: changed=%v", changed)
	}
	// Nil shards are ignored, not read as deletions.
	if changed := r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: shard("c1", "10.0.0.1"), "other.demo.svc.cluster.local": nil}); len(changed) != 0 || len(r.Hostnames()) != 1 {
		t.Fatalf("nil shard: changed=%v hostnames=%v", changed, r.Hostnames())
	}

	r.RemoveCluster("c1")
	if _, err := r.UpdateShard("c1", echo, shard("c1")); !errors.Is(err, ErrUnknownCluster) {
		t.Fatalf("update after removal: %v", err)
	}
	mustChange(t)(r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: shard("c1", "10.0.0.3")}))
	if got := r.Clusters(); len(got) != 1 || got[0].Endpoints != 1 || got[0].Services != 1 {
		t.Fatalf("summary = %+v", got)
	}
}

func TestMergeServicePorts(t *testing.T) {
	r := NewRegistry()
	a := shard("a")
	b := shard("b")
	b.Service = &Service{Hostname: echo, Name: "echo", Namespace: "demo", Ports: []ServicePort{
		{Name: "other-name", Port: 8080, Protocol: ProtocolTCP},
		{Name: "http", Port: 80, Protocol: ProtocolHTTP},
	}}
	mustChange(t)(r.ReplaceCluster("b", map[Hostname]*ServiceShard{echo: b}))
	mustChange(t)(r.ReplaceCluster("a", map[Hostname]*ServiceShard{echo: a}))
	got := r.Service(echo).Service.Ports
	want := []ServicePort{{Name: "http", Port: 80, Protocol: ProtocolHTTP}, {Name: "grpc", Port: 8080, Protocol: ProtocolGRPC}}
	if !slices.Equal(got, want) {
		t.Fatalf("ports = %+v, want %+v", got, want)
	}
}

// mustChange returns a checker for a registry write that must change the view.
func mustChange(t *testing.T) func([]Hostname) {
	return func(changed []Hostname) {
		t.Helper()
		if len(changed) == 0 {
			t.Fatal("expected a change")
		}
	}
}

func TestClusterShards(t *testing.T) {
	r := NewRegistry()
	if got := r.ClusterShards("c1"); got != nil {
		t.Fatalf("unknown cluster: %v", got)
	}
	r.ReplaceCluster("c1", nil)
	if got := r.ClusterShards("c1"); got == nil || len(got) != 0 {
		t.Fatalf("empty cluster: %#v, want an empty non-nil map", got)
	}
	s := shard("c1", "10.0.0.1")
	mustChange(t)(r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: s}))
	got := r.ClusterShards("c1")
	if len(got) != 1 || got[echo] != s {
		t.Fatalf("shards = %v", got)
	}
	// The map is a copy: changing it leaves the registry alone.
	delete(got, echo)
	if len(r.ClusterShards("c1")) != 1 || r.Service(echo) == nil {
		t.Fatal("mutating the returned map changed the registry")
	}
	r.RemoveCluster("c1")
	if got := r.ClusterShards("c1"); got != nil {
		t.Fatalf("removed cluster: %v", got)
	}
}

// TestSingleClusterServiceSharesShard: the merged view of a service only one
// cluster has is that shard's endpoints, not a copy; a shard written out of
// canonical order still reads back sorted, from a copy that leaves the
// shard as it was.
func TestSingleClusterServiceSharesShard(t *testing.T) {
	r := NewRegistry()
	sorted := shard("c1", "10.0.1.1", "10.0.1.2")
	mustChange(t)(r.ReplaceCluster("c1", map[Hostname]*ServiceShard{echo: sorted}))
	m := r.Service(echo)
	if &m.Endpoints[0] != &sorted.Endpoints[0] || m.Service != sorted.Service {
		t.Fatal("the merged view of a one-cluster service copied its shard")
	}

	unsorted := shard("c1", "10.0.1.9", "10.0.1.3")
	if _, err := r.UpdateShard("c1", echo, unsorted); err != nil {
		t.Fatal(err)
	}
	if got, want := addrs(r.Service(echo)), []string{"c1=10.0.1.3", "c1=10.0.1.9"}; !slices.Equal(got, want) {
		t.Fatalf("merged endpoints = %v, want %v", got, want)
	}
	if unsorted.Endpoints[0].Address.String() != "10.0.1.9" {
		t.Fatal("sorting the merged view reordered the shard")
	}
}
