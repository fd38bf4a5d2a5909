package xdsgen

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Routes returns the proxyless gRPC route configurations of svc, one per
// port, sorted by port, named RouteName. Each has a single virtual host
// whose domains are every authority a client may use for the service (the
// FQDN and the Kubernetes short forms, each bare and with ":<port>").
//
// Its routes are those of cfg's VirtualService for the port, as grpc-go
// can follow them (see RouteNotes for what is left out); domainSuffix
// resolves the VirtualService's short destination hosts. Without a
// VirtualService, or when none of its rules applies to the port, one
// route sends every path ("/" prefix) to ClusterName, hashing by cfg's
// DestinationRule's consistentHash header if it has one. Routes is pure;
// a nil svc yields nil.
func Routes(svc *model.Service, cfg istioconfig.HostConfig, domainSuffix string) []*routev3.RouteConfiguration {
	ports := servicePorts(svc)
	if len(ports) == 0 {
		return nil
	}
	out := make([]*routev3.RouteConfiguration, 0, len(ports))
	for _, p := range ports {
		out = append(out, route(svc, p.Port, cfg, domainSuffix))
	}
	return out
}

func route(svc *model.Service, port uint32, cfg istioconfig.HostConfig, domainSuffix string) *routev3.RouteConfiguration {
	name := RouteName(svc.Hostname, port)
	routes, _ := virtualServiceRoutes(ProxyGRPC, svc.Hostname, port, cfg, istioconfig.RouteClass{}, domainSuffix, nil)
	if len(routes) == 0 {
		routes = []*routev3.Route{defaultProxylessRoute(svc.Hostname, port, cfg.DestinationRule)}
	}
	return &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    name,
			Domains: domains(svc, port),
			Routes:  routes,
		}},
	}
}

// defaultProxylessRoute sends every call to port of h.
func defaultProxylessRoute(h model.Hostname, port uint32, dr *istioconfig.DestinationRule) *routev3.Route {
	hps, _ := hashPoliciesFor(ProxyGRPC, dr, port, "")
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(h, port)},
			HashPolicy:       hps,
		}},
	}
}

// domains returns the virtual host domains of port of svc: each name a client
// may use as its authority, bare and with ":<port>". They are the hostname and,
// when the hostname has the Kubernetes form <name>.<ns>.svc.<domain>, the short
// forms <name>, <name>.<ns> and <name>.<ns>.svc, in that order, without
// duplicates. grpc-go matches the authority exactly (by default the dial
// target "<fqdn>:<port>").
func domains(svc *model.Service, port uint32) []string {
	hosts := []string{string(svc.Hostname)}
	if svc.Name != "" && svc.Namespace != "" {
		short := svc.Name + "." + svc.Namespace + ".svc"
		if strings.HasPrefix(string(svc.Hostname), short+".") {
			hosts = append(hosts, svc.Name, svc.Name+"."+svc.Namespace, short)
		}
	}
	p := ":" + strconv.FormatUint(uint64(port), 10)
	out := make([]string, 0, 2*len(hosts))
	for _, h := range hosts {
		out = append(out, h, h+p)
	}
	return out
}
