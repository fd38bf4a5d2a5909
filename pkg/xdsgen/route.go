package xdsgen

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/pkg/model"
)

// Routes returns one route configuration per port of svc, sorted by port,
// named RouteName. Each has a single virtual host whose domains are every
// authority a client may use for the service (the FQDN and the Kubernetes
// short forms, each bare and with ":<port>") and one route sending every path
// ("/" prefix) to ClusterName. Routes is pure; a nil svc yields nil.
func Routes(svc *model.Service) []*routev3.RouteConfiguration {
	ports := servicePorts(svc)
	if len(ports) == 0 {
		return nil
	}
	out := make([]*routev3.RouteConfiguration, 0, len(ports))
	for _, p := range ports {
		out = append(out, route(svc, p.Port))
	}
	return out
}

func route(svc *model.Service, port uint32) *routev3.RouteConfiguration {
	name := RouteName(svc.Hostname, port)
	return &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    name,
			Domains: domains(svc, port),
			Routes: []*routev3.Route{{
				Name:  "default",
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(svc.Hostname, port)},
				}},
			}},
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
