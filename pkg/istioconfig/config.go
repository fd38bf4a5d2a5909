package istioconfig

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// Key names one config object.
type Key struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (k Key) String() string { return k.Kind + "/" + k.Namespace + "/" + k.Name }

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// Meta is what the hub keeps of an object's metadata.
type Meta struct {
	Key
	// Generation is metadata.generation, which the object's status and
	// the fleet's config status report against.
	Generation int64 `json:"generation"`
	// Created is metadata.creationTimestamp; the oldest of two objects
	// claiming one host wins.
	Created time.Time `json:"created"`
}

// older reports whether m wins a host over o.
func (m Meta) older(o Meta) bool {
	if !m.Created.Equal(o.Created) {
		return m.Created.Before(o.Created)
	}
	return compareKeys(m.Key, o.Key) < 0
}

// VirtualService is a valid VirtualService.
type VirtualService struct {
	Meta
	Spec *networking.VirtualService
}

// DestinationRule is a valid DestinationRule.
type DestinationRule struct {
	Meta
	Spec *networking.DestinationRule
}

// Object is a valid config object of any kind this package models.
type Object interface {
	meta() Meta
}

func (v *VirtualService) meta() Meta  { return v.Meta }
func (d *DestinationRule) meta() Meta { return d.Meta }

// MetaOf returns o's metadata.
func MetaOf(o Object) Meta { return o.meta() }

// HostConfig is the configuration that applies to one hostname. Its
// pointers are shared with the Snapshot and must not be modified.
type HostConfig struct {
	VirtualService  *VirtualService
	DestinationRule *DestinationRule
}

// Empty reports whether no object applies.
func (c HostConfig) Empty() bool { return c.VirtualService == nil && c.DestinationRule == nil }

// Same reports whether c and o are the very same objects (identity, which
// is what changes when an object does).
func (c HostConfig) Same(o HostConfig) bool {
	return c.VirtualService == o.VirtualService && c.DestinationRule == o.DestinationRule
}

// Shadowed is an object that lost a host to an older one.
type Shadowed struct {
	Host model.Hostname `json:"host"`
	Lost Key            `json:"object"`
	By   Key            `json:"by"`
}

// Snapshot is an immutable set of valid config objects, indexed by the
// hostnames they apply to. The zero value is not usable; a nil *Snapshot
// is an empty one.
type Snapshot struct {
	domainSuffix  string
	rootNamespace string
	objects       map[Key]Object
	vs            hostIndex[*VirtualService]
	dr            hostIndex[*DestinationRule]
	security      securityIndex
	sidecars      sidecarIndex
	gateways      gatewayIndex
	warnings      map[Key][]string
	apiStatus     map[Key]GatewayAPIStatus
	// apiInputs are the Gateway API's objects, by key; api what they
	// were translated into.
	apiInputs []Object
	api       gatewayAPIResult
	nsLabels  map[string]map[string]string
	entries   entryIndex
	sources   []sourceRule // conditions on clients (RouteClass)
	shadowed  []Shadowed
}

// SnapshotOptions say how a Snapshot reads names.
type SnapshotOptions struct {
	// DomainSuffix is the cluster domain of short host names. Default
	// cluster.local.
	DomainSuffix string
	// RootNamespace holds mesh-wide policy (Istio's
	// meshConfig.rootNamespace). Default DefaultRootNamespace.
	RootNamespace string
	// Previous is the snapshot this one follows, if any: what was
	// derived from objects both hold (the same pointers) is reused, so
	// that it keeps its identity (the Gateway API's translation, whose
	// Gateways and VirtualServices a gateway proxy's state compares by
	// pointer).
	Previous *Snapshot
	// NamespaceLabels are the labels of the config cluster's namespaces,
	// by name: a Gateway API listener's allowedRoutes selector selects
	// routes' namespaces by them. Nil selects none.
	NamespaceLabels map[string]map[string]string
}

