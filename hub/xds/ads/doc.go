// Package ads is the hub's stream layer: it serves Envoy's Aggregated
// Discovery Service, State of the World and Delta, from a go-control-plane
// cache (cachev3.ConfigWatcher). A Handler opens the caller's side of each
// stream (a Stream), which is told of the stream's requests and answers
// at the points where go-control-plane's stream server calls its
// callbacks, and closed once.
//
// Why not go-control-plane's stream server: it keeps a stream's state in
// its own private structures, so the hub could neither tell a cache what it
// knows of a stream (the hub reached into the server's maps with unsafe to
// recognise a Delta ACK) nor act on one stream after another of its
// answers went out. Here a stream is one conn, made when the stream opens
// and dropped when it ends, owned by the stream's goroutine: its node, its
// nonce, and per type URL the subscription, the open watch and what is to
// be sent again; and the caller's side of it, which a cache reaches from
// the subscription it is handed (StreamOf), so that nothing anywhere is
// kept in a map keyed by stream. A second goroutine per stream only reads
// requests.
//
// What the server adds to go-control-plane's protocol handling, both
// visible to the cache through the subscription it is handed (Hints):
//
//   - AckOf: a request that only ACKs the stream's last answer of its type,
//     with nothing changed since, names that answer's version, so that a
//     cache whose version is still that one opens the watch without
//     comparing anything (a Delta ACK names no version of its own).
//   - Rewarming: after an answer that implements Rewarming is sent (an
//     Envoy cluster update), the resources it names of another type (the
//     clusters' load assignments) are sent again on that stream, after it.
//     Envoy keeps an updated EDS cluster warming until it receives the
//     cluster's assignment after the update, and does not ask for it; a
//     cache-wide rewrite could reach the stream before the cluster, when
//     the stream had not ACKed the cluster answer before.
//
// Otherwise the answers are go-control-plane's (TestServerAnswersAsGoControlPlane
// plays random streams against both): SotW ADS is ordered (every type's
// answers leave through one channel in the order the cache gave them), a
// SotW request with a stale nonce is ignored, and a SotW request drops the
// unsent answers of its type; Delta sends every pending answer before it
// takes a request.
package ads
