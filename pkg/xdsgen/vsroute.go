package xdsgen

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
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

// ---- matches ----

// match translates one match of a rule (nil: the rule has none, which
// matches everything). ok is false when the match does not apply to this
// port or proxy kind, or the kind cannot express it (noted).
func (t *translator) match(p string, m *networking.HTTPMatchRequest) (*routev3.RouteMatch, bool) {
	out := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return out, true
	}
	if m.GetPort() != 0 && m.GetPort() != t.port {
		return nil, false
	}
	if gws := m.GetGateways(); len(gws) > 0 {
		// Istio ignores sourceLabels and sourceNamespace when gateways are
		// named; a match for other gateways never applies to the mesh.
		if !slices.Contains(gws, "mesh") {
			return nil, false
		}
	} else if !t.sourceAdmits(p, m) {
		return nil, false
	}
	if f := oversizedRegex(m); f != "" {
		t.note(p+"."+f, "regex too large for Envoy's RE2 program size limit; match left out")
		return nil, false
	}
	ok := t.uriMatch(p, m, out)
	ok = ok && t.headerMatches(p+".headers", m.GetHeaders(), false, out)
	ok = ok && t.headerMatches(p+".withoutHeaders", m.GetWithoutHeaders(), true, out)
	ok = ok && t.pseudoHeaderMatches(p, m, out)
	ok = ok && t.queryMatches(p+".queryParams", m.GetQueryParams(), out)
	return out, ok
}

// Limits on regexes, which Envoy compiles with RE2 and refuses (the whole
// route configuration) beyond its max program size: istiod's validation
// caps their length, and pilot-agent's bootstrap raises the program size
// limit to 32768. Go's compiled program is smaller than RE2's (RE2
// expands character classes into UTF-8 byte ranges), hence the margin.
const (
	maxRegexLength      = 1024
	maxRegexProgramSize = 4096
)

// regexTooLarge reports whether Envoy might refuse regex (valid RE2).
func regexTooLarge(regex string) bool {
	if regex == "" {
		return false
	}
	if len(regex) > maxRegexLength {
		return true
	}
	re, err := syntax.Parse(regex, syntax.Perl)
	if err != nil {
		return true
	}
	prog, err := syntax.Compile(re.Simplify())
	return err != nil || len(prog.Inst) > maxRegexProgramSize
}

// oversizedRegex names the first field of m whose regex is too large, or
// returns "".
func oversizedRegex(m *networking.HTTPMatchRequest) string {
	for _, f := range []struct {
		name string
		sm   *networking.StringMatch
	}{{"uri", m.GetUri()}, {"method", m.GetMethod()}, {"authority", m.GetAuthority()}, {"scheme", m.GetScheme()}} {
		if regexTooLarge(f.sm.GetRegex()) {
			return f.name
		}
	}
	for _, f := range []struct {
		name string
		ms   map[string]*networking.StringMatch
	}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}, {"queryParams", m.GetQueryParams()}} {
		for _, k := range sortedKeys(f.ms) {
			if regexTooLarge(f.ms[k].GetRegex()) {
				return f.name + "[" + k + "]"
			}
		}
	}
	return ""
}

// sourceAdmits reports whether the match's conditions on the client
// (sourceLabels, sourceNamespace) hold for the proxies of t's class.
// Proxyless gRPC clients share their listeners and routes (asked for by
// name, one resource for every client), so no condition on the client can
// be evaluated for them: such a match is left out, noted.
func (t *translator) sourceAdmits(p string, m *networking.HTTPMatchRequest) bool {
	if len(m.GetSourceLabels()) == 0 && m.GetSourceNamespace() == "" {
		return true
	}
	f := ".sourceLabels"
	if len(m.GetSourceLabels()) == 0 {
		f = ".sourceNamespace"
	}
	if t.lacks(t.can.ClientMatch, p+f, "match left out") {
		return false
	}
	return t.class.Admits(m)
}

func (t *translator) uriMatch(p string, m *networking.HTTPMatchRequest, out *routev3.RouteMatch) bool {
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		out.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		out.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		out.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	}
	if m.GetIgnoreUriCase() {
		// Both kinds honour case_sensitive for exact and prefix paths (and,
		// as Istio documents, neither for regexes).
		out.CaseSensitive = wrapperspb.Bool(false)
	}
	return true
}

