package fleetstatus

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/fleetstatus/fleetpb"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// batch is the fleet status one replica sends the others
// (federation.PeerMessage.ProxyStatus): its own records only. On the wire
// it is a fleetpb.Batch.
type batch struct {
	// Full replaces everything known of the sender (sent on connect).
	Full    bool
	Changed []proxystatus.Record
	// Removed are the node IDs of the sender's proxies that are gone.
	Removed []string
	// Spokes, when present, replaces the sender's spoke list (always in a
	// full batch; in others only when it changed).
	Spokes *[]debugdoc.Spoke
	// Ledger, when present, replaces the sender's config ledger (always
	// in a full batch when it has one; in others only when it changed).
	Ledger *proxystatus.ConfigLedger
}

// encode returns b's wire form.
func (b batch) encode() ([]byte, error) {
	p := &fleetpb.Batch{Full: b.Full, Removed: b.Removed, Changed: make([]*fleetpb.Record, len(b.Changed))}
	for i, r := range b.Changed {
		p.Changed[i] = recordToProto(r)
	}
	if b.Spokes != nil {
		p.Spokes = &fleetpb.Spokes{Spokes: make([]*fleetpb.Spoke, len(*b.Spokes))}
		for i, s := range *b.Spokes {
			p.Spokes.Spokes[i] = &fleetpb.Spoke{
				Cluster: string(s.Cluster), Version: s.Version, Identity: s.Identity,
				ConnectedAtUnixNano: federation.UnixNano(s.ConnectedAt), LastSeenUnixNano: federation.UnixNano(s.LastSeen),
				Healthy: s.Healthy, Streams: int32(s.Streams), BundleVersion: s.BundleVersion, Hubs: s.Hubs,
			}
		}
	}
	if l := b.Ledger; l != nil {
		p.Ledger = &fleetpb.Ledger{Epoch: l.Epoch, Pending: l.Pending, Objects: make([]*fleetpb.ConfigObject, len(l.Objects))}
		for i, o := range l.Objects {
			p.Ledger.Objects[i] = &fleetpb.ConfigObject{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
				Generation: o.Generation, Epoch: o.Epoch, Deleted: o.Deleted}
		}
	}
	return proto.Marshal(p)
}

// decodeBatch reads a batch's wire form.
func decodeBatch(data []byte) (batch, error) {
	var p fleetpb.Batch
	if err := proto.Unmarshal(data, &p); err != nil {
		return batch{}, err
	}
	b := batch{Full: p.GetFull(), Removed: p.GetRemoved(), Changed: make([]proxystatus.Record, len(p.GetChanged()))}
	for i, r := range p.GetChanged() {
		rec, err := recordFromProto(r)
		if err != nil {
			return batch{}, fmt.Errorf("record %d: %w", i, err)
		}
		b.Changed[i] = rec
	}
	if ps := p.GetSpokes(); ps != nil {
		spokes := make([]debugdoc.Spoke, len(ps.GetSpokes()))
		for i, s := range ps.GetSpokes() {
			spokes[i] = debugdoc.Spoke{
				Cluster: model.ClusterID(s.GetCluster()), Version: s.GetVersion(), Identity: s.GetIdentity(),
				ConnectedAt: federation.FromUnixNano(s.GetConnectedAtUnixNano()), LastSeen: federation.FromUnixNano(s.GetLastSeenUnixNano()),
				Healthy: s.GetHealthy(), Streams: int(s.GetStreams()), BundleVersion: s.GetBundleVersion(), Hubs: s.GetHubs(),
			}
		}
		b.Spokes = &spokes
	}
	if pl := p.GetLedger(); pl != nil {
		l := &proxystatus.ConfigLedger{Epoch: pl.GetEpoch(), Pending: pl.GetPending(), Objects: make([]proxystatus.ConfigObject, len(pl.GetObjects()))}
		for i, o := range pl.GetObjects() {
			l.Objects[i] = proxystatus.ConfigObject{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(),
				Generation: o.GetGeneration(), Epoch: o.GetEpoch(), Deleted: o.GetDeleted()}
		}
		// A ledger's objects are sorted (ConfigLedger): a sender's
		// order is not trusted.
		proxystatus.SortConfigObjects(l.Objects)
		b.Ledger = l
	}
	return b, nil
}

func recordToProto(r proxystatus.Record) *fleetpb.Record {
	p := &fleetpb.Record{Proxy: r.Proxy, Name: r.Name, Cluster: r.Cluster, Replica: r.Replica, Version: r.Version,
		Namespace: r.Namespace, Locality: r.Locality, HubVersion: r.HubVersion, Network: r.Network, Identity: r.Identity,
		ConnectedUnixNano: federation.UnixNano(r.Connected), LastChangeUnixNano: federation.UnixNano(r.LastChange)}
	for _, short := range slices.Sorted(maps.Keys(r.Types)) {
		ts := r.Types[short]
		p.Types = append(p.Types, &fleetpb.TypeStatus{
			Short: short, TypeUrl: ts.TypeURL, Sent: ts.Sent, SentNonce: ts.SentNonce,
			Acked: ts.Acked, AckedNonce: ts.AckedNonce, Nack: ts.Nack, NackVersion: ts.NackVersion,
			Status: string(ts.Status), SentAtUnixNano: federation.UnixNano(ts.SentAt), AckedAtUnixNano: federation.UnixNano(ts.AckedAt),
			AckedEpoch: ts.AckedEpoch, NackEpoch: ts.NackEpoch,
		})
	}
	return p
}

func recordFromProto(p *fleetpb.Record) (proxystatus.Record, error) {
	r := proxystatus.Record{Proxy: p.GetProxy(), Name: p.GetName(), Cluster: p.GetCluster(), Replica: p.GetReplica(),
		Version: p.GetVersion(), Namespace: p.GetNamespace(), Locality: p.GetLocality(), HubVersion: p.GetHubVersion(), Network: p.GetNetwork(), Identity: p.GetIdentity(), Connected: federation.FromUnixNano(p.GetConnectedUnixNano()), LastChange: federation.FromUnixNano(p.GetLastChangeUnixNano())}
	if len(p.GetTypes()) > 0 {
		r.Types = make(map[string]proxystatus.TypeStatus, len(p.GetTypes()))
	}
	for _, t := range p.GetTypes() {
		if _, dup := r.Types[t.GetShort()]; dup {
			return proxystatus.Record{}, fmt.Errorf("proxy %s: type %q twice", r.Proxy, t.GetShort())
		}
		r.Types[t.GetShort()] = proxystatus.TypeStatus{
			TypeURL: t.GetTypeUrl(), Sent: t.GetSent(), SentNonce: t.GetSentNonce(),
			Acked: t.GetAcked(), AckedNonce: t.GetAckedNonce(), Nack: t.GetNack(), NackVersion: t.GetNackVersion(),
			Status: proxystatus.Status(t.GetStatus()), SentAt: federation.FromUnixNano(t.GetSentAtUnixNano()), AckedAt: federation.FromUnixNano(t.GetAckedAtUnixNano()),
			AckedEpoch: t.GetAckedEpoch(), NackEpoch: t.GetNackEpoch(),
		}
	}
	return r, nil
}
