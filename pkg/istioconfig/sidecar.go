package istioconfig

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/model"
)

// Sidecar is a valid Sidecar: the scope of the sidecars it selects.
type Sidecar struct {
	Meta
	Spec *networking.Sidecar
}

func (s *Sidecar) meta() Meta { return s.Meta }

// sidecarIndex holds a Snapshot's Sidecars by namespace, oldest first.
type sidecarIndex map[string][]*Sidecar

func (x sidecarIndex) sort() {
	for _, ss := range x {
		slices.SortFunc(ss, func(a, b *Sidecar) int {
			if a.older(b.Meta) {
				return -1
			}
			return 1
		})
	}
}

// SidecarScope returns the Sidecar that applies to a workload (a Pod) of
// namespace ns with labels, as in Istio: the oldest of its namespace whose
// workloadSelector matches, else the oldest of its namespace without a
// selector, else the oldest of the root namespace without a selector (the
// mesh's default scope); nil when none does, and the sidecar sees every
// service.
func (s *Snapshot) SidecarScope(ns string, labels model.Labels) *Sidecar {
	if s == nil {
		return nil
	}
	var bare *Sidecar
	for _, sc := range s.sidecars[ns] {
		sel := sc.Spec.GetWorkloadSelector()
		switch {
		case sel != nil && labels.Match(sel.GetLabels()):
			return sc
		case sel == nil && bare == nil:
			bare = sc
		}
	}
	if bare != nil {
		return bare
	}
	for _, sc := range s.sidecars[s.rootNamespace] {
		if sc.Spec.GetWorkloadSelector() == nil {
			return sc
		}
	}
	return nil
}

// Sees reports whether a sidecar of namespace ns under scope sc (nil: no
// Sidecar, everything) receives the service h of namespace svcNS: some
// egress listener's hosts ("namespace/dnsName") name it. The namespace
// part is a namespace, "*" (any), "." (the Sidecar's own) or "~" (none);
// the host part an FQDN, "*", or "*.suffix". A Sidecar with no egress
// listener sees everything, as in Istio. An egress listener with a port
// ("port: {number: 8080}") names its hosts on that port only; port 0 asks
// for any port.
func (sc *Sidecar) Sees(h model.Hostname, svcNS string, port uint32) bool {
	if sc == nil || len(sc.Spec.GetEgress()) == 0 {
		return true
	}
	for _, eg := range sc.Spec.GetEgress() {
		if n := eg.GetPort().GetNumber(); port != 0 && n != 0 && n != port {
			continue
		}
		for _, entry := range eg.GetHosts() {
			ns, host, ok := strings.Cut(entry, "/")
			if !ok {
				continue
			}
			switch ns {
			case "~":
				continue
			case ".":
				ns = sc.Namespace
			}
			if ns != "*" && ns != svcNS {
				continue
			}
			if hostMatches(host, string(h)) {
				return true
			}
		}
	}
	return false
}

// OutboundRegistryOnly reports whether sc sets outboundTrafficPolicy to
// REGISTRY_ONLY (the enum's zero value: a policy without a mode is one):
// connections to destinations outside the registry are refused instead of
// passed through. Without a policy the mesh's default, ALLOW_ANY, holds.
func (sc *Sidecar) OutboundRegistryOnly() bool {
	if sc == nil {
		return false
	}
	p := sc.Spec.GetOutboundTrafficPolicy()
	return p != nil && p.GetMode() == networking.OutboundTrafficPolicy_REGISTRY_ONLY
}

// hostMatches reports whether pattern ("*", "*.suffix" or a name) matches
// the hostname h, case-insensitively.
func hostMatches(pattern, h string) bool {
	pattern, h = strings.ToLower(pattern), strings.ToLower(h)
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(h, pattern[1:])
	}
	return pattern == h
}
