package federation_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/peerpb"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

var (
	labelsV1 = map[string]string{"app": "echo", "version": "v1"}
	labelsV2 = map[string]string{"app": "echo", "version": "v2", "track": "canary"}
)

// labelledShard is echo's shard in cluster-1: two endpoints of Deployment
// v1, one of v2 and one without a Pod.
func labelledShard() *model.ServiceShard {
	ep := func(last byte, labels map[string]string) model.Endpoint {
		e := model.Endpoint{Cluster: "cluster-1", Address: netip.AddrFrom4([4]byte{10, 0, 0, last}), Ready: true,
			Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Ports: map[string]uint32{"grpc": 18080}}
		if labels != nil {
			e.Pod, e.ServiceAccount = "echo-"+string('0'+rune(last)), "echo"
			e.Labels = model.NewLabels(labels)
		}
		return e
	}
	return &model.ServiceShard{
		Service: &model.Service{Hostname: "echo.demo.svc.cluster.local", Name: "echo", Namespace: "demo",
			Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}},
		Endpoints: []model.Endpoint{ep(1, labelsV1), ep(2, labelsV1), ep(3, labelsV2), ep(4, nil)},
	}
}

// TestCodecRoundTripsLabels: endpoint labels survive a snapshot and a delta,
// decode interned (equal to, and sharing storage with, the receiver's own
// sets), and each distinct set is written once per shard.
func TestCodecRoundTripsLabels(t *testing.T) {
	sh := labelledShard()
	ver := federation.Version{Term: 3, Seq: 9, Owner: "hub-0"}
	sent := time.Unix(1_750_000_000, 0)
	msgs := []*federation.PeerMessage{
		{Snapshot: &federation.ClusterSnapshot{Cluster: "cluster-1", Version: ver, Sent: sent,
			Shards: map[model.Hostname]*model.ServiceShard{sh.Service.Hostname: sh}}},
		{Delta: &federation.ShardDelta{Cluster: "cluster-1", Version: ver, Hostname: sh.Service.Hostname, Shard: sh, Sent: sent}},
	}
	for _, m := range msgs {
		data, err := federation.EncodePeerMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		var wire peerpb.PeerMessage
		if err := proto.Unmarshal(data, &wire); err != nil {
			t.Fatal(err)
		}
		ps := wire.GetDelta().GetShard()
		if s := wire.GetSnapshot(); s != nil {
			ps = s.GetShards()[0]
		}
		if n := len(ps.GetLabelSets()); n != 2 {
			t.Errorf("%d label sets on the wire for 2 distinct sets", n)
		}
		got, err := federation.DecodePeerMessage(data)
		if err != nil {
			t.Fatal(err)
		}
		var back *model.ServiceShard
		if got.Snapshot != nil {
			back = got.Snapshot.Shards[sh.Service.Hostname]
		} else {
			back = got.Delta.Shard
		}
		if !back.Equal(sh) {
			t.Fatalf("round trip changed the shard:\n got %+v\nwant %+v", back.Endpoints, sh.Endpoints)
		}
		a, _ := back.Endpoints[0].Labels.Get("version")
		b, _ := model.NewLabels(labelsV1).Get("version")
		if unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("decoded labels are not interned")
		}
		if !back.Endpoints[3].Labels.IsZero() {
			t.Errorf("endpoint without a Pod decoded with labels %v", back.Endpoints[3].Labels)
		}
	}
}

// TestCodecLabelsWire pins the wire form of labelled endpoints (protojson of
// the frame, re-indented).
func TestCodecLabelsWire(t *testing.T) {
	sh := labelledShard()
	data, err := federation.EncodePeerMessage(&federation.PeerMessage{Delta: &federation.ShardDelta{
		Cluster: "cluster-1", Version: federation.Version{Term: 3, Seq: 9, Owner: "hub-0"},
		Hostname: sh.Service.Hostname, Shard: sh, Sent: time.Unix(1_750_000_000, 0),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wire peerpb.PeerMessage
	if err := proto.Unmarshal(data, &wire); err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(&wire)
	if err != nil {
		t.Fatal(err)
	}
	// protojson's whitespace is randomized on purpose; json.Indent of the
	// compacted form is stable, and protojson writes map keys sorted.
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, js); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	testutil.Golden(t, "testdata/codec/labels-delta.json", out.Bytes())
}

// TestCodecWithoutLabels: a frame of a replica that predates labels (no
// label fields) decodes to endpoints without labels, and a reference past
// the shard's label sets is malformed.
func TestCodecWithoutLabels(t *testing.T) {
	old := &peerpb.PeerMessage{Body: &peerpb.PeerMessage_Delta{Delta: &peerpb.ShardDelta{
		Cluster: "cluster-1", Version: &peerpb.Version{Term: 1, Seq: 1, Owner: "hub-0"}, Hostname: "echo.demo.svc.cluster.local",
		Shard: &peerpb.Shard{
			Service:   &peerpb.Service{Hostname: "echo.demo.svc.cluster.local", Name: "echo", Namespace: "demo"},
			Endpoints: []*peerpb.Endpoint{{Address: []byte{10, 0, 0, 1}, Ready: true, Pod: "echo-0"}},
		},
	}}}
	data, err := proto.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	m, err := federation.DecodePeerMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	if l := m.Delta.Shard.Endpoints[0].Labels; !l.IsZero() {
		t.Errorf("labels %v from a frame without any", l)
	}

	old.GetDelta().GetShard().Endpoints[0].LabelSet = 1
	data, _ = proto.Marshal(old)
	_, err = federation.DecodePeerMessage(data)
	if !errors.Is(err, federation.ErrMalformedMessage) || !strings.Contains(err.Error(), "label set 1 of 0") {
		t.Errorf("dangling label set: err = %v", err)
	}
}

// TestCodecRoundTripsNetworks: a shard's network, the network of a Pod
// that says another, and a gateway's addresses and problem survive the
// wire; the shard's network is written once, not per endpoint.
func TestCodecRoundTripsNetworks(t *testing.T) {
	sh := labelledShard()
	sh.Network = "network-1"
	for i := range sh.Endpoints {
		sh.Endpoints[i].Network = "network-1"
	}
	sh.Endpoints[2].Network = "network-2"
	sh.Gateway = &model.NetworkGateway{Network: "network-1", Port: 15443,
		Addresses: []netip.Addr{netip.MustParseAddr("198.19.0.10"), netip.MustParseAddr("2001:db8::1")}}
	problem := labelledShard()
	problem.Gateway = &model.NetworkGateway{Network: "network-3", Port: 15443, Problem: "no address"}
	for _, s := range []*model.ServiceShard{sh, problem} {
		m := &federation.PeerMessage{Delta: &federation.ShardDelta{Cluster: "cluster-1",
			Version: federation.Version{Term: 1, Seq: 1, Owner: "hub-0"}, Hostname: s.Service.Hostname, Shard: s}}
		data, err := federation.EncodePeerMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := federation.DecodePeerMessage(data)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Delta.Shard.Equal(s) {
			t.Errorf("round trip changed the shard:\n got %+v\nwant %+v", got.Delta.Shard, s)
		}
		if n := bytes.Count(data, []byte("network-1")); s == sh && n != 2 {
			t.Errorf("network-1 is on the wire %d times, want 2 (the shard's and the gateway's)", n)
		}
	}
}
