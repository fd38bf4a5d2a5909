package hub

import (
	"slices"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestCAServingNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		wantDNS []string
		wantIPs []string
	}{
		{"defaults", Options{Namespace: "mesh"},
			[]string{"istiod.istio-system.svc", "istiod.mesh.svc", "meshfed-hub.mesh.svc"}, nil},
		{"--ca-dns-names replaces the defaults, istiod's name stays", Options{Namespace: "mesh", CADNSNames: []string{"ca.example"}},
			[]string{"ca.example", "istiod.istio-system.svc"}, nil},
		{"--xds-san adds names and IPs", Options{Namespace: "istio-system", XDSSANs: []string{"hub.example", "192.0.2.7", "istiod.istio-system.svc"}},
			[]string{"hub.example", "istiod.istio-system.svc", "meshfed-hub.istio-system.svc"}, []string{"192.0.2.7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dns, ips := caServingNames(tc.opts)
			var gotIPs []string
			for _, ip := range ips {
				gotIPs = append(gotIPs, ip.String())
			}
			if !slices.Equal(dns, tc.wantDNS) || !slices.Equal(gotIPs, tc.wantIPs) {
				t.Errorf("got %v %v, want %v %v", dns, gotIPs, tc.wantDNS, tc.wantIPs)
			}
		})
	}
}

type remotesOf map[model.ClusterID]*rest.Config

func (r remotesOf) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	c, ok := r[id]
	return c, ok
}

func TestConfigClusterAnd(t *testing.T) {
	remote, config := &rest.Config{Host: "remote"}, &rest.Config{Host: "config"}
	c := configClusterAnd{ClusterConfigs: remotesOf{"c1": remote}, id: "config", cfg: config}
	for id, want := range map[model.ClusterID]*rest.Config{"c1": remote, "config": config, "c2": nil, "": nil} {
		got, ok := c.ClusterConfig(id)
		if got != want || ok != (want != nil) {
			t.Errorf("ClusterConfig(%q) = %v, %v; want %v", id, got, ok, want)
		}
	}
	// A remote cluster of the config cluster's ID is asked instead.
	c.ClusterConfigs = remotesOf{"config": remote}
	if got, _ := c.ClusterConfig("config"); got != remote {
		t.Errorf("remote of the config cluster's ID: got %v", got)
	}
}
