package xdsgen

import (
	"math"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// VirtualService HTTP rewrites, redirects, direct responses and mirrors.

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
