package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// echoVS is a VirtualService of echo at generation gen, with a route
// timeout of gen seconds (so that each generation changes the route).
func echoVS(gen int64) *istioconfig.VirtualService {
	m := meta("VirtualService", "echo")
	m.Generation = gen
	return &istioconfig.VirtualService{Meta: m, Spec: &networking.VirtualService{
		Hosts: []string{"echo"},
		Http: []*networking.HTTPRoute{{
			Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}},
			Timeout: durationpb.New(time.Duration(gen) * time.Second),
		}},
	}}
}

// TestConfigEpochRollout follows one VirtualService through a real server
// and a SotW client: the ledger records the epoch each generation arrives
// in, the proxy's record the epoch it ACKed, and Rollouts says STALE until
// the proxy ACKs the new route, SYNCED after (its listener and cluster,
// untouched by the change, hold the new epoch by the seal), NACKED with
// the error when it rejects the next generation, and follows the removal.
func TestConfigEpochRollout(t *testing.T) {
	st := store.New(store.Options{Self: "test"})
	if err := st.ReplaceCluster("c1", st.NextGeneration("c1"), shard("c1", "r1", "10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	s := runServer(t, Options{Registry: st, Replica: "hub-0", NACKBackoff: Backoff{Initial: time.Millisecond}})
	listener, cluster := xdsgen.ListenerName(echo, 8080), xdsgen.ClusterName(echo, 8080)
	a := newADS(t, s.Addr().String(), "c1", "r1")
	a.subscribe(resourcev3.ListenerType, listener)
	a.subscribe(resourcev3.RouteType, listener)
	a.subscribe(resourcev3.ClusterType, cluster)
	a.subscribe(resourcev3.EndpointType, cluster)

	q := proxystatus.RolloutQuery{Kind: "VirtualService", Namespace: "demo", Name: "echo"}
	rollout := func() (proxystatus.ObjectRollout, error) {
		doc := proxystatus.Rollouts([]proxystatus.ConfigLedger{s.Ledger().ConfigLedger()}, s.Status().Records(), q)
		if len(doc.Objects) != 1 {
			return proxystatus.ObjectRollout{}, fmt.Errorf("%d objects, want 1: %+v", len(doc.Objects), doc)
		}
		return doc.Objects[0], nil
	}
	want := func(what string, gen int64, deleted bool, state proxystatus.RolloutState, reason string) {
		t.Helper()
		waitUntil(t, what, func() error {
			o, err := rollout()
			if err != nil {
				return err
			}
			if o.Generation != gen || o.Deleted != deleted || o.Proxies != 1 {
				return fmt.Errorf("rollout %+v, want generation %d deleted %v of 1 proxy", o, gen, deleted)
			}
			if state == proxystatus.RolloutSynced {
				if o.Synced != 1 || len(o.Pending) != 0 {
					return fmt.Errorf("not synced: %+v", o)
				}
				return nil
			}
			if len(o.Pending) != 1 || o.Pending[0].State != state || !strings.Contains(o.Pending[0].Reason, reason) {
				return fmt.Errorf("pending %+v, want one %s with %q", o.Pending, state, reason)
			}
			return nil
		})
	}
	// rds waits for the route the change brings, leaving it unanswered.
	rds := func() *discoveryv3.DiscoveryResponse {
		t.Helper()
		for {
			r := a.recv()
			if r.GetTypeUrl() == resourcev3.RouteType {
				return r
			}
			a.request(r.GetTypeUrl(), r.GetVersionInfo(), r.GetNonce(), nameFor(r.GetTypeUrl(), listener, cluster))
		}
	}

	s.SetConfig(configOf(echoVS(1)))
	r := rds()
	want("before the ACK", 1, false, proxystatus.RolloutStale, "arrived in epoch 2")
	a.request(resourcev3.RouteType, r.GetVersionInfo(), r.GetNonce(), listener)
	want("after the ACK", 1, false, proxystatus.RolloutSynced, "")
	if e := s.Ledger().ConfigLedger(); e.Epoch != 2 || e.Objects[0].Epoch != 2 {
		t.Fatalf("ledger %+v, want epoch 2 with the object arriving in it", e)
	}

	s.SetConfig(configOf(echoVS(2)))
	r = rds()
	if err := a.stream.Send(&discoveryv3.DiscoveryRequest{
		Node: a.node, TypeUrl: resourcev3.RouteType, ResourceNames: []string{listener},
		VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "route timeout refused"},
	}); err != nil {
		t.Fatal(err)
	}
	// VersionInfo above is the new version, as a confused client might
	// say: the NACK still counts, and the ACKed epoch stays at 2.
	want("after the NACK", 2, false, proxystatus.RolloutNacked, "rds: route timeout refused")

	s.SetConfig(configOf())
	r = rds()
	// The NACKed response did not hold the removal: the proxy is STALE
	// for it, not NACKED.
	want("removal before the ACK", 2, true, proxystatus.RolloutStale, "arrived in epoch 4")
	a.request(resourcev3.RouteType, r.GetVersionInfo(), r.GetNonce(), listener)
	want("removal after the ACK", 2, true, proxystatus.RolloutSynced, "")
}

// writeN makes k empty writes to c, each a version.
func writeN(tb testing.TB, c *versioned, k int) {
	tb.Helper()
	for range k {
		if err := c.UpdateResources(nil, nil); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestLedgerEpochOf: a version holds the epoch of the last seal at or
// below it; versions of no live cache, malformed ones and those older than
// every remembered seal hold none; removals are remembered, and a removed
// object that comes back is an object again.
func TestLedgerEpochOf(t *testing.T) {
	l := xdsstatus.NewLedger("hub-0")
	c := newCache(l, resourcev3.ClusterType, nil)
	v := func(n uint64) string { return fmt.Sprintf("%d.%d", c.id, n) }
	if e := l.EpochOf(v(0)); e != 1 {
		t.Fatalf("a new cache's version holds epoch %d, want 1", e)
	}
	writeN(t, c, 2) // two writes, then a seal: version 2 holds epoch 2
	l.Begin(configOf(echoVS(1)))
	l.Seal()
	writeN(t, c, 1) // a write after it (an endpoint push) holds epoch 2 too
	for n, want := range map[uint64]uint64{0: 1, 1: 1, 2: 2, 3: 2} {
		if e := l.EpochOf(v(n)); e != want {
			t.Errorf("version %d holds epoch %d, want %d", n, e, want)
		}
	}
	for _, bad := range []string{"", "7", "x.1", "1.x", fmt.Sprintf("%d.1", c.id+1)} {
		if e := l.EpochOf(bad); e != 0 {
			t.Errorf("%q holds epoch %d, want 0", bad, e)
		}
	}
	for range xdsstatus.MaxMarks {
		writeN(t, c, 1)
		l.Begin(configOf(echoVS(1)))
		l.Seal()
	}
	if e := l.EpochOf(v(0)); e != 0 {
		t.Errorf("a version older than every remembered seal holds epoch %d, want 0", e)
	}
	l.Begin(configOf())
	if o := l.ConfigLedger().Objects; len(o) != 1 || !o[0].Deleted {
		t.Errorf("after the removal: %+v", o)
	}
	l.Begin(configOf(echoVS(1)))
	if o := l.ConfigLedger().Objects; len(o) != 1 || o[0].Deleted || o[0].Epoch != pendingOf(l) {
		t.Errorf("after it came back: %+v", o)
	}
	l.Release(c.id)
	if e := l.EpochOf(v(3)); e != 0 {
		t.Errorf("a released cache's version holds epoch %d", e)
	}
}

// A write the cache refuses makes no version, so the seal after it marks
// the version the cache really holds.
func TestLedgerSealsTheCachesVersion(t *testing.T) {
	l := xdsstatus.NewLedger("hub-0")
	c := newCache(l, resourcev3.ClusterType, nil)
	writeN(t, c, 1)
	if err := c.UpdateResources(map[string]types.Resource{"bad": nil}, nil); err == nil {
		t.Fatal("a nil resource was written")
	}
	l.Begin(configOf(echoVS(1)))
	l.Seal()
	v := func(n uint64) string { return fmt.Sprintf("%d.%d", c.id, n) }
	if e, want := l.EpochOf(v(1)), sealedOf(l); e != want {
		t.Errorf("the cache's version 1 holds epoch %d, want the sealed %d", e, want)
	}
}

func pendingOf(l *xdsstatus.Ledger) uint64 { _, p := l.Epochs(); return p }

func sealedOf(l *xdsstatus.Ledger) uint64 { s, _ := l.Epochs(); return s }
