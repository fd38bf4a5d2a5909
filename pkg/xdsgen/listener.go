package xdsgen

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshfed/meshfed/pkg/model"
)

// routerFilterName names the terminal HTTP filter. grpc-go identifies filters
// by the type of their typed_config; the name only has to be unique.
const routerFilterName = "envoy.filters.http.router"

// Listeners returns one client-side API listener per port of svc (ports
// outside 1..65535 are skipped, duplicates collapsed), sorted by port. Each is
// named ListenerName and holds an HttpConnectionManager that fetches the
// route configuration RouteName over ADS; its HTTP filters are the fault
// filter, inert unless a route overrides its configuration (a
// VirtualService fault), and the router filter, last as grpc-go requires.
// Listeners is pure; a nil svc yields nil.
func Listeners(svc *model.Service) []*listenerv3.Listener {
	ports := servicePorts(svc)
	if len(ports) == 0 {
		return nil
	}
	out := make([]*listenerv3.Listener, 0, len(ports))
	for _, p := range ports {
		out = append(out, listener(svc.Hostname, p.Port))
	}
	return out
}

func listener(h model.Hostname, port uint32) *listenerv3.Listener {
	name := ListenerName(h, port)
	hcm := &hcmv3.HttpConnectionManager{
		// Envoy requires a stat prefix; grpc-go ignores it.
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: RouteName(h, port),
		}},
		HttpFilters: []*hcmv3.HttpFilter{faultFilter(), routerFilter()},
	}
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
	}
}

// faultFilter injects the faults that a route's typed_per_filter_config
// names; its own configuration is empty, so it does nothing elsewhere
// (grpc-go builds no interceptor for it, Envoy injects nothing).
func faultFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name:       faultFilterName,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&faultv3.HTTPFault{})},
	}
}

// corsFilter applies the CORS policies of routes (Envoy only: grpc-go
// refuses an HCM with a filter it does not know).
func corsFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name:       corsFilterName,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&corsv3.Cors{})},
	}
}

// routerFilter is the terminal filter of every HCM.
func routerFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name:       routerFilterName,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
	}
}
