package xdsgen

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/model"
)

// proximity ranks endpoints for the proxies of one group into classes,
// best first, which become the priorities of their load assignments. By
// default (classify) the classes are the group's own cluster, its region,
// and the rest. A DestinationRule's localityLbSetting changes them:
//
//   - enabled: false puts every endpoint in one class;
//   - failoverPriority [k1, ..., kn] ranks an endpoint by how many of the
//     keys, from the first, it shares with the proxies: all n → 0, the
//     first n-1 → 1, ..., none → n. A key is "key" (the endpoint's value
//     must be the proxies') or "key=value" (it must be value). The proxies'
//     values known to a group are those of topology.istio.io/cluster and
//     topology.kubernetes.io/region; the list is cut before the first other
//     bare key (ClusterNotes says so), since no proxy value can match it;
//   - failover [{from, to}] adds, for proxies in region from, the class of
//     region to between their own region and the rest (each to in order);
//   - distribute, when one of its entries' from matches the proxies'
//     locality, puts every endpoint in one class and weights localities
//     (dist; see distribute.go), failover and failoverPriority set beside
//     it notwithstanding (ClusterNotes says so); endpoints of a locality
//     that none of the entry's to patterns matches are left out. Proxies
//     that no entry matches keep the classes above (istiod, which rejects
//     distribute with failover, applies no failover to them).
type proximity struct {
	g          ProxyGroup
	flat       bool
	priority   []priorityKey
	failoverTo []string
	dist       *distribution
}

// priorityKey is one term of failoverPriority: the endpoint's value of
// key (of) must equal want.
type priorityKey struct {
	of   func(*model.Endpoint) string
	want string
}

// proxyTopology gives the proxies' value of a topology key, as a group
// knows it.
var proxyTopology = map[string]func(ProxyGroup) string{
	model.LabelTopologyCluster: func(g ProxyGroup) string { return string(g.Cluster) },
	model.LabelTopologyRegion:  func(g ProxyGroup) string { return g.Region },
}

// endpointValue returns the endpoint's value of a label key: its placement
// for a topology key (when known), else its Pod's label.
func endpointValue(key string) func(*model.Endpoint) string {
	of := topologyOf[key]
	return func(e *model.Endpoint) string {
		if of != nil {
			if v := of(e); v != "" {
				return v
			}
		}
		v, _ := e.Labels.Get(key)
		return v
	}
}

func newProximity(g ProxyGroup, lb *networking.LocalityLoadBalancerSetting) proximity {
	p := proximity{g: g}
	if lb == nil {
		return p
	}
	if lb.GetEnabled() != nil && !lb.GetEnabled().GetValue() {
		p.flat = true
		return p
	}
	if d := newDistribution(g.locality(), lb.GetDistribute()); d != nil {
		p.flat = true
		p.dist = d
		return p
	}
	if keys := lb.GetFailoverPriority(); len(keys) > 0 {
		p.priority = failoverPriorityKeys(g, keys)
		return p
	}
	for _, f := range lb.GetFailover() {
		if f.GetFrom() != "" && f.GetFrom() == g.Region && f.GetTo() != "" && f.GetTo() != g.Region {
			p.failoverTo = append(p.failoverTo, f.GetTo())
		}
	}
	return p
}

// failoverPriorityKeys turns failoverPriority into terms for group g, cut
// before the first bare key whose proxy value g does not know.
func failoverPriorityKeys(g ProxyGroup, keys []string) []priorityKey {
	out := make([]priorityKey, 0, len(keys))
	for _, k := range keys {
		key, want, explicit := strings.Cut(k, "=")
		if !explicit {
			proxy, ok := proxyTopology[key]
			if !ok {
				break
			}
			want = proxy(g)
		}
		out = append(out, priorityKey{of: endpointValue(key), want: want})
	}
	return out
}

// unknownPriorityKeys returns the bare failoverPriority keys from which
// the list is cut (see failoverPriorityKeys), for ClusterNotes.
func unknownPriorityKeys(keys []string) []string {
	for i, k := range keys {
		if _, _, explicit := strings.Cut(k, "="); !explicit && proxyTopology[k] == nil {
			return keys[i:]
		}
	}
	return nil
}

// class returns ep's class, 0 best.
func (p *proximity) class(ep *model.Endpoint) int {
	switch {
	case p.flat:
		return 0
	case p.priority != nil:
		matched := 0
		for _, k := range p.priority {
			if k.of(ep) != k.want {
				break
			}
			matched++
		}
		return len(p.priority) - matched
	}
	c := classify(ep, p.g)
	if c != classRemote || len(p.failoverTo) == 0 {
		return c
	}
	for i, r := range p.failoverTo {
		if ep.Locality.Region == r {
			return classRemote + i
		}
	}
	return classRemote + len(p.failoverTo)
}
