package xdsgen

import "github.com/meshfed/meshfed/pkg/model"

// subsetSelector selects the endpoints of one DestinationRule subset: those
// whose labels hold every key/value of the subset's labels. As in Istio, an
// endpoint's labels are its Pod's labels plus its topology, taken from where
// it runs (cluster, region, zone, subzone) over what the Pod says, so that a
// subset may select `topology.istio.io/cluster: cluster-2` whatever its Pods
// are labelled.
type subsetSelector struct {
	// pod is the part of the selector matched against the Pod's labels.
	pod map[string]string
	// topology is the part matched against the endpoint's placement.
	topology []topologyTerm
}

// topologyTerm is one topology key of a selector and the value it wants.
type topologyTerm struct {
	key, want string
	of        func(*model.Endpoint) string
}

// topologyOf derives the topology labels of an endpoint.
var topologyOf = map[string]func(*model.Endpoint) string{
	model.LabelTopologyCluster: func(e *model.Endpoint) string { return string(e.Cluster) },
	model.LabelTopologyRegion:  func(e *model.Endpoint) string { return e.Locality.Region },
	model.LabelTopologyZone:    func(e *model.Endpoint) string { return e.Locality.Zone },
	model.LabelTopologySubZone: func(e *model.Endpoint) string { return e.Locality.SubZone },
}

func newSubsetSelector(labels map[string]string) subsetSelector {
	var s subsetSelector
	for k, v := range labels {
		if of, ok := topologyOf[k]; ok {
			s.topology = append(s.topology, topologyTerm{key: k, want: v, of: of})
			continue
		}
		if s.pod == nil {
			s.pod = make(map[string]string, len(labels))
		}
		s.pod[k] = v
	}
	return s
}

// matchesTopology reports whether e's placement satisfies the topology
// terms: the derived value when e has one, else the Pod's own label.
func (s *subsetSelector) matchesTopology(e *model.Endpoint) bool {
	for _, t := range s.topology {
		v := t.of(e)
		if v == "" {
			v, _ = e.Labels.Get(t.key)
		}
		if v != t.want {
			return false
		}
	}
	return true
}

// subsetMembers returns, for each endpoint of eps, whether subset selector
// labels selects it; nil when it selects every endpoint (an empty
// selector). The Pod-label part of the match runs once per distinct label
// set, not per endpoint: endpoints of one Deployment share one interned
// model.Labels, so a fleet of thousands of endpoints has a handful of sets.
func subsetMembers(eps []model.Endpoint, labels map[string]string) []bool {
	if len(labels) == 0 {
		return nil
	}
	sel := newSubsetSelector(labels)
	memo := map[model.Labels]bool{}
	out := make([]bool, len(eps))
	var last model.Labels
	lastMatch := false
	for i := range eps {
		e := &eps[i]
		// Endpoints of one Deployment tend to come together: skip the map
		// when the set repeats.
		if i == 0 || e.Labels != last {
			m, ok := memo[e.Labels]
			if !ok {
				m = e.Labels.Match(sel.pod)
				memo[e.Labels] = m
			}
			last, lastMatch = e.Labels, m
		}
		out[i] = lastMatch && sel.matchesTopology(e)
	}
	return out
}
