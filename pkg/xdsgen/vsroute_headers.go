package xdsgen

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// VirtualService HTTP header changes, fault injection and CORS.

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
