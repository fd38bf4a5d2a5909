package xdsgen

import (
	"cmp"
	"math"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// localityLbSetting.distribute, as istiod applies it: the first entry
// whose from matches the proxies' locality replaces failover for them.
// Every endpoint whose locality a pattern of the entry's to matches goes
// into priority 0; the others are left out. The pattern's weight is split
// over the localities it matches in proportion to their endpoints, each
// locality's share rounded up: ceil(n × weight / N) for a locality of n of
// the pattern's N endpoints (istiod's rule). Proxies that no entry matches
// keep the default priorities (or those of failover and
// failoverPriority).

// localityPattern is a from or to of distribute, "region/zone/subzone":
// a part "*" matches any value, an omitted or empty zone or sub-zone
// matches any value too, while an empty region matches only the empty
// region (as istiod's locality matching does).
type localityPattern model.Locality

// parseLocalityPattern reads s as model.ParseLocality does.
func parseLocalityPattern(s string) localityPattern {
	return localityPattern(model.ParseLocality(s))
}

// matches reports whether locality l is one of p's.
func (p localityPattern) matches(l model.Locality) bool {
	return (p.Region == "*" || p.Region == l.Region) &&
		(p.Zone == "*" || p.Zone == "" || p.Zone == l.Zone) &&
		(p.SubZone == "*" || p.SubZone == "" || p.SubZone == l.SubZone)
}

// specificity is the number of p's parts that name one value.
func (p localityPattern) specificity() int {
	n := 0
	if p.Region != "*" {
		n++
	}
	if p.Zone != "*" && p.Zone != "" {
		n++
	}
	if p.SubZone != "*" && p.SubZone != "" {
		n++
	}
	return n
}

// distribution is the distribute entry that applies to a proxy group: its
// to patterns with their weights, most specific first.
type distribution struct {
	targets []distTarget
}

// distTarget is one to pattern and its weight.
type distTarget struct {
	pattern localityPattern
	weight  uint32
}

// newDistribution returns the distribution of the first entry of
// distribute whose from matches locality l, or nil when none does.
// Istio rejects overlapping to patterns; should some overlap anyway, a
// locality takes the most specific pattern it matches (most parts naming
// one value), then the first in string order, since istiod's choice
// depends on map iteration order.
func newDistribution(l model.Locality, distribute []*networking.LocalityLoadBalancerSetting_Distribute) *distribution {
	for _, e := range distribute {
		if e == nil || !parseLocalityPattern(e.GetFrom()).matches(l) {
			continue
		}
		keys := make([]string, 0, len(e.GetTo()))
		for k := range e.GetTo() {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			return cmp.Or(cmp.Compare(parseLocalityPattern(b).specificity(), parseLocalityPattern(a).specificity()), strings.Compare(a, b))
		})
		d := &distribution{targets: make([]distTarget, len(keys))}
		for i, k := range keys {
			d.targets[i] = distTarget{pattern: parseLocalityPattern(k), weight: e.GetTo()[k]}
		}
		return d
	}
	return nil
}

// target returns the index of the to pattern locality l takes, or -1 when
// l is left out: no pattern matches it, or the one it takes has weight 0.
func (d *distribution) target(l model.Locality) int {
	for i, t := range d.targets {
		if t.pattern.matches(l) {
			if t.weight == 0 {
				return -1
			}
			return i
		}
	}
	return -1
}

// weigh sets weights[i], the load-balancing weight of the i-th locality
// kept, from counts[i], its number of endpoints, and targets[i], the
// index of its pattern: each pattern's weight split over its localities
// in proportion to their endpoints, rounded up, so that every kept
// locality weighs at least 1. The weights are scaled down, if need be, so
// that their sum fits in a uint32, as Envoy and grpc-go require within a
// priority.
func (d *distribution) weigh(counts []uint32, targets []int, weights []uint32) {
	totals := make([]uint64, len(d.targets))
	for i, n := range counts {
		totals[targets[i]] += uint64(n)
	}
	var sum uint64
	for i, n := range counts {
		t := targets[i]
		w := (uint64(n)*uint64(d.targets[t].weight) + totals[t] - 1) / totals[t]
		weights[i] = uint32(w) // w <= the pattern's weight
		sum += w
	}
	if sum <= math.MaxUint32 {
		return
	}
	// Scaling to MaxUint32-len keeps the sum at most that, and the floor
	// of 1 adds at most len; w × limit < 2^64.
	limit := uint64(math.MaxUint32) - uint64(len(weights))
	for i, w := range weights {
		weights[i] = max(1, uint32(uint64(w)*limit/sum))
	}
}

