package xdsstatus

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

var statusT0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func testNode(id, cluster string) *corev3.Node {
	return &corev3.Node{
		Id: id,
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			xdsnode.MetadataClusterID: structpb.NewStringValue(cluster),
		}},
		UserAgentName:        "gRPC Go",
		UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.85.0"},
	}
}

// trackerScript drives a Tracker the way go-control-plane's stream
// server does, with a fake clock.
type trackerScript struct {
	t       *testing.T
	tr      *Tracker
	clk     *clocktesting.FakePassiveClock
	reg     *prometheus.Registry
	streams map[streamKey]*Stream // as the streams' conns hold them
}

func newTrackerScript(t *testing.T) *trackerScript {
	clk := clocktesting.NewFakePassiveClock(statusT0)
	reg := prometheus.NewRegistry()
	return &trackerScript{t: t, tr: NewTracker("hub-0", clk, reg), clk: clk, reg: reg, streams: map[streamKey]*Stream{}}
}

// stream returns the record of a stream, opening it at its first use.
func (s *trackerScript) stream(delta bool, id int64) *Stream {
	k := streamKey{delta, id}
	if s.streams[k] == nil {
		s.streams[k] = s.tr.Open(delta, id)
	}
	return s.streams[k]
}

func (s *trackerScript) step(d time.Duration) { s.clk.SetTime(s.clk.Now().Add(d)) }

func (s *trackerScript) req(id int64, node *corev3.Node, typeURL, version, nonce string) {
	s.stream(false, id).OnRequest(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, VersionInfo: version, ResponseNonce: nonce})
}

func (s *trackerScript) nack(id int64, typeURL, version, nonce, msg string) {
	s.stream(false, id).OnRequest(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: version, ResponseNonce: nonce,
		ErrorDetail: &status.Status{Code: 3, Message: msg}})
}

func (s *trackerScript) resp(id int64, typeURL, version, nonce string) {
	s.stream(false, id).OnResponse(&discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Nonce: nonce})
}

func (s *trackerScript) only() proxystatus.Record {
	s.t.Helper()
	recs := s.tr.Records()
	if len(recs) != 1 {
		s.t.Fatalf("%d records, want 1: %+v", len(recs), recs)
	}
	return recs[0]
}

func (s *trackerScript) wantStatus(short string, want proxystatus.Status) proxystatus.TypeStatus {
	s.t.Helper()
	r := s.only()
	if got := r.Status(short); got != want {
		s.t.Fatalf("%s: %s, want %s (%+v)", short, got, want, r.Types[short])
	}
	return r.Types[short]
}

