package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestWatchCacheAnswersAsLinearCache drives a watchCache and
// go-control-plane's LinearCache with the same random writes and the same
// streams (SotW and Delta, named and wildcard, subscriptions that change,
// answers that are ACKed late or overtaken by a new request) and requires
// the same answers from both: whether a watch is answered, with which
// resources, versions and removals, and what the stream then knows.
func TestWatchCacheAnswersAsLinearCache(t *testing.T) {
	for _, typeURL := range []string{resourcev3.EndpointType, resourcev3.ClusterType} {
		for seed := range uint64(40) {
			t.Run(fmt.Sprintf("%s/%d", typeURL[len("type.googleapis.com/envoy.config."):], seed), func(t *testing.T) {
				runTwins(t, typeURL, seed)
			})
		}
	}
}

func runTwins(t *testing.T, typeURL string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 14))
	const prefix = "9."
	caches := [2]cachev3.ConfigWatcher{
		cachev3.NewLinearCache(typeURL, cachev3.WithVersionPrefix(prefix)),
		newWatchCache(typeURL, prefix, nil),
	}
	update := func(up map[string]types.Resource, del []string) {
		if err := caches[0].(*cachev3.LinearCache).UpdateResources(up, del); err != nil {
			t.Fatal(err)
		}
		if err := caches[1].(*watchCache).UpdateResources(up, del); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"a", "b", "c", "d", "e", "f"}
	randomNames := func() []string {
		var out []string
		for _, n := range names {
			if rng.IntN(3) > 0 {
				out = append(out, n)
			}
		}
		return out
	}

	streams := []*twin{
		{delta: false, names: randomNames()},
		{delta: false, names: randomNames()},
		{delta: true, names: randomNames()},
		{delta: true, names: randomNames()},
		{delta: false, wildcard: true},
		{delta: true, wildcard: true},
	}
	for _, s := range streams {
		s.typeURL = typeURL
		s.request(t, caches, nil)
	}
	for step := range 300 {
		s := streams[rng.IntN(len(streams))]
		switch op := rng.IntN(10); {
		case op < 4: // a write: upserts (some of the same bytes) and deletes
			up := map[string]types.Resource{}
			var del []string
			for range 1 + rng.IntN(3) {
				n := names[rng.IntN(len(names))]
				up[n] = &endpointv3.ClusterLoadAssignment{ClusterName: n, Policy: &endpointv3.ClusterLoadAssignment_Policy{
					OverprovisioningFactor: wrapperspb.UInt32(uint32(100 + rng.IntN(3)))}}
			}
			if rng.IntN(3) == 0 {
				n := names[rng.IntN(len(names))]
				if _, ok := up[n]; !ok {
					del = append(del, n)
				}
			}
			update(up, del)
		case op < 8: // the stream takes its answer and ACKs it
			if s.receive(t, step) {
				s.request(t, caches, nil)
			}
		case op < 9: // the stream takes its answer but asks nothing yet
			s.receive(t, step)
		default: // a new subscription, perhaps overtaking an answer
			if s.wildcard {
				continue
			}
			s.request(t, caches, randomNames())
		}
		for _, s := range streams {
			if len(s.sotw[0])+len(s.dlt[0]) != len(s.sotw[1])+len(s.dlt[1]) {
				t.Fatalf("step %d: %s: LinearCache has %d answers waiting, the watch cache %d", step, s,
					len(s.sotw[0])+len(s.dlt[0]), len(s.sotw[1])+len(s.dlt[1]))
			}
		}
	}
}

// twin is one stream, played against both caches as the stream server
// plays it (processADS, processDelta).
type twin struct {
	typeURL         string
	delta, wildcard bool
	names           []string // what it subscribes to

	opened  bool
	sub     [2]streamv3.Subscription
	sotw    [2]chan cachev3.Response
	dlt     [2]chan cachev3.DeltaResponse
	cancel  [2]func()
	version [2]string
	nonce   int
}

func (s *twin) String() string {
	return fmt.Sprintf("stream(delta=%t wildcard=%t %v)", s.delta, s.wildcard, s.names)
}

