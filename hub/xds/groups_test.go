package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
	waitutil "github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// wantHeld returns a condition that s holds exactly want for proxy groups,
// and that its meshfed_xds_proxy_groups gauge says as much.
func wantHeld(s *Server, want heldGroups) func() error {
	return func() error {
		if got := s.cache.held(); got != want {
			return fmt.Errorf("held %+v, want %+v", got, want)
		}
		if g := testutil.ToFloat64(s.metrics.groups); g != float64(want.caches) {
			return fmt.Errorf("meshfed_xds_proxy_groups = %v, want %d", g, want.caches)
		}
		return nil
	}
}

// deltaEDS opens a Delta stream of cluster c that subscribes to name, reads
// the answer and ACKs it without repeating its node (as proxies do); it
// returns the function that ends the stream.
func deltaEDS(t *testing.T, addr string, c model.ClusterID, name string) context.CancelFunc {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := newADS(t, addr, c, "r1").node
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: node, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{name},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) != 1 {
		t.Fatalf("delta response: %v", r)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return cancel
}

// TestProxyGroupsFreed: proxies of many groups (distinct CLUSTER_ID)
// connect and leave, three times over. While they are connected the hub
// holds one load-assignment cache per group; a group keeps it, and keeps
// being pushed to, as long as one of its proxies is left; once the last
// has left, nothing is held for any group, so proxy churn does not grow
// the hub.
func TestProxyGroupsFreed(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	gen := st.NextGeneration("c1")
	if err := st.ReplaceCluster("c1", gen, shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st})
	addr := s.Addr().String()
	cluster := xdsgen.ClusterName(echo, 8080)
	const groups = 8 // SotW groups; one Delta group more
	addrs := []string{"10.1.0.1"}

	waitutil.Eventually(t, 10*time.Second, 10*time.Millisecond, wantHeld(s, heldGroups{}))
	for round := range 3 {
		var clients []*adsClient
		for i := range groups {
			a := newADS(t, addr, model.ClusterID(fmt.Sprintf("churn-%d", i)), "r1")
			if n := len(priorities(cla(t, a.subscribe(resourcev3.EndpointType, cluster)))); n != len(addrs) {
				t.Fatalf("round %d, group %d: %d endpoints, want %d", round, i, n, len(addrs))
			}
			clients = append(clients, a)
		}
		// A second proxy of churn-0, which stays when the others leave.
		stays := newADS(t, addr, "churn-0", "r1")
		stays.subscribe(resourcev3.EndpointType, cluster)
		endDelta := deltaEDS(t, addr, "churn-delta", cluster)
		// Every stream has sent its requests and been answered, so every
		// one is attached.
		if err := wantHeld(s, heldGroups{
			caches: groups + 1, streams: groups + 2, members: groups + 1, planned: groups + 1, memoized: groups + 1,
		})(); err != nil {
			t.Fatalf("round %d, all connected: %v", round, err)
		}

		for _, a := range clients {
			a.disconnect()
		}
		endDelta()
		waitutil.Eventually(t, 10*time.Second, 10*time.Millisecond, wantHeld(s, heldGroups{
			caches: 1, streams: 1, members: 1, planned: 1, memoized: 1,
		}))
		// The group that kept a proxy is still planned: a change reaches it.
		addrs = append(addrs, fmt.Sprintf("10.1.0.%d", round+2))
		if err := st.UpdateShard("c1", gen, echo, shard("c1", "r1", addrs...)[echo]); err != nil {
			t.Fatal(err)
		}
		r := stays.recv()
		if n := len(priorities(cla(t, r))); r.GetTypeUrl() != resourcev3.EndpointType || n != len(addrs) {
			t.Fatalf("round %d: the group's remaining proxy got %s with %d endpoints, want EDS with %d", round, r.GetTypeUrl(), n, len(addrs))
		}
		stays.disconnect()
		waitutil.Eventually(t, 10*time.Second, 10*time.Millisecond, wantHeld(s, heldGroups{}))
	}
	// Each round built every group afresh.
	if built := testutil.ToFloat64(s.metrics.groupsBuilt); built != 3*(groups+1) {
		t.Errorf("meshfed_xds_proxy_groups_total = %v, want %d", built, 3*(groups+1))
	}
}

// TestReconnectingGroupGetsEDS: a group whose last proxy left is rebuilt
// from the registry when a proxy of it comes back, with the endpoints that
// changed while it was away, and is pushed to again afterwards.
func TestReconnectingGroupGetsEDS(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	gen1, gen2 := st.NextGeneration("c1"), st.NextGeneration("c2")
	if err := st.ReplaceCluster("c1", gen1, shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := st.ReplaceCluster("c2", gen2, shard("c2", "r2", "10.2.0.1")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st})
	addr := s.Addr().String()
	cluster := xdsgen.ClusterName(echo, 8080)

	a := newADS(t, addr, "c1", "r1")
	if p := priorities(cla(t, a.subscribe(resourcev3.EndpointType, cluster))); fmt.Sprint(p) != "map[10.1.0.1:0 10.2.0.1:1]" {
		t.Fatalf("first connection: priorities %v", p)
	}
	a.disconnect()
	waitutil.Eventually(t, 10*time.Second, 10*time.Millisecond, wantHeld(s, heldGroups{}))

	// While the group is away, its own cluster scales up.
	if err := st.UpdateShard("c1", gen1, echo, shard("c1", "r1", "10.1.0.1", "10.1.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	b := newADS(t, addr, "c1", "r1")
	if p := priorities(cla(t, b.subscribe(resourcev3.EndpointType, cluster))); fmt.Sprint(p) != "map[10.1.0.1:0 10.1.0.2:0 10.2.0.1:1]" {
		t.Fatalf("after reconnecting: priorities %v", p)
	}
	// Planned again: a change elsewhere reaches the rebuilt group.
	if err := st.UpdateShard("c2", gen2, echo, shard("c2", "r2", "10.2.0.1", "10.2.0.2")[echo]); err != nil {
		t.Fatal(err)
	}
	r := b.recv()
	if p := priorities(cla(t, r)); r.GetTypeUrl() != resourcev3.EndpointType || fmt.Sprint(p) != "map[10.1.0.1:0 10.1.0.2:0 10.2.0.1:1 10.2.0.2:1]" {
		t.Fatalf("change after reconnecting: %s, priorities %v", r.GetTypeUrl(), p)
	}
}
