package xdsgen

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
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

// Load balancing.

// maxRingSize is the largest minimum_ring_size both Envoy (its validation)
// and grpc-go (its CDS parsing) accept.
const maxRingSize = 8 * 1024 * 1024

// defaultRingSize is Envoy's and grpc-go's default minimum ring size, which
// istiod also sets explicitly.
const defaultRingSize = 1024

// maxMaglevTableSize bounds Envoy's Maglev table, whose size must also be
// prime (checked when Envoy loads the cluster, not by its validation).
const maxMaglevTableSize = 5000011

func applyLoadBalancer(c *clusterv3.Cluster, lb *networking.LoadBalancerSettings, k ProxyKind, n notes) {
	if lb == nil {
		return
	}
	switch lb.GetLbPolicy().(type) {
	case *networking.LoadBalancerSettings_Simple:
		applySimpleLB(c, lb.GetSimple(), k, n.at("simple"))
	case *networking.LoadBalancerSettings_ConsistentHash:
		applyConsistentHash(c, lb.GetConsistentHash(), k, n.at("consistentHash"))
	case *networking.LoadBalancerSettings_BackendUtilization:
		n.at("backendUtilization").addf("not supported yet; %s used", c.GetLbPolicy())
	}
	if ls := lb.GetLocalityLbSetting(); ls != nil {
		localityNotes(ls, k, c.GetLbPolicy(), n.at("localityLbSetting"))
	}
	if lb.GetZoneAwareLbSetting() != nil {
		n.at("zoneAwareLbSetting").addf("not supported yet; dropped")
	}
	if lb.GetWarmup() != nil {
		n.at("warmup").addf("not supported yet; dropped")
	}
	if lb.GetWarmupDurationSecs() != nil {
		n.at("warmupDurationSecs").addf("not supported yet; dropped")
	}
}

// localityNotes says what of a localityLbSetting the load assignments do
// not apply (see proximity), or apply where Istio would reject it, for
// clusters of kind k with load balancer policy lbPolicy.
func localityNotes(ls *networking.LocalityLoadBalancerSetting, k ProxyKind, lbPolicy clusterv3.Cluster_LbPolicy, n notes) {
	if distributes(ls) {
		distributeNotes(ls, k, lbPolicy, n.at("distribute"))
	}
	if len(ls.GetFailoverPriority()) > 0 && len(ls.GetFailover()) > 0 {
		n.at("failover").addf("ignored: failoverPriority decides the priorities")
	}
	if rest := unknownPriorityKeys(ls.GetFailoverPriority()); len(rest) > 0 {
		n.at("failoverPriority").addf("the proxies' values of %v are not known to the hub (only %s and %s are); the list is cut before them",
			rest, model.LabelTopologyCluster, model.LabelTopologyRegion)
	}
}

func applySimpleLB(c *clusterv3.Cluster, simple networking.LoadBalancerSettings_SimpleLB, k ProxyKind, n notes) {
	switch simple {
	case networking.LoadBalancerSettings_UNSPECIFIED:
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	//lint:ignore SA1019 Istio still accepts LEAST_CONN, an alias of LEAST_REQUEST.
	case networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	case networking.LoadBalancerSettings_RANDOM:
		if lack := k.Can().RandomLB; !lack.Can() {
			n.addf("%s; ROUND_ROBIN used", lack)
			c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
			return
		}
		c.LbPolicy = clusterv3.Cluster_RANDOM
	case networking.LoadBalancerSettings_PASSTHROUGH:
		// istiod makes an ORIGINAL_DST cluster: the service's VIP, which
		// means nothing across the fleet's clusters.
		n.addf("not supported (the VIP of the original destination means nothing across clusters); %s used", c.GetLbPolicy())
	default:
		n.addf("%s is not supported; %s used", simple, c.GetLbPolicy())
	}
}

// applyConsistentHash makes c a hash ring (Envoy: RING_HASH or MAGLEV).
// grpc-go computes a request's hash only from header hash policies (and its
// own channel_id), so for proxyless clusters only httpHeaderName makes a
// ring; other keys keep round robin, which balances better than a ring
// picking at random.
func applyConsistentHash(c *clusterv3.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB, k ProxyKind, n notes) {
	hp := hashPolicy(ch)
	can := k.Can()
	switch {
	case !can.HashKeys.Can() && hp.GetHeader() == nil:
		if key := hashKeyField(ch); key != "" && key != "httpHeaderName" {
			n.at(key).addf("%s; %s used", can.HashKeys, c.GetLbPolicy())
		} else {
			n.addf("no valid hash key; %s used", c.GetLbPolicy())
		}
		return
	case hp == nil:
		n.addf("no valid hash key; %s picks the ring's hosts at random", k)
	}
	m := ch.GetMaglev()
	if m != nil && !can.Maglev.Can() {
		n.at("maglev").addf("%s; RING_HASH used", can.Maglev)
		m = nil
	}
	if m != nil {
		c.LbPolicy = clusterv3.Cluster_MAGLEV
		c.LbConfig = nil
		if size := m.GetTableSize(); size != 0 {
			if size < maxMaglevTableSize && isPrime(size) {
				c.LbConfig = &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{
					TableSize: wrapperspb.UInt64(size),
				}}
			} else {
				n.at("maglev.tableSize").addf("%d is not a prime below %d, which Envoy requires; its default 65537 used", size, maxMaglevTableSize)
			}
		}
		return
	}
	setRingHash(c, ch, n)
}

