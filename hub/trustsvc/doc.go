// Package trustsvc serves the federated trust bundle to the spoke shims
// and the workload agents: the hub side of pkg/trustapi
// (meshfed.trust.v1.TrustBundle/Watch), registered on the CA's TLS gRPC
// server next to IstioCertificateService.
//
// # Walk-through
//
// A client opens one Watch stream, authenticated like a CSR to the CA (its
// service account token in authorization: Bearer, its cluster in the
// ClusterID metadata, the token reviewed by the Authenticator against that
// cluster's own apiserver). A missing or rejected token is Unauthenticated;
// a review that could not be made is Unavailable, so the client retries.
//
// The stream sends the current bundle (Options.Roots, converted by
// BundleOf) at once, and the whole bundle again whenever its version
// changes, never a delta. Changes arrive on one coalescing channel
// (Options.Changed, the federated bundle's change signal); Run drains it
// and wakes every open stream at once (Notify closes a channel each stream
// waits on), and each stream compares the bundle's version with the one it
// last sent. So any number of clients may watch, and a burst of changes
// costs each stream one send of the latest bundle.
//
// A stream ends when:
//   - its client goes away;
//   - the token that opened it expires (Unauthenticated; the expiry is timed
//     by Options.Clock), so the client reconnects with a fresh token that is
//     reviewed again and a revoked identity stops receiving updates;
//   - Run returns (Unavailable), so a graceful stop of the gRPC server need
//     not wait for the streams and the clients move to another replica.
//
// # Spokes
//
// The Service remembers every spoke that connected: its cluster, version
// (x-meshfed-spoke-version metadata), identity, when it connected, when it
// was last seen, whether a stream is open now and the bundle version last
// sent (Spokes, signalled by SpokesChanged), for the fleet's spoke status and
// meshfedctl remote-clusters. Workload agents (x-meshfed-client: agent) are
// served the same bundle but are not spokes: they are counted only in
// meshfed_hub_trust_streams{client="agent"}.
package trustsvc