// convergence returns the sample count and sum of the convergence
// histogram for typ.
func convergence(t *testing.T, reg *prometheus.Registry, typ string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshfed_xds_proxy_convergence_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

const clientID = "sidecar~10.0.0.1~client.demo~demo.svc.cluster.local"

// TestTrackerSotWLifecycle walks one type through every state.
func TestTrackerSotWLifecycle(t *testing.T) {
	s := newTrackerScript(t)
	cds := resourcev3.ClusterType
	s.stream(false, 1)
	if len(s.tr.Records()) != 0 {
		t.Fatal("a stream without a node has a record")
	}

	s.req(1, testNode(clientID, "c1"), cds, "", "")
	r := s.only()
	if r.Proxy != clientID || r.Name != "client.demo" || r.Cluster != "c1" || r.Replica != "hub-0" ||
		r.Version != "1.85.0" || !r.Connected.Equal(statusT0) {
		t.Fatalf("record %+v", r)
	}
	s.wantStatus("cds", proxystatus.StatusNotSent)
	if r.Status("lds") != proxystatus.StatusNotSent {
		t.Fatal("unrequested type")
	}

	s.step(time.Millisecond)
	s.resp(1, cds, "v1", "1")
	s.wantStatus("cds", proxystatus.StatusStale)

	s.step(3 * time.Millisecond)
	s.req(1, nil, cds, "v1", "1")
	ts := s.wantStatus("cds", proxystatus.StatusSynced)
	if ts.Acked != "v1" || ts.AckedNonce != "1" || !ts.AckedAt.Equal(statusT0.Add(4*time.Millisecond)) ||
		!ts.SentAt.Equal(statusT0.Add(time.Millisecond)) {
		t.Fatalf("after ACK: %+v", ts)
	}
	if n, sum := convergence(t, s.reg, "cds"); n != 1 || sum < 0.0029 || sum > 0.0031 {
		t.Fatalf("convergence: %d samples, sum %v; want 1, 3ms", n, sum)
	}
	// A repeated ACK (a resource-name change) is not a second convergence.
	s.req(1, nil, cds, "v1", "1")
	if n, _ := convergence(t, s.reg, "cds"); n != 1 {
		t.Fatalf("repeated ACK observed: %d samples", n)
	}

	s.resp(1, cds, "v2", "2")
	s.nack(1, cds, "v1", "2", "cluster foo: bad lb policy")
	ts = s.wantStatus("cds", proxystatus.StatusError)
	if ts.Nack != "cluster foo: bad lb policy" || ts.NackVersion != "v2" || ts.Acked != "v1" || ts.Sent != "v2" {
		t.Fatalf("after NACK: %+v", ts)
	}
	// The proxy asks again (new names) still answering the NACKed nonce:
	// not an ACK.
	s.req(1, nil, cds, "v1", "2")
	s.wantStatus("cds", proxystatus.StatusError)

	// A fixed version is sent: still ERROR until the proxy ACKs it.
	s.resp(1, cds, "v3", "3")
	s.wantStatus("cds", proxystatus.StatusError)
	s.req(1, nil, cds, "v3", "3")
	ts = s.wantStatus("cds", proxystatus.StatusSynced)
	if ts.Nack != "" || ts.NackVersion != "" || ts.Acked != "v3" {
		t.Fatalf("after recovery: %+v", ts)
	}

	// A NACK without a message still shows as ERROR.
	s.resp(1, cds, "v4", "4")
	s.nack(1, cds, "v3", "4", "")
	if ts := s.wantStatus("cds", proxystatus.StatusError); ts.Nack == "" {
		t.Fatal("empty NACK message lost the error")
	}

	s.stream(false, 1).Close()
	if len(s.tr.Records()) != 0 {
		t.Fatal("closed stream kept")
	}
	s.stream(false, 1).Close() // twice: harmless
}

// TestTrackerOvertakenResponse: the ACK of a response a newer one overtook
// still finds its version, and leaves the type STALE.
func TestTrackerOvertakenResponse(t *testing.T) {
	s := newTrackerScript(t)
	eds := resourcev3.EndpointType
	s.req(7, testNode(clientID, "c1"), eds, "", "")
	s.resp(7, eds, "v1", "1")
	s.resp(7, eds, "v2", "2")
	s.stream(true, 7).OnDeltaRequest(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds}) // another stream: ignored here
	s.nack(7, eds, "", "1", "old one was bad")
	ts := s.wantStatus("eds", proxystatus.StatusError)
	if ts.NackVersion != "v1" {
		t.Fatalf("NACK of overtaken response: %+v", ts)
	}
	s.req(7, nil, eds, "v2", "2")
	s.wantStatus("eds", proxystatus.StatusSynced)
}

// TestTrackerDelta: Delta ACKs carry no version; it is found by nonce. SotW
// and Delta stream IDs do not collide.
func TestTrackerDelta(t *testing.T) {
	s := newTrackerScript(t)
	eds := resourcev3.EndpointType
	s.stream(true, 1)
	s.stream(false, 1)
	other := "sidecar~10.0.0.2~other.demo~demo.svc.cluster.local"
	s.req(1, testNode(other, "c2"), eds, "", "")

	s.stream(true, 1).OnDeltaRequest(&discoveryv3.DeltaDiscoveryRequest{Node: testNode(clientID, "c1"), TypeUrl: eds,
		ResourceNamesSubscribe: []string{"a"}})
	s.stream(true, 1).OnDeltaResponse(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: eds, SystemVersionInfo: "7", Nonce: "1"})
	s.stream(true, 1).OnDeltaRequest(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "1"})
	recs := s.tr.Records()
	if len(recs) != 2 {
		t.Fatalf("records: %+v", recs)
	}
	byID := map[string]proxystatus.Record{}
	for _, r := range recs {
		byID[r.Proxy] = r
	}
	if ts := byID[clientID].Types["eds"]; ts.Status != proxystatus.StatusSynced || ts.Acked != "7" {
		t.Fatalf("delta: %+v", ts)
	}
	if st := byID[other].Status("eds"); st != proxystatus.StatusNotSent {
		t.Fatalf("SotW stream 1: %s", st)
	}
	s.stream(true, 1).OnDeltaResponse(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: eds, SystemVersionInfo: "8", Nonce: "2"})
	s.stream(true, 1).OnDeltaRequest(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "2",
		ErrorDetail: &status.Status{Message: "nope"}})
	s.stream(false, 1).Close()
	ts := s.wantStatus("eds", proxystatus.StatusError)
	if ts.NackVersion != "8" || ts.Acked != "7" {
		t.Fatalf("delta NACK: %+v", ts)
	}
}

