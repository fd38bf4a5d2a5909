package xdsgen

import (
	"fmt"
	"slices"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
)

// effectivePolicy is the traffic policy of DestinationRule dr that applies to
// the cluster of port of subset (the whole service when subset is ""), with
// Istio's precedence: a port-level setting replaces the top level whole (its
// omitted fields take their defaults rather than being inherited), and then
// the subset's policy, taken for the port the same way, replaces load
// balancer, connection pool, outlier detection and TLS one by one where it
// sets them, or all four when it has a setting for the port. The result is
// a new shallow policy whose parts are shared with dr and must not be
// modified; it is nil when nothing applies. An unknown subset is no subset.
func effectivePolicy(dr *istioconfig.DestinationRule, port uint32, subset string) *networking.TrafficPolicy {
	if dr == nil || dr.Spec == nil {
		return nil
	}
	top, _ := portPolicy(dr.Spec.GetTrafficPolicy(), port)
	s := findSubset(dr, subset)
	if s.GetTrafficPolicy() == nil {
		return top
	}
	sub, portLevel := portPolicy(s.GetTrafficPolicy(), port)
	if top == nil {
		return sub
	}
	merged := top // portPolicy's result is ours to change
	if sub.LoadBalancer != nil || portLevel {
		merged.LoadBalancer = sub.LoadBalancer
	}
	if sub.ConnectionPool != nil || portLevel {
		merged.ConnectionPool = sub.ConnectionPool
	}
	if sub.OutlierDetection != nil || portLevel {
		merged.OutlierDetection = sub.OutlierDetection
	}
	if sub.Tls != nil || portLevel {
		merged.Tls = sub.Tls
	}
	return merged
}

// portPolicy is tp as it applies to port: its port-level setting for port
// (true) when there is one, else tp's own top-level parts (false), as a new
// policy of the four parts clusters translate.
func portPolicy(tp *networking.TrafficPolicy, port uint32) (*networking.TrafficPolicy, bool) {
	if tp == nil {
		return nil, false
	}
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort() != nil && pl.GetPort().GetNumber() == port {
			return portLevelParts(pl), true
		}
	}
	return topLevelParts(tp), false
}

// topLevelParts is a new policy of tp's top-level load balancer,
// connection pool, outlier detection and TLS.
func topLevelParts(tp *networking.TrafficPolicy) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{
		LoadBalancer: tp.GetLoadBalancer(), ConnectionPool: tp.GetConnectionPool(),
		OutlierDetection: tp.GetOutlierDetection(), Tls: tp.GetTls(),
	}
}

// portLevelParts is topLevelParts of a port-level setting.
func portLevelParts(pl *networking.TrafficPolicy_PortTrafficPolicy) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{
		LoadBalancer: pl.GetLoadBalancer(), ConnectionPool: pl.GetConnectionPool(),
		OutlierDetection: pl.GetOutlierDetection(), Tls: pl.GetTls(),
	}
}

// findSubset returns dr's subset named name, nil for "" or an unknown name.
func findSubset(dr *istioconfig.DestinationRule, name string) *networking.Subset {
	if name == "" {
		return nil
	}
	for _, s := range dr.Spec.GetSubsets() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// HashPolicies returns the route hash policies of the consistent hash that
// DestinationRule dr sets for port of subset ("" for the whole service),
// taken from the same effective policy as the cluster's (subset over
// port-level over top-level), so that a route hashes exactly when its
// cluster is a hash ring: httpHeaderName → header, httpCookie → cookie
// (name, path, ttl, attributes), useSourceIp → connection_properties
// source_ip, httpQueryParameterName → query_parameter. It returns nil when
// the policy is not consistentHash or names no key (Envoy then hashes
// nothing and picks a random host of the ring). It does not filter per proxy
// kind: grpc-go honours only header (and its own channel_id) hash policies,
// so its caller drops the others. It is pure.
func HashPolicies(dr *istioconfig.DestinationRule, port uint32, subset string) []*routev3.RouteAction_HashPolicy {
	ch := effectivePolicy(dr, port, subset).GetLoadBalancer().GetConsistentHash()
	if hp := hashPolicy(ch); hp != nil {
		return []*routev3.RouteAction_HashPolicy{hp}
	}
	return nil
}

// hashPolicy translates ch's hash key; nil without one, or when the key
// would not pass Envoy's validation (an empty or malformed header name):
// the spec's validation does not check hash keys.
func hashPolicy(ch *networking.LoadBalancerSettings_ConsistentHashLB) *routev3.RouteAction_HashPolicy {
	hp := translateHashKey(ch)
	if hp == nil || hp.ValidateAll() != nil {
		return nil
	}
	return hp
}

func translateHashKey(ch *networking.LoadBalancerSettings_ConsistentHashLB) *routev3.RouteAction_HashPolicy {
	switch key := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: key.HttpHeaderName},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		c := key.HttpCookie
		if ttl := c.GetTtl(); ttl != nil && (ttl.CheckValid() != nil || ttl.AsDuration() < 0) {
			return nil // the spec's validation leaves the TTL unchecked
		}
		cookie := &routev3.RouteAction_HashPolicy_Cookie{Name: c.GetName(), Path: c.GetPath(), Ttl: c.GetTtl()}
		for _, a := range c.GetAttributes() {
			cookie.Attributes = append(cookie.Attributes, &routev3.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: cookie}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if !key.UseSourceIp {
			return nil
		}
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: key.HttpQueryParameterName},
		}}
	}
	return nil
}

