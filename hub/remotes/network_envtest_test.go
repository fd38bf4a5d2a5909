package remotes_test

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
)

// networksOf checks the networks of echo's and web's endpoints, and the
// cluster's.
func networksOf(st *store.Store, echo, web, cluster model.Network) func() error {
	return func() error {
		for h, want := range map[model.Hostname]model.Network{echoHost: echo, model.ServiceHostname("web", "demo", ""): web} {
			ms := st.Service(h)
			if ms == nil || len(ms.Endpoints) != 1 {
				return fmt.Errorf("%s: %+v", h, ms)
			}
			if got := ms.Endpoints[0].Network; got != want {
				return fmt.Errorf("%s's endpoint is on network %q, want %q", h, got, want)
			}
		}
		if got := st.ClusterNetwork("c1"); got != cluster {
			return fmt.Errorf("cluster on network %q, want %q", got, cluster)
		}
		return nil
	}
}

// TestWatcherNetworks: a cluster's network is the remote secret's default
// until its istio-system namespace says one, which moves every endpoint at
// once; a Pod's own label wins over both. A Service labelled with a
// network and port 15443 is that network's gateway: without an address it
// is a problem, with a load balancer address a gateway address.
func TestWatcherNetworks(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	for _, o := range serviceIn("demo", "web", "10.1.0.2") {
		if o.GetNamespace() != "" { // demo exists already
			e.create(t, o)
		}
	}
	st, _ := runRemote(t, e, remotes.Scope{Network: "from-secret"}, &requestLog{})
	eventually(t, "the secret's network", networksOf(st, "from-secret", "from-secret", "from-secret"))

	ctx := t.Context()
	patch := func(o client.Object, labels map[string]string) {
		t.Helper()
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		o.SetLabels(labels)
		if err := e.client.Update(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	patch(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, map[string]string{model.LabelTopologyNetwork: "net-a"})
	eventually(t, "the namespace's network", networksOf(st, "net-a", "net-a", "net-a"))
	patch(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-0", Namespace: "demo"}},
		map[string]string{"app": "echo", "version": "v1", model.LabelTopologyNetwork: "net-b"})
	eventually(t, "the Pod's own network", networksOf(st, "net-b", "net-a", "net-a"))

	gw := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "eastwest", Namespace: "istio-system", Labels: map[string]string{model.LabelTopologyNetwork: "net-a"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "tls", Port: model.DefaultGatewayPort}}},
	}
	e.create(t, gw)
	eventually(t, "a gateway without an address", func() error {
		v := st.NetworkGateways()
		for _, p := range v.Problems {
			if p.Reason == model.ProblemNoAddress && p.Network == "net-a" && p.Service == "eastwest.istio-system.svc.cluster.local" {
				return nil
			}
		}
		return fmt.Errorf("problems %+v", v.Problems)
	})
	gw.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.19.7.1"}}
	if err := e.client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gateway's address", func() error {
		got := st.NetworkGateways().Of("net-a")
		if len(got) != 1 || got[0].Address != netip.MustParseAddr("198.19.7.1") || got[0].Port != model.DefaultGatewayPort || got[0].Cluster != "c1" {
			return fmt.Errorf("net-a's gateways %+v", got)
		}
		return nil
	})
}
