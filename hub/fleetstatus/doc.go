// Package fleetstatus is the hub's fleet-wide status of proxies and spokes:
// one view, the same on every replica, of what each proxy of the fleet was
// sent and ACKed or NACKed and of which spokes hold a trust-bundle stream.
//
// # Walk-through
//
//	xdsstatus.Tracker ──┐  (this replica's streams, fed by the xDS server)
//	trustsvc.Service ───┤  (this replica's spoke streams)
//	                    ▼
//	                 Fleet ── TakeChanges: one batch ──► replication ──► peers
//	                    ▲                                                  │
//	                    └──────────── Apply(batch of a peer) ◄─────────────┘
//	                    │
//	                    ▼ All, Spokes: the joined fleet view
//	CSDS (xdsstatus.StatusSource), /debug/proxy-status, /debug/spokez
//	      └─► meshfedctl proxy-status / spokes, the web console
//
// A local tracker: the xDS server keeps, per stream, what it sent and what
// came back (xdsstatus.Tracker, its own per-stream bookkeeping, read here
// through the small Proxies interface); the trust-bundle service keeps its
// spoke streams (Spokes). Neither knows of replicas.
//
// Batches: Run turns their change signals into one coalesced Changed;
// replication waits its batch interval and calls TakeChanges, which takes
// the tracker's changes, applies them to this replica's own view and
// returns them as one protobuf batch (batch, the wire type): changed records,
// removed node IDs, and the spoke list when it changed. A peer that
// (re)connects gets Full instead, which replaces all it knew of this
// replica.
//
// Peers: Apply merges a peer's batch under its name (a record naming
// another replica is refused: a peer speaks for itself only); DropReplica
// forgets a replica that left, with its streams.
//
// The joined view: All is every replica's proxies, a proxy on two
// replicas (a reconnect) shown once, its newest stream
// (proxystatus.Fleet); Spokes merges each cluster's spoke over the
// replicas (healthy if any holds a stream, Hubs naming them). CSDS and, in
// time, istio.io/debug/syncz answer from All through xdsstatus.StatusSource,
// /debug/proxy-status and /debug/spokez from All and Spokes (the
// documents of pkg/proxystatus and pkg/debugdoc); meshfedctl and the
// console read those.
//
// Config status: the xDS server's config ledger (Config, *xdsstatus.Ledger: each
// Istio object's generation and the config epoch it arrived in) rides in
// the batches too, whole when it changed; ConfigStatus judges every proxy
// of the fleet against its own replica's ledger (proxystatus.Rollouts), so
// any replica answers /debug/configstatusz for all of them.
//
// The record types, the join of records, the table and the CSDS
// conversion are pure and shared with meshfedctl: they live in
// pkg/proxystatus. This package is the hub's I/O-free owner of the
// replicated view; it opens no connection and reads no clock.
package fleetstatus