// request sends the stream's next request: its first, an ACK (next nil),
// or a new subscription.
func (s *twin) request(t testing.TB, caches [2]cachev3.ConfigWatcher, next []string) {
	t.Helper()
	for i, c := range caches {
		if s.cancel[i] != nil {
			s.cancel[i]()
		}
		var err error
		if !s.delta {
			if !s.opened {
				s.sotw[i] = make(chan cachev3.Response, 2)
				s.sub[i] = streamv3.NewSotwSubscription(s.names, s.wildcard)
			}
			// A SotW answer still waiting is dropped by a request of its type.
			select {
			case <-s.sotw[i]:
			default:
			}
			if next != nil {
				s.sub[i].SetResourceSubscription(next)
			}
			req := &discoveryv3.DiscoveryRequest{TypeUrl: s.typeURL, ResourceNames: s.namesAfter(next), VersionInfo: s.version[i]}
			s.cancel[i], err = c.CreateWatch(req, s.sub[i], s.sotw[i])
		} else {
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: s.typeURL}
			if !s.opened {
				s.dlt[i] = make(chan cachev3.DeltaResponse, 2)
				s.sub[i] = streamv3.NewDeltaSubscription(s.names, nil, nil, s.wildcard)
				req.ResourceNamesSubscribe = s.names
			} else {
				if s.nonce > 0 {
					req.ResponseNonce = fmt.Sprint(s.nonce)
				}
				// A Delta answer still waiting is sent first.
				select {
				case r := <-s.dlt[i]:
					s.sub[i].SetReturnedResources(r.GetNextVersionMap())
				default:
				}
				if next != nil {
					add, drop := diffNames(s.names, next)
					req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe = add, drop
					s.sub[i].UpdateResourceSubscriptions(add, drop)
				}
			}
			s.cancel[i], err = c.CreateDeltaWatch(req, s.sub[i], s.dlt[i])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if next != nil {
		s.names = next
	}
	s.opened = true
}

func (s *twin) namesAfter(next []string) []string {
	if next != nil {
		return next
	}
	return s.names
}

// receive takes the stream's answers from both caches, if any, requires
// them to say the same, and reports whether there were.
func (s *twin) receive(t *testing.T, step int) bool {
	t.Helper()
	var got [2]string
	var any bool
	for i := range 2 {
		if !s.delta {
			select {
			case r := <-s.sotw[i]:
				out, err := r.GetDiscoveryResponse()
				if err != nil {
					t.Fatal(err)
				}
				got[i] = fmt.Sprintf("version %s resources %v returned %v", out.GetVersionInfo(), sotwResources(out), sorted(r.GetReturnedResources()))
				s.sub[i].SetReturnedResources(r.GetReturnedResources())
				s.version[i] = out.GetVersionInfo()
				s.cancel[i] = nil
				any = true
			default:
			}
			continue
		}
		select {
		case r := <-s.dlt[i]:
			out, err := r.GetDeltaDiscoveryResponse()
			if err != nil {
				t.Fatal(err)
			}
			got[i] = fmt.Sprintf("version %s resources %v removed %v returned %v", out.GetSystemVersionInfo(), deltaResources(out),
				slices.Sorted(slices.Values(out.GetRemovedResources())), sorted(r.GetNextVersionMap()))
			s.sub[i].SetReturnedResources(r.GetNextVersionMap())
			s.cancel[i] = nil
			any = true
		default:
		}
	}
	if got[0] != got[1] {
		t.Fatalf("step %d: %s:\nLinearCache: %s\nwatch cache: %s", step, s, got[0], got[1])
	}
	if any {
		s.nonce++
	}
	return any
}

func sotwResources(out *discoveryv3.DiscoveryResponse) []string {
	var s []string
	for _, r := range out.GetResources() {
		s = append(s, fmt.Sprintf("%x", r.GetValue()))
	}
	slices.Sort(s)
	return s
}

func deltaResources(out *discoveryv3.DeltaDiscoveryResponse) []string {
	var s []string
	for _, r := range out.GetResources() {
		s = append(s, fmt.Sprintf("%s@%s=%x", r.GetName(), r.GetVersion()[:8], r.GetResource().GetValue()))
	}
	slices.Sort(s)
	return s
}

func sorted(m map[string]string) []string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, k+"="+m[k])
	}
	return s
}

func diffNames(from, to []string) (add, drop []string) {
	for _, n := range to {
		if !slices.Contains(from, n) {
			add = append(add, n)
		}
	}
	for _, n := range from {
		if !slices.Contains(to, n) {
			drop = append(drop, n)
		}
	}
	return add, drop
}

