package framework

import (
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestIstioCRDs: the config cluster of a fleet serves the chart's Istio
// kinds in every version, with Istio's short names, and a v1alpha3 (or
// v1beta1) object reads back as v1 (one stored version).
func TestIstioCRDs(t *testing.T) {
	f := NewTestFleet(t, FleetOptions{})
	dc, err := discovery.NewDiscoveryClientForConfig(f.Config().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		group    string
		versions []string
		short    map[string][]string
	}{
		{"networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"},
			map[string][]string{"virtualservices": {"vs"}, "destinationrules": {"dr"}, "serviceentries": {"se"}, "sidecars": nil}},
		{"security.istio.io", []string{"v1", "v1beta1"},
			map[string][]string{"peerauthentications": {"pa"}, "authorizationpolicies": {"ap"}}},
	} {
		for _, v := range g.versions {
			list, err := dc.ServerResourcesForGroupVersion(g.group + "/" + v)
			if err != nil {
				t.Fatalf("%s/%s: %v", g.group, v, err)
			}
			served := map[string][]string{}
			for _, r := range list.APIResources {
				served[r.Name] = r.ShortNames
			}
			for name, want := range g.short {
				got, ok := served[name]
				if !ok || !slices.Equal(got, want) {
					t.Errorf("%s/%s %s: served %v, short names %v; want %v", g.group, v, name, ok, got, want)
				}
				if _, ok := served[name+"/status"]; !ok {
					t.Errorf("%s/%s %s has no status subresource", g.group, v, name)
				}
			}
		}
	}
	if _, err := dc.ServerResourcesForGroupVersion("security.istio.io/v1alpha1"); err == nil {
		t.Error("security.istio.io/v1alpha1 is served; the chart defines v1 and v1beta1 only")
	}

	ctx := t.Context()
	if err := f.Config().EnsureNamespace(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	vs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1alpha3", "kind": "VirtualService",
		"metadata": map[string]any{"namespace": "demo", "name": "echo"},
		// Not valid Istio: the CRD keeps it as written, validation is the
		// hub's and the webhook's.
		"spec": map[string]any{"hosts": []any{"echo"}, "http": []any{map[string]any{"route": "oops"}}},
	}}
	if err := f.Config().Client().Create(ctx, vs); err != nil {
		t.Fatal(err)
	}
	back := &unstructured.Unstructured{}
	back.SetAPIVersion("networking.istio.io/v1")
	back.SetKind("VirtualService")
	if err := f.Config().Client().Get(ctx, client.ObjectKey{Namespace: "demo", Name: "echo"}, back); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedSlice(back.Object, "spec", "http"); len(r) != 1 || r[0].(map[string]any)["route"] != "oops" {
		t.Errorf("spec not kept as written: %v", back.Object["spec"])
	}

	// A security kind too: written in v1beta1, kept as written (not valid
	// Istio: validation is the hub's and the webhook's), read as v1, and
	// deleted by DeleteIstio in its own group.
	ap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "security.istio.io/v1beta1", "kind": "AuthorizationPolicy",
		"metadata": map[string]any{"namespace": "demo", "name": "deny"},
		"spec":     map[string]any{"action": "DENY", "rules": "oops"},
	}}
	if err := f.Config().Client().Create(ctx, ap); err != nil {
		t.Fatal(err)
	}
	back = &unstructured.Unstructured{}
	back.SetAPIVersion("security.istio.io/v1")
	back.SetKind("AuthorizationPolicy")
	if err := f.Config().Client().Get(ctx, client.ObjectKey{Namespace: "demo", Name: "deny"}, back); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedString(back.Object, "spec", "rules"); r != "oops" {
		t.Errorf("AuthorizationPolicy spec not kept as written: %v", back.Object["spec"])
	}
	if err := f.Config().DeleteIstio(ctx, "AuthorizationPolicy", "demo", "deny"); err != nil {
		t.Fatal(err)
	}
	if err := f.Config().Client().Get(ctx, client.ObjectKey{Namespace: "demo", Name: "deny"}, back); !apierrors.IsNotFound(err) {
		t.Errorf("after DeleteIstio: %v", err)
	}
}
