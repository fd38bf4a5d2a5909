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
// DestinationRule of the configuration last pushed (xdsgen.ExplainEndpoints).
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
	return xdsgen.ExplainEndpoints(ms, g, cfg.Host(h).DestinationRule, port, subset)
}