// headerMatches adds a matcher per header, in name order; invert for
// withoutHeaders.
func (t *translator) headerMatches(p string, headers map[string]*networking.StringMatch, invert bool, out *routev3.RouteMatch) bool {
	for _, name := range sortedKeys(headers) {
		hp := p + "[" + name + "]"
		if !validHeaderName(name) {
			t.note(hp, "not a valid HTTP header name; match left out")
			return false
		}
		if strings.HasPrefix(name, ":") && t.lacks(t.can.PseudoHeaderMatch, hp, "match left out") {
			return false
		}
		sm := headers[name]
		hm := headerMatcher(name, sm)
		if invert {
			hm.InvertMatch = true
		}
		if invert && !hm.GetPresentMatch() {
			// grpc-go fails every value matcher on a missing header,
			// inverted or not; Istio's withoutHeaders matches it.
			if t.lacks(t.can.MissingHeaderMatch, hp, "match left out") {
				return false
			}
			hm.TreatMissingHeaderAsEmpty = true
		}
		out.Headers = append(out.Headers, hm)
	}
	return true
}

// headerMatcher matches header name with sm; an empty sm is a presence
// check.
func headerMatcher(name string, sm *networking.StringMatch) *routev3.HeaderMatcher {
	hm := &routev3.HeaderMatcher{Name: name}
	if m := stringMatcher(sm); m != nil {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: m}
	} else {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
	}
	return hm
}

// stringMatcher is sm as an Envoy matcher; nil for an empty sm.
func stringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher {
	switch m := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.Exact}}
	case *networking.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: m.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: m.Regex}}}
	}
	return nil
}

// pseudoHeaderMatches translates method, authority and scheme, which
// Envoy matches as pseudo-headers. grpc-go sees none of them, but every
// gRPC call is a POST, so a method match is decided here.
func (t *translator) pseudoHeaderMatches(p string, m *networking.HTTPMatchRequest, out *routev3.RouteMatch) bool {
	if sm := m.GetMethod(); sm != nil {
		if !t.can.MethodMatch.Can() {
			if !matchesString(sm, "POST") {
				return false // never matches a gRPC call: no route needed
			}
		} else {
			out.Headers = append(out.Headers, headerMatcher(":method", sm))
		}
	}
	for _, f := range []struct {
		field, header string
		sm            *networking.StringMatch
		lack          Lack
	}{{"authority", ":authority", m.GetAuthority(), t.can.AuthorityMatch}, {"scheme", ":scheme", m.GetScheme(), t.can.SchemeMatch}} {
		if f.sm == nil {
			continue
		}
		if t.lacks(f.lack, p+"."+f.field, "match left out") {
			return false
		}
		out.Headers = append(out.Headers, headerMatcher(f.header, f.sm))
	}
	return true
}

// fullMatch reports whether regex (RE2, validated) matches all of s.
func fullMatch(regex, s string) bool {
	re, err := regexp.Compile("^(?:" + regex + ")$")
	return err == nil && re.MatchString(s)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// matchesString evaluates sm (validated: a regex compiles) on s.
func matchesString(sm *networking.StringMatch, s string) bool {
	switch m := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return s == m.Exact
	case *networking.StringMatch_Prefix:
		return strings.HasPrefix(s, m.Prefix)
	case *networking.StringMatch_Regex:
		return fullMatch(m.Regex, s)
	}
	return true
}

func (t *translator) queryMatches(p string, params map[string]*networking.StringMatch, out *routev3.RouteMatch) bool {
	if len(params) == 0 {
		return true
	}
	if t.lacks(t.can.QueryMatch, p, "match left out") {
		return false
	}
	for _, name := range sortedKeys(params) {
		qm := &routev3.QueryParameterMatcher{Name: name}
		if sm := stringMatcher(params[name]); sm != nil {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm}
		} else {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		}
		out.QueryParameters = append(out.QueryParameters, qm)
	}
	return true
}

// ---- actions ----

