package validate

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// VirtualService checks a VirtualService spec. Paths start at "spec".
func VirtualService(vs *networking.VirtualService) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	checkVSHosts(&e, spec, vs)
	for i, gw := range vs.GetGateways() {
		checkGatewayName(&e, spec.Child("gateways").Index(i), gw)
	}
	if len(vs.GetHttp())+len(vs.GetTcp())+len(vs.GetTls()) == 0 {
		e.add(spec, "one of http, tcp or tls is required")
	}
	for i, r := range vs.GetHttp() {
		checkHTTPRoute(&e, spec.Child("http").Index(i), r)
	}
	for i, r := range vs.GetTcp() {
		p := spec.Child("tcp").Index(i)
		for j, m := range r.GetMatch() {
			checkL4Match(&e, p.Child("match").Index(j), m.GetPort(), m.GetDestinationSubnets(), m.GetSourceSubnet(), m.GetGateways())
		}
		checkRouteDestinations(&e, p.Child("route"), r.GetRoute())
	}
	for i, r := range vs.GetTls() {
		p := spec.Child("tls").Index(i)
		if len(r.GetMatch()) == 0 {
			e.required(p.Child("match"))
		}
		for j, m := range r.GetMatch() {
			mp := p.Child("match").Index(j)
			if len(m.GetSniHosts()) == 0 {
				e.required(mp.Child("sniHosts"))
			}
			for k, h := range m.GetSniHosts() {
				if msg := checkWildcardHost(h); msg != "" {
					e.add(mp.Child("sniHosts").Index(k), "%q: %s", h, msg)
				}
			}
			checkL4Match(&e, mp, m.GetPort(), m.GetDestinationSubnets(), "", m.GetGateways())
		}
		checkRouteDestinations(&e, p.Child("route"), r.GetRoute())
	}
	checkExportTo(&e, spec.Child("exportTo"), vs.GetExportTo())
	return e.list
}

func checkVSHosts(e *errs, spec *field.Path, vs *networking.VirtualService) {
	hosts := vs.GetHosts()
	if len(hosts) == 0 {
		e.add(spec.Child("hosts"), "required (at least one host)")
		return
	}
	mesh := len(vs.GetGateways()) == 0 || slices.Contains(vs.GetGateways(), "mesh")
	seen := map[string]bool{}
	for i, h := range hosts {
		p := spec.Child("hosts").Index(i)
		if h == "*" && mesh {
			e.add(p, "wildcard host \"*\" is not allowed for virtual services bound to the mesh gateway")
		} else if msg := checkWildcardHost(h); msg != "" && !isIP(h) {
			e.add(p, "%q: %s", h, msg)
		}
		if seen[h] {
			e.add(p, "duplicate host %q", h)
		}
		seen[h] = true
	}
}

