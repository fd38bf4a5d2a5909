// Package hub assembles meshfed's hub: the external control plane that
// watches many remote clusters and serves xDS to all their proxies. It
// holds Options and Run, and Run only wires the parts, each in its own
// package, in dependency order (no setters):
//
//	config cluster ── remote secrets ──► remotes.Provider ──engages──► remotes.Watcher
//	                                      (one cluster.Cluster per     │ shards per Service
//	                                       remote, if replication's     ▼
//	                                       Ownership says so)       store.Store ──outbox──► replication
//	                                                                    │ changed hostnames   (peers, gossip)
//	                                                                    ▼
//	                               proxies ◄── ADS (SotW, Delta) ──── xds.Server ──records──► fleetstatus
//	                               workloads ◄── CreateCertificate, trust bundle ── trust.CA (hub/ca, trustsvc)
//
// monitoring.Server exposes /metrics, /healthz, /readyz (remotes.Readiness)
// and the /debug documents of pkg/debugdoc. The hub reads no environment
// and no globals: its main parses flags into Options and calls Run.
package hub
