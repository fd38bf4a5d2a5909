// Package xdsnode is the xDS node contract between the hub and the proxies
// it serves: the node ID, the node metadata keys, and grpc-go's xDS
// bootstrap that gives a proxyless gRPC workload its node. The hub reads
// nodes through it (hub/xds), the spoke's pod agent and the e2e framework
// write bootstraps with it, and proxy status and meshfedctl parse node IDs
// with it, so that each part of the contract is declared once.
//
// It is pure: no I/O, no goroutines, no clock.
//
// # Walk-through
//
// A node ID has Istio's four "~"-separated fields:
//
//	sidecar~10.0.0.1~client-7d9.demo~demo.svc.cluster.local
//	└ type  └ IP     └ name "<pod>.<ns>" └ DNS domain "<ns>.svc.<suffix>"
//
// SidecarID builds one; ParseID splits one (outside input: it is fuzzed)
// and ID.String joins it back. A proxy whose ID has another shape (a plain
// grpc-go client, say) is still served; it just has no "<pod>.<ns>" name.
//
// The node metadata keys (CLUSTER_ID, NAMESPACE, NETWORK, LABELS,
// GENERATOR, INTERCEPTION_MODE, ISTIO_VERSION, ...) are the constants
// Metadata* (MetadataEnv names the ISTIO_META_ variable an agent takes each
// from); Metadata holds their values, and MetadataOf reads them back from a
// node's metadata Struct.
//
// Bootstrap describes the grpc-go bootstrap of one workload: the xDS
// server, the node (ID, metadata, locality), optionally the file_watcher
// certificate provider reading an agent's files, and Istio's inbound
// listener name template; Bootstrap.JSON writes it.
package xdsnode
