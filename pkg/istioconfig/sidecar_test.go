package istioconfig_test

import (
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

func sidecarObj(ns, name string, age int, sel map[string]string, hosts ...string) *istioconfig.Sidecar {
	spec := &networking.Sidecar{}
	if sel != nil {
		spec.WorkloadSelector = &networking.WorkloadSelector{Labels: sel}
	}
	if hosts != nil {
		spec.Egress = []*networking.IstioEgressListener{{Hosts: hosts}}
	}
	return &istioconfig.Sidecar{Meta: istioconfig.Meta{
		Key:     istioconfig.Key{Kind: "Sidecar", Namespace: ns, Name: name},
		Created: epoch.Add(-time.Duration(age) * time.Hour),
	}, Spec: spec}
}

// TestSidecarScope: a workload's Sidecar is the oldest matching selector
// one of its namespace, else its namespace's selectorless one, else the
// root namespace's selectorless one.
func TestSidecarScope(t *testing.T) {
	echo := model.NewLabels(map[string]string{"app": "echo"})
	other := model.NewLabels(map[string]string{"app": "other"})
	objs := []istioconfig.Object{
		sidecarObj("demo", "young-echo", 1, map[string]string{"app": "echo"}, "./*"),
		sidecarObj("demo", "old-echo", 5, map[string]string{"app": "echo"}, "./*"),
		sidecarObj("demo", "ns", 0, nil, "./*"),
		sidecarObj("istio-system", "mesh", 0, nil, "istio-system/*"),
		sidecarObj("istio-system", "mesh-sel", 9, map[string]string{"app": "echo"}, "*/*"),
	}
	s := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs)
	for _, c := range []struct {
		ns     string
		labels model.Labels
		want   string
	}{
		{"demo", echo, "old-echo"},
		{"demo", other, "ns"},
		{"elsewhere", echo, "mesh"},
	} {
		if got := s.SidecarScope(c.ns, c.labels); got == nil || got.Name != c.want {
			t.Errorf("SidecarScope(%s, %v) = %v, want %s", c.ns, c.labels.Map(), got, c.want)
		}
	}
	if got := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs[:3]).SidecarScope("elsewhere", echo); got != nil {
		t.Errorf("no mesh default: %v, want none", got.Name)
	}
}

// TestSidecarSees: egress hosts "namespace/dnsName" by namespace ("*",
// ".", "~", a name) and host (exact, "*", "*.suffix").
func TestSidecarSees(t *testing.T) {
	sc := sidecarObj("demo", "s", 0, nil, "./echo.demo.svc.cluster.local", "istio-system/*", "*/*.shared.svc.cluster.local", "~/*")
	for _, c := range []struct {
		host model.Hostname
		ns   string
		want bool
	}{
		{"echo.demo.svc.cluster.local", "demo", true},
		{"ECHO.demo.svc.cluster.local", "demo", true},
		{"other.demo.svc.cluster.local", "demo", false},
		{"istiod.istio-system.svc.cluster.local", "istio-system", true},
		{"a.shared.svc.cluster.local", "anywhere", true},
		{"echo.demo.svc.cluster.local", "not-demo", false},
		{"x.elsewhere.svc.cluster.local", "elsewhere", false},
	} {
		if got := sc.Sees(c.host, c.ns, 0); got != c.want {
			t.Errorf("Sees(%s, %s) = %t, want %t", c.host, c.ns, got, c.want)
		}
	}
	var none *istioconfig.Sidecar
	if !none.Sees("x.y.svc.cluster.local", "y", 0) || !sidecarObj("demo", "in", 0, nil).Sees("x.y.svc.cluster.local", "y", 0) {
		t.Error("no Sidecar, or one without egress, must see everything")
	}
	ro := sidecarObj("demo", "ro", 0, nil)
	ro.Spec.OutboundTrafficPolicy = &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY}
	if !ro.OutboundRegistryOnly() || sc.OutboundRegistryOnly() || none.OutboundRegistryOnly() {
		t.Error("OutboundRegistryOnly")
	}
}

// TestSidecarSeesPort: an egress listener with a port names its hosts on
// that port only; one without names them on every port; port 0 asks for
// any.
func TestSidecarSeesPort(t *testing.T) {
	sc := sidecarObj("demo", "ports", 0, nil)
	sc.Spec.Egress = []*networking.IstioEgressListener{
		{Port: &networking.SidecarPort{Number: 8080}, Hosts: []string{"./*"}},
		{Hosts: []string{"istio-system/*"}},
	}
	for _, tc := range []struct {
		ns   string
		port uint32
		want bool
	}{
		{"demo", 8080, true}, {"demo", 9090, false}, {"demo", 0, true},
		{"istio-system", 9090, true}, {"other", 8080, false},
	} {
		if got := sc.Sees(model.Hostname("svc."+tc.ns+".svc.cluster.local"), tc.ns, tc.port); got != tc.want {
			t.Errorf("%s:%d: sees %v, want %v", tc.ns, tc.port, got, tc.want)
		}
	}
}
