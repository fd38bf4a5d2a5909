// Package trustapi is the wire contract between the hub and the spoke shim
// for the federated trust bundle: one gRPC service, written by hand because
// the repository has no protoc.
//
// # Wire
//
//	service meshfed.trust.v1.TrustBundle {
//	  rpc Watch(google.protobuf.BytesValue) returns (stream google.protobuf.BytesValue);
//	}
//
// The request's value is reserved (send empty bytes; the server ignores it).
// Each response's value is the JSON of a Bundle:
//
//	{"version": "<hex>", "roots": [{"trustDomain": "...", "pem": "-----BEGIN...", "fingerprint": "<hex sha256 of DER>"}]}
//
// The server sends the current bundle at once, then the whole bundle again
// whenever it changes (never a delta), so a client only ever keeps the last
// message. Version is a digest of the sorted fingerprints: equal versions
// mean equal root sets.
//
// Request metadata, as for Istio's certificate API:
//
//	authorization            Bearer <service account token of the caller, audience istio-ca>
//	ClusterID                the caller's cluster ID (the token is reviewed against it)
//	x-meshfed-client         what the caller is: "spoke" (a spoke shim) or "agent" (a
//	                         workload agent, pkg/agent); absent means "spoke", as older
//	                         spokes do not send it, and any other value is treated as
//	                         "spoke"
//	x-meshfed-spoke-version  the spoke's version, shown by the hub (optional)
//
// Spoke shims and workload agents watch the same bundle: a spoke to publish
// it into its cluster, an agent to keep a workload's root-cert.pem current
// while the roots rotate. The hub lists only spokes as connected clusters;
// x-meshfed-client tells it which is which.
//
// The service is served on the hub's CA TLS port (15012) next to
// istio.v1.auth.IstioCertificateService.
//
// # Go API
//
// Both ends share this package and nothing else: the hub (hub/trustsvc)
// implements TrustBundleServer and registers it with
// RegisterTrustBundleServer; a client (spoke/shim, pkg/agent) opens the
// stream with Watch and the metadata above. NewBundle builds a Bundle from
// roots (sorted by fingerprint, duplicates dropped, Version set), PEM gives
// the concatenated roots as root-cert.pem holds them, and Encode and Decode
// convert a Bundle to and from one stream message. The package does no I/O
// of its own beyond the gRPC calls its caller makes.
package trustapi
