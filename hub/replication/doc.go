// Package replication is the I/O shell around package federation for the
// hub: it runs membership and the peer transport, decides which clusters
// this replica owns, feeds what peers send into the hub's store, and
// answers their catch-up requests.
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