// notes collects RouteNotes on what a translation of DestinationRule obj
// for kind leaves out, at a field path (like
// "spec.trafficPolicy.loadBalancer.simple"). The zero value, discard, drops
// them, which is how the generators use the translations; ClusterNotes
// runs the very same translations with a list.
type notes struct {
	obj  istioconfig.Key
	kind ProxyKind
	path string
	out  *[]RouteNote
}

// discard drops every note.
var discard = notes{}

// at is n for the child field name.
func (n notes) at(name string) notes {
	if n.out == nil {
		return n
	}
	n.path += "." + name
	return n
}

// index is n for element i of a list.
func (n notes) index(i int) notes {
	if n.out == nil {
		return n
	}
	n.path += "[" + strconv.Itoa(i) + "]"
	return n
}

// addf records a note on n's field.
func (n notes) addf(format string, args ...any) {
	if n.out != nil {
		*n.out = append(*n.out, RouteNote{Object: n.obj, Kind: n.kind, Field: n.path, Reason: fmt.Sprintf(format, args...)})
	}
}

// subsetNames are the names of dr's subsets, sorted.
func subsetNames(dr *istioconfig.DestinationRule) []string {
	if dr == nil {
		return nil
	}
	var out []string
	for _, s := range dr.Spec.GetSubsets() {
		if s.GetName() != "" && !slices.Contains(out, s.GetName()) {
			out = append(out, s.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// ClusterNotes lists what the clusters of kind (Clusters and
// ServiceClusters for ProxyGRPC, SidecarClusters for ProxyEnvoy) leave out
// of dr, one note per field and place it is set (top level, port-level
// settings, subsets), in spec order. It is pure; a nil dr yields nil.
func ClusterNotes(kind ProxyKind, dr *istioconfig.DestinationRule) []RouteNote {
	if dr == nil || dr.Spec == nil {
		return nil
	}
	var out []RouteNote
	root := notes{obj: dr.Key, kind: kind, path: "spec", out: &out}
	policyNotes(dr.Spec.GetTrafficPolicy(), kind, root.at("trafficPolicy"))
	for i, s := range dr.Spec.GetSubsets() {
		policyNotes(s.GetTrafficPolicy(), kind, root.at("subsets").index(i).at("trafficPolicy"))
	}
	return out
}

// policyNotes translates each part of tp, its port-level settings too, on
// a scratch cluster to collect the notes, as for an HTTP/2 port (which
// takes every connection pool setting).
func policyNotes(tp *networking.TrafficPolicy, k ProxyKind, n notes) {
	if tp == nil {
		return
	}
	applyPolicy(scratchCluster(k), topLevelParts(tp), k, true, n)
	for i, pl := range tp.GetPortLevelSettings() {
		applyPolicy(scratchCluster(k), portLevelParts(pl), k, true, n.at("portLevelSettings").index(i))
	}
	if tp.GetTunnel() != nil {
		n.at("tunnel").addf("not supported yet; dropped")
	}
	if tp.GetProxyProtocol() != nil {
		n.at("proxyProtocol").addf("not supported yet; dropped")
	}
	if tp.GetRetryBudget() != nil {
		n.at("retryBudget").addf("not supported yet; dropped")
	}
}

// scratchCluster is a cluster with k's defaults, for policyNotes.
func scratchCluster(k ProxyKind) *clusterv3.Cluster {
	if !k.Can().envoy() {
		return &clusterv3.Cluster{LbPolicy: clusterv3.Cluster_ROUND_ROBIN}
	}
	return &clusterv3.Cluster{
		LbPolicy:        clusterv3.Cluster_LEAST_REQUEST,
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{unlimitedThresholds()}},
	}
}

// applyPolicy applies the effective traffic policy tp (nil: none) to c, a
// cluster of kind k with k's defaults, and returns the upstream HTTP
// protocol options an Envoy cluster needs (always nil for proxyless
// clusters): HTTP/2 when http2 (the port speaks it) or the pool asks for
// the upgrade, with the pool's connection settings. TLS is not set here:
// it depends on the endpoints too (ServiceClusters, outboundClusters; see
// drtls.go), but its notes are collected here.
func applyPolicy(c *clusterv3.Cluster, tp *networking.TrafficPolicy, k ProxyKind, http2 bool, n notes) *httpv3.HttpProtocolOptions {
	var pool poolOptions
	if tp != nil {
		applyLoadBalancer(c, tp.GetLoadBalancer(), k, n.at("loadBalancer"))
		pool = applyConnectionPool(c, tp.GetConnectionPool(), k, n.at("connectionPool"))
		applyOutlierDetection(c, tp.GetOutlierDetection(), k, n.at("outlierDetection"))
		if t := tp.GetTls(); t != nil && n.out != nil {
			tlsNotes(t, k, n.at("tls")) // the TLS itself is ServiceClusters' and outboundClusters'
		}
	}
	if !k.Can().envoy() {
		return nil
	}
	return pool.protocolOptions(http2, n.at("connectionPool"))
}
