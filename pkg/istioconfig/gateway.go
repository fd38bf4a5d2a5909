package istioconfig

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// Gateway is a valid Istio Gateway: the servers (ports, hosts, TLS) that
// the gateway proxies its selector matches serve.
type Gateway struct {
	Meta
	Spec *networking.Gateway
}

func (g *Gateway) meta() Meta { return g.Meta }

// MeshGateway is the reserved gateway name that binds a VirtualService to
// the mesh's sidecars.
const MeshGateway = "mesh"

// gatewayIndex holds the Gateways and the VirtualServices bound to each.
type gatewayIndex struct {
	// all are the Gateways, oldest first (the order istiod merges their
	// servers in: the oldest wins a port).
	all []*Gateway
	// routes are the VirtualServices naming each Gateway in
	// spec.gateways, oldest first.
	routes map[Key][]*VirtualService
}

func (x *gatewayIndex) add(o Object) {
	switch o := o.(type) {
	case *Gateway:
		x.all = append(x.all, o)
	case *VirtualService:
		for _, name := range o.Spec.GetGateways() {
			k, ok := GatewayKey(name, o.Namespace)
			if !ok {
				continue
			}
			if x.routes == nil {
				x.routes = map[Key][]*VirtualService{}
			}
			if !slices.Contains(x.routes[k], o) {
				x.routes[k] = append(x.routes[k], o)
			}
		}
	}
}

func (x *gatewayIndex) sort() {
	oldest := func(a, b Meta) int {
		switch {
		case a.older(b):
			return -1
		case b.older(a):
			return 1
		}
		return 0
	}
	slices.SortFunc(x.all, func(a, b *Gateway) int { return oldest(a.Meta, b.Meta) })
	for _, vs := range x.routes {
		slices.SortFunc(vs, func(a, b *VirtualService) int { return oldest(a.Meta, b.Meta) })
	}
}

// GatewayKey returns the key of the Gateway that name, as a
// VirtualService of namespace ns writes it in spec.gateways or in a
// match's gateways, refers to: "<ns>/<name>", or "<name>" in ns. It
// reports false for "mesh", which names the sidecars.
func GatewayKey(name, ns string) (Key, bool) {
	if name == MeshGateway || name == "" {
		return Key{}, false
	}
	if gwNS, gwName, ok := strings.Cut(name, "/"); ok {
		return Key{Kind: validate.KindGateway, Namespace: gwNS, Name: gwName}, true
	}
	return Key{Kind: validate.KindGateway, Namespace: ns, Name: name}, true
}

// GatewaysFor returns the Gateways whose selector the labels of a gateway
// proxy hold, oldest first. A Gateway selects proxies of any namespace,
// as Istio's does by default (PILOT_SCOPE_GATEWAY_TO_NAMESPACE off); an
// empty selector selects every gateway proxy.
func (s *Snapshot) GatewaysFor(labels model.Labels) []*Gateway {
	if s == nil {
		return nil
	}
	var out []*Gateway
	for _, g := range s.gateways.all {
		if labels.Match(g.Spec.GetSelector()) {
			out = append(out, g)
		}
	}
	return out
}

// Gateways returns every Gateway, oldest first.
func (s *Snapshot) Gateways() []*Gateway {
	if s == nil {
		return nil
	}
	return s.gateways.all
}

// GatewayRoutes returns the VirtualServices bound to the Gateway of key k
// (which name it in spec.gateways), oldest first. The caller must not
// modify the slice.
func (s *Snapshot) GatewayRoutes(k Key) []*VirtualService {
	if s == nil {
		return nil
	}
	return s.gateways.routes[k]
}

// ServerHost is one host of a Gateway server: the namespace whose
// VirtualServices may bind to it ("*" for any) and the hostname pattern
// ("*", "*.example.com" or a name).
type ServerHost struct {
	Namespace string
	Host      string
}

// Admits reports whether a VirtualService of namespace ns may bind to h.
func (h ServerHost) Admits(ns string) bool { return h.Namespace == "*" || h.Namespace == ns }

// ServerHosts parses the hosts of a server of the Gateway g, written
// "[<ns>/]<host>" where ns is "*" (the default), "." (g's namespace) or a
// namespace name.
func (g *Gateway) ServerHosts(srv *networking.Server) []ServerHost {
	out := make([]ServerHost, 0, len(srv.GetHosts()))
	for _, h := range srv.GetHosts() {
		ns, host, ok := strings.Cut(h, "/")
		if !ok {
			ns, host = "*", h
		}
		if ns == "." {
			ns = g.Namespace
		}
		out = append(out, ServerHost{Namespace: ns, Host: strings.ToLower(host)})
	}
	return out
}

// HostIntersection returns the names under both patterns a and b ("*",
// "*.suffix" or a name): the more specific of the two when one covers
// the other, false when they share no name. A VirtualService host and a
// Gateway server host meet there, as istiod intersects them.
func HostIntersection(a, b string) (string, bool) {
	a, b = strings.ToLower(a), strings.ToLower(b)
	switch {
	case hostMatches(a, b):
		return b, true
	case hostMatches(b, a):
		return a, true
	}
	return "", false
}
