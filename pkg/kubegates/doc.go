// Package kubegates sets the client-go feature gates of meshfed's
// long-running processes, from main, before any client is built.
//
// client-go v0.36 turns WatchListClient on by default: a reflector starts
// with a streaming watch-list instead of a paged list. While that request
// fails (an apiserver down), the reflector waits out its retry backoff,
// growing to 30 s, without looking at its context, so an informer stopped
// during or right after an outage keeps its goroutines for up to 30 s: a
// hub stopped then outlives its termination grace, and each reconnect of a
// remote cluster leaves the old cluster's informers behind for as long.
// The classic list-then-watch path waits on the same backoff but returns
// as soon as its context ends. DisableWatchList picks that path unless the
// operator asks for the feature by name (KUBE_FEATURE_WatchListClient).
package kubegates
