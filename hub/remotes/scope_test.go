package remotes_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
)

func TestParseScope(t *testing.T) {
	for _, c := range []struct {
		in, want   string
		namespaces []string
		err        bool
	}{
		{in: "", want: ""},
		{in: "  ", want: ""},
		{in: "mesh=on", want: "mesh=on"},
		{in: "kubernetes.io/metadata.name in (shop, pay)", want: "kubernetes.io/metadata.name in (pay,shop)", namespaces: []string{"pay", "shop"}},
		{in: "kubernetes.io/metadata.name=shop,team=a", want: "kubernetes.io/metadata.name=shop,team=a", namespaces: []string{"shop"}},
		// Two name requirements: only what both allow.
		{in: "kubernetes.io/metadata.name in (a,b),kubernetes.io/metadata.name in (b,c)", want: "kubernetes.io/metadata.name in (a,b),kubernetes.io/metadata.name in (b,c)", namespaces: []string{"b"}},
		{in: "kubernetes.io/metadata.name notin (kube-system)", want: "kubernetes.io/metadata.name notin (kube-system)"},
		{in: "a in (", err: true},
		{in: "=x", err: true},
	} {
		s, err := remotes.ParseScope(c.in)
		if c.err {
			if err == nil || !containsAll(err.Error(), remotes.AnnotationDiscoverySelector, c.in) {
				t.Errorf("ParseScope(%q): %v, want an error naming the annotation and value", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseScope(%q): %v", c.in, err)
			continue
		}
		if s.String() != c.want || !slices.Equal(s.Namespaces, c.namespaces) {
			t.Errorf("ParseScope(%q) = %q %v, want %q %v", c.in, s.String(), s.Namespaces, c.want, c.namespaces)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestClusterDiscoveryScope: two clusters (one apiserver under two IDs),
// each scoped by its own secret's annotation, under a hub-wide selector.
// A cluster discovers a namespace only when both allow it; removing an
// annotation widens the cluster to the hub-wide scope; an invalid one is
// refused with its cause and counted, and never widens a running cluster;
// a new cluster with an invalid one is not started.
func TestClusterDiscoveryScope(t *testing.T) {
	e := startEnv(t)
	e.create(t, workloadObjects()...)
	e.create(t, serviceIn("other", "web", "10.1.0.2")...)
	reg := prometheus.NewRegistry()
	st, status, cancel, done := hubPartsOpts(t, e, reg, func(o *remotes.WatcherOptions) {
		o.DiscoverySelector = labels.SelectorFromSet(labels.Set{"kubernetes.io/metadata.name": "demo"}).Add(mustReq(t, "env", "!=", "dev"))
	})
	defer func() { cancel(); <-done }()
	const webHost = model.Hostname("web.other.svc.cluster.local")

	c1 := remoteSecret("r1", map[string][]byte{"c1": e.kubeconfig})
	c1.Annotations = map[string]string{remotes.AnnotationDiscoverySelector: "kubernetes.io/metadata.name in (demo,other)"}
	c2 := remoteSecret("r2", map[string][]byte{"c2": e.kubeconfig})
	c2.Annotations = map[string]string{remotes.AnnotationDiscoverySelector: "mesh=on"}
	e.create(t, c1, c2)
	eventually(t, "c1 and c2 synced", func() error {
		if !st.HasCluster("c1") || !st.HasCluster("c2") {
			return fmt.Errorf("not published")
		}
		return nil
	})
	// c1: its own scope allows demo and other, the hub's only demo.
	// c2: its own scope (mesh=on) allows neither.
	eventually(t, "echo from c1 only", endpointsFrom(st, echoHost, "c1"))
	if ms := st.Service(webHost); ms != nil {
		t.Errorf("a service outside the hub-wide selector discovered: %+v", ms)
	}
	if got, _ := status.Get("c1"); got.Scope.String() != "kubernetes.io/metadata.name in (demo,other)" {
		t.Errorf("c1's scope in its status: %q", got.Scope.String())
	}

	// Without its annotation, c2 has the hub-wide scope: demo.
	c2.Annotations = nil
	update(t, e, c2)
	eventually(t, "echo from c1 and c2", endpointsFrom(st, echoHost, "c1", "c2"))

	// The hub-wide selector still applies: demo turned env=dev leaves both.
	var ns corev1.Namespace
	if err := e.client.Get(t.Context(), client.ObjectKey{Name: "demo"}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"env": "dev"}
	if err := e.client.Update(t.Context(), &ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, "echo gone under the hub-wide selector", endpointsFrom(st, echoHost))
	ns.Labels = nil
	if err := e.client.Update(t.Context(), &ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, "echo back", endpointsFrom(st, echoHost, "c1", "c2"))

	// An invalid selector on c2's secret: refused, counted, c2 keeps its
	// scope and its endpoints.
	c2.Annotations = map[string]string{remotes.AnnotationDiscoverySelector: "a in ("}
	update(t, e, c2)
	eventually(t, "the bad selector reported", func() error {
		for _, se := range status.SecretErrors() {
			if se.Secret == "istio-system/r2" && containsAll(se.Error, remotes.AnnotationDiscoverySelector, "a in (") {
				return nil
			}
		}
		return fmt.Errorf("secret errors %+v", status.SecretErrors())
	})
	if n := counterSum(t, reg, "meshfed_remote_cluster_errors_total", "cluster", "istio-system/r2", "reason", remotes.ReasonDiscoverySelector); n < 1 {
		t.Errorf("the bad selector is not counted (%v)", n)
	}
	if err := endpointsFrom(st, echoHost, "c1", "c2")(); err != nil {
		t.Errorf("after a bad selector: %v", err)
	}

	// A new cluster with an invalid selector is not started.
	c3 := remoteSecret("r3", map[string][]byte{"c3": e.kubeconfig})
	c3.Annotations = map[string]string{remotes.AnnotationDiscoverySelector: "=x"}
	e.create(t, c3)
	eventually(t, "c3 invalid", func() error {
		if s, ok := status.Get("c3"); !ok || s.State != remotes.StateInvalid {
			return fmt.Errorf("c3: %+v", s)
		}
		return nil
	})
	if st.HasCluster("c3") {
		t.Error("a cluster with an invalid selector was published")
	}
}

// endpointsFrom checks that host has one endpoint from each of clusters
// and no other (none, and no service, when clusters is empty).
func endpointsFrom(st *store.Store, host model.Hostname, clusters ...model.ClusterID) func() error {
	return func() error {
		ms := st.Service(host)
		var got []model.ClusterID
		if ms != nil {
			for _, ep := range ms.Endpoints {
				got = append(got, ep.Cluster)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, clusters) {
			return fmt.Errorf("%s has endpoints of %v, want %v", host, got, clusters)
		}
		return nil
	}
}

func update(t *testing.T, e *env, s *corev1.Secret) {
	t.Helper()
	var cur corev1.Secret
	if err := e.client.Get(t.Context(), client.ObjectKeyFromObject(s), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Annotations = s.Annotations
	if err := e.client.Update(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
}

func mustReq(t *testing.T, key, op, value string) labels.Requirement {
	t.Helper()
	sel, err := labels.Parse(key + op + value)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := sel.Requirements()
	return reqs[0]
}

// serviceIn is a namespace with one Service and one ready endpoint.
func serviceIn(ns, name, addr string) []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: ns,
				Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](18080)}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			}},
		},
	}
}