// TestTrackerChanges: TakeChanges reports what changed once, a closed
// proxy as removed, and a reconnected proxy under its newest stream.
func TestTrackerChanges(t *testing.T) {
	s := newTrackerScript(t)
	cds := resourcev3.ClusterType
	select {
	case <-s.tr.Changes():
		t.Fatal("signal before any change")
	default:
	}
	s.stream(false, 1)
	s.req(1, testNode(clientID, "c1"), cds, "", "")
	s.resp(1, cds, "v1", "1")
	select {
	case <-s.tr.Changes():
	default:
		t.Fatal("no signal")
	}
	changed, removed := s.tr.TakeChanges()
	if len(changed) != 1 || changed[0].Proxy != clientID || len(removed) != 0 {
		t.Fatalf("TakeChanges: %+v %v", changed, removed)
	}
	if changed, removed := s.tr.TakeChanges(); len(changed)+len(removed) != 0 {
		t.Fatalf("second TakeChanges: %+v %v", changed, removed)
	}

	// The proxy reconnects before its old stream is seen closing.
	s.step(time.Second)
	s.stream(false, 2)
	s.req(2, testNode(clientID, "c1"), cds, "", "")
	if r := s.only(); !r.Connected.Equal(statusT0.Add(time.Second)) || r.Status("cds") != proxystatus.StatusNotSent {
		t.Fatalf("after reconnect: %+v", r)
	}
	s.tr.TakeChanges()
	s.stream(false, 1).Close()
	changed, removed = s.tr.TakeChanges()
	if len(changed) != 1 || len(removed) != 0 || !changed[0].Connected.Equal(statusT0.Add(time.Second)) {
		t.Fatalf("old stream closed: %+v %v", changed, removed)
	}
	s.stream(false, 2).Close()
	changed, removed = s.tr.TakeChanges()
	if len(changed) != 0 || !reflect.DeepEqual(removed, []string{clientID}) {
		t.Fatalf("last stream closed: %+v %v", changed, removed)
	}
}

func TestTrackerDrain(t *testing.T) {
	s := newTrackerScript(t)
	s.req(1, testNode(clientID, "c1"), resourcev3.ClusterType, "", "")
	fleet := proxystatus.NewFleet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.tr.Drain(ctx, func(changed []proxystatus.Record, removed []string) {
			fleet.Upsert("hub-0", changed)
			fleet.Remove("hub-0", removed)
		})
	}()
	waitUntil(t, "initial record drained", func() error {
		if n := len(fleet.All()); n != 1 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})
	s.stream(false, 1).Close()
	waitUntil(t, "removal drained", func() error {
		if n := len(fleet.All()); n != 0 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})
	cancel()
	<-done
}

// waitUntil polls cond until it returns nil, for at most 20s.
func waitUntil(t *testing.T, what string, cond func() error) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, testutil.Named(what, cond))
}

// TestTrackerConcurrent runs many streams at once under -race.
func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker("hub-0", nil, nil)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := tr.Open(false, int64(i))
			node := testNode(fmt.Sprintf("sidecar~10.0.0.%d~p%d.demo~demo.svc.cluster.local", i, i), "c1")
			st.OnRequest(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType})
			for v := range 50 {
				nonce := fmt.Sprint(v)
				st.OnResponse(&discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.ClusterType, VersionInfo: nonce, Nonce: nonce})
				st.OnRequest(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: nonce, ResponseNonce: nonce})
				if v%10 == 0 {
					_ = tr.Records()
					tr.TakeChanges()
				}
			}
		}()
	}
	wg.Wait()
	recs := tr.Records()
	if len(recs) != 32 {
		t.Fatalf("%d records", len(recs))
	}
	for _, r := range recs {
		if r.Status("cds") != proxystatus.StatusSynced {
			t.Fatalf("%s: %s", r.Name, r.Status("cds"))
		}
	}
}

