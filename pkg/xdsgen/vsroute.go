package xdsgen

import (
	"fmt"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// Names of the HTTP filters that VirtualService routes configure per
// route. Every HCM that may carry such routes has the filter (with an
// empty, inert configuration), so a VirtualService change never needs a
// listener change.
const (
	faultFilterName = "envoy.filters.http.fault"
	corsFilterName  = "envoy.filters.http.cors"
)

// RouteNote says which part of a VirtualService was left out of the
// routes of one proxy kind, and why. The hub reports notes in the
// object's status; they are not errors: the rest of the object applies.
type RouteNote struct {
	// Object is the VirtualService.
	Object istioconfig.Key
	// Kind is the proxy kind the part was left out for.
	Kind ProxyKind
	// Field is the path of the part, e.g. "spec.http[2].match[0].sourceLabels".
	Field string
	// Reason says why, e.g. "not supported for proxyless gRPC".
	Reason string
}

func (n RouteNote) String() string {
	return n.Object.String() + " " + n.Field + ": " + n.Reason + " (" + n.Kind.String() + ")"
}

// RouteNotes returns what Routes (kind ProxyGRPC) or SidecarRoutes (kind
// ProxyEnvoy) leave out of cfg's VirtualService for svc, over all of
// svc's ports, without duplicates, in field order. It is pure.
func RouteNotes(kind ProxyKind, svc *model.Service, cfg istioconfig.HostConfig, domainSuffix string) []RouteNote {
	var out []RouteNote
	for _, p := range servicePorts(svc) {
		_, notes := virtualServiceRoutes(kind, svc.Hostname, p.Port, cfg, istioconfig.RouteClass{}, domainSuffix, nil)
		for _, n := range notes {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// destinationRules looks up the DestinationRule of a destination host
// (for its consistent-hash policy); nil when unknown.
type destinationRules func(model.Hostname) *istioconfig.DestinationRule

// virtualServiceRoutes translates the HTTP rules of cfg's VirtualService
// into the routes of port of host h for kind, with the notes on what was
// left out. It returns no routes when there is no VirtualService or none
// of its rules applies to the port: the caller then keeps its default
// route, as istiod does. drs may be nil: then only h's own
// DestinationRule (cfg's) is known. class is the Envoy sidecars' the
// routes are for: a match on the client (sourceLabels, sourceNamespace)
// applies only when class satisfies it; proxyless gRPC clients, which
// share their routes, get no such match.
//
// Istio's semantics are kept: rules in order, the first match wins; the
// matches of a rule are alternatives (one route each), the conditions of
// a match all hold. A rule or match that a proxy kind would evaluate
// differently is left out with a note rather than generated wrong; a
// field whose absence leaves the matching and the destination intact
// (mirror, CORS, header changes for gRPC) is dropped with a note.
func virtualServiceRoutes(kind ProxyKind, h model.Hostname, port uint32, cfg istioconfig.HostConfig, class istioconfig.RouteClass, domainSuffix string, drs destinationRules) ([]*routev3.Route, []RouteNote) {
	vs := cfg.VirtualService
	if vs == nil || vs.Spec == nil {
		return nil, nil
	}
	if drs == nil {
		drs = func(d model.Hostname) *istioconfig.DestinationRule {
			if d == h {
				return cfg.DestinationRule
			}
			return nil
		}
	}
	t := &translator{kind: kind, can: kind.Can(), port: port, vs: vs, class: class, domainSuffix: domainSuffix, drs: drs}
	var out []*routev3.Route
	for i, rule := range vs.Spec.GetHttp() {
		routes, catchAll := t.rule(fmt.Sprintf("spec.http[%d]", i), rule)
		out = append(out, routes...)
		if catchAll {
			// Nothing after a catch-all can match.
			break
		}
	}
	return out, t.notes
}

// translator holds what the translation of one VirtualService for one
// port and proxy kind needs, and collects its notes.
type translator struct {
	kind         ProxyKind
	can          *Capabilities
	port         uint32
	vs           *istioconfig.VirtualService
	class        istioconfig.RouteClass
	domainSuffix string
	drs          destinationRules
	notes        []RouteNote
	// gateway is the Gateway the routes are for; the zero Key means the
	// mesh's sidecars and proxyless clients.
	gateway istioconfig.Key
	// destPort is the port of a destination that names none, by its
	// host; nil means the port being built (the mesh's rule).
	destPort func(h model.Hostname, def uint32) uint32
}

func (t *translator) note(field, format string, args ...any) {
	t.notes = append(t.notes, RouteNote{Object: t.vs.Key, Kind: t.kind, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// lacks notes, when the kind lacks l, that field was left out (what says
// how: "rule left out", "dropped"), and reports whether it does.
func (t *translator) lacks(l Lack, field, what string) bool {
	if l.Can() {
		return false
	}
	t.note(field, "%s; %s", l, what)
	return true
}

// rule translates one HTTP rule into one route per applicable match.
// catchAll reports that a route matches every request, so later rules
// are unreachable.
func (t *translator) rule(p string, r *networking.HTTPRoute) (routes []*routev3.Route, catchAll bool) {
	if !t.ruleSupported(p, r) {
		return nil, false
	}
	matches := r.GetMatch()
	if len(matches) == 0 {
		matches = []*networking.HTTPMatchRequest{nil}
	}
	for j, m := range matches {
		mp := fmt.Sprintf("%s.match[%d]", p, j)
		rm, ok := t.match(mp, m)
		if !ok {
			continue
		}
		route, ok := t.route(p, r, m, rm)
		if !ok {
			// The action cannot be built: no match of the rule can be.
			return nil, false
		}
		if err := route.ValidateAll(); err != nil {
			// Validation accepts some values that the proxies refuse (a
			// control character in an authority, say); one such route
			// would have the whole route configuration refused.
			t.note(p, "the proxy would refuse the route: %v; rule left out", err)
			return nil, false
		}
		routes = append(routes, route)
		if isCatchAll(rm) {
			return routes, true
		}
	}
	return routes, false
}

// ruleSupported reports whether the rule's action exists for the proxy
// kind, noting why not.
func (t *translator) ruleSupported(p string, r *networking.HTTPRoute) bool {
	switch {
	case r.GetDelegate() != nil:
		t.note(p+".delegate", "delegate VirtualServices are not supported yet; rule left out")
		return false
	case r.GetRedirect() != nil && t.lacks(t.can.Redirect, p+".redirect", "rule left out"):
		return false
	case r.GetDirectResponse() != nil && t.lacks(t.can.DirectResponse, p+".directResponse", "rule left out"):
		return false
	case (r.GetRewrite().GetUri() != "" || r.GetRewrite().GetUriRegexRewrite() != nil) &&
		t.lacks(t.can.PathRewrite, p+".rewrite.uri", "rule left out"):
		// Without the rewrite the call would reach another path.
		return false
	case r.GetRedirect() == nil && r.GetDirectResponse() == nil && len(r.GetRoute()) == 0:
		t.note(p+".route", "no destination; rule left out")
		return false
	}
	if rr := r.GetRewrite().GetUriRegexRewrite(); rr != nil && (rr.GetMatch() == "" || regexTooLarge(rr.GetMatch())) {
		t.note(p+".rewrite.uriRegexRewrite.match", "empty, invalid or too large for Envoy's RE2; rule left out")
		return false
	}
	if dr := r.GetDirectResponse(); dr != nil && len(directResponseBody(dr)) > maxDirectResponseBody {
		t.note(p+".directResponse.body", "longer than Envoy's %d-byte limit; rule left out", maxDirectResponseBody)
		return false
	}
	return true
}

// maxDirectResponseBody is Envoy's default max_direct_response_body_size_bytes.
const maxDirectResponseBody = 4096

// isCatchAll reports whether m matches every request.
func isCatchAll(m *routev3.RouteMatch) bool {
	return m.GetPrefix() == "/" && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 &&
		m.GetRuntimeFraction() == nil && m.GetCaseSensitive() == nil
}
