package istioconfig

import (
	"fmt"
	"maps"
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
	// Namespaced limits the Gateway to proxies of its own namespace: the
	// translation of a Gateway API Gateway. An Istio Gateway selects
	// proxies of any namespace.
	Namespaced bool
	// From is the Gateway API Gateway it was translated from; the zero
	// Key for an Istio Gateway.
	From Key
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
// proxy of namespace ns hold, oldest first. An Istio Gateway selects
// proxies of any namespace, as Istio's does by default
// (PILOT_SCOPE_GATEWAY_TO_NAMESPACE off); a translated Gateway API one
// those of its own namespace. An empty selector selects every gateway
// proxy.
func (s *Snapshot) GatewaysFor(ns string, labels model.Labels) []*Gateway {
	if s == nil {
		return nil
	}
	var out []*Gateway
	for _, g := range s.gateways.all {
		if (!g.Namespaced || g.Namespace == ns) && labels.Match(g.Spec.GetSelector()) {
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

// gatewayWarnings are what is wrong between Gateways and the
// VirtualServices bound to them, by object: a VirtualService naming a
// Gateway that does not exist; a server whose port another Gateway of the
// same proxies (equal selectors, or an empty one) serves with another
// protocol class, which the older Gateway keeps.
func gatewayWarnings(x *gatewayIndex, objects map[Key]Object) map[Key][]string {
	out := map[Key][]string{}
	for _, o := range objects {
		vs, ok := o.(*VirtualService)
		if !ok {
			continue
		}
		for i, name := range vs.Spec.GetGateways() {
			k, ok := GatewayKey(name, vs.Namespace)
			if !ok {
				continue
			}
			if _, exists := objects[k]; !exists {
				out[vs.Key] = append(out[vs.Key], fmt.Sprintf("spec.gateways[%d]: Gateway %s/%s does not exist: no gateway gets these routes through it", i, k.Namespace, k.Name))
			}
		}
	}
	type claim struct {
		gw    *Gateway
		index int
		class ServerClass
	}
	for i, a := range x.all { // oldest first: a keeps its ports
		for _, b := range x.all[i+1:] {
			if !sameProxies(a.Spec.GetSelector(), b.Spec.GetSelector()) {
				continue
			}
			ports := map[uint32]claim{}
			for j, srv := range a.Spec.GetServers() {
				if _, taken := ports[srv.GetPort().GetNumber()]; !taken {
					ports[srv.GetPort().GetNumber()] = claim{a, j, ClassOf(srv)}
				}
			}
			for j, srv := range b.Spec.GetServers() {
				c, taken := ports[srv.GetPort().GetNumber()]
				if taken && c.class != ClassOf(srv) {
					out[b.Key] = append(out[b.Key], fmt.Sprintf("spec.servers[%d]: port %d is served by Gateway %s/%s (servers[%d], %s) to the same gateway proxies; this server is left out there",
						j, srv.GetPort().GetNumber(), c.gw.Namespace, c.gw.Name, c.index, c.class))
				}
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// sameProxies reports whether Gateways of selectors a and b both select
// some proxy for sure: equal selectors, or an empty one (every proxy).
func sameProxies(a, b map[string]string) bool {
	return len(a) == 0 || len(b) == 0 || maps.Equal(a, b)
}

// ServerClass is what a server's listener does; servers of one class
// share a port.
type ServerClass string

// Server classes.
const (
	ClassHTTP ServerClass = "plaintext HTTP" // HTTP, HTTP2, GRPC, GRPC-WEB
	ClassTLS  ServerClass = "TLS"            // HTTPS and TLS: terminated or passed through
	ClassTCP  ServerClass = "TCP"            // every other protocol
)

// ClassOf returns srv's class, by its port's protocol.
func ClassOf(srv *networking.Server) ServerClass {
	switch strings.ToUpper(srv.GetPort().GetProtocol()) {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return ClassHTTP
	case "HTTPS", "TLS":
		return ClassTLS
	}
	return ClassTCP
}

// Warnings returns what is wrong between objects (not in any one of
// them), by the object it is reported on, each sorted; see
// gatewayWarnings. The map must not be modified.
func (s *Snapshot) Warnings() map[Key][]string {
	if s == nil {
		return nil
	}
	return s.warnings
}