// distributeApplies reports whether some localityLbSetting of dr (top
// level, port level, of a subset) has a distribute entry whose from
// matches the locality of g: only then may g's load assignments differ
// from those of g.coarse().
func distributeApplies(dr *istioconfig.DestinationRule, g ProxyGroup) bool {
	if dr == nil || dr.Spec == nil {
		return false
	}
	l := g.locality()
	policyApplies := func(tp *networking.TrafficPolicy) bool {
		if newDistribution(l, tp.GetLoadBalancer().GetLocalityLbSetting().GetDistribute()) != nil {
			return true
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if newDistribution(l, pl.GetLoadBalancer().GetLocalityLbSetting().GetDistribute()) != nil {
				return true
			}
		}
		return false
	}
	if policyApplies(dr.Spec.GetTrafficPolicy()) {
		return true
	}
	for _, s := range dr.Spec.GetSubsets() {
		if policyApplies(s.GetTrafficPolicy()) {
			return true
		}
	}
	return false
}

// distributes reports whether localityLbSetting ls weights localities by
// distribute for some proxies: it has an entry and is not disabled. Such
// a cluster's Envoy needs locality_weighted_lb_config to honour the
// weights.
func distributes(ls *networking.LocalityLoadBalancerSetting) bool {
	if ls.GetEnabled() != nil && !ls.GetEnabled().GetValue() {
		return false
	}
	for _, e := range ls.GetDistribute() {
		if e != nil {
			return true
		}
	}
	return false
}

// distributeNotes says, for the distribute list of ls (n), what Istio
// would reject or what the proxies of kind k, balancing by lbPolicy, do
// not honour.
func distributeNotes(ls *networking.LocalityLoadBalancerSetting, k ProxyKind, lbPolicy clusterv3.Cluster_LbPolicy, n notes) {
	if len(ls.GetFailover()) > 0 || len(ls.GetFailoverPriority()) > 0 {
		n.addf("set with failover or failoverPriority (Istio rejects distribute with failover): for the proxies an entry's from matches, distribute decides; the others keep the failover priorities")
	}
	if lack := k.Can().LocalityWeightedLeastRequest; !lack.Can() && lbPolicy == clusterv3.Cluster_LEAST_REQUEST {
		n.addf("%s: %s clients get only the localities an entry's to matches, balanced by requests alone", lack, k)
	}
	for i, e := range ls.GetDistribute() {
		if e == nil {
			continue
		}
		en := n.index(i)
		if len(e.GetTo()) == 0 {
			en.at("to").addf("empty (Istio rejects this): the proxies in %q get no endpoints", e.GetFrom())
			continue
		}
		var sum uint64
		zero := false
		keys := make([]string, 0, len(e.GetTo()))
		for k, w := range e.GetTo() {
			sum += uint64(w)
			zero = zero || w == 0
			keys = append(keys, k)
		}
		if sum != 100 || zero {
			en.at("to").addf("weights sum to %d, or one is 0 (Istio rejects this, wanting 1..100 summing to 100): they are used as relative weights, a locality of weight 0 is left out", sum)
		}
		slices.Sort(keys)
		for a := range keys {
			for b := a + 1; b < len(keys); b++ {
				if localityPatternsOverlap(parseLocalityPattern(keys[a]), parseLocalityPattern(keys[b])) {
					en.at("to").addf("%q and %q overlap (Istio rejects this): a locality takes the more specific, then the first in string order", keys[a], keys[b])
				}
			}
		}
	}
}

// localityPatternsOverlap reports whether some locality matches both p
// and q.
func localityPatternsOverlap(p, q localityPattern) bool {
	part := func(a, b string, emptyAny bool) bool {
		wild := func(s string) bool { return s == "*" || emptyAny && s == "" }
		return wild(a) || wild(b) || a == b
	}
	return part(p.Region, q.Region, false) && part(p.Zone, q.Zone, true) && part(p.SubZone, q.SubZone, true)
}
