// Package xds serves the hub's registry to proxies over ADS (State of the
// World and Delta) with the hub's stream server (package ads), which
// reads go-control-plane's cache interface.
//
// The layering follows go-control-plane: the pusher writes resources into a
// cache and the stream server only reads it. The cache is a groupCache:
// listeners, routes and clusters are the same for every proxy and live in one
// watch cache per type; load assignments depend on where the proxy runs (its
// cluster and region decide the failover priorities) and live in one
// watch cache per proxy group, created when the group's first proxy asks.
// A watch cache (watchcache.go) answers as go-control-plane's LinearCache
// does: it marshals each resource once per version, however many streams
// it is sent on, and answers a non-wildcard watch only when one of the
// watched resources changed. Unlike a LinearCache, what a watch costs does
// not grow with the resources it subscribes to (an Envoy sidecar subscribes
// to every service's load assignment).
//
// The pusher drains the store's changed hostnames; the pure planners,
// xdsgen.Planner (proxyless gRPC and every group's load assignments) and
// xdsgen.SidecarPlanner (Envoy sidecars), rebuild only their resources
// (memoized per hostname and group) and return the plan of changes against
// what was written before: per cache, what to upsert and what to delete,
// without resources equal to those written, in the order the proxy needs
// them. Server.push only writes the plan into the watch caches, after the
// push lock is released.
//
// A stream's first request never waits for a push: a new group, Envoy
// node or inbound listener is built on the stream's goroutine from the
// last plan's view and answered at once, and the push loop adopts it into
// the planners next (apart.go).
//
// A stream is one conn (conn.go), the hub's side of the stream server's
// stream (ads.Stream): made when it opens, freed once when it closes, and
// holding everything kept of it: the caller's credentials and proven
// identity, the node it was admitted with (its metadata read once), its
// attachment to a proxy group and Envoy sidecar, its NACKs in a row and
// its status record (xdsstatus.Stream). The caches route each watch by the
// conn's attachment (ads.StreamOf); the group cache and the status
// tracker keep only indexes of what conns attach to them.
//
// A group's state lives as long as one of its streams: a request with a
// node new to its stream attaches the stream to the group of its node, and when the last stream of
// a group closes, the group's watch cache, its record in the planner and
// its memoized assignments are freed (meshfed_xds_proxy_groups counts the
// groups held). A group that comes back is built afresh from the registry.
//
// Inbound (server-side) listeners, which grpc-go's xDS-enabled servers ask
// for by the name xdsgen.InboundListenerName(IP:port), enforce the policy
// (PeerAuthentication, AuthorizationPolicy) of the workload at that
// address: the Pod the registry has there in the asking server's cluster
// (xdsgen.Pods). The groupCache builds one when a watch first names it and
// puts it in the listener watch cache before the watch is created; it
// stays there (one small resource per server address ever seen), and a
// push rebuilds it when its policy changes: on any change of the security
// config, or of the endpoints at its address. Clusters follow auto mTLS
// (the endpoints' tlsMode labels and their PeerAuthentications); a change
// of the security config re-plans every host. Options.Security (the hub's
// --xds-mtls) is only the default mode of ports no policy sets.
//
// Envoy sidecars (a node whose user_agent_name is "envoy" and whose
// metadata does not say GENERATOR=grpc) get Istio-shaped resources from
// xdsgen's sidecar generator, planned by xdsgen.SidecarPlanner. Their routes (named by port) are shared by
// every sidecar of a route set (its route class, the VirtualService
// matches on clients the pod satisfies, under its Sidecar scope's egress;
// most sidecars are of the default set, and each other set's routes are
// named by port and set and held while a sidecar of it is); their listeners and clusters live in caches of their own
// node ID (see sidecar), because they carry the inbound side of the pod
// (the ports it serves, found by the pod IP of the node ID among the
// endpoints of its cluster), its policy, its Sidecar scope and, without
// interception, its address. Load
// assignments are the proxy group's, as for proxyless clients: the two
// kinds get the same bytes for the same group, so they share the cache.
// A sidecar's state is freed when its node's last stream closes
// (meshfed_xds_envoy_sidecars counts those held). A push regenerates
// every held sidecar's listeners and clusters from all services. A
// sidecar's cluster cache names, with each answer, the load assignments
// of the EDS clusters it sends (ads.Rewarming): Envoy keeps an updated
// EDS cluster warming until it receives the assignment after the
// update, so the stream server sends them again on that stream, after
// the clusters, whenever the answer goes out.
//
// What the server knows of its proxies lives apart from the caches, in
// package xdsstatus: each stream's status record (xdsstatus.Tracker, fed
// by the conn), CSDS and Istio's debug types (answered from the
// fleet-wide xdsstatus.StatusSource, as istiod answers istioctl
// proxy-status), and the config ledger, which observes every watch cache
// (versioned.go: a cache names its versions after its ID there) to say
// which Istio configuration each response holds.
//
// ServiceEntries are merged with the registry's services under the
// planner's configuration (meshServicesLocked, istioconfig.MergeEntry), so
// every generator sees them as services.
//
// A request of a type the hub has nothing of for the proxy (a ztunnel's
// workloads, say) opens a watch that is never answered, as istiod
// answers a type it has no generator for: the stream and its other types
// live on (meshfed_xds_unserved_requests_total counts them).
//
// A watch cache answers a request that accepted no version at once, so a
// proxy that NACKs its first response would be sent it again in a tight
// loop; nackBackoff holds back the answer to each NACK in a row a little
// longer (Options.NACKBackoff), per stream and type, until an ACK.
package xds