// BenchmarkTracker10k: one push (response and ACK of three types) to each
// of 10,000 proxies, then a full Records() snapshot, as CSDS takes.
func BenchmarkTracker10k(b *testing.B) {
	tr := NewTracker("hub-0", nil, prometheus.NewRegistry())
	benchTracker(b, tr, func(_, n int) string { return fmt.Sprint(n) })
}

// benchTracker runs 10,000 proxies of three types on tr, each round a
// response of version(proxy, round) and its ACK per proxy and type, then
// the records and the changes taken.
func benchTracker(b *testing.B, tr *Tracker, version func(proxy, round int) string) {
	const proxies = 10000
	types := []string{resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.EndpointType}
	streams := make([]*Stream, proxies)
	for i := range proxies {
		streams[i] = tr.Open(false, int64(i))
		node := testNode(fmt.Sprintf("sidecar~10.%d.%d.%d~p%d.demo~demo.svc.cluster.local", i>>16, (i>>8)&255, i&255, i), "c1")
		for _, ty := range types {
			streams[i].OnRequest(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: ty})
		}
	}
	b.ResetTimer()
	for n := range b.N {
		for i := range proxies {
			v := version(i, n)
			for _, ty := range types {
				streams[i].OnResponse(&discoveryv3.DiscoveryResponse{TypeUrl: ty, VersionInfo: v, Nonce: v})
				streams[i].OnRequest(&discoveryv3.DiscoveryRequest{TypeUrl: ty, VersionInfo: v, ResponseNonce: v})
			}
		}
		if recs := tr.Records(); len(recs) != proxies || (tr.epochOf != nil && recs[0].ConfigEpoch() == 0) {
			b.Fatalf("%d records", len(recs))
		}
		tr.TakeChanges()
	}
}

// TestTrackerSkipsDebugClients: a stream that asks only for Istio's debug
// types (istioctl's) is a tool, not a proxy, and gets no record.
func TestTrackerSkipsDebugClients(t *testing.T) {
	s := newTrackerScript(t)
	s.stream(false, 1)
	s.req(1, testNode("sidecar~10.0.0.9~test-1.default~default.svc.cluster.local", "c1"), DebugSynczType, "", "n0")
	s.resp(1, DebugSynczType, "", "n1")
	if rs := s.tr.Records(); len(rs) != 0 {
		t.Fatalf("istioctl's stream is listed: %+v", rs)
	}
	// The stream server repeats the stream's first node in later requests.
	s.req(1, testNode("sidecar~10.0.0.9~test-1.default~default.svc.cluster.local", "c1"), resourcev3.ClusterType, "", "")
	if r := s.only(); r.Status("cds") != proxystatus.StatusNotSent {
		t.Fatalf("a proxy type on the same stream: %+v", r)
	}
}

// TestTrackerIdentity: the identity a stream proved shows in its record,
// and a change of it is a change of the record.
func TestTrackerIdentity(t *testing.T) {
	tr := NewTracker("hub-0", nil, nil)
	st := tr.Open(true, 1)
	st.SetIdentity("spiffe://cluster.local/ns/demo/sa/client") // before the node is known
	st.OnDeltaRequest(&discoveryv3.DeltaDiscoveryRequest{Node: testNode("sidecar~10.0.0.1~client.demo~demo.svc.cluster.local", "c1"), TypeUrl: resourcev3.ClusterType})
	recs := tr.Records()
	if len(recs) != 1 || recs[0].Identity != "spiffe://cluster.local/ns/demo/sa/client" {
		t.Fatalf("records %+v", recs)
	}
	tr.TakeChanges()
	st.SetIdentity("demo/client")
	if changed, _ := tr.TakeChanges(); len(changed) != 1 || changed[0].Identity != "demo/client" {
		t.Errorf("changes after a new identity: %+v", changed)
	}
}
