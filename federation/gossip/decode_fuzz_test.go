package gossip

import (
	"encoding/json"
	"testing"

	"github.com/meshfed/meshfed/federation"
)

// FuzzDecodeGossipState: whatever a peer sends on push/pull, decoding it
// never panics, and a state it accepts is of this version and names its
// sender.
func FuzzDecodeGossipState(f *testing.F) {
	good, err := json.Marshal(gossipState{V: stateVersion, From: "hub-1", Digest: federation.Digest{"c1": {Term: 2, Owner: "hub-1"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"v":2,"from":"hub-1"}`))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"from":"x","digest":{"c1":null}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeGossipState(data)
		if err == nil && (s.V != stateVersion || s.From == "") {
			t.Fatalf("accepted %+v", s)
		}
	})
}

// FuzzDecodeNodeMeta: whatever a member publishes as its node metadata,
// decoding it never panics, and what it accepts has a version.
func FuzzDecodeNodeMeta(f *testing.F) {
	f.Add([]byte(`{"peer":"10.0.0.1:15020","build":"v1","v":1}`))
	f.Add([]byte(`{"peer":"x"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := decodeNodeMeta(data); err == nil && m.V < 1 {
			t.Fatalf("accepted %+v", m)
		}
	})
}
