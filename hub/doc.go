// Package hub assembles meshfed's hub: the external control plane that
// watches many remote clusters and serves xDS to all their proxies.
//
// Run wires the parts, each in its own package:
//
//	config cluster ── remote secrets ──► remotes.Provider ──engages──► remotes.Watcher
//	                                      (one cluster.Cluster              │ shards per Service
//	                                       per remote, multicluster-runtime) ▼
//	                                                                   store.Store
//	                                                                        │ changed hostnames
//	                                                                        ▼
//	                               proxies ◄── ADS (SotW, Delta) ──── xds.Server
//
// and monitoring.Server exposes /metrics, /healthz, /readyz and
// /debug/registryz. The hub reads no environment and no globals: its main
// parses flags into Options and calls Run.
package hub
