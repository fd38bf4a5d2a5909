// Package validate checks Istio networking and security configuration:
// VirtualService, DestinationRule, ServiceEntry and Sidecar in
// networking.istio.io v1, v1beta1 and v1alpha3 (one schema; the Go types
// of v1 and v1beta1 are aliases of v1alpha3's), and PeerAuthentication and
// AuthorizationPolicy in security.istio.io v1 and v1beta1 (GroupOf,
// VersionsOf).
//
// A spec is decoded into istio.io/api's protos with protojson. Before that,
// its JSON is walked against the message descriptors, so an unknown or
// misspelt field is refused with its full path ("spec.http[0].rout: unknown
// field") instead of being dropped silently, and a value of the wrong JSON
// type is refused with its path too. Durations may be Go durations ("30ms"),
// as Istio accepts them, as well as protojson's "0.030s". The decoded
// message is then checked by a focused validator per kind (VirtualService,
// DestinationRule, ServiceEntry, Sidecar, PeerAuthentication,
// AuthorizationPolicy). Messages name the field as the user wrote it:
//
//	spec.http[0].route[1].destination.host: required
//	spec.http[0].route: weights must add up to 100, got 90
//	spec.egress[0].hosts[1]: "reviews" must be of the form namespace/dnsName, ...
//	spec.portLevelMtls: portLevelMtls requires a workload selector
//
// The validators cover the rules that catch real mistakes — hosts, gateway
// and namespace references, ports, weights, percentages, durations,
// regular expressions, TLS settings, subset names, ServiceEntry resolution
// against its hosts and endpoints, Sidecar egress host format — not every
// rule of Istio's own validation package, which is not a dependency.
// Deliberate differences: a VirtualService must name hosts (delegate
// VirtualServices without hosts are not supported), and several weighted
// destinations must add up to exactly 100, Istio's classic rule.
//
// The spoke's admission webhook (spoke/validate) and the hub's config
// watcher (hub/istioconfig) both run these checks.
package validate
