package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/meshfed/meshfed/federation"
)

// nodeMeta is the JSON in a member's node metadata, well below
// memberlist.MetaMaxSize (512 bytes).
type nodeMeta struct {
	Peer string `json:"peer"`
	// Build is the replica's version; replicas older than it publish none.
	Build string `json:"build,omitempty"`
	V     int    `json:"v"`
}

// decodeNodeMeta parses a member's node metadata.
func decodeNodeMeta(b []byte) (nodeMeta, error) {
	var meta nodeMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nodeMeta{}, err
	}
	if meta.V < 1 {
		return nodeMeta{}, fmt.Errorf("node metadata version %d", meta.V)
	}
	return meta, nil
}

// gossipState is the JSON a replica sends on push/pull. memberlist does
// not say who sent push/pull state, so the sender names itself.
type gossipState struct {
	V      int                  `json:"v"`
	From   federation.ReplicaID `json:"from"`
	Digest federation.Digest    `json:"digest"`
}

// decodeGossipState parses and checks a peer's push/pull state.
func decodeGossipState(buf []byte) (gossipState, error) {
	var s gossipState
	if err := json.Unmarshal(buf, &s); err != nil {
		return gossipState{}, err
	}
	if s.V != stateVersion {
		return gossipState{}, fmt.Errorf("unsupported state version %d", s.V)
	}
	if s.From == "" {
		return gossipState{}, errors.New("state names no sender")
	}
	return s, nil
}

// gossipDelegate is memberlist's Delegate. memberlist calls it from its
// packet and stream goroutines, concurrently; no method blocks.
type gossipDelegate struct{ m *Membership }

// NodeMeta returns the metadata fixed at construction (checked against
// memberlist.MetaMaxSize there).
func (d gossipDelegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		return nil
	}
	return d.m.meta
}

// NotifyMsg counts user messages: replicas send none, so one is a
// misbehaving peer.
func (d gossipDelegate) NotifyMsg([]byte) { d.m.metrics.reject(reasonUnexpected) }

// GetBroadcasts returns nothing: state moves over the peer gRPC stream.
func (d gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState encodes this replica's Digest for push/pull.
func (d gossipDelegate) LocalState(join bool) []byte {
	if d.m.opts.LocalState == nil {
		return nil
	}
	buf, err := json.Marshal(gossipState{V: stateVersion, From: d.m.opts.ReplicaID, Digest: d.m.opts.LocalState()})
	if err != nil {
		d.m.log.Error(err, "encoding push/pull state")
		return nil
	}
	return buf
}

// MergeRemoteState queues a peer's Digest for MergeState. Malformed state
// is counted, logged and dropped; nothing changes.
func (d gossipDelegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	s, err := decodeGossipState(buf)
	if err != nil {
		d.m.metrics.reject(reasonState)
		d.m.log.Error(err, "refusing malformed push/pull state", "bytes", len(buf), "join", join)
		return
	}
	if s.From == d.m.opts.ReplicaID || d.m.opts.MergeState == nil {
		return
	}
	d.m.inbox.put(s.From, s.Digest)
}

// eventDelegate is memberlist's EventDelegate. memberlist calls it one at a
// time, while holding its node lock: it must neither block nor call back
// into memberlist.
type eventDelegate struct{ m *Membership }

func (d eventDelegate) NotifyJoin(n *memberlist.Node) {
	mem := d.m.memberFromNode(n)
	d.m.metrics.members.Set(float64(d.m.setMember(mem)))
	d.m.metrics.events.WithLabelValues("join").Inc()
	d.m.logEvent("member joined", "member", mem.ID, "gossip", mem.GossipAddr, "peer", mem.PeerAddr)
	d.m.notifyChanged()
}

func (d eventDelegate) NotifyLeave(n *memberlist.Node) {
	d.m.metrics.members.Set(float64(d.m.removeMember(federation.ReplicaID(n.Name), n.Address())))
	d.m.metrics.events.WithLabelValues("leave").Inc()
	// A graceful leave and a death look the same here: memberlist v0.7.0
	// tracks left versus dead in its own nodeState.State and leaves the
	// Node.State it passes to delegates unset.
	d.m.logEvent("member left", "member", n.Name, "gossip", n.Address())
	d.m.notifyChanged()
}

func (d eventDelegate) NotifyUpdate(n *memberlist.Node) {
	mem := d.m.memberFromNode(n)
	d.m.metrics.members.Set(float64(d.m.setMember(mem)))
	d.m.metrics.events.WithLabelValues("update").Inc()
	d.m.logEvent("member updated", "member", mem.ID, "gossip", mem.GossipAddr, "peer", mem.PeerAddr)
	d.m.notifyChanged()
}

// digestInbox holds the latest undelivered Digest of each peer.
type digestInbox struct {
	ready chan struct{} // capacity 1; signals pending digests

	mu      sync.Mutex                                 // guards pending
	pending map[federation.ReplicaID]federation.Digest // the newest digest of each sender
}

type inboxEntry struct {
	from   federation.ReplicaID
	digest federation.Digest
}

func newDigestInbox() digestInbox {
	return digestInbox{ready: make(chan struct{}, 1), pending: map[federation.ReplicaID]federation.Digest{}}
}

func (b *digestInbox) put(from federation.ReplicaID, d federation.Digest) {
	b.mu.Lock()
	b.pending[from] = d
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take empties the inbox, sorted by sender.
func (b *digestInbox) take() []inboxEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]inboxEntry, 0, len(b.pending))
	for _, from := range slices.Sorted(maps.Keys(b.pending)) {
		out = append(out, inboxEntry{from, b.pending[from]})
	}
	clear(b.pending)
	return out
}