// route builds the route of rule r for one of its matches (m, translated
// to rm).
func (t *translator) route(p string, r *networking.HTTPRoute, m *networking.HTTPMatchRequest, rm *routev3.RouteMatch) (*routev3.Route, bool) {
	out := &routev3.Route{Name: routeName(r, m), Match: rm}
	var lone *routev3.WeightedCluster_ClusterWeight
	switch {
	case r.GetRedirect() != nil:
		out.Action = t.redirect(r.GetRedirect())
	case r.GetDirectResponse() != nil:
		out.Action = &routev3.Route_DirectResponse{DirectResponse: directResponse(r.GetDirectResponse())}
	default:
		action, l, ok := t.forward(p, r)
		if !ok {
			return nil, false
		}
		out.Action, lone = &routev3.Route_Route{Route: action}, l
	}
	// Header changes: the rule's, then its lone destination's (a weighted
	// destination keeps its own). The authority is rewritten by, first,
	// rewrite.authority, then the rule's headers, then the destination's.
	ops, _ := t.headerOps(p+".headers", r.GetHeaders())
	ops.apply(out)
	if lone != nil {
		out.RequestHeadersToAdd = append(out.RequestHeadersToAdd, lone.RequestHeadersToAdd...)
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, lone.ResponseHeadersToAdd...)
		out.RequestHeadersToRemove = append(out.RequestHeadersToRemove, lone.RequestHeadersToRemove...)
		out.ResponseHeadersToRemove = append(out.ResponseHeadersToRemove, lone.ResponseHeadersToRemove...)
	}
	if action := out.GetRoute(); action != nil {
		setHostRewrite(action, cmpOr(ops.authority, lone.GetHostRewriteLiteral()))
	}
	t.perFilterConfig(p, r, out)
	return out, true
}

// routeName is istiod's: the rule's name, dot the match's name.
func routeName(r *networking.HTTPRoute, m *networking.HTTPMatchRequest) string {
	if m.GetName() != "" {
		return r.GetName() + "." + m.GetName()
	}
	return r.GetName()
}

// forward is the action of a rule with destinations; lone is its only
// destination, if it has one.
func (t *translator) forward(p string, r *networking.HTTPRoute) (action *routev3.RouteAction, lone *routev3.WeightedCluster_ClusterWeight, ok bool) {
	action = &routev3.RouteAction{}
	if !t.destinations(p+".route", r.GetRoute(), action, &lone) {
		return nil, nil, false
	}
	t.timeout(r, action)
	t.retries(p+".retries", r.GetRetries(), action)
	t.rewrite(p+".rewrite", r.GetRewrite(), action)
	t.mirrors(p, r, action)
	return action, lone, true
}

// destinations sets the cluster (one destination) or weighted clusters
// of action, and the hash policies of their DestinationRules.
// A lone destination is returned in lone, whose header changes belong to
// the route.
func (t *translator) destinations(p string, dests []*networking.HTTPRouteDestination, action *routev3.RouteAction, lone **routev3.WeightedCluster_ClusterWeight) bool {
	var weighted []*routev3.WeightedCluster_ClusterWeight
	for k, d := range dests {
		if len(dests) > 1 && d.GetWeight() == 0 {
			continue // Istio: a zero weight among several takes nothing
		}
		host, port, subset := t.resolve(d.GetDestination())
		name := SubsetClusterName(host, port, subset)
		action.HashPolicy = append(action.HashPolicy, t.hashPolicies(fmt.Sprintf("%s[%d]", p, k), host, port, subset)...)
		cw := &routev3.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(uint32(d.GetWeight()))}
		t.destinationHeaders(fmt.Sprintf("%s[%d].headers", p, k), d.GetHeaders(), cw)
		weighted = append(weighted, cw)
	}
	switch {
	case len(weighted) == 0:
		t.note(p, "no destination with a weight; rule left out")
		return false
	case len(dests) == 1:
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: weighted[0].Name}
		*lone = weighted[0]
	default:
		action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: weighted}}
	}
	return true
}

// resolve returns the cluster coordinates of d: its host resolved in the
// VirtualService's namespace, its port (else the one being built), its
// subset.
func (t *translator) resolve(d *networking.Destination) (model.Hostname, uint32, string) {
	host := istioconfig.ResolveHost(d.GetHost(), t.vs.Namespace, t.domainSuffix)
	port := t.port
	if n := d.GetPort().GetNumber(); n != 0 {
		port = n
	}
	return host, port, d.GetSubset()
}

// hashPolicies are the consistent-hash policies of the destination's
// DestinationRule, noting those the proxy kind ignores.
func (t *translator) hashPolicies(p string, host model.Hostname, port uint32, subset string) []*routev3.RouteAction_HashPolicy {
	hps, dropped := hashPoliciesFor(t.kind, t.drs(host), port, subset)
	if dropped {
		t.note(p, "grpc-go hashes only on headers: the DestinationRule's consistentHash is ignored for this destination")
	}
	return hps
}

