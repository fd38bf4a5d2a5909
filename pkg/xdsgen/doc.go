// Package xdsgen generates the xDS resources that proxyless gRPC clients
// (grpc-go's xDS resolver and balancers) and Envoy sidecars (Istio's
// pilot-agent with upstream Envoy) need to reach meshfed services.
//
// Everything in this package is pure: the generators take model values and
// return freshly built protos. There is no I/O, no goroutine, no clock and no
// mutable global state, so the same input always yields proto.Equal output,
// in a deterministic order suitable for golden files and for skipping no-op
// pushes. Cache memoizes results but is likewise pure; it is not safe for
// concurrent use.
//
// # Walk-through
//
// A gRPC client dials xds:///echo.demo.svc.cluster.local:8080. grpc-go then
// walks one chain of resources, each naming the next, and meshfed generates one
// chain per service port:
//
//	LDS  Listener             echo.demo.svc.cluster.local:8080       (ListenerName, Listeners)
//	      └ API listener: HttpConnectionManager, RDS over ADS, router filter
//	RDS  RouteConfiguration   echo.demo.svc.cluster.local:8080       (RouteName, Routes)
//	      └ one virtual host whose domains are the FQDN, the Kubernetes
//	        short forms, each with and without the port; prefix "/" → cluster
//	CDS  Cluster              outbound|8080||echo.demo.svc.cluster.local  (ClusterName, Clusters)
//	      └ type EDS over ADS, service_name = cluster name, ROUND_ROBIN
//	EDS  ClusterLoadAssignment outbound|8080||echo.demo.svc.cluster.local (LoadAssignments)
//
// Listeners, routes and clusters depend only on the model.Service, so they are
// the same for every proxy. Cache.Service rebuilds them only when the Service
// changes, never on an endpoint change; Cache.LoadAssignments rebuilds a
// group's assignments only when the registry hands out a new MergedService.
//
// Load assignments depend on who asks: endpoints are ordered into priorities
// by proximity to the client, which grpc-go's priority balancer uses for
// failover. Clients that would receive identical assignments form a
// ProxyGroup (same cluster and locality); the hub generates and marshals each
// assignment once per group and sends it to every member. Only a
// DestinationRule's localityLbSetting.distribute tells groups apart by
// zone and sub-zone; for every other rule, Cache builds the assignments
// once for all the zones of a cluster and region. The priorities are:
//
//	0  endpoints in the client's own cluster
//	1  endpoints of other clusters in the client's region (if the client has one)
//	2  everything else
//
// Empty classes are dropped and the rest renumbered from 0, because grpc-go
// rejects an assignment whose priorities have a gap. Inside a priority,
// endpoints are grouped into one LocalityLbEndpoints per (region, zone,
// subzone), weighted by the number of endpoints in it. A distribute entry
// of the DestinationRule whose from matches the client's locality
// replaces all this: one priority, of the localities its to patterns
// match, weighted as they say (distribute.go); Envoy clusters of such a
// rule carry locality_weighted_lb_config, which Envoy needs to honour
// locality weights, and grpc-go honours them by default. Only ready endpoints
// that declare a target port for the service port are included, and an
// address:port is emitted at most once (grpc-go rejects the whole assignment
// otherwise); when two clusters claim the same address, the closer one wins.
//
// # Plans
//
// Planner is what the hub's pusher drives: given the hostnames that changed
// and their new views, Plan returns a Plan, per shared type URL (LDS, RDS,
// CDS) and per proxy group (EDS), of the resources to upsert and the names
// to delete, diffed against what earlier plans wrote (proto.Equal
// resources are left out, and only written names are deleted). It keeps
// the names of each hostname's resources, so a removed port or service is
// deleted from every cache. AddGroup starts a group's cache with every
// service's assignments; ForgetGroup frees the group when its last proxy
// leaves (and Cache.ForgetGroup its memoized assignments). Inbound records
// the server-side listeners the hub builds on demand.
//
// The name functions (ClusterName, ListenerName, RouteName) and their parsers
// (ParseClusterName, ParseListenerName) let the hub map a resource name that a
// client subscribes to back to a hostname and port.
//
// # Istio configuration
//
// The generators take the Istio objects of a host (istioconfig.HostConfig)
// and say per proxy kind (ProxyKind: ProxyGRPC, ProxyEnvoy) what they make
// of them, generating only what that proxy accepts; RouteNotes and
// ClusterNotes list what a kind leaves out, with the field path and why.
//
// A VirtualService's HTTP rules become the routes of its hosts' route
// configurations (vsroute.go), in order, first match first: matches on
// path, headers, method and port; weighted destinations, to subsets by
// SubsetClusterName; timeout (grpc-go reads only max_stream_duration);
// retries (grpc-go only on gRPC codes); fault delay and abort as a
// per-route override of the fault filter, which every HTTP connection
// manager carries with an empty configuration so that a VirtualService
// never changes a listener; and, for Envoy only, header changes,
// rewrites, redirects, mirrors and CORS. A port no rule applies to keeps
// its default route.
//
// A DestinationRule adds, per port, one cluster per subset,
// outbound|<port>|<subset>|<fqdn>, next to the default one, each under
// the effective traffic policy of its port and subset, merged as istiod
// merges it (destinationrule.go): load balancer (consistentHash as a ring
// with the route's HashPolicies), connection pool as circuit breakers,
// outlier detection (for grpc-go translated into failure-percentage
// ejection, the only kind it has besides success rate). LoadAssignments
// adds per subset the assignment of the endpoints whose Pod labels hold
// the subset's labels (subset.go), with the default's priorities.
//
// # DNS-resolved services
//
// A ServiceEntry with resolution DNS or DNS_ROUND_ROBIN becomes a
// model.Service whose Resolution says so and whose DNSEndpoints are the
// names to resolve (dns.go). Its clusters keep their names, subset
// clusters included, but carry the names in an inline load assignment
// instead of EDS: Envoy gets STRICT_DNS (DNS) or LOGICAL_DNS
// (DNS_ROUND_ROBIN, first name only), family V4_PREFERRED; grpc-go, which
// has no STRICT_DNS and takes LOGICAL_DNS with exactly one endpoint, gets
// LOGICAL_DNS to the first name for both. A name without a usable host or
// port is dropped; without any, the hostname itself is resolved. DNS
// endpoints have no labels, so a subset cluster is the whole service
// under its subset's policy. There are no load assignments for them, and
// no auto mTLS (no Pod labels); neither is there for the clusters of a
// model.Service.External (MESH_EXTERNAL) service, whatever its endpoints'
// labels, but a DestinationRule's tls applies to both. ServiceNotes says
// what each kind leaves out.
//
// # Security (mTLS)
//
// Clients use Istio's auto mTLS: they send mutual TLS to an endpoint
// exactly when its Pod carries the injector's label
// security.istio.io/tlsMode=istio (TLSModeLabel) and the PeerAuthentication
// mode of its workload and target port is not DISABLE, where none sets a
// mode Options.DefaultMTLS: STRICT with Options.Security (off by default,
// because grpc-go rejects a cluster that names a certificate provider its
// bootstrap lacks), else DISABLE. grpc-go has no transport_socket_matches
// (it rejects a cluster that has them), so ServiceClusters decides per
// cluster (MTLSClusters): mutual TLS when none of the cluster's endpoints
// refuses it, an endpoint without Pod labels counting as taking it with
// Security. A secure cluster carries a transport socket
// envoy.transport_sockets.tls with an UpstreamTlsContext: identity from
// tls_certificate_provider_instance {"default", "default"}, roots from
// ca_certificate_provider_instance {"default"}, and SAN matchers for the
// SPIFFE IDs spiffe://<trust domain>/ns/<ns>/sa/<sa> of the service
// accounts of the service's endpoints (ServiceSANs). grpc-go v1.85 reads
// SAN matchers only from the deprecated match_subject_alt_names; Envoy
// prefers match_typed_subject_alt_names; both carry the same URIs. When no
// endpoint has a known service account there is no SAN matcher, and any
// certificate chaining to the roots is accepted. ServiceClusters depend on
// the endpoints and on the PeerAuthentications, so Cache does not memoize
// them, and a PeerAuthentication change must re-plan them.
//
// A DestinationRule's tls (from the effective policy of the cluster's port
// and subset) overrides auto mTLS, External and DNS services included
// (drtls.go): DISABLE is plaintext; ISTIO_MUTUAL is the mesh's mutual TLS
// to every endpoint, with the rule's sni and subjectAltNames when set;
// SIMPLE and MUTUAL originate TLS for Envoy (UpstreamTlsContext with the
// rule's SNI, else the hostname, ALPN "h2" or "http/1.1" by protocol, CA,
// CRL and client certificate files, SAN matchers, and, for credentialName
// and caCertCredentialName, SDS secrets "kubernetes://<name>" over ADS,
// which the hub does not serve, so such a cluster fails closed), and
// leave proxyless clusters to auto mTLS: grpc-go takes TLS only from its
// bootstrap's certificate providers. MTLSClusters follows the same
// decisions; ClusterNotes says what each kind leaves out.
//
// Servers built with grpc-go's xds.NewGRPCServer ask for the listener
// InboundListenerName(IP:port) (Istio's template
// "xds.istio.io/grpc/lds/inbound/%s"). InboundListener builds it from the
// address and the workload's istioconfig.WorkloadSecurity: one filter chain
// whose HttpConnectionManager has an inline route configuration (virtual
// host "*", prefix "/", non_forwarding_action) and the authorization
// filters (AuthzHTTPFilters) before the router filter. The inbound mode of
// a port is that of the workload's PeerAuthentications
// (WorkloadSecurity.MTLS), and Options.DefaultMTLS (STRICT with Security,
// else DISABLE) where none sets one. STRICT and PERMISSIVE add a
// DownstreamTlsContext that requires client certificates (no SAN matchers:
// grpc-go rejects them on the server side); DISABLE is plaintext.
// PERMISSIVE cannot be both for grpc-go, whose filter chain match has no
// TLS inspector (gRFC A36), so it requires mTLS, which mesh clients speak.
//
// # Envoy sidecars
//
// A sidecar (Istio node ID sidecar~<ip>~<pod>.<ns>~...) gets resources in
// the shape istiod gives its sidecars, so that Istio's tools and habits
// carry over, built from upstream Envoy extensions only (Istio's own
// filters, such as metadata exchange and istio.stats, do not exist in
// upstream Envoy, which rejects them). SidecarInbound finds the ports the
// pod serves; SidecarListeners, SidecarRoutes and SidecarClusters build
// the rest, sorted by name. For a pod 10.1.0.1 serving echo's HTTP port
// 8080 on target port 8081, in a mesh that also has a TCP service on 9000,
// in REDIRECT (iptables) mode:
//
//	LDS  virtualOutbound   0.0.0.0:15001, use_original_dst: each redirected
//	                       connection goes to the listener of its original
//	                       port, the rest to PassthroughCluster
//	     0.0.0.0_8080      not bound; HttpConnectionManager, RDS "8080"
//	     0.0.0.0_9000      not bound; tcp_proxy to outbound|9000||<fqdn>
//	     virtualInbound    0.0.0.0:15006, original_dst listener filter; one
//	                       chain per served port, matched by destination
//	                       port: HCM (or tcp_proxy) to inbound|8081||
//	RDS  8080              one virtual host per HTTP service on 8080
//	                       (domains as for proxyless), prefix "/" to
//	                       outbound|8080||<fqdn>, no timeout, Istio's retries
//	CDS  outbound|8080||<fqdn>  EDS over ADS; the same ClusterLoadAssignment
//	                       (LoadAssignments, per ProxyGroup) as proxyless
//	     inbound|8081||    STATIC 127.0.0.1:8081, the app
//	     PassthroughCluster, BlackHoleCluster
//
// TPROXY is REDIRECT with transparent virtual listeners. NONE (no
// iptables: tests, VMs) binds for real: outbound listeners on
// 127.0.0.1:<port> (named "127.0.0.1_<port>"), inbound ones on the pod IP
// ("10.1.0.1_8081"), and no virtual listeners; the app listens on
// 127.0.0.1 only, so a port it serves gets no outbound listener. Ports of
// Envoy and pilot-agent (15000-15090) get no listener. Without service VIPs
// the outbound listener of a port serves every service on it: HTTP ones
// are told apart by authority, a TCP port goes to its first service in
// hostname order, and HTTP wins a port that both use.
//
// Outbound clusters use auto mTLS in istiod's shape. A cluster one of
// whose endpoints takes mutual TLS (as for proxyless clients; the hub's
// --xds-mtls is Options.Security) has two transport_socket_matches:
// "tlsMode-istio" for the endpoints whose metadata says {tlsMode: "istio"}
// (LoadAssignments sets it from the Pod label alone, so that assignments
// stay free of configuration), speaking Istio mutual TLS with certificate
// and roots from pilot-agent's SDS secrets "default" and "ROOTCA", fetched
// over gRPC from the static cluster "sds-grpc" of pilot-agent's bootstrap
// (set_node_on_first_message_only, initial_fetch_timeout 0, exactly as
// istiod references them), SAN check against ServiceSANs, SNI
// outbound_.<port>_._.<fqdn>, ALPN "istio" (and "h2" for HTTP2 and GRPC
// ports); then "tlsMode-disabled", plaintext (raw_buffer), for the other
// endpoints. A cluster none of whose endpoints takes mutual TLS is
// plaintext. Since the metadata cannot say DISABLE, an injected endpoint
// whose mode is DISABLE gets mutual TLS when another endpoint of its
// cluster takes it. Inbound, the pod's PeerAuthentications
// (Sidecar.Security) decide the mode of each workload port, and
// Options.DefaultMTLS (STRICT with Security, else DISABLE) that of a port
// none sets. A STRICT port has one chain that requires a client
// certificate of the mesh and matches transport "tls", so a plaintext
// connection is refused; a DISABLE port one plaintext chain; a PERMISSIVE
// port both, the plaintext one ("<chain>-plaintext") matching
// "raw_buffer", told apart by the TLS inspector, which a listener has
// when one of its chains matches on transport. HTTP chains set
// x-forwarded-client-cert to the client's SPIFFE ID (and drop the
// client's own over plaintext) and run the authorization filters
// (AuthzHTTPFilters) before the router; TCP chains run AuthzNetworkFilters
// before the TCP proxy.
//
// A Sidecar object (Sidecar.Scope) narrows the outbound side to the
// services its egress hosts name (ScopedServices), and with
// outboundTrafficPolicy REGISTRY_ONLY sends what no listener takes to
// BlackHoleCluster. Its routes are narrowed alike: the sidecars of one
// RouteSet (a route class, the VirtualService matches on clients they
// satisfy, under one Sidecar scope) share routes named
// SidecarRouteSetName, holding only the virtual hosts they see. Its
// ingress listeners replace the inbound ports the Services give
// (SidecarIngress).
//
// The sidecar routes and clusters reuse the proxyless names, but not their
// content (HTTP/2 options, TLS, circuit breakers), so the hub keeps them
// in caches of their own; only the load assignments are shared.
// e2e/envoyvalidate_test.go runs upstream Envoy 1.40 in validate mode on
// them.
package xdsgen
