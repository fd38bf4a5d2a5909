package replication

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/gossip"
	"github.com/meshfed/meshfed/federation/peerstream"
	"github.com/meshfed/meshfed/hub/store"
)

// members keeps ownership and the peer connections in line with the live
// gossip members, and sets aside as suspect a member whose peer stream
// broke or never came up (an earlier signal of failure than gossip's).
type members struct {
	self       federation.ReplicaID
	own        *Ownership
	store      *store.Store
	peers      *peerstream.Peers
	membership *gossip.Membership
	m          *metrics
	log        logr.Logger
	grace      time.Duration
	clock      clock.WithTicker
	// onDepart, if set, learns the members after each change (the fleet
	// status drops the records of replicas that left).
	onDepart func([]federation.ReplicaID)

	// unconnected holds, per member without a peer stream, since when
	// (only runConnectCheck's goroutine touches it).
	unconnected map[federation.ReplicaID]time.Time
}

// run follows membership changes until ctx ends.
func (ms *members) run(ctx context.Context) {
	ms.onMembers()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ms.membership.Changed():
			ms.onMembers()
		}
	}
}

// onMembers brings ownership and peer connections in line with the live
// members.
func (ms *members) onMembers() {
	all := ms.membership.Members()
	ids := make([]federation.ReplicaID, 0, len(all))
	peers := map[federation.ReplicaID]string{}
	for _, m := range all {
		ids = append(ids, m.ID)
		if m.ID != ms.self && m.PeerAddr != "" {
			peers[m.ID] = m.PeerAddr
		}
	}
	ms.peers.SetPeers(peers)
	ms.setMembers(ids)
	if ms.onDepart != nil {
		ms.onDepart(ids)
	}
}

func (ms *members) setMembers(ids []federation.ReplicaID) {
	clusters := slices.Collect(maps.Keys(ms.store.Digest()))
	moved := ms.own.setMembers(ids, clusters)
	ms.m.moves.Add(float64(moved))
	ms.m.members.Set(float64(len(ids)))
}

// runConnectCheck sets aside, every quarter of the grace, the members that
// have had no peer stream for the grace.
func (ms *members) runConnectCheck(ctx context.Context) {
	t := ms.clock.NewTicker(ms.grace / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			ms.checkUnconnected(ms.clock.Now())
		}
	}
}

// checkUnconnected suspects the live members without a peer stream since
// the grace before now. A suspect that connects is taken back by Hello.
func (ms *members) checkUnconnected(now time.Time) {
	connected := map[federation.ReplicaID]bool{}
	for _, id := range ms.peers.Connected() {
		connected[id] = true
	}
	live := map[federation.ReplicaID]bool{}
	changed := false
	for _, m := range ms.membership.Members() {
		id := m.ID
		live[id] = true
		if id == ms.self || connected[id] {
			delete(ms.unconnected, id)
			continue
		}
		since, ok := ms.unconnected[id]
		if !ok {
			ms.unconnected[id] = now
			continue
		}
		if now.Sub(since) >= ms.grace && ms.own.suspect(id, true) {
			ms.log.Info("no peer stream with a member; treating it as suspect", "peer", id, "since", since)
			changed = true
		}
	}
	for id := range ms.unconnected {
		if !live[id] {
			delete(ms.unconnected, id)
		}
	}
	if changed {
		ms.setMembers(ms.own.liveMembers())
	}
}

// peerDown sets a peer aside as suspect: its clusters move now rather than
// when gossip declares it dead.
func (ms *members) peerDown(id federation.ReplicaID) {
	ms.log.Info("peer stream broke; treating peer as suspect", "peer", id)
	if ms.own.suspect(id, true) {
		ms.setMembers(ms.own.liveMembers())
	}
}

// Hello implements peerstream.KindHandler (registered for no kind): a
// suspect whose stream is back is taken back.
func (ms *members) Hello(from federation.ReplicaID, _ *federation.Hello) []*federation.PeerMessage {
	if ms.own.suspect(from, false) {
		ms.setMembers(ms.own.liveMembers())
	}
	return nil
}

// Receive implements peerstream.KindHandler; members handles no kind.
func (ms *members) Receive(federation.ReplicaID, *federation.PeerMessage) {}
