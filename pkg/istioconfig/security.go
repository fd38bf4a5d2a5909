package istioconfig

import (
	"slices"

	security "istio.io/api/security/v1beta1"

	"github.com/meshfed/meshfed/pkg/model"
)

// DefaultRootNamespace is the mesh's root namespace when a Snapshot names
// none: Istio's meshConfig.rootNamespace defaults to istiod's namespace.
const DefaultRootNamespace = "istio-system"

// TLSModeLabel is the Pod label by which Istio's injector marks a
// workload whose proxy (sidecar or agent) terminates Istio mutual TLS,
// with value TLSModeIstio.
const (
	TLSModeLabel = "security.istio.io/tlsMode"
	TLSModeIstio = "istio"
)

// PeerAuthentication is a valid PeerAuthentication.
type PeerAuthentication struct {
	Meta
	Spec *security.PeerAuthentication
}

// AuthorizationPolicy is a valid AuthorizationPolicy.
type AuthorizationPolicy struct {
	Meta
	Spec *security.AuthorizationPolicy
}

func (p *PeerAuthentication) meta() Meta  { return p.Meta }
func (p *AuthorizationPolicy) meta() Meta { return p.Meta }

// MTLSMode is the inbound mutual-TLS mode of a server port, as
// PeerAuthentication decides it.
type MTLSMode string

const (
	// MTLSStrict accepts mutual TLS only.
	MTLSStrict MTLSMode = "STRICT"
	// MTLSPermissive accepts mutual TLS and plaintext.
	MTLSPermissive MTLSMode = "PERMISSIVE"
	// MTLSDisable accepts plaintext only.
	MTLSDisable MTLSMode = "DISABLE"
)

// WorkloadSecurity is the security policy that applies to one workload
// (a Pod: its namespace and labels). Its pointers are shared with the
// Snapshot and must not be modified.
type WorkloadSecurity struct {
	// Mesh, Namespace and Workload are the PeerAuthentications that apply
	// at each level, nil where none does: mesh-wide (root namespace, no
	// selector), the workload's namespace (no selector), and the oldest
	// one of the namespace whose selector matches the workload's labels.
	// Of several at one level the oldest applies, as in Istio.
	Mesh, Namespace, Workload *PeerAuthentication
	// AuthorizationPolicies are those of the root namespace and of the
	// workload's namespace whose selector (none: every workload) matches,
	// sorted by key. Policies with targetRefs (gateways, waypoints) are
	// not among them.
	AuthorizationPolicies []*AuthorizationPolicy
	// Injected reports whether the Pod carries TLSModeLabel=TLSModeIstio:
	// its proxy terminates mutual TLS, and clients use it (auto mTLS). A
	// server that cannot take both on one port (proxyless gRPC) serves
	// PERMISSIVE as STRICT when injected, else as DISABLE, as istiod does.
	Injected bool
}

// Same reports whether w and o hold the very same objects.
func (w WorkloadSecurity) Same(o WorkloadSecurity) bool {
	return w.Mesh == o.Mesh && w.Namespace == o.Namespace && w.Workload == o.Workload && w.Injected == o.Injected &&
		slices.Equal(w.AuthorizationPolicies, o.AuthorizationPolicies)
}

// MTLS returns the inbound mode of the workload's (target) port: the
// workload policy's port-level mode, else the first mode set (not UNSET)
// of the workload, namespace and mesh policies, else def (the hub's
// mesh-wide default). Port-level modes count only in a policy with a
// selector, as in Istio.
func (w WorkloadSecurity) MTLS(port uint32, def MTLSMode) MTLSMode {
	if w.Workload != nil {
		if m, ok := mode(w.Workload.Spec.GetPortLevelMtls()[port]); ok {
			return m
		}
	}
	for _, p := range []*PeerAuthentication{w.Workload, w.Namespace, w.Mesh} {
		if p == nil {
			continue
		}
		if m, ok := mode(p.Spec.GetMtls()); ok {
			return m
		}
	}
	return def
}

