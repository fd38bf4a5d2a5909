package xdsgen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/model"
)

// DestinationRule load balancing: simple balancers, consistent hashing
// and locality settings.

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
