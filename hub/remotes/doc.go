// Package remotes connects the hub to remote Kubernetes clusters.
//
// Provider is a multicluster-runtime provider fed by Istio-format remote
// secrets in the config cluster: each valid entry becomes a cluster.Cluster
// that lives as long as its context, engaged with the multicluster manager;
// a changed kubeconfig (a rotated token) starts a replacement cluster, and a
// deleted entry cancels the cluster and removes its state from the store.
//
// Watcher is the multicluster.Aware component engaged for each cluster. It
// watches Services, EndpointSlices, Nodes and Namespaces through the
// cluster's cache, with transforms that keep only the fields the registry
// needs, and Pods through informers of the cluster's own (podCache) that
// keep a small podInfo per Pod (interned labels and service account);
// every client asks for protobuf. It turns them into model.ServiceShards,
// each endpoint with its Pod's labels and service account, finding a
// Service's EndpointSlices through an index by Service; a change of a Pod
// (a relabel) recomputes the shards of the Services whose endpoints it
// backs. Once the cluster's informers have
// synced it publishes the whole cluster in one step, then one shard per
// changed Service.
//
// Status records, per cluster, the secret that defines it, its sync state and
// its last error, for /readyz, /debug/registryz and the metrics, and for
// /debug/clusterz: the same clusters in istiod's shape
// ([{"id","secretName","syncStatus"}]), which `istioctl remote-clusters`
// reads.
package remotes