// hashPoliciesFor returns the route hash policies of dr for subset of
// port. grpc-go hashes only on headers (and its channel ID) and would
// ignore the others: they are left out for it, and dropped says so.
func hashPoliciesFor(kind ProxyKind, dr *istioconfig.DestinationRule, port uint32, subset string) (hps []*routev3.RouteAction_HashPolicy, dropped bool) {
	all := HashPolicies(dr, port, subset)
	if kind.Can().HashKeys.Can() {
		return all, false
	}
	for _, hp := range all {
		if hp.GetHeader() != nil {
			hps = append(hps, hp)
		} else {
			dropped = true
		}
	}
	return hps, dropped
}

// timeout sets the route timeout; without one there is none (istiod's
// default). grpc-go reads only max_stream_duration. Envoy gets it as
// max_stream_duration too, which also caps a gRPC client's grpc-timeout:
// a route with any max_stream_duration field uses Envoy's "new timeouts"
// and ignores route.timeout altogether (measured with Envoy 1.40: a 0.3 s
// route.timeout next to grpc_timeout_header_max let a 2 s answer through).
// The stream duration counts from the request's start, so a fault delay
// counts against it, as the users expect of a timeout (Envoy's
// router timeout would start after the delay).
func (t *translator) timeout(r *networking.HTTPRoute, action *routev3.RouteAction) {
	d := r.GetTimeout()
	if !t.can.envoy() {
		if d != nil {
			action.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: d}
		}
		return
	}
	if d == nil { // as the default route: no timeout, grpc-timeout uncapped
		action.Timeout = durationpb.New(0)
		action.MaxStreamDuration = noGRPCTimeoutCap()
		return
	}
	action.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: d, GrpcTimeoutHeaderMax: d}
}

// ---- retries ----

// grpcRetryOn are the retry conditions grpc-go reads (gRPC status codes).
var grpcRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// envoyRetryOn are Envoy's HTTP retry conditions; with grpcRetryOn and
// HTTP status codes they are everything Istio's retryOn may name.
var envoyRetryOn = []string{
	"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited",
	"retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure",
}

// istioDefaultRetryOn is what Istio retries on when retries name no
// conditions.
const (
	istioDefaultRetryOn     = "connect-failure,refused-stream,unavailable,cancelled"
	istioDefaultGRPCRetryOn = "unavailable,cancelled"
)

// retries sets the retry policy. Without retries Envoy keeps istiod's
// default policy and grpc-go none (today's defaults); attempts 0 disables
// retries.
func (t *translator) retries(p string, in *networking.HTTPRetry, action *routev3.RouteAction) {
	if in == nil {
		if t.can.envoy() {
			action.RetryPolicy = defaultRetryPolicy()
			if len(action.HashPolicy) > 0 {
				// Retrying on another host breaks session affinity.
				action.RetryPolicy.RetryHostPredicate = nil
			}
		}
		return
	}
	if in.GetAttempts() <= 0 {
		return
	}
	retryOn := in.GetRetryOn()
	switch {
	case retryOn != "":
	case !t.can.RetryConditions.Can():
		// The gRPC codes among Istio's defaults; the others (connection
		// failures) are the client's business anyway.
		retryOn = istioDefaultGRPCRetryOn
	default:
		retryOn = istioDefaultRetryOn
	}
	conds, codes := t.retryConditions(p+".retryOn", retryOn)
	if len(conds) == 0 && len(codes) == 0 {
		t.note(p, "no retry condition %s supports; retries left out", t.kind)
		return
	}
	rp := &routev3.RetryPolicy{RetryOn: strings.Join(conds, ","), NumRetries: wrapperspb.UInt32(uint32(in.GetAttempts()))}
	if b := in.GetBackoff(); b != nil {
		rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: b}
	}
	if in.GetPerTryTimeout() != nil && !t.lacks(t.can.PerTryTimeout, p+".perTryTimeout", "dropped") {
		rp.PerTryTimeout = in.GetPerTryTimeout()
	}
	if !t.can.envoy() {
		action.RetryPolicy = rp
		return
	}
	rp.RetriableStatusCodes = codes
	rp.HostSelectionRetryMaxAttempts = 5
	if in.GetRetryIgnorePreviousHosts().GetValue() || (in.GetRetryIgnorePreviousHosts() == nil && len(action.HashPolicy) == 0) {
		rp.RetryHostPredicate = defaultRetryPolicy().RetryHostPredicate
	}
	if in.GetRetryRemoteLocalities().GetValue() {
		rp.RetryPriority = &routev3.RetryPolicy_RetryPriority{
			Name:       "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAny(&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 2})},
		}
	}
	action.RetryPolicy = rp
}

