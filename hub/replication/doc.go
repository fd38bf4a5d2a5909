// Package replication is the I/O shell around package federation for the
// hub: it runs membership (federation/gossip) and the peer stream
// (federation/peerstream), and registers one small replicator per kind of
// replicated state on the stream's mux:
//
//   - clusters (clusters.go): the store's local writes go out from its
//     outbox, with no store lock held; what peers send is applied; catch-up
//     and resync requests are answered; a writer is told of a tombstone;
//   - Trust (trust.go): the federated trust bundle, sent whole when it
//     changes and merged by union, with the retirement deadlines;
//   - fleet (fleet.go): proxy-status records, batched;
//   - members (members.go): ownership and peer connections follow the live
//     members.
//
// Everything is built in dependency order: the store, the trust bundle
// (NewTrust), the fleet status and the Ownership (NewOwnership) first,
// then New, which wires them to the peers (the one wire set after
// construction: New hands the trust bundle the peers it broadcasts to,
// which exist only once New has made them).
//
// Ownership follows the live members that memberlist reports, with one
// shortcut: a member whose peer stream breaks is set aside at once (as
// suspect) instead of waiting for gossip to declare it dead, so failover
// starts within a probe's time; so is a member with which no peer stream
// comes up within PeerConnectGrace (a replica that joined after a peer died
// never sees that peer's stream break). A suspect that reconnects is taken
// back.
//
// Anti-entropy runs two ways: every replica's digest travels in memberlist's
// push/pull exchange, and a replica that sees a peer ahead on a cluster asks
// it for a snapshot over the peer stream; a delta that arrives out of order
// triggers the same request.
package replication
