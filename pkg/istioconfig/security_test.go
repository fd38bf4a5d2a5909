package istioconfig_test

import (
	"testing"
	"time"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func peerAuth(ns, name string, age int, sel map[string]string, m security.PeerAuthentication_MutualTLS_Mode, ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) *istioconfig.PeerAuthentication {
	spec := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: m}}
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	for p, pm := range ports {
		if spec.PortLevelMtls == nil {
			spec.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
		}
		spec.PortLevelMtls[p] = &security.PeerAuthentication_MutualTLS{Mode: pm}
	}
	return &istioconfig.PeerAuthentication{Meta: istioconfig.Meta{
		Key:     istioconfig.Key{Kind: "PeerAuthentication", Namespace: ns, Name: name},
		Created: epoch.Add(-time.Duration(age) * time.Hour),
	}, Spec: spec}
}

func authzPolicy(ns, name string, sel map[string]string, targeted bool) *istioconfig.AuthorizationPolicy {
	spec := &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}}
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	if targeted {
		spec.TargetRefs = []*typev1beta1.PolicyTargetReference{{Kind: "Gateway", Name: "gw"}}
	}
	return &istioconfig.AuthorizationPolicy{Meta: istioconfig.Meta{
		Key: istioconfig.Key{Kind: "AuthorizationPolicy", Namespace: ns, Name: name}, Created: epoch,
	}, Spec: spec}
}

const (
	unset      = security.PeerAuthentication_MutualTLS_UNSET
	strict     = security.PeerAuthentication_MutualTLS_STRICT
	permissive = security.PeerAuthentication_MutualTLS_PERMISSIVE
	disable    = security.PeerAuthentication_MutualTLS_DISABLE
)