// retryConditions splits Istio's comma list into the conditions and HTTP
// status codes the proxy kind knows, noting the rest.
func (t *translator) retryConditions(p, retryOn string) (conds []string, codes []uint32) {
	for part := range strings.SplitSeq(retryOn, ",") {
		part = strings.TrimSpace(part)
		switch n, err := strconv.Atoi(part); {
		case part == "":
		case slices.Contains(grpcRetryOn, part):
			conds = appendNew(conds, part)
		case !t.can.RetryConditions.Can():
			t.note(p, "%s: %q dropped", t.can.RetryConditions, part)
		case slices.Contains(envoyRetryOn, part):
			conds = appendNew(conds, part)
		case err == nil && n >= 100 && n <= 599:
			codes = append(codes, uint32(n))
		default:
			t.note(p, "%q is not a retry condition Envoy knows; dropped", part)
		}
	}
	if len(codes) > 0 {
		conds = appendNew(conds, "retriable-status-codes")
	}
	return conds, codes
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// ---- rewrite, redirect, direct response, mirror ----

// rewrite sets Envoy's path and authority rewrites. grpc-go can rewrite
// neither: a path rewrite left the rule out (ruleSupported), an authority
// rewrite is dropped (the call still reaches its destination).
func (t *translator) rewrite(p string, rw *networking.HTTPRewrite, action *routev3.RouteAction) {
	if rw == nil {
		return
	}
	if !t.can.AuthorityRewrite.Can() {
		// A path rewrite is PathRewrite's (ruleSupported).
		if rw.GetAuthority() != "" {
			t.lacks(t.can.AuthorityRewrite, p+".authority", "dropped")
		}
		return
	}
	if !validHeaderValue(rw.GetUri()) || !validHeaderValue(rw.GetAuthority()) {
		t.note(p, "not valid in an HTTP header (control characters); dropped")
		return
	}
	if rr := rw.GetUriRegexRewrite(); rr != nil {
		action.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: rr.GetMatch()}, Substitution: rr.GetRewrite()}
	} else if rw.GetUri() != "" {
		action.PrefixRewrite = rw.GetUri()
	}
	setHostRewrite(action, rw.GetAuthority())
}

// setHostRewrite rewrites the authority of action's requests, unless
// authority is empty or a rewrite is already set.
func setHostRewrite(action *routev3.RouteAction, authority string) {
	if authority != "" && action.HostRewriteSpecifier == nil {
		action.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority}
	}
}

// redirect is Envoy's redirect action (Envoy only: ruleSupported).
func (t *translator) redirect(rd *networking.HTTPRedirect) *routev3.Route_Redirect {
	out := &routev3.RedirectAction{HostRedirect: rd.GetAuthority()}
	switch {
	case rd.GetPrefixRewrite() != "":
		out.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: rd.GetPrefixRewrite()}
	case rd.GetUri() != "":
		out.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
	}
	if s := rd.GetScheme(); s != "" {
		out.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: s}
	}
	switch rp := rd.GetRedirectPort().(type) {
	case *networking.HTTPRedirect_Port:
		out.PortRedirect = rp.Port
	case *networking.HTTPRedirect_DerivePort:
		if rp.DerivePort == networking.HTTPRedirect_FROM_REQUEST_PORT {
			out.PortRedirect = t.port
		}
	}
	if scheme := cmpOr(rd.GetScheme(), "http"); rd.GetRedirectPort() != nil &&
		(out.PortRedirect == 80 && scheme == "http" || out.PortRedirect == 443 && scheme == "https") {
		out.PortRedirect = 0 // the scheme's default port is left implicit
	}
	out.ResponseCode = redirectCodes[rd.GetRedirectCode()]
	return &routev3.Route_Redirect{Redirect: out}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// redirectCodes are the codes validation allows (0 is Istio's 301).
