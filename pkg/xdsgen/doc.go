// Package xdsgen generates the xDS resources that proxyless gRPC clients
// (grpc-go's xDS resolver and balancers) need to reach meshfed services.
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
// ProxyGroup (same cluster, same region); the hub generates and marshals each
// assignment once per group and sends it to every member. The priorities are:
//
//	0  endpoints in the client's own cluster
//	1  endpoints of other clusters in the client's region (if the client has one)
//	2  everything else
//
// Empty classes are dropped and the rest renumbered from 0, because grpc-go
// rejects an assignment whose priorities have a gap. Inside a priority,
// endpoints are grouped into one LocalityLbEndpoints per (region, zone,
// subzone), weighted by the number of endpoints in it. Only ready endpoints
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
// # Security (mTLS)
//
// Security is optional per generation (Options.Security, off by default,
// because grpc-go rejects a cluster that names a certificate provider its
// bootstrap lacks). With it, ServiceClusters adds to each cluster a
// transport socket envoy.transport_sockets.tls with an UpstreamTlsContext:
// identity from tls_certificate_provider_instance {"default", "default"},
// roots from ca_certificate_provider_instance {"default"}, and SAN matchers
// for the SPIFFE IDs spiffe://<trust domain>/ns/<ns>/sa/<sa> of the service
// accounts of the service's endpoints (ServiceSANs). grpc-go v1.85 reads
// SAN matchers only from the deprecated match_subject_alt_names; Envoy
// prefers match_typed_subject_alt_names; both carry the same URIs. When no
// endpoint has a known service account there is no SAN matcher, and any
// certificate chaining to the roots is accepted. Secure clusters depend on
// the endpoints, so Cache does not memoize them.
//
// Servers built with grpc-go's xds.NewGRPCServer ask for the listener
// InboundListenerName(IP:port) (Istio's template
// "xds.istio.io/grpc/lds/inbound/%s"). InboundListener builds it from the
// address alone: one filter chain whose HttpConnectionManager has an inline
// route configuration (virtual host "*", prefix "/", non_forwarding_action)
// and the router filter, plus, with Security, a DownstreamTlsContext that
// requires client certificates (no SAN matchers: grpc-go rejects them on
// the server side).
package xdsgen
