package fleetstatus

import (
	"reflect"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// FuzzDecodeBatch feeds arbitrary bytes to the decoder of a peer's batch:
// no panic, and an accepted batch survives a round trip unchanged.
func FuzzDecodeBatch(f *testing.F) {
	t0 := time.Unix(1_750_000_000, 0)
	spokes := []debugdoc.Spoke{{Cluster: "c1", Version: "v1", ConnectedAt: t0, LastSeen: t0, Healthy: true, Streams: 2, Hubs: []string{"hub-0"}}}
	for _, b := range []batch{
		{Full: true, Changed: []proxystatus.Record{{Proxy: "sidecar~10.0.0.1~a.demo~demo.svc.cluster.local", Name: "a.demo", Cluster: "c1",
			Replica: "hub-0", HubVersion: "v0.1.0", Connected: t0, LastChange: t0, Version: "1.28", Namespace: "demo", Locality: "us-east/us-east-1a/",
			Types: map[string]proxystatus.TypeStatus{"CDS": {TypeURL: "type.googleapis.com/envoy.config.cluster.v3.Cluster",
				Sent: "3", SentNonce: "n3", Acked: "2", AckedNonce: "n2", Nack: "bad", NackVersion: "3",
				Status: proxystatus.StatusError, SentAt: t0, AckedAt: t0, AckedEpoch: 4, NackEpoch: 5}}}}, Spokes: &spokes,
			Ledger: &proxystatus.ConfigLedger{Epoch: 5, Pending: 6, Objects: []proxystatus.ConfigObject{
				{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: 3, Epoch: 5},
				{Kind: "VirtualService", Namespace: "demo", Name: "old", Generation: 1, Epoch: 2, Deleted: true}}}},
		{Removed: []string{"sidecar~10.0.0.2~b.demo~demo.svc.cluster.local"}},
	} {
		raw, err := b.encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeBatch(data)
		if err != nil {
			return
		}
		again, err := b.encode()
		if err != nil {
			t.Fatalf("a decoded batch does not encode: %v", err)
		}
		back, err := decodeBatch(again)
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if !reflect.DeepEqual(b, back) {
			t.Fatalf("round trip changed the batch:\n%+v\n%+v", b, back)
		}
	})
}
