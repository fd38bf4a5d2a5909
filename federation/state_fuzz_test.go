package federation

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
)

// FuzzApplyFromWire: whatever a peer sends, decoded as the peer stream
// decodes it and applied to a State that holds a cluster already, is
// applied or refused with one of the State's errors, and never leaves the
// registry unreadable.
func FuzzApplyFromWire(f *testing.F) {
	const c = model.ClusterID("c1")
	h := model.Hostname("echo.demo.svc.cluster.local")
	shard := func(addr string) *model.ServiceShard {
		return &model.ServiceShard{
			Service: &model.Service{Hostname: h, Name: "echo", Namespace: "demo",
				Ports: []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}}},
			Endpoints: []model.Endpoint{{Cluster: c, Address: netip.MustParseAddr(addr), Ready: true,
				Ports: map[string]uint32{"grpc": 9000}}},
		}
	}
	base := ClusterSnapshot{Cluster: c, Version: Version{Term: 2, Owner: "a"},
		Shards: map[model.Hostname]*model.ServiceShard{h: shard("10.0.0.1")}, Sent: time.Unix(1, 0)}
	for _, m := range []*PeerMessage{
		{Snapshot: &ClusterSnapshot{Cluster: c, Version: Version{Term: 3, Owner: "b"},
			Shards: map[model.Hostname]*model.ServiceShard{h: shard("10.0.0.2")}, Sent: time.Unix(2, 0)}},
		{Delta: &ShardDelta{Cluster: c, Version: Version{Term: 2, Seq: 1, Owner: "a"}, Hostname: h, Shard: shard("10.0.0.3")}},
		{Delta: &ShardDelta{Cluster: c, Version: Version{Term: 2, Seq: 1, Owner: "a"}, Hostname: h}},
		{Delta: &ShardDelta{Cluster: c, Version: Version{Term: 2, Seq: 1, Owner: "a"}, Hostname: h, Shard: func() *model.ServiceShard {
			s := shard("10.0.0.4")
			s.Network, s.Endpoints[0].Network = "n1", "n2"
			s.Gateway = &model.NetworkGateway{Network: "n1", Port: model.DefaultGatewayPort, Addresses: []netip.Addr{netip.MustParseAddr("198.19.0.1")}}
			return s
		}()}},
	} {
		data, err := EncodePeerMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodePeerMessage(data)
		if err != nil {
			return
		}
		reg := model.NewRegistry()
		s := NewState(reg)
		if _, err := s.ApplySnapshot(base); err != nil {
			t.Fatal(err)
		}
		known := func(err error) bool {
			for _, e := range []error{ErrStale, ErrDuplicate, ErrGap, ErrRemoved, ErrInvalid} {
				if errors.Is(err, e) {
					return true
				}
			}
			return false
		}
		if m.Snapshot != nil {
			if _, err := s.ApplySnapshot(*m.Snapshot); err != nil && !known(err) {
				t.Fatalf("snapshot refused with %v, not one of the State's errors", err)
			}
		}
		if m.Delta != nil {
			if _, err := s.ApplyDelta(*m.Delta); err != nil && !known(err) {
				t.Fatalf("delta refused with %v, not one of the State's errors", err)
			}
		}
		for _, name := range reg.Hostnames() {
			_ = reg.Service(name)
		}
		_ = reg.Clusters()
		_ = s.Digest()
		// A peer's networks and gateways are read as any other.
		for _, a := range reg.NetworkGateways().ByNetwork {
			for _, g := range a {
				if g.Port == 0 || g.Port > 65535 || !g.Address.IsValid() {
					t.Fatalf("a peer's gateway %+v got into the view", g)
				}
			}
		}
		_ = reg.ClusterNetwork(c)
	})
}
