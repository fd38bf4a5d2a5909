// Package istioconfig is the hub's model of a mesh's Istio configuration:
// the valid VirtualServices, DestinationRules, ServiceEntries, Sidecars,
// PeerAuthentications and AuthorizationPolicies read from the config
// cluster, with the host each applies to resolved to a service hostname.
//
// A Snapshot is immutable. The hub's config watcher (hub/istioconfig)
// builds a new one whenever an object changes and hands it to the xDS
// pusher, which asks ChangedHosts which hostnames' resources to rebuild:
// an object that did not change keeps its pointer from one snapshot to the
// next, so HostConfig values compare by identity and a change to one
// VirtualService rebuilds only the hosts it names.
//
// Hosts are resolved as Istio resolves them for sidecars: a short name is
// relative to the object's namespace ("reviews" in namespace demo is
// reviews.demo.svc.cluster.local), a name of two labels gets ".svc." and
// the domain suffix ("reviews.demo"), anything else is taken as a fully
// qualified name. A leading "*." is a wildcard: it applies to every host
// under it that no exact host claims, the longest suffix winning. When two
// objects claim the same host, the oldest (creation time, then
// namespace/name) wins, as istiod decides it; the other is reported as
// shadowed for that host. Only VirtualServices bound to the mesh (no
// gateways, or "mesh" among them) apply to proxies.
//
// ServiceEntries (serviceentry.go) become services: each exact host of the
// oldest entry naming it, with the entry's ports and its endpoints by
// address (STATIC) or by DNS name (DNS, DNS_ROUND_ROBIN), MESH_EXTERNAL
// by default; MergeEntry joins a MESH_INTERNAL entry's endpoints to the
// Kubernetes Service of its host. Their hosts are taken as written (no
// namespace is added).
//
// A VirtualService match may name its clients (sourceLabels,
// sourceNamespace). RouteClass (source.go) sorts proxies by the set of
// such conditions they satisfy, so that all proxies of one class can share
// one set of routes; most proxies are of the default class.
//
// Differences from Istio, on purpose or not yet done: exportTo is not
// applied (every object is visible fleet-wide), delegate VirtualServices
// are refused by validation, several VirtualServices of one host are not
// merged, and a ServiceEntry's workloadSelector, wildcard hosts and
// resolution NONE give no service (EntryNotes says so).
package istioconfig
