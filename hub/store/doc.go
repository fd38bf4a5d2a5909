// Package store is the hub's replicated registry: a model.Registry whose
// per-cluster writes are ordered by federation.State, safe for concurrent
// use.
//
// Two kinds of writers feed it. The cluster watchers of the clusters this
// replica owns write through the Sink methods (ReplaceCluster, UpdateShard);
// each accepted write becomes a snapshot or delta handed to Publish for the
// other replicas. What other replicas publish arrives through
// ApplySnapshot and ApplyDelta. A single consumer, the xDS pusher, learns
// which hostnames changed through a coalescing notification, so a burst of
// writes costs one push, never a queue of stale ones.
package store
