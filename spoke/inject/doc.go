// Package inject is the spoke's sidecar-injection webhook: a mutating
// admission webhook that adds the mesh's containers to Pods, the way
// Istio's injector does, with Istio's labels, annotations and template
// mechanism, so existing manifests and habits carry over.
//
// # Which Pods
//
// A Pod is injected when its namespace is labelled istio-injection=enabled
// or the Pod is labelled sidecar.istio.io/inject=true; sidecar.istio.io/
// inject=false (label or annotation) always wins (Required has the full
// rules). The webhook configuration in the spoke chart selects the same
// Pods with a namespaceSelector and an objectSelector, so the apiserver
// calls the webhook only for them; the handler checks again, reading
// namespace labels from a watch-backed cache (NamespaceCache), so that a
// hand-edited configuration cannot inject where it should not.
//
// # Templates
//
// What is injected comes from a ConfigMap (Istio's istio-sidecar-injector
// layout: key "config" with the policy, default templates and the templates
// themselves, key "values" with YAML or JSON values). A template is a Go
// text/template that renders a Pod fragment; fragments are merged into the
// Pod like strategic merge patches, in the order the Pod's
// inject.istio.io/templates annotation names them (default: sidecar).
// meshfed ships two (BuiltinTemplates):
//
//   - sidecar: istio-init and an istio-proxy Envoy pointing at the hub's
//     discovery and CA addresses, with CLUSTER_ID, NETWORK and the trust
//     domain, and Istio's volumes;
//   - grpc-agent: proxyless gRPC: GRPC_XDS_BOOTSTRAP in every application
//     container, a bootstrap volume, and meshfed's agent as a native
//     sidecar that writes the bootstrap and fetches certificates.
//
// A configuration is checked when it is loaded (each template is rendered
// for a sample Pod), so a bad edit of the ConfigMap is refused and the
// previous configuration stays in force (Watcher, Store).
//
// # Walk-through of one request
//
//	apiserver ──AdmissionReview(Pod CREATE)──► webhook.Server ──► Injector.Admit
//	  already injected (sidecar.istio.io/status)? → allowed, unchanged
//	  NamespaceCache.Labels + Required → not wanted? → allowed, unchanged
//	  Store.Current() → Config.Patch: render templates, merge, annotate,
//	  diff the JSON → JSONPatch → mutated
//
// Nothing on this path talks to the hub: the configuration and the
// namespace labels are in memory, so Pods keep being injected while the hub
// is unreachable. The Pod's proxies find the hub later, through the
// addresses the templates wrote.
package inject
