package xdsgen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// VirtualService HTTP route actions: destinations and their weights,
// hash policies, timeouts and retries.

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
	switch n := d.GetPort().GetNumber(); {
	case n != 0:
		port = n
	case t.destPort != nil:
		port = t.destPort(host, t.port)
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
