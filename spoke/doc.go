// Package spoke is what meshfed runs inside each workload cluster: the
// sidecar-injection and configuration-validation webhooks, the keeper of
// their caBundle, and the config-cluster shim (package shim) that brings
// the hub's trust bundle into the cluster. The hub itself runs outside;
// the spoke is small on purpose.
//
// # Walk-through
//
// cmd/meshfed-spoke parses flags into Options and calls Run, which serves,
// over HTTPS on one port (15017, istiod's webhook port):
//
//	/inject    mutating webhook for Pods         (package inject)
//	/validate  validating webhook for Istio      (package validate)
//	           VirtualService, DestinationRule, ServiceEntry, Sidecar
//	/healthz   the process is up
//	/readyz    an injection configuration is loaded and namespaces are synced
//	/metrics   Prometheus: meshfed_spoke_webhook_requests_total{webhook,result},
//	           meshfed_spoke_webhook_duration_seconds{webhook},
//	           meshfed_spoke_inject_config_loads_total{result}
//
// Package webhook turns HTTP into AdmissionReviews and back for both.
//
// Beside the server, Run keeps the caBundle of the spoke's own webhook
// configurations (Options.WebhookConfigs) equal to the CA of its serving
// certificate, at start and every CABundleInterval, and, when
// Options.Shim.HubAddr is set, runs the shim: it streams the federated
// trust bundle from the hub's CA address and writes istio-ca-root-cert
// (key root-cert.pem) into every selected namespace, and the hub lists
// the cluster's spoke as connected while the stream is open.
//
// The spoke chart (remote-charts/spoke) installs the process with the
// webhook configurations that select what reaches it (namespaces labelled
// istio-injection=enabled, Pods labelled sidecar.istio.io/inject=true, and
// networking.istio.io objects) and the ConfigMap of injection templates
// and values, whose values name the hub's discovery and CA addresses, the
// cluster ID, network and trust domain.
//
// # Independence from the hub
//
// No request path talks to the hub. The injection configuration and the
// namespace labels are watched from the workload cluster's own apiserver and
// kept in memory, and the last good configuration stays in force when the
// ConfigMap breaks or disappears. So Pods keep being injected and
// configuration validated while the hub is down or unreachable; the
// injected proxies find the hub by themselves afterwards. The shim is one
// more member of Run's errgroup, off the admission path: while the hub is
// away it reconnects with backoff and keeps the last bundle in every
// namespace, deleting nothing.
//
// The process meshfed-agent (cmd/meshfed-agent, package podagent) is not
// part of Run: it runs beside a proxyless gRPC workload, keeping its
// certificates (pkg/agent) and its xDS bootstrap.
package spoke
