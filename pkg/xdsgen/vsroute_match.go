package xdsgen

import (
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
)

// VirtualService HTTP matches: URI, headers, pseudo-headers, query
// parameters and the client (sourceLabels, sourceNamespace).

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
	if t.gateway != (istioconfig.Key{}) {
		if !appliesToGateway(m.GetGateways(), t.vs.Namespace, t.gateway) || !t.sourceAdmits(p, m) {
			return nil, false
		}
	} else if gws := m.GetGateways(); len(gws) > 0 {
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
