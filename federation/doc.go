// Package federation lets hub replicas share one view of every remote
// cluster while only a few of them watch each cluster's apiserver.
//
// Walk-through:
//
//   - Membership (package gossip) runs hashicorp/memberlist: who is alive,
//     encrypted gossip, graceful leave. Members advertise their peer gRPC
//     address in their node metadata, and push/pull state carries each
//     replica's Digest: the Version of every cluster it owns.
//   - Owners (ownership.go) ranks replicas per cluster by rendezvous
//     hashing; the first WatchReplicas of the live members own it. Adding or
//     removing a replica moves only the clusters whose top ranks change.
//   - State (state.go) is the pure merge: it orders every cluster's writes
//     by Version (term, sequence, owner), applies snapshots and deltas to a
//     model.Registry, refuses stale, duplicate and out-of-order ones with a
//     sentinel error, and tells which clusters a peer's digest is ahead on.
//     It is the one authority on the order of writes (the registry only
//     stores), keeps a tombstone of each removed cluster, does no I/O and
//     reads no clock.
//   - TrustBundle (trust.go) is the replicated set of root certificates,
//     merged by union, with tombstones so a late message cannot bring back a
//     removed root.
//   - The peer transport (package peerstream) moves bulk state between replicas over a
//     gRPC stream with mutual TLS: catch-up snapshots on connect, then the
//     owner's deltas as they happen; gossip only carries digests. Its
//     frames are this package's wire types (peer_wire.go): protobuf
//     (peerpb, peer_codec.go), encoded once per broadcast and validated on
//     receipt; repeated strings are interned as they are decoded.
//
// This package is the pure core: state, trust bundle, ownership, wire
// types. It imports no I/O package (the import-rule test checks it); the
// I/O lives in its subpackages gossip and peerstream, and in the hub's
// replication package.
//
// Terms only count; no clock picks them. A replica that writes a cluster
// removed and added again, without having seen the removal, may pick a
// term that the others hold a tombstone of: they refuse the write with
// ErrRemoved and answer with the tombstone (PeerMessage.Superseded), and
// the writer republishes above it.
//
// The hub wires these together: it watches the clusters it owns, writes
// their changes into State under a new term, and publishes them to peers
// (the hub's store appends the messages to an outbox under its lock; one
// goroutine encodes and sends them after the lock is released);
// what peers send is applied to the same State. When an owner dies every
// replica keeps the last state it had until the new owner's snapshot, of a
// higher term, replaces it.
package federation