// BenchmarkWatchCache measures what a cache costs per proxy update: one
// load assignment of 300 changes, and each of 100 streams (half SotW, half
// Delta, all subscribed to every assignment) takes its answer and ACKs
// it, as the stream server does. LinearCache and the watch cache side by
// side (make bench).
func BenchmarkWatchCache(b *testing.B) {
	const resources, streams = 300, 100
	names := make([]string, resources)
	initial := map[string]types.Resource{}
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%d.ns.svc.cluster.local", i)
		initial[names[i]] = &endpointv3.ClusterLoadAssignment{ClusterName: names[i]}
	}
	type cache interface {
		cachev3.ConfigWatcher
		UpdateResources(map[string]types.Resource, []string) error
	}
	for _, bc := range []struct {
		name string
		new  func() cache
	}{
		{"LinearCache", func() cache {
			return cachev3.NewLinearCache(resourcev3.EndpointType, cachev3.WithVersionPrefix("1."), cachev3.WithInitialResources(initial))
		}},
		{"watchCache", func() cache { return newWatchCache(resourcev3.EndpointType, "1.", initial) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := bc.new()
			twins := make([]*twin, streams)
			caches := [2]cachev3.ConfigWatcher{c, c}
			for i := range twins {
				// Both halves of a twin are played against the same cache:
				// each proxy's answer is taken and ACKed twice over.
				twins[i] = &twin{typeURL: resourcev3.EndpointType, delta: i%2 == 1, names: names}
				twins[i].request(b, caches, nil)
				twins[i].drain(b, caches)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				name := names[n%resources]
				if err := c.UpdateResources(map[string]types.Resource{name: &endpointv3.ClusterLoadAssignment{ClusterName: name,
					Policy: &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(uint32(n))}}}, nil); err != nil {
					b.Fatal(err)
				}
				for _, s := range twins {
					s.drain(b, caches)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams*2), "ns/proxy-update")
		})
	}
}

// drain takes the stream's answers and ACKs them until none is left.
func (s *twin) drain(tb testing.TB, caches [2]cachev3.ConfigWatcher) {
	for s.take(tb) {
		s.request(tb, caches, nil)
	}
}

// take takes the stream's waiting answers, as the stream server records
// them, and reports whether there were any.
func (s *twin) take(tb testing.TB) bool {
	var any bool
	for i := range 2 {
		select {
		case r := <-s.sotw[i]:
			s.sub[i].SetReturnedResources(r.GetReturnedResources())
			s.version[i] = r.GetResponseVersion()
			s.cancel[i] = nil
			any = true
		case r := <-s.dlt[i]:
			s.sub[i].SetReturnedResources(r.GetNextVersionMap())
			s.cancel[i] = nil
			any = true
		default:
		}
	}
	if any {
		s.nonce++
	}
	return any
}

// TestNoMarshallingUnderTheCacheLock: the resources a write brings are
// marshalled, and hashed for Delta streams, before the cache's lock is
// taken, so that no stream's watch (which takes that lock) waits for it;
// the answers then send the bytes made before.
func TestNoMarshallingUnderTheCacheLock(t *testing.T) {
	c := newWatchCache(resourcev3.EndpointType, "1.", nil)
	calls := 0
	c.marshal = func(r types.Resource) ([]byte, error) {
		calls++
		if !c.mu.TryLock() {
			t.Error("a resource was marshalled under the cache's lock")
		} else {
			c.mu.Unlock()
		}
		return cachev3.MarshalResource(r)
	}
	sotw := &twin{typeURL: resourcev3.EndpointType, names: []string{"a", "b"}}
	delta := &twin{typeURL: resourcev3.EndpointType, names: []string{"a", "b"}, delta: true}
	caches := [2]cachev3.ConfigWatcher{c, c}
	for _, s := range []*twin{sotw, delta} {
		s.request(t, caches, nil)
	}
	for round := range 3 {
		up := map[string]types.Resource{}
		for _, n := range []string{"a", "b"} {
			up[n] = &endpointv3.ClusterLoadAssignment{ClusterName: n, Policy: &endpointv3.ClusterLoadAssignment_Policy{
				OverprovisioningFactor: wrapperspb.UInt32(uint32(100 + round))}}
		}
		if err := c.UpdateResources(up, nil); err != nil {
			t.Fatal(err)
		}
		// Build every answer, as the stream server does before it sends.
		for i := range 2 {
			r := <-sotw.sotw[i]
			if _, err := r.GetDiscoveryResponse(); err != nil {
				t.Fatal(err)
			}
			sotw.sotw[i] <- r
			d := <-delta.dlt[i]
			if _, err := d.GetDeltaDiscoveryResponse(); err != nil {
				t.Fatal(err)
			}
			delta.dlt[i] <- d
		}
		for _, s := range []*twin{sotw, delta} {
			if !s.take(t) {
				t.Fatalf("round %d: %s got no answer", round, s)
			}
			s.request(t, caches, nil)
		}
	}
	if calls != 6 {
		t.Errorf("%d marshallings for 3 writes of 2 resources, want each marshalled once", calls)
	}
}
