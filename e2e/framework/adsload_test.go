package framework

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/meshfed/meshfed/pkg/testutil"
)

// loadCLA is an assignment of name with healthy HEALTHY endpoints and one
// UNHEALTHY one.
func loadCLA(name string, healthy int) *endpointv3.ClusterLoadAssignment {
	lle := &endpointv3.LocalityLbEndpoints{}
	for i := range healthy + 1 {
		st := corev3.HealthStatus_HEALTHY
		if i == healthy {
			st = corev3.HealthStatus_UNHEALTHY
		}
		lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: fmt.Sprintf("10.0.0.%d", i+1), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}},
			HealthStatus: st,
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{lle}}
}

// serveLoadCache serves an ADS server (SotW and Delta) over cache on addr
// until the returned function stops it.
func serveLoadCache(t *testing.T, addr string, cache cachev3.Cache) (string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, cache, nil))
	go func() { _ = gs.Serve(l) }()
	return l.Addr().String(), func() {
		gs.Stop()
		cancel()
	}
}

// TestLoadClient: SotW and Delta clients count the healthy endpoints of
// every subscribed assignment, see changes through OnAssignment, and when
// their server goes away, redial until one serves the address again.
func TestLoadClient(t *testing.T) {
	cache := cachev3.NewLinearCache(resourcev3.EndpointType, cachev3.WithInitialResources(map[string]types.Resource{
		"a": loadCLA("a", 2), "b": loadCLA("b", 3),
	}))
	addr, stop := serveLoadCache(t, "127.0.0.1:0", cache)
	defer func() { stop() }()

	type seen struct {
		name    string
		healthy int
	}
	var mu sync.Mutex
	var events []seen
	var clients []*LoadClient
	for _, delta := range []bool{false, true} {
		c, err := DialLoadClient(t.Context(), addr, LoadClientOptions{
			Node:  &corev3.Node{Id: fmt.Sprintf("load-%v", delta)},
			Delta: delta, Names: []string{"a", "b"},
			OnAssignment: func(name string, healthy int, _ time.Time) {
				mu.Lock()
				events = append(events, seen{name, healthy})
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	holds := func(name string, want int) func() error {
		return func() error {
			for i, c := range clients {
				if n, ok := c.Healthy(name); !ok || n != want {
					return fmt.Errorf("client %d holds %d healthy endpoints of %s (received: %v), want %d", i, n, name, ok, want)
				}
			}
			return nil
		}
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, holds("a", 2))
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, holds("b", 3))
	for i, c := range clients {
		if c.Received() != 2 {
			t.Errorf("client %d received %d names, want 2", i, c.Received())
		}
	}

	if err := cache.UpdateResource("a", loadCLA("a", 5)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, holds("a", 5))
	mu.Lock()
	fives := 0
	for _, e := range events {
		if e == (seen{"a", 5}) {
			fives++
		}
	}
	mu.Unlock()
	if fives != 2 {
		t.Errorf("OnAssignment reported a with 5 healthy endpoints %d times, want once per client", fives)
	}

	// The server goes; a new one on the same address serves other state.
	stop()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		for i, c := range clients {
			if n, err := c.Retries(); n == 0 || err == nil {
				return fmt.Errorf("client %d: %d failed streams (%v)", i, n, err)
			}
		}
		return nil
	})
	if err := cache.UpdateResource("b", loadCLA("b", 1)); err != nil {
		t.Fatal(err)
	}
	_, stop = serveLoadCache(t, addr, cache)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, holds("b", 1))
}
