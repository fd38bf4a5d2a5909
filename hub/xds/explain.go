package xds

import (
	"fmt"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// Explain tells which endpoints of host h's port (and subset, "" for
// none) proxies of group g are sent, in priority order, and why: the
// registry's service merged with its ServiceEntry, under the
// DestinationRule of the configuration last pushed and the fleet's network
// gateways (xdsgen.ExplainEndpoints); a group of no network is on its
// cluster's.
// It needs no proxy of g to be connected here, so any replica explains
// any proxy of the fleet.
func (s *Server) Explain(g xdsgen.ProxyGroup, h model.Hostname, port uint32, subset string) (xdsgen.Explanation, error) {
	c := s.cache
	c.mu.Lock()
	cfg := c.planner.Config()
	c.mu.Unlock()
	ms := istioconfig.MergeEntry(s.opts.Registry.Service(h), cfg.Entry(h))
	if ms == nil {
		return xdsgen.Explanation{}, fmt.Errorf("no service %s in the registry or in a ServiceEntry", h)
	}
	if g.Network == "" {
		g.Network = s.opts.Registry.ClusterNetwork(g.Cluster)
	}
	return xdsgen.ExplainEndpoints(ms, g, cfg.Host(h).DestinationRule, s.opts.Registry.NetworkGateways(), port, subset)
}
