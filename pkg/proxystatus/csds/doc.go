// Package csds maps proxystatus records to and from the Client Status
// Discovery Service API (envoy.service.status.v3) and evaluates the node
// matchers of a ClientStatusRequest. It is pure: no I/O, no clock.
//
// # Wire shape
//
// Each proxy is one ClientConfig:
//
//   - Node.Id is the proxy's node ID; Node.UserAgentVersion its version.
//   - Node.Metadata holds CLUSTER_ID (the proxy's cluster, as the proxy
//     itself sets it) and meshfed's own keys:
//     MESHFED_REPLICA, the hub replica serving the proxy (HUB in tables);
//     MESHFED_HUB_VERSION, that replica's build version;
//     MESHFED_IDENTITY, the identity the proxy's stream proved on the
//     authenticated port (a SPIFFE ID, or <namespace>/<service account>);
//     MESHFED_CONNECTED and MESHFED_LAST_CHANGE, RFC 3339 times;
//     MESHFED_XDS, a struct keyed by short type ("cds", "eds", …) whose
//     values hold what CSDS has no field for: "sent" and "sentNonce" (the
//     last response sent), "ackedNonce", and "sentAt" (RFC 3339).
//   - GenericXdsConfigs has one entry per xDS type, not per resource: always
//     CDS, LDS, EDS, RDS and ECDS, plus any other type the proxy subscribed
//     to. TypeUrl is the type; VersionInfo the version the proxy last ACKed;
//     LastUpdated when; ConfigStatus SYNCED, NOT_SENT, STALE or ERROR;
//     ClientStatus ACKED, NACKED, REQUESTED (subscribed, nothing ACKed yet)
//     or UNKNOWN (never subscribed); ErrorState, after a NACK, carries the
//     proxy's error message in Details and the rejected version in
//     VersionInfo. XdsConfig is never set: the hub reports status, not
//     resource contents.
//
// Record is the inverse of ClientConfig; an entry that is NOT_SENT and
// UNKNOWN (never subscribed) maps to no TypeStatus.
package csds
