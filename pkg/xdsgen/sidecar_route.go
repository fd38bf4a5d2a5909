package xdsgen

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// SidecarRoutes returns the outbound HTTP route configurations of Envoy
// sidecars, one per port that has an HTTP-family service (reserved ports
// excepted), named SidecarRouteName(port) and sorted by name. Each has one
// virtual host per HTTP service on the port, named "<hostname>:<port>",
// whose domains are those of the proxyless routes (the hostname, the
// Kubernetes short forms, each bare and with ":<port>").
//
// A virtual host's routes are those of the VirtualService of its service's
// host in config (config.Host), translated for Envoy (see RouteNotes for
// what is left out), with the consistent-hash policies of each
// destination host's DestinationRule. Without one, or when none of its
// rules applies to the port, one route sends every path to ClusterName,
// with Istio's defaults: no timeout (0 disables Envoy's 15 s default;
// grpc-timeout headers are honoured uncapped) and Istio's default retry
// policy (without the previous-hosts predicate when the service's
// DestinationRule hashes, which would break the affinity). A nil config
// has no objects.
//
// The routes are the same for every sidecar of a RouteSet, whatever its
// namespace, so the short forms cannot depend on the client's namespace as Kubernetes DNS does: a domain that
// several services claim (echo.a and echo.b both claim "echo") is left out
// of all of them, because Envoy rejects a route configuration whose virtual
// hosts share a domain, and which service was meant is unknowable. A host
// that matches no virtual host gets Envoy's 404 (there is no allow-any
// passthrough host). opts is accepted for symmetry with the other
// generators; the routes do not depend on it. It is pure.
//
// These are the routes of the default RouteSet: no VirtualService match
// that names its clients (sourceLabels, sourceNamespace) is part of them,
// and every service is. SidecarSetRoutes gives those of other sets.
func SidecarRoutes(services []*model.MergedService, config *istioconfig.Snapshot, opts Options) []*routev3.RouteConfiguration {
	return SidecarSetRoutes(services, config, RouteSet{}, opts)
}

// SidecarSetRoutes returns the outbound HTTP route configurations of the
// Envoy sidecars of set: SidecarRoutes' (which it is for the default set)
// with the VirtualService matches on clients that set's class satisfies,
// and only the virtual hosts of the services (and ports) its scope sees
// (ScopedServices), so that a request for another host gets Envoy's 404.
// They are named SidecarRouteSetName(port, set). It is pure.
func SidecarSetRoutes(services []*model.MergedService, config *istioconfig.Snapshot, set RouteSet, _ Options) []*routev3.RouteConfiguration {
	var out []*routev3.RouteConfiguration
	for _, p := range outboundPorts(ScopedServices(services, Sidecar{Scope: set.Scope})) {
		if p.isHTTP() {
			out = append(out, sidecarRoute(p, config, set))
		}
	}
	sortByName(out)
	return out
}

func sidecarRoute(p outboundPort, config *istioconfig.Snapshot, set RouteSet) *routev3.RouteConfiguration {
	claims := map[string]int{}
	for _, ref := range p.http {
		for _, d := range domains(ref.svc, p.port) {
			claims[d]++
		}
	}
	rc := &routev3.RouteConfiguration{
		Name: SidecarRouteSetName(p.port, set),
		// The clusters arrive on CDS independently; do not reject a route
		// that names one not yet known (istiod's setting too).
		ValidateClusters: wrapperspb.Bool(false),
	}
	for _, ref := range p.http {
		var ds []string
		for _, d := range domains(ref.svc, p.port) {
			if claims[d] == 1 {
				ds = append(ds, d)
			}
		}
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
			Name:    ListenerName(ref.svc.Hostname, p.port),
			Domains: ds,
			Routes:  sidecarServiceRoutes(ref.svc.Hostname, p.port, config, set.Class),
		})
	}
	return rc
}

// sidecarServiceRoutes are the routes of the virtual host of port of h.
func sidecarServiceRoutes(h model.Hostname, port uint32, config *istioconfig.Snapshot, class istioconfig.RouteClass) []*routev3.Route {
	cfg := config.Host(h)
	drs := func(d model.Hostname) *istioconfig.DestinationRule { return config.Host(d).DestinationRule }
	if routes, _ := virtualServiceRoutes(ProxyEnvoy, h, port, cfg, class, config.DomainSuffix(), drs); len(routes) > 0 {
		return routes
	}
	r := outboundRoute(ClusterName(h, port))
	if hps := HashPolicies(cfg.DestinationRule, port, ""); len(hps) > 0 {
		r.GetRoute().HashPolicy = hps
		r.GetRoute().RetryPolicy.RetryHostPredicate = nil
	}
	return []*routev3.Route{r}
}

// outboundRoute is istiod's default outbound route to cluster.
func outboundRoute(cluster string) *routev3.Route {
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier:  &routev3.RouteAction_Cluster{Cluster: cluster},
			Timeout:           durationpb.New(0),
			MaxStreamDuration: noGRPCTimeoutCap(),
			RetryPolicy:       defaultRetryPolicy(),
		}},
	}
}

// noGRPCTimeoutCap honours a gRPC client's grpc-timeout header without a
// cap, and sets no stream duration limit: the non-deprecated form of
// istiod's max_grpc_timeout 0s.
func noGRPCTimeoutCap() *routev3.RouteAction_MaxStreamDuration {
	return &routev3.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)}
}

// defaultRetryPolicy is istiod's default for outbound HTTP routes: two
// retries on connection failures, refused streams, gRPC unavailable or
// cancelled and the statuses a x-envoy-retriable-status-codes header names,
// each on another host than before.
func defaultRetryPolicy() *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn:                       "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
		NumRetries:                    wrapperspb.UInt32(2),
		HostSelectionRetryMaxAttempts: 5,
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{
				TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{}),
			},
		}},
	}
}

// inboundRouteConfig is the inline route of an inbound HTTP chain on port:
// every request to the local app, without timeout; requests other than
// gRPC are retried when the connection to the app resets before the
// request was sent (istiod's inbound default).
func inboundRouteConfig(p InboundPort) *routev3.RouteConfiguration {
	action := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: InboundClusterName(p.Port)},
		Timeout:          durationpb.New(0),
		MaxStreamDuration: &routev3.RouteAction_MaxStreamDuration{
			MaxStreamDuration:    durationpb.New(0),
			GrpcTimeoutHeaderMax: durationpb.New(0),
		},
	}
	if p.Protocol != model.ProtocolGRPC {
		action.RetryPolicy = &routev3.RetryPolicy{RetryOn: "reset-before-request", NumRetries: wrapperspb.UInt32(2)}
	}
	return &routev3.RouteConfiguration{
		Name: InboundClusterName(p.Port),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "inbound|http|" + SidecarRouteName(p.Port),
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Name:   "default",
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: action},
			}},
		}},
		ValidateClusters: wrapperspb.Bool(false),
	}
}
