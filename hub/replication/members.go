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
	// recheck wakes runConnectCheck (capacity 1; see wake).
	recheck chan struct{}
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
	ms.wake() // a new member starts its grace
}

func (ms *members) setMembers(ids []federation.ReplicaID) {
	clusters := slices.Collect(maps.Keys(ms.store.Digest()))
	moved := ms.own.setMembers(ids, clusters)
	ms.m.moves.Add(float64(moved))
	ms.m.members.Set(float64(len(ids)))
}

// runConnectCheck sets aside the members that have had no peer stream for
// the grace. It sleeps while there is nothing to wait for (every live
// member connected, or suspected already) and wakes on a membership
// change, a broken stream, or when the earliest pending grace ends: an
// idle replica has no timer of its own here.
func (ms *members) runConnectCheck(ctx context.Context) {
	var timer clock.Timer
	stop := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
	}
	defer stop()
	for {
		now := ms.clock.Now()
		next, wait := ms.checkUnconnected(now)
		stop()
		var fire <-chan time.Time
		if wait {
			timer = ms.clock.NewTimer(max(next.Sub(now), 0))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-ms.recheck:
		case <-fire:
		}
	}
}

// wake has runConnectCheck look again (a membership change or a broken
// stream); it never blocks.
func (ms *members) wake() {
	select {
	case ms.recheck <- struct{}{}:
	default:
	}
}

// checkUnconnected suspects the live members without a peer stream since
// the grace before now. A suspect that connects is taken back by Hello. It
// returns when the next member's grace ends, if one is pending.
func (ms *members) checkUnconnected(now time.Time) (next time.Time, pending bool) {
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
			since = now
			ms.unconnected[id] = since
		}
		if end := since.Add(ms.grace); now.Before(end) {
			if !pending || end.Before(next) {
				next, pending = end, true
			}
			continue
		}
		if ms.own.suspect(id, true) {
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
	return next, pending
}

// peerDown sets a peer aside as suspect: its clusters move now rather than
// when gossip declares it dead.
func (ms *members) peerDown(id federation.ReplicaID) {
	ms.log.Info("peer stream broke; treating peer as suspect", "peer", id)
	if ms.own.suspect(id, true) {
		ms.setMembers(ms.own.liveMembers())
	}
	ms.wake()
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
