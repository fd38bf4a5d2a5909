package fleetstatus

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/trustsvc"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// peerSync is the interface replication consumes (today's
// replication.ProxyStatusSync), restated so that this package's tests do
// not depend on the replication package.
type peerSync interface {
	Full() []byte
	TakeChanges() (encode func() ([]byte, error), ok bool)
	WaitChanged(ctx context.Context) bool
	Apply(from federation.ReplicaID, batch []byte) error
	DropReplica(id federation.ReplicaID)
}

var _ peerSync = (*Fleet)(nil)

// The xDS server's tracker is a Proxies, the trust-bundle service's
// status a Spokes.
var (
	_ Proxies = (*xdsstatus.Tracker)(nil)
	_ Spokes  = (*trustsvc.Service)(nil)
)

const nodeA = "sidecar~10.1.0.1~a-0.demo~demo.svc.cluster.local"

// localSpokes is a replica's trust-bundle service as Fleet reads it.
type localSpokes struct {
	list    []debugdoc.Spoke
	changed chan struct{}
}

func (l *localSpokes) Spokes() []debugdoc.Spoke       { return slices.Clone(l.list) }
func (l *localSpokes) SpokesChanged() <-chan struct{} { return l.changed }

// take is TakeChanges with the batch encoded, as the replicator does
// when a peer is connected.
func take(t *testing.T, f *Fleet) ([]byte, bool) {
	t.Helper()
	encode, ok := f.TakeChanges()
	if !ok {
		return nil, false
	}
	raw, err := encode()
	if err != nil {
		t.Fatalf("encoding the batch: %v", err)
	}
	return raw, true
}

func names(recs []proxystatus.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Replica+"/"+r.Name)
	}
	return out
}

// One replica's proxies and spokes reach another through the batches:
// changes as they come, everything on (re)connect, nothing once the
// replica left; a peer cannot speak for another replica.
func TestFleetReplicates(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0).UTC()
	clk := clocktesting.NewFakePassiveClock(t0)
	tracker := xdsstatus.NewTracker("hub-0", clk, nil)
	spokes := &localSpokes{changed: make(chan struct{}, 1)}
	a := New(Options{Self: "hub-0", Proxies: tracker, Spokes: spokes})
	b := New(Options{Self: "hub-1", Proxies: xdsstatus.NewTracker("hub-1", clk, nil)})

	if raw := a.Full(); raw != nil {
		t.Fatalf("full batch of an empty replica: %s", raw)
	}
	if raw, ok := take(t, a); ok {
		t.Fatalf("changes of an empty replica: %s", raw)
	}

	// A proxy connects to hub-0 and is sent its clusters.
	stream := tracker.Open(false, 1)
	stream.OnRequest(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: nodeA}, TypeUrl: resourcev3.ClusterType})
	stream.OnResponse(&discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.ClusterType, VersionInfo: "1", Nonce: "n1"})
	waitChanged(t, a)
	raw, ok := take(t, a)
	if !ok {
		t.Fatal("no changes after a proxy connected")
	}
	if got := names(a.All()); !slices.Equal(got, []string{"hub-0/a-0.demo"}) {
		t.Fatalf("hub-0 sees %v", got)
	}
	if err := b.Apply("hub-0", raw); err != nil {
		t.Fatal(err)
	}
	if got := names(b.All()); !slices.Equal(got, []string{"hub-0/a-0.demo"}) {
		t.Fatalf("hub-1 sees %v", got)
	}
	if r := b.All()[0]; r.Types["cds"].Sent != "1" {
		t.Errorf("hub-1's record: %+v", r)
	}

	// hub-2 may not relay hub-0's records.
	if err := b.Apply("hub-2", raw); err == nil || !strings.Contains(err.Error(), `replica "hub-0"`) {
		t.Errorf("a batch carrying another replica's records: %v", err)
	}
	if err := b.Apply("hub-0", raw[:len(raw)/2]); err == nil || !strings.Contains(err.Error(), "fleetstatus: batch") {
		t.Errorf("a torn batch: %v", err)
	}

	// A spoke connects to hub-0: that alone is a batch.
	spokes.list = []debugdoc.Spoke{{Cluster: "c1", Version: "v1", ConnectedAt: t0, LastSeen: t0, Healthy: true, Streams: 1}}
	spokes.changed <- struct{}{}
	waitChanged(t, a)
	raw, ok = take(t, a)
	if !ok {
		t.Fatal("no changes after a spoke connected")
	}
	if err := b.Apply("hub-0", raw); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	if got := b.Spokes(now); len(got) != 1 || !got[0].Healthy || !slices.Equal(got[0].Hubs, []string{"hub-0"}) || !got[0].LastSeen.Equal(now) {
		t.Fatalf("hub-1 sees spokes %+v", got)
	}

	// A replica that (re)connects gets everything at once.
	c := New(Options{Self: "hub-2", Proxies: xdsstatus.NewTracker("hub-2", clk, nil)})
	full := a.Full()
	if full == nil {
		t.Fatal("no full batch")
	}
	if err := c.Apply("hub-0", full); err != nil {
		t.Fatal(err)
	}
	if got := names(c.All()); !slices.Equal(got, []string{"hub-0/a-0.demo"}) {
		t.Fatalf("hub-2 sees %v after the full batch", got)
	}
	if got := c.Spokes(now); len(got) != 1 || got[0].Cluster != "c1" {
		t.Fatalf("hub-2 sees spokes %+v after the full batch", got)
	}

	// The proxy disconnects: gone everywhere.
	stream.Close()
	waitChanged(t, a)
	if raw, ok = take(t, a); !ok {
		t.Fatal("no changes after the proxy left")
	}
	if err := b.Apply("hub-0", raw); err != nil {
		t.Fatal(err)
	}
	if got := a.All(); len(got) != 0 {
		t.Errorf("hub-0 still sees %v", names(got))
	}
	if got := b.All(); len(got) != 0 {
		t.Errorf("hub-1 still sees %v", names(got))
	}

	// hub-0 leaves: hub-2 forgets its proxies and spokes.
	c.DropReplica("hub-0")
	if got := c.All(); len(got) != 0 {
		t.Errorf("hub-2 still sees %v after hub-0 left", names(got))
	}
	if got := c.Spokes(now); len(got) != 0 {
		t.Errorf("hub-2 still sees spokes %+v after hub-0 left", got)
	}
}

// waitChanged waits for f's change signal.
func waitChanged(t *testing.T, f *Fleet) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // never block: with a change pending, select may still pick ctx, and Eventually asks again
		if !f.WaitChanged(ctx) {
			return errors.New("no change signalled")
		}
		return nil
	})
}
