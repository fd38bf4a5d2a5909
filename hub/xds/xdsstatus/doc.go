// Package xdsstatus is what the xDS server knows of its proxies, apart
// from the caches that answer them: each stream's status record, the
// config ledger, CSDS and Istio's debug types.
//
// The Tracker keeps one record per stream (Stream), fed by the server's
// conn with every request and answer: per type what was sent, ACKed and
// NACKed, and when; a node's newest stream is its record
// (proxystatus.Record). Streams that ask only for debug types are tools,
// not proxies: the Tracker does not list them. Its records are the
// replica's part of the fleet status (hub/fleetstatus).
//
// The Ledger keeps the config epochs: which Istio configuration each
// response holds, for the fleet's config status. Every watch cache is
// observed by it (Reserve, then Observe) and names its versions after its
// ID there ("<id>.<n>", VersionPrefix); a push of a new configuration
// begins an epoch (each object's new generation, or its removal, arrives
// in it) and seals it once its writes are done, marking each cache's
// current version. The Tracker puts the epoch of each ACKed and NACKed
// version in the proxy's record (TypeStatus.AckedEpoch, NackEpoch). A
// cache built apart from the planners (ObserveApart) keeps the epoch of
// what it was built from until the planners adopt it (Adopted). The
// caches own their versions; the ledger only reads their counters.
//
// CSDS (envoy.service.status.v3) and istio.io/debug/syncz (DebugTypes,
// one ClientConfig per proxy of every replica, as istiod answers istioctl
// proxy-status) answer from a StatusSource: the fleet's records when the
// hub replicates them, else the Tracker's.
package xdsstatus