// TestWorkloadMTLS: the mode of a workload's port follows Istio's
// precedence: the workload policy's port level, then the first mode set
// of workload, namespace and mesh policies, then the hub's default; of
// several policies at one level the oldest applies.
func TestWorkloadMTLS(t *testing.T) {
	echo := model.NewLabels(map[string]string{"app": "echo", "version": "v1"})
	other := model.NewLabels(map[string]string{"app": "other"})
	cases := []struct {
		name   string
		objs   []istioconfig.Object
		ns     string
		labels model.Labels
		port   uint32
		want   istioconfig.MTLSMode
	}{
		{name: "no policy: the default", ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSDisable},
		{name: "mesh-wide", objs: []istioconfig.Object{peerAuth("istio-system", "mesh", 0, nil, strict, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSStrict},
		{name: "a selector in the root namespace is not mesh-wide",
			objs: []istioconfig.Object{peerAuth("istio-system", "sel", 0, map[string]string{"app": "echo"}, strict, nil)},
			ns:   "demo", labels: echo, port: 8080, want: istioconfig.MTLSDisable},
		{name: "namespace over mesh", objs: []istioconfig.Object{
			peerAuth("istio-system", "mesh", 0, nil, strict, nil), peerAuth("demo", "ns", 0, nil, permissive, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSPermissive},
		{name: "another namespace's policy does not apply", objs: []istioconfig.Object{peerAuth("other", "ns", 0, nil, strict, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSDisable},
		{name: "workload over namespace", objs: []istioconfig.Object{
			peerAuth("demo", "ns", 0, nil, strict, nil), peerAuth("demo", "wl", 0, map[string]string{"app": "echo"}, disable, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSDisable},
		{name: "a selector that does not match", objs: []istioconfig.Object{
			peerAuth("demo", "ns", 0, nil, strict, nil), peerAuth("demo", "wl", 0, map[string]string{"app": "echo"}, disable, nil)},
			ns: "demo", labels: other, port: 8080, want: istioconfig.MTLSStrict},
		{name: "UNSET inherits", objs: []istioconfig.Object{
			peerAuth("istio-system", "mesh", 0, nil, permissive, nil), peerAuth("demo", "ns", 0, nil, unset, nil),
			peerAuth("demo", "wl", 0, map[string]string{"app": "echo"}, unset, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSPermissive},
		{name: "port level wins on its port", objs: []istioconfig.Object{
			peerAuth("demo", "wl", 0, map[string]string{"app": "echo"}, strict, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: disable})},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSDisable},
		{name: "port level only on its port", objs: []istioconfig.Object{
			peerAuth("demo", "wl", 0, map[string]string{"app": "echo"}, strict, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: disable})},
			ns: "demo", labels: echo, port: 9090, want: istioconfig.MTLSStrict},
		{name: "UNSET port level inherits", objs: []istioconfig.Object{
			peerAuth("demo", "ns", 0, nil, permissive, nil),
			peerAuth("demo", "wl", 0, map[string]string{"app": "echo"}, unset, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: unset})},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSPermissive},
		{name: "oldest namespace policy wins", objs: []istioconfig.Object{
			peerAuth("demo", "young", 1, nil, strict, nil), peerAuth("demo", "old", 5, nil, permissive, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSPermissive},
		{name: "oldest matching workload policy wins", objs: []istioconfig.Object{
			peerAuth("demo", "a-young", 1, map[string]string{"app": "echo"}, strict, nil),
			peerAuth("demo", "z-old", 5, map[string]string{"version": "v1"}, disable, nil)},
			ns: "demo", labels: echo, port: 8080, want: istioconfig.MTLSDisable},
		{name: "a workload of the root namespace gets the mesh policy", objs: []istioconfig.Object{
			peerAuth("istio-system", "mesh", 0, nil, strict, nil)},
			ns: "istio-system", labels: echo, port: 8080, want: istioconfig.MTLSStrict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, c.objs)
			if got := s.Workload(c.ns, c.labels).MTLS(c.port, istioconfig.MTLSDisable); got != c.want {
				t.Errorf("MTLS(%d) = %s, want %s", c.port, got, c.want)
			}
		})
	}
}

// TestWorkloadAuthorizationPolicies: a workload gets the root namespace's
// policies and its namespace's whose selector matches, sorted by key;
// policies bound to gateways or waypoints (targetRefs) are not a
// workload's.
func TestWorkloadAuthorizationPolicies(t *testing.T) {
	echo := model.NewLabels(map[string]string{"app": "echo"})
	objs := []istioconfig.Object{
		authzPolicy("demo", "z-all", nil, false),
		authzPolicy("demo", "a-echo", map[string]string{"app": "echo"}, false),
		authzPolicy("demo", "other", map[string]string{"app": "other"}, false),
		authzPolicy("demo", "gateway", nil, true),
		authzPolicy("elsewhere", "all", nil, false),
		authzPolicy("mesh-root", "mesh", nil, false),
	}
	s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{RootNamespace: "mesh-root"}, objs)
	var got []string
	for _, p := range s.Workload("demo", echo).AuthorizationPolicies {
		got = append(got, p.Key.String())
	}
	want := []string{"AuthorizationPolicy/demo/a-echo", "AuthorizationPolicy/demo/z-all", "AuthorizationPolicy/mesh-root/mesh"}
	if len(got) != len(want) {
		t.Fatalf("policies %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("policies %v, want %v", got, want)
		}
	}
	if n := len(s.Workload("mesh-root", echo).AuthorizationPolicies); n != 1 {
		t.Errorf("a root-namespace workload got %d policies, want its namespace's one (once)", n)
	}
}

// TestSecurityChanged: a change of a security object is seen; a traffic
// object's change is not a security change.
func TestSecurityChanged(t *testing.T) {
	pa := peerAuth("demo", "ns", 0, nil, strict, nil)
	vs := &istioconfig.VirtualService{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: "VirtualService", Namespace: "demo", Name: "vs"}}}
	a := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{pa, vs})
	vs2 := &istioconfig.VirtualService{Meta: vs.Meta}
	if istioconfig.SecurityChanged(a, istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{pa, vs2})) {
		t.Error("a VirtualService change counted as a security change")
	}
	pa2 := peerAuth("demo", "ns", 0, nil, disable, nil)
	if !istioconfig.SecurityChanged(a, istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{pa2, vs})) {
		t.Error("a PeerAuthentication change was not seen")
	}
	if !istioconfig.SecurityChanged(nil, a) || istioconfig.SecurityChanged(nil, nil) {
		t.Error("nil snapshots")
	}
}

// TestWorkloadInjected: a Pod labelled security.istio.io/tlsMode=istio is
// injected, with or without any policy.
func TestWorkloadInjected(t *testing.T) {
	meshed := model.NewLabels(map[string]string{"app": "echo", istioconfig.TLSModeLabel: istioconfig.TLSModeIstio})
	plain := model.NewLabels(map[string]string{"app": "echo", istioconfig.TLSModeLabel: "disabled"})
	for _, s := range []*istioconfig.Snapshot{nil, istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, nil)} {
		if !s.Workload("demo", meshed).Injected || s.Workload("demo", plain).Injected || s.Workload("demo", model.Labels{}).Injected {
			t.Errorf("Injected follows the tlsMode label")
		}
	}
	if s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, nil); s.Workload("demo", meshed).Same(s.Workload("demo", plain)) {
		t.Error("Same ignores Injected")
	}
}
