package istioconfig

import (
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/model"
)

// A VirtualService match may name its clients: sourceLabels (the client
// Pod's labels) and sourceNamespace. Such a match applies to some proxies
// and not others, so the routes it is part of cannot be shared by all.
// The proxies that satisfy the same set of such conditions, across the
// whole configuration, get the same routes: that set is their RouteClass.
// The class of most proxies, and of all when no match names its clients,
// is the default, the empty set.

// sourceCondition returns the canonical text of m's conditions on the
// client, "" when it has none: the namespace, then the sorted labels,
// "ns;k1=v1,k2=v2". Keys and values are label syntax (validate checks
// them), which has no ';', ',', '=' or newline.
func sourceCondition(m *networking.HTTPMatchRequest) string {
	if len(m.GetSourceLabels()) == 0 && m.GetSourceNamespace() == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString(m.GetSourceNamespace())
	b.WriteByte(';')
	for i, k := range slices.Sorted(maps.Keys(m.GetSourceLabels())) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m.GetSourceLabels()[k])
	}
	return b.String()
}

// sourceRule is one distinct condition on clients, parsed for matching.
type sourceRule struct {
	text      string // sourceCondition's
	namespace string
	labels    map[string]string
}

// sourceRules returns the distinct conditions on clients of the mesh's
// VirtualServices (those bound to sidecars), sorted by text. A match that
// names gateways other than the mesh never applies to sidecars, and one
// that names gateways at all has its source conditions ignored (Istio's
// rule), so neither contributes.
func sourceRules(objects map[Key]Object) []sourceRule {
	seen := map[string]bool{}
	var out []sourceRule
	for _, o := range objects {
		vs, ok := o.(*VirtualService)
		if !ok || !boundToMesh(vs.Spec.GetGateways()) {
			continue
		}
		for _, r := range vs.Spec.GetHttp() {
			for _, m := range r.GetMatch() {
				t := sourceCondition(m)
				if t == "" || len(m.GetGateways()) > 0 || seen[t] {
					continue
				}
				seen[t] = true
				out = append(out, sourceRule{text: t, namespace: m.GetSourceNamespace(), labels: m.GetSourceLabels()})
			}
		}
	}
	slices.SortFunc(out, func(a, b sourceRule) int { return strings.Compare(a.text, b.text) })
	return out
}

// RouteClass is the set of conditions on clients (VirtualService matches'
// sourceLabels and sourceNamespace) that a proxy satisfies; the zero value
// is the default class, which satisfies none. Classes are comparable:
// proxies of equal classes get identical routes.
type RouteClass struct {
	// set is the sorted sourceCondition texts, each followed by '\n'.
	set string
}

// IsDefault reports whether c satisfies no condition on clients.
func (c RouteClass) IsDefault() bool { return c.set == "" }

// Name returns a short name of c, 16 hex digits of a hash of its
// conditions, for resource names; "" for the default class.
func (c RouteClass) Name() string {
	if c.set == "" {
		return ""
	}
	h := fnv.New64a()
	h.Write([]byte(c.set))
	return strconv.FormatUint(h.Sum64()|1<<63, 16)
}

// String lists c's conditions, "ns;k=v" each, separated by spaces;
// "default" for the default class.
func (c RouteClass) String() string {
	if c.set == "" {
		return "default"
	}
	return strings.TrimSpace(strings.ReplaceAll(c.set, "\n", " "))
}

// Admits reports whether a proxy of class c is subject to match m: m has
// no condition on clients, or c satisfies m's.
func (c RouteClass) Admits(m *networking.HTTPMatchRequest) bool {
	t := sourceCondition(m)
	if t == "" {
		return true
	}
	for rest := c.set; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		if line == t {
			return true
		}
	}
	return false
}

// RouteClass returns the class of a client in namespace ns whose Pod has
// labels: the conditions on clients of s's VirtualServices that it
// satisfies. It is the default class when s has no such condition.
func (s *Snapshot) RouteClass(ns string, labels model.Labels) RouteClass {
	if s == nil || len(s.sources) == 0 {
		return RouteClass{}
	}
	var b strings.Builder
	for _, r := range s.sources {
		if (r.namespace == "" || r.namespace == ns) && labels.Match(r.labels) {
			b.WriteString(r.text)
			b.WriteByte('\n')
		}
	}
	return RouteClass{set: b.String()}
}

// HasSourceRules reports whether any VirtualService match of s names its
// clients, so that proxies can differ in class.
func (s *Snapshot) HasSourceRules() bool { return s != nil && len(s.sources) > 0 }