var redirectCodes = map[uint32]routev3.RedirectAction_RedirectResponseCode{
	0:   routev3.RedirectAction_MOVED_PERMANENTLY,
	301: routev3.RedirectAction_MOVED_PERMANENTLY,
	302: routev3.RedirectAction_FOUND,
	303: routev3.RedirectAction_SEE_OTHER,
	307: routev3.RedirectAction_TEMPORARY_REDIRECT,
	308: routev3.RedirectAction_PERMANENT_REDIRECT,
}

func directResponseBody(dr *networking.HTTPDirectResponse) []byte {
	switch b := dr.GetBody().GetSpecifier().(type) {
	case *networking.HTTPBody_String_:
		return []byte(b.String_)
	case *networking.HTTPBody_Bytes:
		return b.Bytes
	}
	return nil
}

func directResponse(dr *networking.HTTPDirectResponse) *routev3.DirectResponseAction {
	out := &routev3.DirectResponseAction{Status: dr.GetStatus()}
	switch b := dr.GetBody().GetSpecifier().(type) {
	case *networking.HTTPBody_String_:
		out.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.String_}}
	case *networking.HTTPBody_Bytes:
		out.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.Bytes}}
	}
	return out
}

// mirrors sets Envoy's request mirrors (mirror with mirrorPercentage or
// the deprecated mirrorPercent, and mirrors[]). grpc-go cannot mirror:
// dropped, the primary call is unchanged.
func (t *translator) mirrors(p string, r *networking.HTTPRoute, action *routev3.RouteAction) {
	if !t.can.Mirror.Can() {
		if r.GetMirror() != nil || len(r.GetMirrors()) > 0 {
			t.lacks(t.can.Mirror, p+".mirror", "dropped")
		}
		return
	}
	if m := r.GetMirror(); m != nil {
		//lint:ignore SA1019 Istio still honours the deprecated field.
		if pct, ok := mirrorFraction(r.GetMirrorPercentage(), r.GetMirrorPercent()); ok {
			action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, t.mirrorPolicy(m, pct))
		}
	}
	for _, m := range r.GetMirrors() {
		if pct, ok := mirrorFraction(m.GetPercentage(), nil); ok && m.GetDestination() != nil {
			action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, t.mirrorPolicy(m.GetDestination(), pct))
		}
	}
}

// mirrorFraction is Istio's: 100 % unless a percentage says otherwise; a
// zero percentage means no mirror.
func mirrorFraction(pct *networking.Percent, deprecated *wrapperspb.UInt32Value) (*typev3.FractionalPercent, bool) {
	switch {
	case pct != nil:
		return percent(pct), pct.GetValue() > 0
	case deprecated != nil:
		return &typev3.FractionalPercent{Numerator: min(deprecated.GetValue(), 100), Denominator: typev3.FractionalPercent_HUNDRED}, deprecated.GetValue() > 0
	}
	return &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}, true
}

func (t *translator) mirrorPolicy(d *networking.Destination, pct *typev3.FractionalPercent) *routev3.RouteAction_RequestMirrorPolicy {
	host, port, subset := t.resolve(d)
	return &routev3.RouteAction_RequestMirrorPolicy{
		Cluster:         SubsetClusterName(host, port, subset),
		RuntimeFraction: &corev3.RuntimeFractionalPercent{DefaultValue: pct},
		TraceSampled:    wrapperspb.Bool(false),
	}
}

// percent is an Istio percentage (0-100, a double) in millionths, as
// istiod translates it.
func percent(p *networking.Percent) *typev3.FractionalPercent {
	v := math.Round(min(max(p.GetValue(), 0), 100) * 10000)
	return &typev3.FractionalPercent{Numerator: uint32(v), Denominator: typev3.FractionalPercent_MILLION}
}

// ---- headers ----

// headerOps are header changes in Envoy's form.
type headerOps struct {
	reqAdd, respAdd       []*corev3.HeaderValueOption
	reqRemove, respRemove []string
	authority             string
}

// apply adds the header changes to route r.
func (ops headerOps) apply(r *routev3.Route) {
	r.RequestHeadersToAdd = append(r.RequestHeadersToAdd, ops.reqAdd...)
	r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, ops.respAdd...)
	r.RequestHeadersToRemove = append(r.RequestHeadersToRemove, ops.reqRemove...)
	r.ResponseHeadersToRemove = append(r.ResponseHeadersToRemove, ops.respRemove...)
}

