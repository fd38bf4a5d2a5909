// Package gossip runs hashicorp/memberlist for the hub replicas: who is
// alive, encrypted gossip (AES keyring), graceful leave. Members advertise
// their peer-stream address in their node metadata, and memberlist's
// push/pull exchange carries each replica's federation.Digest, so that a
// replica that is behind on a cluster learns it and asks a peer for a
// snapshot over the peer stream.
//
// Only membership and small digests travel here: memberlist broadcasts are
// best-effort and capped at about 1.4 KB. memberlist calls its delegates
// under its own lock; they hand events to a goroutine and do no work.
package gossip
