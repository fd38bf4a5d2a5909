// Package podagent is the agent that the spoke's grpc-agent injection
// template (spoke/inject/templates/grpc-agent.yaml) runs beside a
// proxyless gRPC application, as the native sidecar meshfed-agent: the
// library of cmd/meshfed-agent.
//
// # Walk-through
//
// cmd/meshfed-agent parses its flags and the Pod's environment (downward
// API) into Options and calls Run, which
//
//  1. checks Options, reads the roots that verify the hub's CA
//     (CARootsFile, the istio-ca-root-cert ConfigMap) and the Pod's labels
//     (LabelsFile, a downward API file; see ParseLabels);
//  2. starts a pkg/agent.Agent: it obtains the workload certificate of the
//     Pod's service account (spiffe://<trust domain>/ns/<ns>/sa/<sa>) from
//     the hub's CA with the projected token (TokenFile), writes
//     cert-chain.pem, key.pem and root-cert.pem into CertDir, renews the
//     certificate and follows the hub's trust bundle until the Pod ends;
//  3. once the first certificate is in place, writes grpc-go's xDS
//     bootstrap (Bootstrap) to BootstrapPath, atomically: the application
//     reads it through GRPC_XDS_BOOTSTRAP. Its file_watcher certificate
//     provider re-reads the files of CertDir every CertRefreshInterval, so
//     renewals and root changes reach the application without a restart;
//  4. serves GET /healthz/ready on ReadyAddr: 503 with the reason until the
//     bootstrap is written, then 200. It is the template's startupProbe:
//     the kubelet starts the application container only after it, so the
//     application never starts without its bootstrap and certificate.
//
// Run returns nil when its context ends (SIGTERM at the Pod's end), after
// shutting the HTTP server down. The certificate files and the bootstrap
// stay: the application may still be draining.
//
// # The bootstrap
//
// The node is what the hub expects of a proxyless gRPC client: ID
// sidecar~<ip>~<pod>.<ns>~<ns>.svc.<domain suffix>, metadata CLUSTER_ID,
// NAMESPACE, NETWORK, LABELS, GENERATOR "grpc", INSTANCE_IPS and
// SERVICE_ACCOUNT, and, when the Pod has the istio-locality label
// ("region.zone.subzone"), a locality: the hub groups proxies by cluster and
// region. The xDS server is DiscoveryAddress (default the CA address, the
// hub's 15012) over mutual TLS with the workload's certificate files,
// which grpc-go re-reads as the agent renews them (plaintext only with
// XDSPlaintext), and server_listener_resource_name_template
// is Istio's, so that xDS-enabled gRPC servers ask for their inbound
// listener under the name the hub serves. pkg/xdsnode declares all of it
// (node ID, metadata keys, the bootstrap's JSON) once for the hub, this
// agent and the tests.
//
// The package imports only pkg/ (the agent, the node contract), as every
// package of spoke/.
package podagent
