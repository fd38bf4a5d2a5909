// Package model holds meshfed's service registry: the typed identifiers of the
// mesh (ClusterID, Hostname), the per-cluster shards of services and endpoints
// that a cluster watcher produces, and Registry, which merges the shards of
// every remote cluster into one view keyed by hostname.
//
// The package is pure: no I/O, no goroutines, no clock. A Registry is not safe
// for concurrent use; its owner (the hub) serialises access. Views returned by
// a Registry are immutable and may be shared freely between goroutines.
//
// Walk-through: a cluster watcher computes, for each Kubernetes Service it
// sees, a ServiceShard (the Service's ports and the endpoints of that cluster).
// federation.State decides whether the write is current (it alone orders the
// writes of every cluster, local and replicated) and hands it to
// Registry.UpdateShard. The Registry records it, returns the hostnames whose
// merged view changed, and the xDS layer rebuilds only the resources of those
// hostnames. When a remote secret is rotated, a new watcher replaces the
// cluster's shards in one step (ReplaceCluster) once it has synced, so clients
// never see the cluster disappear in between.
//
// An Endpoint carries its Pod's labels as Labels, an interned immutable set:
// every Labels with the same pairs shares one copy process-wide (through
// package unique), so the endpoints of one Deployment cost a pointer each
// rather than a map each (BenchmarkLabelsMemory: ~8 B against ~540 B per
// endpoint with six labels), and comparing two sets, or keying a memo by
// one, is a pointer comparison. Label sets no endpoint refers to any more
// are garbage collected.
package model
