package replication

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/peerstream"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
)

// clusters replicates the state of every remote cluster: it sends the
// store's local writes to every peer (from the store's outbox, after the
// store's lock is released), applies what peers send, answers catch-up and
// resync requests, and tells a writer when this replica holds a tombstone
// of its cluster. It is the mux's handler of snapshots, deltas, resyncs and
// tombstone answers.
type clusters struct {
	self  federation.ReplicaID
	store *store.Store
	peers *peerstream.Peers
	m     *metrics
	log   logr.Logger
	clock clock.PassiveClock
}

// run sends the store's local writes to every peer, in write order, until
// ctx ends. Only this goroutine encodes them, with no store lock held.
func (c *clusters) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.store.Outbox():
		}
		for _, m := range c.store.TakeOutbox() {
			c.publish(m)
		}
	}
}

func (c *clusters) publish(m *federation.PeerMessage) {
	if err := c.peers.Broadcast(m); err != nil {
		c.log.V(1).Info("broadcast incomplete", "error", err.Error())
	}
	c.m.published.Inc()
}

// mergeDigest is memberlist's push/pull: ask the peer for what it is
// ahead on.
func (c *clusters) mergeDigest(from federation.ReplicaID, d federation.Digest) {
	if behind := c.store.Behind(d); len(behind) > 0 {
		c.resync(from, behind, "gossip digest")
	}
}

func (c *clusters) resync(from federation.ReplicaID, ids []model.ClusterID, why string) {
	c.m.resyncs.WithLabelValues(why).Inc()
	if err := c.peers.Send(from, &federation.PeerMessage{Resync: ids}); err != nil {
		c.log.V(1).Info("cannot ask peer for snapshots", "peer", from, "clusters", ids, "error", err.Error())
	}
}

// Hello implements peerstream.KindHandler: a peer (re)connected; send it
// every cluster it is behind on that this replica should send (catchUp).
func (c *clusters) Hello(from federation.ReplicaID, hello *federation.Hello) []*federation.PeerMessage {
	snaps := c.store.Snapshots(c.catchUp(from, c.store.AheadOf(hello.Digest)))
	out := make([]*federation.PeerMessage, 0, len(snaps))
	for i := range snaps {
		out = append(out, &federation.PeerMessage{Snapshot: &snaps[i]})
	}
	return out
}

// catchUp picks, of the clusters a (re)connecting peer is behind on, those
// this replica sends it: the ones it wrote itself, and the ones whose
// writer has no stream with this replica (gone, or not connected yet).
// Every replica holds the same snapshots, so without this a replica that
// joins a fleet of N would be sent each cluster N-1 times and drop all
// but one; the writer's own Hello exchange with the joiner brings the
// rest, and the gossip digests repair whatever slips through.
func (c *clusters) catchUp(from federation.ReplicaID, behind []model.ClusterID) []model.ClusterID {
	connected := map[federation.ReplicaID]bool{}
	for _, id := range c.peers.Connected() {
		connected[id] = true
	}
	var out []model.ClusterID
	for _, id := range behind {
		v, ok := c.store.Version(id)
		if !ok {
			continue
		}
		if v.Owner == c.self || v.Owner == from || !connected[v.Owner] {
			out = append(out, id)
		}
	}
	return out
}

// Receive implements peerstream.KindHandler.
func (c *clusters) Receive(from federation.ReplicaID, msg *federation.PeerMessage) {
	now := c.clock.Now()
	switch {
	case msg.Snapshot != nil:
		err := c.store.ApplySnapshot(*msg.Snapshot)
		c.account("snapshot", err, now.Sub(msg.Snapshot.Sent))
		c.answerRemoved(from, msg.Snapshot.Cluster, msg.Snapshot.Version, err)
	case msg.Delta != nil:
		err := c.store.ApplyDelta(*msg.Delta)
		c.account("delta", err, now.Sub(msg.Delta.Sent))
		c.answerRemoved(from, msg.Delta.Cluster, msg.Delta.Version, err)
		if errors.Is(err, federation.ErrGap) {
			c.resync(from, []model.ClusterID{msg.Delta.Cluster}, "gap")
		}
	case msg.Superseded != nil:
		if c.store.Superseded(msg.Superseded.Cluster, msg.Superseded.Version) {
			c.log.Info("a peer holds a tombstone of a cluster this replica writes; republished above it",
				"peer", from, "cluster", msg.Superseded.Cluster, "tombstone", msg.Superseded.Version.String())
		}
	case len(msg.Resync) > 0:
		for _, snap := range c.store.Snapshots(msg.Resync) {
			if err := c.peers.Send(from, &federation.PeerMessage{Snapshot: &snap}); err != nil {
				c.log.V(1).Info("cannot send snapshot", "peer", from, "cluster", snap.Cluster, "error", err.Error())
				return
			}
		}
	}
}

// answerRemoved tells the writer of a refused write that this replica
// holds a tombstone of its cluster, so that a writer of the cluster's new
// incarnation (one that never saw the removal) moves above it. Only the
// writer itself is answered: a snapshot forwarded in a catch-up is not
// its sender's to fix.
func (c *clusters) answerRemoved(from federation.ReplicaID, id model.ClusterID, v federation.Version, err error) {
	if !errors.Is(err, federation.ErrRemoved) || v.Owner != from {
		return
	}
	tomb, ok := c.store.Tombstone(id)
	if !ok {
		return
	}
	if err := c.peers.Send(from, &federation.PeerMessage{Superseded: &federation.ClusterTombstone{Cluster: id, Version: tomb}}); err != nil {
		c.log.V(1).Info("cannot tell the writer of its cluster's tombstone", "peer", from, "cluster", id, "error", err.Error())
	}
}

// account counts an applied (or refused) replicated write.
func (c *clusters) account(kind string, err error, lag time.Duration) {
	switch {
	case err == nil:
		c.m.applied.WithLabelValues(kind).Inc()
		c.m.lag.Observe(lag.Seconds())
	case errors.Is(err, federation.ErrDuplicate):
		c.m.rejected.WithLabelValues(kind, "duplicate").Inc()
	case errors.Is(err, federation.ErrStale):
		c.m.rejected.WithLabelValues(kind, "stale").Inc()
	case errors.Is(err, federation.ErrGap):
		c.m.rejected.WithLabelValues(kind, "gap").Inc()
	case errors.Is(err, federation.ErrRemoved):
		c.m.rejected.WithLabelValues(kind, "removed").Inc()
	default:
		c.m.rejected.WithLabelValues(kind, "invalid").Inc()
		c.log.Error(err, "replicated write refused", "kind", kind)
	}
}