// NewSnapshot indexes objs, which must be valid (validate.Spec accepted
// them) and of distinct keys; a later duplicate replaces an earlier one.
func NewSnapshot(opts SnapshotOptions, objs []Object) *Snapshot {
	domainSuffix := cmp.Or(opts.DomainSuffix, model.DefaultDomainSuffix)
	s := &Snapshot{domainSuffix: domainSuffix, rootNamespace: cmp.Or(opts.RootNamespace, DefaultRootNamespace),
		objects: make(map[Key]Object, len(objs))}
	for _, o := range objs {
		s.objects[o.meta().Key] = o
	}
	for _, o := range s.objects {
		s.security.add(o)
		s.gateways.add(o)
		if sc, ok := o.(*Sidecar); ok {
			if s.sidecars == nil {
				s.sidecars = sidecarIndex{}
			}
			s.sidecars[sc.Namespace] = append(s.sidecars[sc.Namespace], sc)
		}
	}
	s.security.sort()
	// The Gateway API's objects, translated into Gateways and
	// VirtualServices bound to them (never to the mesh).
	s.apiInputs = gatewayAPIInputs(s.objects)
	var api gatewayAPIResult
	if p := opts.Previous; p != nil && p.domainSuffix == domainSuffix && slices.Equal(p.apiInputs, s.apiInputs) &&
		(!p.api.selectsNamespaces || maps.EqualFunc(p.nsLabels, opts.NamespaceLabels, maps.Equal)) {
		api = p.api
	} else {
		api = translateGatewayAPI(s.objects, domainSuffix, opts.NamespaceLabels)
	}
	s.nsLabels = opts.NamespaceLabels
	s.api = api
	for _, o := range api.objects {
		s.gateways.add(o)
	}
	s.apiStatus = api.status
	s.gateways.sort()
	s.warnings = gatewayWarnings(&s.gateways, s.objects)
	s.sidecars.sort()
	// Who wins a host does not depend on the order of the claims (the
	// oldest does), so the objects need no sorting; the losers are known
	// once every claim is in.
	var claims []hostClaim
	for _, o := range s.objects {
		switch o := o.(type) {
		case *VirtualService:
			if !boundToMesh(o.Spec.GetGateways()) {
				continue
			}
			for _, h := range o.Spec.GetHosts() {
				h := ResolveHost(h, o.Namespace, domainSuffix)
				claimVS(&s.vs, h, o)
				claims = append(claims, hostClaim{host: h, key: o.Key, vs: true})
			}
		case *DestinationRule:
			h := ResolveHost(o.Spec.GetHost(), o.Namespace, domainSuffix)
			claim(&s.dr, h, o)
			claims = append(claims, hostClaim{host: h, key: o.Key})
		case *ServiceEntry:
			for _, h := range entryHosts(o) {
				s.entries.claim(h, o)
				claims = append(claims, hostClaim{host: h, key: o.Key, entry: true})
			}
		}
	}
	s.entries.build()
	s.sources = sourceRules(s.objects)
	for _, c := range claims {
		var winner Key
		switch {
		case c.vs:
			v, _ := s.vs.get(c.host)
			winner = v.Key
		case c.entry:
			winner = s.entries.byHost[c.host].Key
		default:
			d, _ := s.dr.get(c.host)
			winner = d.Key
		}
		if winner != c.key {
			s.shadowed = append(s.shadowed, Shadowed{Host: c.host, Lost: c.key, By: winner})
		}
	}
	slices.SortFunc(s.shadowed, func(a, b Shadowed) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), compareKeys(a.Lost, b.Lost))
	})
	return s
}

// hostClaim is one object's claim of one host, of a VirtualService, a
// DestinationRule or a ServiceEntry.
type hostClaim struct {
	host  model.Hostname
	key   Key
	vs    bool
	entry bool
}

// claim gives host h to o unless an older object holds it.
func claim[T Object](idx *hostIndex[T], h model.Hostname, o T) {
	if cur, ok := idx.get(h); !ok || o.meta().older(cur.meta()) {
		idx.put(h, o)
	}
}

// claimVS gives host h to the VirtualService vs unless one that holds it
// has HTTP rules and vs has none, or it is as routed and older: a
// VirtualService of only TCP or TLS rules does not take the host's HTTP
// routes from one that has some, whatever their ages.
func claimVS(idx *hostIndex[*VirtualService], h model.Hostname, vs *VirtualService) {
	cur, ok := idx.get(h)
	if ok {
		mine, theirs := len(vs.Spec.GetHttp()) > 0, len(cur.Spec.GetHttp()) > 0
		if mine != theirs {
			if mine {
				idx.put(h, vs)
			}
			return
		}
	}
	claim(idx, h, vs)
}

// BoundToMesh reports whether vs applies to the mesh's sidecars and
// proxyless clients: it names no gateway, or "mesh" among them.
func (vs *VirtualService) BoundToMesh() bool { return boundToMesh(vs.Spec.GetGateways()) }

func boundToMesh(gateways []string) bool {
	return len(gateways) == 0 || slices.Contains(gateways, "mesh")
}

// Host returns the configuration that applies to hostname h.
func (s *Snapshot) Host(h model.Hostname) HostConfig {
	if s == nil {
		return HostConfig{}
	}
	vs, _ := s.vs.lookup(h)
	dr, _ := s.dr.lookup(h)
	return HostConfig{VirtualService: vs, DestinationRule: dr}
}

