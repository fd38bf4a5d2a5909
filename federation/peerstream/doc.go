// Package peerstream is the replica-to-replica stream of the hub: one gRPC
// bidi stream with mutual TLS between each pair of replicas, carrying the
// protobuf frames of package federation (federation.PeerMessage, encoded
// once per broadcast).
//
// Walk-through:
//
//   - Identities (tls.go): each replica's certificate carries a SPIFFE ID
//     naming it; PeerCertificate issues one, PeerTLS and LoadPeerTLS build
//     the TLS configurations, and a stream whose certificate names another
//     replica than its Hello is refused.
//   - The engine (peer.go): of each pair the lower replica ID dials; a
//     stream opens with a Hello each way, then the Handler's catch-up
//     messages, then whatever is broadcast. Send and Broadcast never
//     block: a peer whose queue fills up has its stream closed and catches
//     up when it reconnects. PeerOptions.OnPeerDown is the early signal of failure.
//   - Frames (frame.go): decoded and validated on receipt; a malformed
//     frame is dropped, counted by reason, and the stream goes on.
//   - The mux (mux.go): a Handler that hands each kind of message to the
//     KindHandler registered for it, so that each replicated state (cluster
//     state, trust bundle, fleet status) has a small replicator of its own.
//
// What the frames mean belongs to the handlers; this package only moves
// them.
package peerstream
