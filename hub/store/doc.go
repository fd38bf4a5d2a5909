// Package store wraps the pure model.Registry for concurrent use by the hub:
// cluster watchers write shards into it, and a single consumer (the xDS
// pusher) learns which hostnames changed through a coalescing notification,
// so a burst of writes costs one push, never a queue of stale ones.
package store
