package framework

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestIstioCRDs: the config cluster of a fleet serves the chart's Istio
// kinds in every version, with Istio's short names, and a v1alpha3 object
// reads back as v1 (one stored version).
func TestIstioCRDs(t *testing.T) {
	f := NewTestFleet(t, FleetOptions{})
	dc, err := discovery.NewDiscoveryClientForConfig(f.Config().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	short := map[string][]string{"virtualservices": {"vs"}, "destinationrules": {"dr"}, "serviceentries": {"se"}, "sidecars": nil}
	for _, v := range []string{"v1", "v1beta1", "v1alpha3"} {
		list, err := dc.ServerResourcesForGroupVersion("networking.istio.io/" + v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		served := map[string][]string{}
		for _, r := range list.APIResources {
			served[r.Name] = r.ShortNames
		}
		for name, want := range short {
			got, ok := served[name]
			if !ok || !slices.Equal(got, want) {
				t.Errorf("networking.istio.io/%s %s: served %v, short names %v; want %v", v, name, ok, got, want)
			}
			if _, ok := served[name+"/status"]; !ok {
				t.Errorf("networking.istio.io/%s %s has no status subresource", v, name)
			}
		}
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
}