// setRingHash makes c a RING_HASH cluster with ch's minimum ring size.
func setRingHash(c *clusterv3.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB, n notes) {
	size, field := uint64(defaultRingSize), ""
	//lint:ignore SA1019 Istio still accepts the deprecated top-level minimumRingSize.
	if s := ch.GetMinimumRingSize(); s != 0 {
		size, field = s, "minimumRingSize"
	}
	if s := ch.GetRingHash().GetMinimumRingSize(); s != 0 {
		size, field = s, "ringHash.minimumRingSize"
	}
	if size > maxRingSize {
		n.at(field).addf("%d is above the %d that Envoy and grpc-go accept; %d used", size, maxRingSize, maxRingSize)
		size = maxRingSize
	}
	c.LbPolicy = clusterv3.Cluster_RING_HASH
	c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
		MinimumRingSize: wrapperspb.UInt64(size),
	}}
}

// hashKeyField names ch's hash key field, "" without one.
func hashKeyField(ch *networking.LoadBalancerSettings_ConsistentHashLB) string {
	switch ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return "httpHeaderName"
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		return "httpCookie"
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		return "useSourceIp"
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		return "httpQueryParameterName"
	}
	return ""
}

// isPrime reports whether n is prime, by trial division: n is below
// maxMaglevTableSize, so at most ~2,200 divisions.
func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// Connection pool.

// poolOptions are the connection pool settings that Envoy takes in a
// cluster's upstream HTTP protocol options rather than in the cluster.
type poolOptions struct {
	upgrade               bool // h2UpgradePolicy UPGRADE
	idleTimeout           *durationpb.Duration
	maxConnectionDuration *durationpb.Duration
	maxRequestsPerConn    uint32
	maxConcurrentStreams  uint32
	keepalive             *networking.ConnectionPoolSettings_HTTPSettings_ConnectionKeepalive
}

// applyConnectionPool applies cp as istiod does, a zero value meaning
// "unset" (the API cannot tell them apart): for Envoy, circuit breakers
// (tcp.maxConnections → max_connections, http.http1MaxPendingRequests →
// max_pending_requests, http.http2MaxRequests → max_requests,
// http.maxRetries → max_retries, the others staying unlimited),
// tcp.connectTimeout and tcp.tcpKeepalive on the cluster and the rest in
// the returned options; for grpc-go, which reads only max_requests of the
// circuit breakers (gRFC A32), only that.
func applyConnectionPool(c *clusterv3.Cluster, cp *networking.ConnectionPoolSettings, k ProxyKind, n notes) poolOptions {
	if cp == nil {
		return poolOptions{}
	}
	if !k.Can().envoy() {
		proxylessPool(c, cp, n)
		return poolOptions{}
	}
	if len(c.GetCircuitBreakers().GetThresholds()) == 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{unlimitedThresholds()}}
	}
	th := c.GetCircuitBreakers().GetThresholds()[0]
	var po poolOptions
	if h := cp.GetHttp(); h != nil {
		setLimit(&th.MaxRequests, h.GetHttp2MaxRequests())
		setLimit(&th.MaxPendingRequests, h.GetHttp1MaxPendingRequests())
		setLimit(&th.MaxRetries, h.GetMaxRetries())
		po.idleTimeout = h.GetIdleTimeout()
		po.maxRequestsPerConn = positive(h.GetMaxRequestsPerConnection())
		po.maxConcurrentStreams = positive(h.GetMaxConcurrentStreams())
		po.keepalive = h.GetHttp2KeepAlive()
		po.upgrade = h.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE
		if h.GetUseClientProtocol() {
			n.at("http.useClientProtocol").addf("not supported yet; dropped")
		}
	}
	if t := cp.GetTcp(); t != nil {
		if t.GetConnectTimeout() != nil {
			c.ConnectTimeout = t.GetConnectTimeout()
		}
		setLimit(&th.MaxConnections, t.GetMaxConnections())
		po.maxConnectionDuration = t.GetMaxConnectionDuration()
		if po.idleTimeout == nil {
			po.idleTimeout = t.GetIdleTimeout()
		}
		if ka := t.GetTcpKeepalive(); ka != nil {
			c.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{TcpKeepalive: tcpKeepalive(ka)}
		}
	}
	return po
}