func checkHTTPRoute(e *errs, p *field.Path, r *networking.HTTPRoute) {
	hasRoute := len(r.GetRoute()) > 0
	actions := 0
	for _, set := range []bool{hasRoute, r.GetRedirect() != nil, r.GetDirectResponse() != nil, r.GetDelegate() != nil} {
		if set {
			actions++
		}
	}
	switch {
	case actions == 0:
		e.add(p, "one of route, redirect, directResponse or delegate is required")
	case actions > 1:
		e.add(p, "only one of route, redirect, directResponse or delegate may be set")
	}
	for j, m := range r.GetMatch() {
		checkHTTPMatch(e, p.Child("match").Index(j), m)
	}
	if hasRoute {
		checkHTTPRouteDestinations(e, p.Child("route"), r.GetRoute())
	}
	if rd := r.GetRedirect(); rd != nil {
		switch c := rd.GetRedirectCode(); c {
		case 0, 301, 302, 303, 307, 308:
		default:
			e.add(p.Child("redirect", "redirectCode"), "must be 301, 302, 303, 307 or 308, got %d", c)
		}
		if port := rd.GetPort(); port > 65535 {
			e.add(p.Child("redirect", "port"), "must be between 1 and 65535, got %d", port)
		}
		if r.GetRewrite() != nil {
			e.add(p.Child("rewrite"), "cannot be combined with redirect")
		}
	}
	if dr := r.GetDirectResponse(); dr != nil {
		if s := dr.GetStatus(); s < 200 || s > 599 {
			e.add(p.Child("directResponse", "status"), "must be between 200 and 599, got %d", s)
		}
	}
	if d := r.GetDelegate(); d != nil {
		if d.GetName() == "" {
			e.required(p.Child("delegate", "name"))
		}
		if ns := d.GetNamespace(); ns != "" && len(validation.IsDNS1123Label(ns)) != 0 {
			e.add(p.Child("delegate", "namespace"), "%q is not a namespace name", ns)
		}
	}
	checkDuration(e, p.Child("timeout"), r.GetTimeout())
	if rt := r.GetRetries(); rt != nil {
		if rt.GetAttempts() < 0 {
			e.add(p.Child("retries", "attempts"), "must not be negative, got %d", rt.GetAttempts())
		}
		checkDuration(e, p.Child("retries", "perTryTimeout"), rt.GetPerTryTimeout())
		checkDuration(e, p.Child("retries", "backoff"), rt.GetBackoff())
	}
	if f := r.GetFault(); f != nil {
		checkFault(e, p.Child("fault"), f)
	}
	if m := r.GetMirror(); m != nil {
		checkDestination(e, p.Child("mirror"), m)
	}
	checkPercent(e, p.Child("mirrorPercentage"), r.GetMirrorPercentage())
	//lint:ignore SA1019 Istio still accepts the deprecated field, so it is validated.
	if mp := r.GetMirrorPercent(); mp != nil && mp.GetValue() > 100 {
		e.add(p.Child("mirrorPercent"), "must be between 0 and 100, got %d", mp.GetValue())
	}
	for k, m := range r.GetMirrors() {
		mp := p.Child("mirrors").Index(k)
		if m.GetDestination() == nil {
			e.required(mp.Child("destination"))
		} else {
			checkDestination(e, mp.Child("destination"), m.GetDestination())
		}
		checkPercent(e, mp.Child("percentage"), m.GetPercentage())
	}
}

func checkHTTPMatch(e *errs, p *field.Path, m *networking.HTTPMatchRequest) {
	for _, f := range []struct {
		name string
		sm   *networking.StringMatch
	}{{"uri", m.GetUri()}, {"scheme", m.GetScheme()}, {"method", m.GetMethod()}, {"authority", m.GetAuthority()}} {
		if f.sm != nil {
			checkStringMatch(e, p.Child(f.name), f.sm, false)
		}
	}
	for _, f := range []struct {
		name    string
		matches map[string]*networking.StringMatch
	}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}, {"queryParams", m.GetQueryParams()}} {
		for _, k := range slices.Sorted(maps.Keys(f.matches)) {
			kp := p.Child(f.name).Key(k)
			if k == "" {
				e.add(p.Child(f.name), "empty name")
			} else if f.name != "queryParams" && k != strings.ToLower(k) {
				e.add(kp, "header names must be lower case")
			}
			// An empty match is a presence check.
			checkStringMatch(e, kp, f.matches[k], true)
		}
	}
	if m.GetPort() > 65535 {
		e.add(p.Child("port"), "must be between 1 and 65535, got %d", m.GetPort())
	}
	for i, gw := range m.GetGateways() {
		checkGatewayName(e, p.Child("gateways").Index(i), gw)
	}
	checkLabels(e, p.Child("sourceLabels"), m.GetSourceLabels())
	if ns := m.GetSourceNamespace(); ns != "" && len(validation.IsDNS1123Label(ns)) != 0 {
		e.add(p.Child("sourceNamespace"), "%q is not a namespace name", ns)
	}
}

func checkStringMatch(e *errs, p *field.Path, sm *networking.StringMatch, emptyOK bool) {
	switch t := sm.GetMatchType().(type) {
	case nil:
		if !emptyOK {
			e.add(p, "one of exact, prefix or regex is required")
		}
	case *networking.StringMatch_Exact:
		if t.Exact == "" {
			e.add(p.Child("exact"), "must not be empty")
		}
	case *networking.StringMatch_Prefix:
		if t.Prefix == "" {
			e.add(p.Child("prefix"), "must not be empty")
		}
	case *networking.StringMatch_Regex:
		if t.Regex == "" {
			e.add(p.Child("regex"), "must not be empty")
		} else if _, err := regexp.Compile(t.Regex); err != nil {
			// Envoy uses RE2, whose syntax Go's regexp shares.
			e.add(p.Child("regex"), "invalid RE2 regular expression: %v", err)
		}
	}
}