// destinationHeaders applies a destination's header changes to its
// cluster weight (merged into the route by destinations when it is the
// only one).
func (t *translator) destinationHeaders(p string, h *networking.Headers, cw *routev3.WeightedCluster_ClusterWeight) {
	ops, ok := t.headerOps(p, h)
	if !ok {
		return
	}
	cw.RequestHeadersToAdd, cw.ResponseHeadersToAdd = ops.reqAdd, ops.respAdd
	cw.RequestHeadersToRemove, cw.ResponseHeadersToRemove = ops.reqRemove, ops.respRemove
	if ops.authority != "" {
		cw.HostRewriteSpecifier = &routev3.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: ops.authority}
	}
}

// headerOps translates h for Envoy. grpc-go does not change headers:
// they are dropped with a note, and ok is false.
func (t *translator) headerOps(p string, h *networking.Headers) (headerOps, bool) {
	if h == nil {
		return headerOps{}, false
	}
	if t.lacks(t.can.HeaderOps, p, "dropped") {
		return headerOps{}, false
	}
	var ops headerOps
	req, resp := h.GetRequest(), h.GetResponse()
	var setAuth, addAuth string
	ops.reqAdd, setAuth = t.headerValues(p+".request.set", req.GetSet(), corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)
	add, addAuth := t.headerValues(p+".request.add", req.GetAdd(), corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD)
	ops.reqAdd = append(ops.reqAdd, add...)
	ops.respAdd, _ = t.headerValues(p+".response.set", resp.GetSet(), corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)
	add, _ = t.headerValues(p+".response.add", resp.GetAdd(), corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD)
	ops.respAdd = append(ops.respAdd, add...)
	ops.reqRemove = t.headerRemovals(p+".request.remove", req.GetRemove())
	ops.respRemove = t.headerRemovals(p+".response.remove", resp.GetRemove())
	ops.authority = cmpOr(setAuth, addAuth)
	return ops, true
}

// headerValues translates set or add, in name order. The authority
// (":authority" or "host") becomes a host rewrite, as in istiod; other
// pseudo-headers cannot be changed and invalid names or values would be
// refused by Envoy: both are dropped with a note.
func (t *translator) headerValues(p string, headers map[string]string, action corev3.HeaderValueOption_HeaderAppendAction) (out []*corev3.HeaderValueOption, authority string) {
	for _, k := range sortedKeys(headers) {
		v := headers[k]
		switch {
		case !validHeaderValue(v):
			t.note(p+"["+k+"]", "not a valid HTTP header value; dropped")
		case strings.EqualFold(k, "host") || strings.EqualFold(k, ":authority"):
			authority = v
		case strings.HasPrefix(k, ":") || !validHeaderName(k):
			t.note(p+"["+k+"]", "Envoy cannot change this header; dropped")
		default:
			out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: action})
		}
	}
	return out, authority
}

func (t *translator) headerRemovals(p string, names []string) []string {
	var out []string
	for i, k := range names {
		if strings.HasPrefix(k, ":") || strings.EqualFold(k, "host") || !validHeaderName(k) {
			t.note(fmt.Sprintf("%s[%d]", p, i), "Envoy cannot remove this header; dropped")
			continue
		}
		out = appendNew(out, k)
	}
	return out
}