// proxylessPool is applyConnectionPool for grpc-go.
func proxylessPool(c *clusterv3.Cluster, cp *networking.ConnectionPoolSettings, n notes) {
	h, t := cp.GetHttp(), cp.GetTcp()
	if v := h.GetHttp2MaxRequests(); v > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxRequests: wrapperspb.UInt32(uint32(v)),
		}}}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"http.http1MaxPendingRequests", h.GetHttp1MaxPendingRequests() > 0},
		{"http.maxRequestsPerConnection", h.GetMaxRequestsPerConnection() > 0},
		{"http.maxRetries", h.GetMaxRetries() > 0},
		{"http.idleTimeout", h.GetIdleTimeout() != nil},
		{"http.h2UpgradePolicy", h.GetH2UpgradePolicy() != networking.ConnectionPoolSettings_HTTPSettings_DEFAULT},
		{"http.useClientProtocol", h.GetUseClientProtocol()},
		{"http.maxConcurrentStreams", h.GetMaxConcurrentStreams() > 0},
		{"http.http2KeepAlive", h.GetHttp2KeepAlive() != nil},
		{"tcp.maxConnections", t.GetMaxConnections() > 0},
		{"tcp.connectTimeout", t.GetConnectTimeout() != nil},
		{"tcp.tcpKeepalive", t.GetTcpKeepalive() != nil},
		{"tcp.maxConnectionDuration", t.GetMaxConnectionDuration() != nil},
		{"tcp.idleTimeout", t.GetIdleTimeout() != nil},
	} {
		if f.set {
			n.at(f.name).addf("grpc-go reads only the circuit breakers' max_requests (http.http2MaxRequests); dropped")
		}
	}
}

// setLimit sets *dst to v when v is set (positive).
func setLimit(dst **wrapperspb.UInt32Value, v int32) {
	if v > 0 {
		*dst = wrapperspb.UInt32(uint32(v))
	}
}

// positive is v, or 0 when v is not positive.
func positive(v int32) uint32 {
	if v > 0 {
		return uint32(v)
	}
	return 0
}

// tcpKeepalive is Envoy's SO_KEEPALIVE setting, in whole seconds.
func tcpKeepalive(ka *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) *corev3.TcpKeepalive {
	out := &corev3.TcpKeepalive{}
	if ka.GetProbes() > 0 {
		out.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
	}
	if d := ka.GetTime(); d != nil {
		out.KeepaliveTime = wrapperspb.UInt32(seconds(d))
	}
	if d := ka.GetInterval(); d != nil {
		out.KeepaliveInterval = wrapperspb.UInt32(seconds(d))
	}
	return out
}

// seconds is d in whole seconds, clamped to uint32.
func seconds(d *durationpb.Duration) uint32 {
	s := d.AsDuration() / time.Second
	switch {
	case s < 0:
		return 0
	case s > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(s)
}

// protocolOptions are the upstream HTTP protocol options of an Envoy
// cluster: HTTP/2 when http2 or upgrade (with maxConcurrentStreams and
// http2KeepAlive, which only HTTP/2 has), else HTTP/1.1 when a common
// option is set (Envoy requires an upstream protocol); nil when neither.
// Options Envoy would refuse (the spec's validation does not check
// http2KeepAlive) are left out with a reason.
func (po poolOptions) protocolOptions(http2 bool, n notes) *httpv3.HttpProtocolOptions {
	common := &corev3.HttpProtocolOptions{IdleTimeout: po.idleTimeout, MaxConnectionDuration: po.maxConnectionDuration}
	if po.maxRequestsPerConn > 0 {
		common.MaxRequestsPerConnection = wrapperspb.UInt32(po.maxRequestsPerConn)
	}
	hasCommon := !proto.Equal(common, &corev3.HttpProtocolOptions{})
	if !hasCommon {
		common = nil
	}
	if http2 || po.upgrade {
		h2 := &corev3.Http2ProtocolOptions{}
		if po.maxConcurrentStreams > 0 {
			h2.MaxConcurrentStreams = wrapperspb.UInt32(po.maxConcurrentStreams)
		}
		if ka := po.keepalive; ka != nil {
			kas := &corev3.KeepaliveSettings{Interval: ka.GetInterval(), Timeout: ka.GetTimeout()}
			if err := kas.ValidateAll(); err != nil {
				n.at("http.http2KeepAlive").addf("Envoy refuses it (%v); dropped", err)
			} else {
				h2.ConnectionKeepalive = kas
			}
		}
		return explicitHTTP(common, &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2},
		})
	}
	if !hasCommon {
		return nil
	}
	return explicitHTTP(common, &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
	})
}

func explicitHTTP(common *corev3.HttpProtocolOptions, cfg *httpv3.HttpProtocolOptions_ExplicitHttpConfig) *httpv3.HttpProtocolOptions {
	return &httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: common,
		UpstreamProtocolOptions:   &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: cfg},
	}
}

// Outlier detection.

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