func checkFault(e *errs, p *field.Path, f *networking.HTTPFaultInjection) {
	if f.GetDelay() == nil && f.GetAbort() == nil {
		e.add(p, "delay or abort is required")
	}
	if d := f.GetDelay(); d != nil {
		dp := p.Child("delay")
		switch {
		case d.GetFixedDelay() != nil:
			checkDuration(e, dp.Child("fixedDelay"), d.GetFixedDelay())
		case d.GetExponentialDelay() != nil:
			checkDuration(e, dp.Child("exponentialDelay"), d.GetExponentialDelay())
		default:
			e.add(dp, "fixedDelay is required")
		}
		//lint:ignore SA1019 Istio still accepts the deprecated field, so it is validated.
		if pct := d.GetPercent(); pct < 0 || pct > 100 {
			e.add(dp.Child("percent"), "must be between 0 and 100, got %d", pct)
		}
		checkPercent(e, dp.Child("percentage"), d.GetPercentage())
	}
	if a := f.GetAbort(); a != nil {
		ap := p.Child("abort")
		switch t := a.GetErrorType().(type) {
		case nil:
			e.add(ap, "one of httpStatus, grpcStatus or http2Error is required")
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			if t.HttpStatus < 200 || t.HttpStatus > 599 {
				e.add(ap.Child("httpStatus"), "must be between 200 and 599, got %d", t.HttpStatus)
			}
		}
		checkPercent(e, ap.Child("percentage"), a.GetPercentage())
	}
}

func checkDestination(e *errs, p *field.Path, d *networking.Destination) {
	switch host := d.GetHost(); {
	case host == "":
		e.required(p.Child("host"))
	case strings.Contains(host, "*"):
		e.add(p.Child("host"), "%q: a destination cannot be a wildcard", host)
	default:
		if msg := checkFQDN(host); msg != "" {
			e.add(p.Child("host"), "%q: %s", host, msg)
		}
	}
	if s := d.GetSubset(); s != "" && len(validation.IsDNS1123Label(s)) != 0 {
		e.add(p.Child("subset"), "%q is not a valid subset name (DNS-1123 label)", s)
	}
	checkPortSelector(e, p.Child("port"), d.GetPort())
}

func checkHTTPRouteDestinations(e *errs, p *field.Path, rs []*networking.HTTPRouteDestination) {
	weights := make([]int32, len(rs))
	for j, r := range rs {
		rp := p.Index(j)
		if r.GetDestination() == nil {
			e.required(rp.Child("destination"))
		} else {
			checkDestination(e, rp.Child("destination"), r.GetDestination())
		}
		weights[j] = r.GetWeight()
	}
	checkWeights(e, p, weights)
}

func checkRouteDestinations(e *errs, p *field.Path, rs []*networking.RouteDestination) {
	if len(rs) == 0 {
		e.add(p, "required (at least one destination)")
		return
	}
	weights := make([]int32, len(rs))
	for j, r := range rs {
		rp := p.Index(j)
		if r.GetDestination() == nil {
			e.required(rp.Child("destination"))
		} else {
			checkDestination(e, rp.Child("destination"), r.GetDestination())
		}
		weights[j] = r.GetWeight()
	}
	checkWeights(e, p, weights)
}

// checkWeights: a lone destination takes all traffic (weight unset or
// 100); several must split it, their weights adding up to 100.
func checkWeights(e *errs, p *field.Path, weights []int32) {
	var sum int64
	for j, w := range weights {
		if w < 0 {
			e.add(p.Index(j).Child("weight"), "must not be negative, got %d", w)
		}
		sum += int64(w)
	}
	switch {
	case len(weights) == 1 && (weights[0] == 0 || weights[0] == 100):
	case len(weights) > 0 && sum != 100:
		e.add(p, "weights must add up to 100, got %d", sum)
	}
}

func checkL4Match(e *errs, p *field.Path, port uint32, dstSubnets []string, srcSubnet string, gateways []string) {
	if port > 65535 {
		e.add(p.Child("port"), "must be between 1 and 65535, got %d", port)
	}
	for i, s := range dstSubnets {
		if !isIPOrCIDR(s) {
			e.add(p.Child("destinationSubnets").Index(i), "%q is not an IP address or CIDR", s)
		}
	}
	if srcSubnet != "" && !isIPOrCIDR(srcSubnet) {
		e.add(p.Child("sourceSubnet"), "%q is not an IP address or CIDR", srcSubnet)
	}
	for i, gw := range gateways {
		checkGatewayName(e, p.Child("gateways").Index(i), gw)
	}
}