func mode(m *security.PeerAuthentication_MutualTLS) (MTLSMode, bool) {
	switch m.GetMode() {
	case security.PeerAuthentication_MutualTLS_STRICT:
		return MTLSStrict, true
	case security.PeerAuthentication_MutualTLS_PERMISSIVE:
		return MTLSPermissive, true
	case security.PeerAuthentication_MutualTLS_DISABLE:
		return MTLSDisable, true
	}
	return "", false
}

// securityIndex holds the security objects of a Snapshot by namespace.
type securityIndex struct {
	peer    map[string][]*PeerAuthentication  // by namespace, oldest first
	authz   map[string][]*AuthorizationPolicy // by namespace, by key
	objects []Object                          // all of them, by key
}

func (x *securityIndex) add(o Object) {
	if isSecurity(o) {
		x.objects = append(x.objects, o)
	}
	switch o := o.(type) {
	case *PeerAuthentication:
		if x.peer == nil {
			x.peer = map[string][]*PeerAuthentication{}
		}
		x.peer[o.Namespace] = append(x.peer[o.Namespace], o)
	case *AuthorizationPolicy:
		if len(o.Spec.GetTargetRefs()) > 0 || o.Spec.GetTargetRef() != nil {
			return
		}
		if x.authz == nil {
			x.authz = map[string][]*AuthorizationPolicy{}
		}
		x.authz[o.Namespace] = append(x.authz[o.Namespace], o)
	}
}

func (x *securityIndex) sort() {
	slices.SortFunc(x.objects, func(a, b Object) int { return compareKeys(a.meta().Key, b.meta().Key) })
	for _, ps := range x.peer {
		slices.SortFunc(ps, func(a, b *PeerAuthentication) int {
			if a.older(b.Meta) {
				return -1
			}
			return 1
		})
	}
	for _, ps := range x.authz {
		slices.SortFunc(ps, func(a, b *AuthorizationPolicy) int { return compareKeys(a.Key, b.Key) })
	}
}

// Workload returns the security policy of a workload (a Pod) of namespace
// ns with labels.
func (s *Snapshot) Workload(ns string, labels model.Labels) WorkloadSecurity {
	tlsMode, _ := labels.Get(TLSModeLabel)
	if s == nil {
		return WorkloadSecurity{Injected: tlsMode == TLSModeIstio}
	}
	w := WorkloadSecurity{Injected: tlsMode == TLSModeIstio}
	for _, p := range s.security.peer[s.rootNamespace] {
		if p.Spec.GetSelector() == nil {
			w.Mesh = p
			break
		}
	}
	for _, p := range s.security.peer[ns] {
		switch sel := p.Spec.GetSelector(); {
		case sel == nil && w.Namespace == nil && ns != s.rootNamespace:
			w.Namespace = p
		case sel != nil && w.Workload == nil && labels.Match(sel.GetMatchLabels()):
			w.Workload = p
		}
	}
	add := func(ps []*AuthorizationPolicy) {
		for _, p := range ps {
			if sel := p.Spec.GetSelector(); sel == nil || labels.Match(sel.GetMatchLabels()) {
				w.AuthorizationPolicies = append(w.AuthorizationPolicies, p)
			}
		}
	}
	add(s.security.authz[s.rootNamespace])
	if ns != s.rootNamespace {
		add(s.security.authz[ns])
	}
	slices.SortFunc(w.AuthorizationPolicies, func(a, b *AuthorizationPolicy) int { return compareKeys(a.Key, b.Key) })
	return w
}

// RootNamespace is the namespace of mesh-wide policy.
func (s *Snapshot) RootNamespace() string {
	if s == nil {
		return DefaultRootNamespace
	}
	return s.rootNamespace
}

// SecurityChanged reports whether the security objects of old and next
// differ (by identity). Either may be nil.
func SecurityChanged(old, next *Snapshot) bool {
	var o, n []Object
	if old != nil {
		o = old.security.objects
	}
	if next != nil {
		n = next.security.objects
	}
	return !slices.Equal(o, n)
}

func isSecurity(o Object) bool {
	switch o.(type) {
	case *PeerAuthentication, *AuthorizationPolicy:
		return true
	}
	return false
}
