package xdsgen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// DestinationRule outlier detection, for Envoy and for grpc-go.

// envoyDefaultConsecutive5xx is what Envoy (and so Istio) uses when
// consecutive5xxErrors is unset: 5, enforced.
const envoyDefaultConsecutive5xx = 5

// proxylessFailureThreshold is the failure percentage above which grpc-go
// ejects a host in the translation of consecutive errors: a host failing
// every call (100 %) is above it, one with a success among its last hundred
// calls is not, as consecutive-error detection would not eject it either.
const proxylessFailureThreshold = 99

func applyOutlierDetection(c *clusterv3.Cluster, od *networking.OutlierDetection, k ProxyKind, n notes) {
	if od == nil {
		return
	}
	//lint:ignore SA1019 Istio still accepts the deprecated field; istiod ignores it too.
	if od.GetConsecutiveErrors() != 0 {
		n.at("consecutiveErrors").addf("deprecated, and ignored as by istiod (use consecutive5xxErrors); dropped")
	}
	if len(od.GetOutlierDetectionHttpErrorCodes()) > 0 {
		n.at("outlierDetectionHttpErrorCodes").addf("not supported yet; dropped")
	}
	var out *clusterv3.OutlierDetection
	if !k.Can().envoy() {
		out = proxylessOutlier(od, n)
	} else {
		out = sidecarOutlier(c, od, n)
	}
	if out == nil {
		return
	}
	if err := out.ValidateAll(); err != nil {
		n.addf("Envoy refuses it (%v); outlier detection dropped", err)
		return
	}
	c.OutlierDetection = out
}

// sidecarOutlier is istiod's translation: consecutive 5xx and gateway
// errors enforced at 100 % when positive, success-rate detection off,
// interval, baseEjectionTime, maxEjectionPercent as they are, local-origin
// errors when split; and, which istiod does not do yet,
// failurePercentageThreshold enforced at 100 % with Envoy's defaults for
// the minimum hosts (5) and request volume (50). minHealthPercent is
// Envoy's healthy panic threshold (below it Envoy balances over every host,
// ejected or not), which istiod sets even at 0 to turn the panic mode off.
func sidecarOutlier(c *clusterv3.Cluster, od *networking.OutlierDetection, n notes) *clusterv3.OutlierDetection {
	out := &clusterv3.OutlierDetection{
		EnforcingSuccessRate: wrapperspb.UInt32(0),
		Interval:             od.GetInterval(),
		BaseEjectionTime:     od.GetBaseEjectionTime(),
	}
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if e := od.GetConsecutiveGatewayErrors(); e != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if v := od.GetMaxEjectionPercent(); v > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(v))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if v := od.GetConsecutiveLocalOriginFailures().GetValue(); v > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v)
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	if t := od.GetFailurePercentageThreshold(); t != nil {
		out.FailurePercentageThreshold = wrapperspb.UInt32(percentOf(t.GetValue(), n.at("failurePercentageThreshold")))
		out.EnforcingFailurePercentage = wrapperspb.UInt32(100)
	}
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: float64(max(od.GetMinHealthPercent(), 0))}
	return out
}

// proxylessOutlier translates od for grpc-go, which has only success-rate
// and failure-percentage detection (gRFC A50), each over one interval's
// calls, and counts every failed RPC (any status but OK) as a failure.
//
// Istio's consecutive errors (the smallest positive of consecutive5xxErrors,
// default 5, consecutiveGatewayErrors and, when split,
// consecutiveLocalOriginFailures: grpc-go cannot tell these kinds of
// failure apart) become failure-percentage
// detection that ejects a host whose calls in the last interval were at
// least that many and failed more than proxylessFailureThreshold (99) % of
// the time: a host failing every call is ejected once it has had as many
// calls as Envoy would need to see consecutive failures. The minimum hosts
// is 1, since consecutive-error detection judges each host alone (grpc-go's
// default, 5, would never eject in a smaller cluster). Without consecutive
// errors, failurePercentageThreshold T becomes grpc-go's threshold T-1
// (grpc-go ejects above it, Envoy at or above T) with the defaults both
// share (5 hosts, 50 calls). Success-rate detection is off, as istiod turns
// it off for Envoy (grpc-go would otherwise enable it with its defaults).
// interval, baseEjectionTime and maxEjectionPercent carry over.
func proxylessOutlier(od *networking.OutlierDetection, n notes) *clusterv3.OutlierDetection {
	count := uint32(envoyDefaultConsecutive5xx)
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		count = e.GetValue()
	}
	candidates := []uint32{od.GetConsecutiveGatewayErrors().GetValue()}
	if od.GetSplitExternalLocalOriginErrors() {
		candidates = append(candidates, od.GetConsecutiveLocalOriginFailures().GetValue())
	}
	for _, v := range candidates {
		if v > 0 && (count == 0 || v < count) {
			count = v
		}
	}
	if od.GetSplitExternalLocalOriginErrors() {
		n.at("splitExternalLocalOriginErrors").addf("grpc-go counts every failed call alike; not split")
	}
	if od.GetMinHealthPercent() > 0 {
		n.at("minHealthPercent").addf("grpc-go has no panic threshold; dropped")
	}
	threshold := od.GetFailurePercentageThreshold()
	out := &clusterv3.OutlierDetection{
		EnforcingSuccessRate:       wrapperspb.UInt32(0),
		Interval:                   od.GetInterval(),
		BaseEjectionTime:           od.GetBaseEjectionTime(),
		EnforcingFailurePercentage: wrapperspb.UInt32(100),
	}
	if v := od.GetMaxEjectionPercent(); v > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(v))
	}
	switch {
	case count > 0:
		out.FailurePercentageThreshold = wrapperspb.UInt32(proxylessFailureThreshold)
		out.FailurePercentageRequestVolume = wrapperspb.UInt32(count)
		out.FailurePercentageMinimumHosts = wrapperspb.UInt32(1)
		if threshold != nil {
			n.at("failurePercentageThreshold").addf("grpc-go has one failure-percentage detector, which translates the consecutive errors; dropped")
		}
	case threshold != nil:
		t := percentOf(threshold.GetValue(), n.at("failurePercentageThreshold"))
		out.FailurePercentageThreshold = wrapperspb.UInt32(max(t, 1) - 1)
	default:
		return nil // nothing ejects, in Envoy either
	}
	return out
}

// enforcing is istiod's enforcement percentage of a consecutive-errors
// count: 100 when the count is positive, else 0 (off).
func enforcing(count uint32) uint32 {
	if count > 0 {
		return 100
	}
	return 0
}

// percentOf clamps a percentage to 100, with a reason when it was above.
func percentOf(v uint32, n notes) uint32 {
	if v > 100 {
		n.addf("%d is above 100; 100 used", v)
		return 100
	}
	return v
}