// validHeaderName accepts an RFC 9110 token, optionally ':'-prefixed (a
// pseudo-header), which is what Envoy's header name check lets through
// and grpc-go can carry.
func validHeaderName(s string) bool {
	name := strings.TrimPrefix(s, ":")
	if name == "" || len(s) > 16384 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue refuses what Envoy refuses in a header value: NUL, CR
// and LF.
func validHeaderValue(s string) bool { return len(s) <= 16384 && !strings.ContainsAny(s, "\x00\r\n") }

// ---- fault, CORS ----

// perFilterConfig sets the fault and CORS overrides of the route.
func (t *translator) perFilterConfig(p string, r *networking.HTTPRoute, out *routev3.Route) {
	if f := t.fault(p+".fault", r.GetFault()); f != nil {
		if err := f.ValidateAll(); err != nil {
			t.note(p+".fault", "the proxy would refuse it: %v; dropped", err)
		} else {
			setPerFilter(out, faultFilterName, mustAny(f))
		}
	}
	if c := r.GetCorsPolicy(); c != nil {
		cp := corsPolicy(c)
		switch err := cp.ValidateAll(); {
		case t.lacks(t.can.CORS, p+".corsPolicy", "dropped"):
		case err != nil:
			t.note(p+".corsPolicy", "Envoy would refuse it: %v; dropped", err)
		default:
			setPerFilter(out, corsFilterName, mustAny(cp))
		}
	}
}

func setPerFilter(r *routev3.Route, name string, a *anypb.Any) {
	if r.TypedPerFilterConfig == nil {
		r.TypedPerFilterConfig = map[string]*anypb.Any{}
	}
	r.TypedPerFilterConfig[name] = a
}

// fault is the HTTPFault override of the route; nil when nothing remains.
// An unset percentage injects into no request (Istio's documented
// default), which both kinds are told explicitly: grpc-go reads a missing
// percentage as 0 %, Envoy's default is not Istio's.
func (t *translator) fault(p string, in *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	if in == nil {
		return nil
	}
	out := &faultv3.HTTPFault{}
	if d := in.GetDelay(); d != nil {
		if fd := d.GetFixedDelay(); fd != nil {
			out.Delay = &faultcommonv3.FaultDelay{
				FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: fd},
				Percentage:         delayPercent(d),
			}
		} else {
			t.note(p+".delay", "only fixedDelay is supported; delay dropped")
		}
	}
	if a := in.GetAbort(); a != nil {
		out.Abort = t.abort(p+".abort", a)
	}
	if out.Delay == nil && out.Abort == nil {
		return nil
	}
	return out
}

func delayPercent(d *networking.HTTPFaultInjection_Delay) *typev3.FractionalPercent {
	if d.GetPercentage() != nil {
		return percent(d.GetPercentage())
	}
	//lint:ignore SA1019 Istio still honours the deprecated field.
	return &typev3.FractionalPercent{Numerator: uint32(min(max(d.GetPercent(), 0), 100)), Denominator: typev3.FractionalPercent_HUNDRED}
}

func (t *translator) abort(p string, a *networking.HTTPFaultInjection_Abort) *faultv3.FaultAbort {
	pct := &typev3.FractionalPercent{Denominator: typev3.FractionalPercent_HUNDRED}
	if a.GetPercentage() != nil {
		pct = percent(a.GetPercentage())
	}
	switch e := a.GetErrorType().(type) {
	case *networking.HTTPFaultInjection_Abort_HttpStatus:
		return &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}, Percentage: pct}
	case *networking.HTTPFaultInjection_Abort_GrpcStatus:
		code, ok := grpcCodes[strings.ToUpper(e.GrpcStatus)]
		if !ok {
			t.note(p+".grpcStatus", "%q is not a gRPC status name; abort dropped", e.GrpcStatus)
			return nil
		}
		return &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_GrpcStatus{GrpcStatus: code}, Percentage: pct}
	default:
		t.note(p, "only httpStatus and grpcStatus aborts are supported; abort dropped")
		return nil
	}
}

// grpcCodes maps gRPC status names, as Istio writes them, to their codes.
var grpcCodes = map[string]uint32{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
	"ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
	"DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

// corsPolicy is Istio's CORS policy as Envoy's per-route CORS config.
func corsPolicy(in *networking.CorsPolicy) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowMethods:     strings.Join(in.GetAllowMethods(), ","),
		AllowHeaders:     strings.Join(in.GetAllowHeaders(), ","),
		ExposeHeaders:    strings.Join(in.GetExposeHeaders(), ","),
		AllowCredentials: in.GetAllowCredentials(),
		FilterEnabled: &corev3.RuntimeFractionalPercent{
			DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED},
		},
		ForwardNotMatchingPreflights: wrapperspb.Bool(in.GetUnmatchedPreflights() != networking.CorsPolicy_IGNORE),
	}
	for _, o := range in.GetAllowOrigins() {
		// validate does not check CORS origins: leave out what Envoy refuses.
		if sm := stringMatcher(o); sm != nil && sm.ValidateAll() == nil && !regexTooLarge(o.GetRegex()) {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, sm)
		}
	}
	if len(in.GetAllowOrigins()) == 0 {
		//lint:ignore SA1019 Istio still honours the deprecated field.
		for _, o := range in.GetAllowOrigin() {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o}})
		}
	}
	if in.GetMaxAge() != nil {
		out.MaxAge = strconv.FormatInt(in.GetMaxAge().GetSeconds(), 10)
	}
	return out
}