// DomainSuffix is the cluster domain short names were resolved with.
func (s *Snapshot) DomainSuffix() string {
	if s == nil {
		return model.DefaultDomainSuffix
	}
	return s.domainSuffix
}

// Objects returns every object, sorted by key.
func (s *Snapshot) Objects() []Object {
	if s == nil {
		return nil
	}
	out := make([]Object, 0, len(s.objects))
	for _, k := range slices.SortedFunc(maps.Keys(s.objects), compareKeys) {
		out = append(out, s.objects[k])
	}
	return out
}

// Object returns the object of key k.
func (s *Snapshot) Object(k Key) (Object, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.objects[k]
	return o, ok
}

// Shadowed lists the objects that lost a host to an older one, sorted by
// host.
func (s *Snapshot) Shadowed() []Shadowed {
	if s == nil {
		return nil
	}
	return s.shadowed
}

// ChangedHosts returns, of hosts (the registry's hostnames), those whose
// HostConfig differs between old and next, in the order given. Either
// snapshot may be nil (empty).
func ChangedHosts(old, next *Snapshot, hosts []model.Hostname) []model.Hostname {
	var out []model.Hostname
	for _, h := range hosts {
		if !old.Host(h).Same(next.Host(h)) {
			out = append(out, h)
		}
	}
	return out
}

// ResolveHost turns host, as written in an object of namespace ns, into a
// hostname: "reviews" → reviews.<ns>.svc.<domain>, "reviews.demo" →
// reviews.demo.svc.<domain>, anything with more labels (or a wildcard) as
// it is, lower-cased.
func ResolveHost(host, ns, domainSuffix string) model.Hostname {
	if domainSuffix == "" {
		domainSuffix = model.DefaultDomainSuffix
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if strings.HasPrefix(host, "*") {
		return model.Hostname(host)
	}
	switch strings.Count(host, ".") {
	case 0:
		return model.Hostname(host + "." + ns + ".svc." + domainSuffix)
	case 1:
		return model.Hostname(host + ".svc." + domainSuffix)
	}
	return model.Hostname(host)
}

// Kinds are the kinds a Snapshot holds.
var Kinds = []string{validate.KindVirtualService, validate.KindDestinationRule, validate.KindServiceEntry, validate.KindSidecar, validate.KindGateway,
	validate.KindPeerAuthentication, validate.KindAuthorizationPolicy,
	validate.KindGatewayClass, validate.KindKubeGateway, validate.KindHTTPRoute, validate.KindGRPCRoute, validate.KindTLSRoute, validate.KindReferenceGrant}

// SelectsNamespaces reports whether the Gateway API's translation
// depends on namespaces' labels (a listener's allowedRoutes selector).
func (s *Snapshot) SelectsNamespaces() bool { return s != nil && s.api.selectsNamespaces }

// GatewayAPIStatus returns the status the Gateway API object of key k
// should carry, and whether meshfed writes one (a Gateway of another
// class, say, gets none).
func (s *Snapshot) GatewayAPIStatus(k Key) (GatewayAPIStatus, bool) {
	if s == nil {
		return GatewayAPIStatus{}, false
	}
	st, ok := s.apiStatus[k]
	return st, ok
}

// hostIndex maps hostnames to the object that applies: exact hosts, and
// wildcards ("*.demo.svc.cluster.local", "*") by suffix.
type hostIndex[T Object] struct {
	exact    map[model.Hostname]T
	wildcard map[string]T // by suffix without the "*", e.g. ".demo.svc.cluster.local"; "" for "*"
}

func (x *hostIndex[T]) get(h model.Hostname) (T, bool) {
	if suffix, ok := strings.CutPrefix(string(h), "*"); ok {
		v, ok := x.wildcard[suffix]
		return v, ok
	}
	v, ok := x.exact[h]
	return v, ok
}

func (x *hostIndex[T]) put(h model.Hostname, v T) {
	if suffix, ok := strings.CutPrefix(string(h), "*"); ok {
		if x.wildcard == nil {
			x.wildcard = map[string]T{}
		}
		x.wildcard[suffix] = v
		return
	}
	if x.exact == nil {
		x.exact = map[model.Hostname]T{}
	}
	x.exact[h] = v
}

// lookup returns the object for h: its exact host, else the wildcard of
// the longest suffix of h.
func (x *hostIndex[T]) lookup(h model.Hostname) (T, bool) {
	if v, ok := x.exact[h]; ok {
		return v, true
	}
	var best T
	bestLen, found := -1, false
	for suffix, v := range x.wildcard {
		if len(suffix) > bestLen && strings.HasSuffix(string(h), suffix) {
			best, bestLen, found = v, len(suffix), true
		}
	}
	return best, found
}
