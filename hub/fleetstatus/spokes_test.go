package fleetstatus

import (
	"slices"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

func TestMergeSpokes(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0).UTC()
	now := t0.Add(time.Hour)
	got := mergeSpokes(map[string][]debugdoc.Spoke{
		"hub-1": {
			{Cluster: "c1", Version: "v2", ConnectedAt: t0.Add(2 * time.Minute), Streams: 1, BundleVersion: "b2"},
			{Cluster: "c2", Version: "v1", ConnectedAt: t0, LastSeen: t0.Add(5 * time.Minute)},
		},
		"hub-0": {
			{Cluster: "c1", Version: "v1", ConnectedAt: t0, Streams: 1, BundleVersion: "b1"},
			{Cluster: "c2", Version: "v0", ConnectedAt: t0.Add(-time.Minute), LastSeen: t0.Add(9 * time.Minute)},
		},
	}, now)
	if len(got) != 2 || got[0].Cluster != "c1" || got[1].Cluster != "c2" {
		t.Fatalf("merged = %+v", got)
	}
	c1, c2 := got[0], got[1]
	// Two replicas hold a stream each (two spoke replicas): both listed;
	// the latest connection tells the version.
	if !c1.Healthy || c1.Streams != 2 || !slices.Equal(c1.Hubs, []string{"hub-0", "hub-1"}) ||
		c1.Version != "v2" || c1.BundleVersion != "b2" || !c1.LastSeen.Equal(now) {
		t.Errorf("c1 = %+v", c1)
	}
	// Nobody holds a stream: down, last seen by whoever saw it last.
	if c2.Healthy || c2.Streams != 0 || len(c2.Hubs) != 0 || c2.Version != "v1" || !c2.LastSeen.Equal(t0.Add(9*time.Minute)) {
		t.Errorf("c2 = %+v", c2)
	}
}

// The local list goes out when it changes, not when only time passes; a
// peer's list replaces what it said before and leaves with it.
func TestSpokeStatusReplication(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0).UTC()
	local := []debugdoc.Spoke{{Cluster: "c1", Version: "v1", ConnectedAt: t0, LastSeen: t0, Streams: 1, Healthy: true}}
	a := newSpokeStatus("hub-0", func() []debugdoc.Spoke { return slices.Clone(local) })
	if list, ok := a.take(); !ok || len(list) != 1 {
		t.Fatalf("first take = %v, %v", list, ok)
	}
	local[0].LastSeen = t0.Add(time.Minute) // healthy: LastSeen is "now" anyway
	if _, ok := a.take(); ok {
		t.Fatal("a healthy spoke's LastSeen alone made a change")
	}
	local[0].Streams, local[0].Healthy = 0, false
	list, ok := a.take()
	if !ok || list[0].Streams != 0 {
		t.Fatalf("a closed stream was not a change: %v, %v", list, ok)
	}

	// Through the wire form of a batch, to another replica.
	raw, err := batch{Spokes: &list}.encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeBatch(raw)
	if err != nil || b.Spokes == nil {
		t.Fatalf("batch round trip: %v, %v", b.Spokes, err)
	}
	peer := newSpokeStatus("hub-1", nil)
	peer.apply("hub-0", *b.Spokes)
	if got := peer.all(t0); len(got) != 1 || got[0].Healthy || got[0].Version != "v1" {
		t.Fatalf("hub-1 sees %+v", got)
	}
	peer.apply("hub-0", []debugdoc.Spoke{{Cluster: "c1", Version: "v1", ConnectedAt: t0, Streams: 1}})
	if got := peer.all(t0); !got[0].Healthy || !slices.Equal(got[0].Hubs, []string{"hub-0"}) {
		t.Fatalf("hub-1 sees %+v after the spoke reconnected", got)
	}
	peer.drop("hub-0")
	if got := peer.all(t0); len(got) != 0 {
		t.Fatalf("hub-1 still sees %+v after hub-0 left", got)
	}
}
