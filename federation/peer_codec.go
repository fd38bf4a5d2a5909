package federation

// The protobuf encoding of PeerMessage (federation/peerpb). Conversion is
// pure; the transport marshals a broadcast once for every peer.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"
	"unique"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/peerpb"
	"github.com/meshfed/meshfed/pkg/model"
)

// EncodePeerMessage validates m and returns its wire encoding.
func EncodePeerMessage(m *PeerMessage) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	data, err := proto.Marshal(toProto(m))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedMessage, err)
	}
	return data, nil
}

// DecodePeerMessage decodes and validates one frame. Errors wrap
// ErrMalformedMessage, and also ErrUndecodable when data is not the
// protobuf of a PeerMessage at all.
func DecodePeerMessage(data []byte) (*PeerMessage, error) {
	var p peerpb.PeerMessage
	if err := proto.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrMalformedMessage, ErrUndecodable, err)
	}
	m, err := fromProto(&p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrMalformedMessage, ErrUndecodable, err)
	}
	if !m.trustSet() {
		m.Trust = nil
	}
	if !m.proxiesSet() {
		m.ProxyStatus = nil
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

func toProto(m *PeerMessage) *peerpb.PeerMessage {
	out := &peerpb.PeerMessage{}
	switch {
	case m.Hello != nil:
		h := &peerpb.Hello{Replica: string(m.Hello.Replica), Protocol: int32(m.Hello.Protocol)}
		if len(m.Hello.Digest) > 0 {
			h.Digest = make(map[string]*peerpb.Version, len(m.Hello.Digest))
			for c, v := range m.Hello.Digest {
				h.Digest[string(c)] = versionToProto(v)
			}
		}
		out.Body = &peerpb.PeerMessage_Hello{Hello: h}
	case m.Snapshot != nil:
		s := m.Snapshot
		ps := &peerpb.ClusterSnapshot{Cluster: string(s.Cluster), Version: versionToProto(s.Version),
			Shards: make([]*peerpb.Shard, 0, len(s.Shards)), SentUnixNano: UnixNano(s.Sent)}
		for _, sh := range s.Shards {
			ps.Shards = append(ps.Shards, shardToProto(s.Cluster, sh))
		}
		out.Body = &peerpb.PeerMessage_Snapshot{Snapshot: ps}
	case m.Delta != nil:
		d := m.Delta
		out.Body = &peerpb.PeerMessage_Delta{Delta: &peerpb.ShardDelta{
			Cluster: string(d.Cluster), Version: versionToProto(d.Version), Hostname: string(d.Hostname),
			Shard: shardToProto(d.Cluster, d.Shard), SentUnixNano: UnixNano(d.Sent),
		}}
	case len(m.Resync) > 0:
		r := &peerpb.Resync{Clusters: make([]string, len(m.Resync))}
		for i, c := range m.Resync {
			r.Clusters[i] = string(c)
		}
		out.Body = &peerpb.PeerMessage_Resync{Resync: r}
	case m.Superseded != nil:
		out.Body = &peerpb.PeerMessage_Superseded{Superseded: &peerpb.ClusterTombstone{
			Cluster: string(m.Superseded.Cluster), Version: versionToProto(m.Superseded.Version),
		}}
	case m.proxiesSet():
		out.Body = &peerpb.PeerMessage_ProxyStatus{ProxyStatus: m.ProxyStatus}
	case m.trustSet():
		out.Body = &peerpb.PeerMessage_Trust{Trust: m.Trust}
	}
	return out
}

// fromProto converts a decoded frame. Strings repeated across endpoints
// and frames (cluster IDs, localities, service accounts, port names) and
// label sets are interned, so that the replicated state holds one copy of each. Shapes
// that cannot be represented (an address of neither 4 nor 16 bytes) are
// errors; everything else is left to Validate.
func fromProto(p *peerpb.PeerMessage) (*PeerMessage, error) {
	out := &PeerMessage{}
	switch b := p.Body.(type) {
	case *peerpb.PeerMessage_Hello:
		h := &Hello{Replica: ReplicaID(b.Hello.GetReplica()), Protocol: int(b.Hello.GetProtocol())}
		if len(b.Hello.GetDigest()) > 0 {
			h.Digest = make(Digest, len(b.Hello.GetDigest()))
			for c, v := range b.Hello.GetDigest() {
				h.Digest[model.ClusterID(intern(c))] = versionFromProto(v)
			}
		}
		out.Hello = h
	case *peerpb.PeerMessage_Snapshot:
		s := b.Snapshot
		c := model.ClusterID(intern(s.GetCluster()))
		snap := &ClusterSnapshot{Cluster: c, Version: versionFromProto(s.GetVersion()),
			Shards: make(map[model.Hostname]*model.ServiceShard, len(s.GetShards())), Sent: FromUnixNano(s.GetSentUnixNano())}
		for i, ps := range s.GetShards() {
			sh, err := shardFromProto(c, ps)
			if err != nil {
				return nil, fmt.Errorf("snapshot of %s: shard %d: %w", c, i, err)
			}
			if sh.Service == nil {
				return nil, fmt.Errorf("snapshot of %s: shard %d has no service", c, i)
			}
			if _, dup := snap.Shards[sh.Service.Hostname]; dup {
				return nil, fmt.Errorf("snapshot of %s: hostname %s twice", c, sh.Service.Hostname)
			}
			snap.Shards[sh.Service.Hostname] = sh
		}
		out.Snapshot = snap
	case *peerpb.PeerMessage_Delta:
		d := b.Delta
		c := model.ClusterID(intern(d.GetCluster()))
		delta := &ShardDelta{Cluster: c, Version: versionFromProto(d.GetVersion()),
			Hostname: model.Hostname(d.GetHostname()), Sent: FromUnixNano(d.GetSentUnixNano())}
		if d.GetShard() != nil {
			sh, err := shardFromProto(c, d.GetShard())
			if err != nil {
				return nil, fmt.Errorf("delta of %s: %w", c, err)
			}
			delta.Shard = sh
		}
		out.Delta = delta
	case *peerpb.PeerMessage_Resync:
		for _, c := range b.Resync.GetClusters() {
			out.Resync = append(out.Resync, model.ClusterID(c))
		}
	case *peerpb.PeerMessage_Superseded:
		out.Superseded = &ClusterTombstone{
			Cluster: model.ClusterID(b.Superseded.GetCluster()), Version: versionFromProto(b.Superseded.GetVersion()),
		}
	case *peerpb.PeerMessage_Trust:
		out.Trust = b.Trust
	case *peerpb.PeerMessage_ProxyStatus:
		out.ProxyStatus = b.ProxyStatus
	}
	return out, nil
}

func versionToProto(v Version) *peerpb.Version {
	return &peerpb.Version{Term: v.Term, Seq: v.Seq, Owner: string(v.Owner)}
}

func versionFromProto(v *peerpb.Version) Version {
	return Version{Term: v.GetTerm(), Seq: v.GetSeq(), Owner: ReplicaID(intern(v.GetOwner()))}
}

// shardToProto encodes a shard of cluster c; endpoints of c leave their
// cluster out, and the target ports' names are written once per shard. A
// nil shard is nil (a deletion).
func shardToProto(c model.ClusterID, s *model.ServiceShard) *peerpb.Shard {
	if s == nil {
		return nil
	}
	out := &peerpb.Shard{Endpoints: make([]*peerpb.Endpoint, len(s.Endpoints))}
	if svc := s.Service; svc != nil {
		ps := &peerpb.Service{Hostname: string(svc.Hostname), Name: svc.Name, Namespace: svc.Namespace,
			Ports: make([]*peerpb.ServicePort, len(svc.Ports))}
		for i, p := range svc.Ports {
			ps.Ports[i] = &peerpb.ServicePort{Name: p.Name, Port: p.Port, Protocol: string(p.Protocol)}
		}
		out.Service = ps
	}
	out.PortNames = portNames(s)
	out.Network = string(s.Network)
	if gw := s.Gateway; gw != nil {
		pg := &peerpb.NetworkGateway{Network: string(gw.Network), Port: gw.Port, Problem: gw.Problem,
			Addresses: make([][]byte, len(gw.Addresses))}
		for i, a := range gw.Addresses {
			pg.Addresses[i] = a.AsSlice()
		}
		out.Gateway = pg
	}
	// One allocation for every endpoint of the shard, one for every target
	// port.
	eps := make([]peerpb.Endpoint, len(s.Endpoints))
	ports := make([]uint32, len(s.Endpoints)*len(out.PortNames))
	var sets labelSets
	for i := range s.Endpoints {
		e, pe := &s.Endpoints[i], &eps[i]
		if e.Cluster != c {
			pe.Cluster = string(e.Cluster)
		}
		if e.Address.IsValid() {
			pe.Address = e.Address.AsSlice()
		}
		pe.Region, pe.Zone, pe.SubZone = e.Locality.Region, e.Locality.Zone, e.Locality.SubZone
		pe.Ready, pe.ServiceAccount, pe.Pod = e.Ready, e.ServiceAccount, e.Pod
		if e.Network != s.Network {
			pe.Network = string(e.Network)
		}
		pe.LabelSet = sets.ref(e.Labels)
		if len(e.Ports) > 0 {
			tp := ports[i*len(out.PortNames) : (i+1)*len(out.PortNames) : (i+1)*len(out.PortNames)]
			for j, name := range out.PortNames {
				tp[j] = e.Ports[name]
			}
			pe.TargetPorts = tp
		}
		out.Endpoints[i] = pe
	}
	out.LabelSets = sets.list
	return out
}

// labelSets numbers the distinct label sets of one shard's endpoints as
// they are written: Labels are interned, so the endpoints of a Deployment
// share one set and it goes on the wire once.
type labelSets struct {
	ids  map[model.Labels]uint32
	list []*peerpb.LabelSet
}

// ref returns the Endpoint.label_set of l: 0 for no labels, else 1 + its
// index in list.
func (ls *labelSets) ref(l model.Labels) uint32 {
	if l.IsZero() {
		return 0
	}
	if id, ok := ls.ids[l]; ok {
		return id
	}
	if ls.ids == nil {
		ls.ids = map[model.Labels]uint32{}
	}
	ls.list = append(ls.list, &peerpb.LabelSet{Labels: l.Map()})
	id := uint32(len(ls.list))
	ls.ids[l] = id
	return id
}

// portNames returns the names of the target ports of s's endpoints: the
// service's port names in order, then any other name an endpoint uses,
// sorted.
func portNames(s *model.ServiceShard) []string {
	var names []string
	known := map[string]bool{}
	if s.Service != nil {
		for _, p := range s.Service.Ports {
			if !known[p.Name] {
				known[p.Name] = true
				names = append(names, p.Name)
			}
		}
	}
	var extra []string
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		found := 0
		for _, name := range names {
			if _, ok := e.Ports[name]; ok {
				found++
			}
		}
		if found == len(e.Ports) {
			continue // the common case: no map iteration
		}
		for name := range e.Ports {
			if !known[name] {
				known[name] = true
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	return append(names, extra...)
}

func shardFromProto(c model.ClusterID, p *peerpb.Shard) (*model.ServiceShard, error) {
	out := &model.ServiceShard{Endpoints: make([]model.Endpoint, len(p.GetEndpoints()))}
	if ps := p.GetService(); ps != nil {
		svc := &model.Service{Hostname: model.Hostname(ps.GetHostname()), Name: ps.GetName(), Namespace: intern(ps.GetNamespace()),
			Ports: make([]model.ServicePort, len(ps.GetPorts()))}
		for i, pp := range ps.GetPorts() {
			svc.Ports[i] = model.ServicePort{Name: intern(pp.GetName()), Port: pp.GetPort(), Protocol: model.Protocol(intern(pp.GetProtocol()))}
		}
		out.Service = svc
	}
	out.Network = model.Network(intern(p.GetNetwork()))
	if pg := p.GetGateway(); pg != nil {
		if pg.GetNetwork() == "" || pg.GetPort() == 0 || pg.GetPort() > 65535 {
			return nil, fmt.Errorf("gateway of network %q on port %d: a gateway needs a network and a port in 1..65535", pg.GetNetwork(), pg.GetPort())
		}
		gw := &model.NetworkGateway{Network: model.Network(intern(pg.GetNetwork())), Port: pg.GetPort(), Problem: pg.GetProblem()}
		for i, a := range pg.GetAddresses() {
			addr, ok := netip.AddrFromSlice(a)
			if !ok {
				return nil, fmt.Errorf("gateway address %d: %d bytes", i, len(a))
			}
			gw.Addresses = append(gw.Addresses, addr)
		}
		out.Gateway = gw
	}
	names := p.GetPortNames()
	for i, name := range names {
		names[i] = intern(name)
	}
	ports := portMaps{names: names}
	// Each label set is interned once, however many endpoints refer to it.
	sets := make([]model.Labels, len(p.GetLabelSets()))
	for i, ls := range p.GetLabelSets() {
		sets[i] = model.NewLabels(ls.GetLabels())
	}
	for i, pe := range p.GetEndpoints() {
		e := &out.Endpoints[i]
		e.Cluster = c
		if pe.GetCluster() != "" {
			e.Cluster = model.ClusterID(intern(pe.GetCluster()))
		}
		if a := pe.GetAddress(); len(a) > 0 {
			addr, ok := netip.AddrFromSlice(a)
			if !ok {
				return nil, fmt.Errorf("endpoint %d: address of %d bytes", i, len(a))
			}
			e.Address = addr
		}
		e.Locality = model.Locality{Region: intern(pe.GetRegion()), Zone: intern(pe.GetZone()), SubZone: intern(pe.GetSubZone())}
		e.Ready, e.ServiceAccount, e.Pod = pe.GetReady(), intern(pe.GetServiceAccount()), pe.GetPod()
		e.Network = out.Network
		if n := pe.GetNetwork(); n != "" {
			e.Network = model.Network(intern(n))
		}
		if ref := pe.GetLabelSet(); ref != 0 {
			if int(ref) > len(sets) {
				return nil, fmt.Errorf("endpoint %d: label set %d of %d", i, ref, len(sets))
			}
			e.Labels = sets[ref-1]
		}
		if tp := pe.GetTargetPorts(); len(tp) > 0 {
			if len(tp) != len(names) {
				return nil, fmt.Errorf("endpoint %d: %d target ports for %d port names", i, len(tp), len(names))
			}
			e.Ports = ports.get(tp)
		}
	}
	return out, nil
}

// portMaps builds the Ports maps of one shard's endpoints. Endpoints with
// the same target ports share one map (shards are immutable once built),
// so a receiving replica holds one map per distinct set of target ports,
// not one per endpoint.
type portMaps struct {
	names []string
	seen  map[string]map[string]uint32
}

func (pm *portMaps) get(tp []uint32) map[string]uint32 {
	key := make([]byte, 0, 4*len(tp))
	for _, p := range tp {
		key = binary.LittleEndian.AppendUint32(key, p)
	}
	if m, ok := pm.seen[string(key)]; ok {
		return m
	}
	m := make(map[string]uint32, len(tp))
	for j, p := range tp {
		if p != 0 {
			m[pm.names[j]] = p
		}
	}
	if pm.seen == nil {
		pm.seen = map[string]map[string]uint32{}
	}
	pm.seen[string(key)] = m
	return m
}

// intern returns the canonical copy of s.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// UnixNano is how the peer wire writes a time: Unix nanoseconds, 0 for
// the zero time. Owners of opaque payloads (fleet status) use it too.
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnixNano reads a time written by UnixNano.
func FromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
