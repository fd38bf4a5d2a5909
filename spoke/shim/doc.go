// Package shim is the spoke's config-cluster shim: it brings the hub's
// federated trust bundle into the workload cluster, as istiod's
// istio-ca-root-cert controller does in a single cluster.
//
// # Walk-through
//
// Run keeps one Watch stream (pkg/trustapi) open to the hub's CA address
// over TLS (Options.HubRoots or HubRootsFile verify the hub), authenticated
// with the spoke's own service account token (audience istio-ca, read again
// from TokenFunc or TokenFile on every reconnect) and its cluster ID, and
// marked x-meshfed-client: spoke, so the hub lists the cluster's spoke as
// connected. Every bundle received that differs from the last one is kept
// and queued for every selected namespace.
//
// Workers (Options.Workers) write the bundle as ConfigMap
// istio-ca-root-cert (key root-cert.pem, the concatenated PEM of every
// root, label istio.io/config=true, as istiod does) into every namespace
// that Options.NamespaceSelector selects, except ExcludeNamespaces and
// namespaces being deleted. Namespaces and ConfigMaps are read from
// informer caches (the ConfigMap informer watches only that name), so a
// write happens only when the ConfigMap is missing or differs; other keys
// and labels of an existing ConfigMap are kept. The shim puts the
// ConfigMap back when it is deleted or edited, and writes it into a
// namespace as soon as the namespace appears. A failed write is retried
// with the work queue's rate limit.
//
// # While the hub is away
//
// Run keeps reconnecting with doubling, jittered backoff (MinBackoff to
// MaxBackoff, timed by Options.Clock, reset once a stream delivered a
// bundle) and keeps writing the last bundle it received: it never deletes a
// ConfigMap and never writes an empty bundle (the hub sending one is
// logged and ignored), so new namespaces still get the roots. Before the
// first bundle arrives it writes nothing. The hub being unreachable is not
// an error of Run; only bad options are.
//
// Metrics: meshfed_spoke_root_cert_writes_total{result} (created, updated,
// error), meshfed_spoke_trust_bundle_connected (1 while the stream is open),
// meshfed_spoke_trust_bundle_updates_total.
package shim
