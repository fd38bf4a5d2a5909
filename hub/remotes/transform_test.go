package remotes

import (
	"runtime"
	"strings"
	"testing"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestLeanEndpointSlice: an EndpointSlice enters the cache with endpoints
// that keep only what endpointsFromSlices reads, their conditions pointing
// to shared values, their target reduced to kind, namespace and name, and
// no spare capacity; what the registry reads of it is unchanged.
func TestLeanEndpointSlice(t *testing.T) {
	ep := func(addr, pod string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{
			Addresses: []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready),
				Terminating: ptr.To(false)},
			NodeName: ptr.To(strings.Clone("n1")), Zone: ptr.To(strings.Clone("eu-1")), Hostname: ptr.To(pod),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: pod, UID: "0f3c-uid",
				ResourceVersion: "12345", APIVersion: "v1", FieldPath: "spec"},
			Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "eu-1"}}},
			DeprecatedTopology: map[string]string{"kubernetes.io/hostname": "n1"},
		}
	}
	endpoints := make([]discoveryv1.Endpoint, 0, 8)
	endpoints = append(endpoints, ep("10.0.0.1", "p1", true), ep("10.0.0.2", "p2", false), ep("10.0.0.3", "p3", true))
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo-1",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "echo"},
			Annotations: map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "now"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9000)}},
		Endpoints:   endpoints,
	}
	out, err := transformObject(sl)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*discoveryv1.EndpointSlice)
	if got.Labels[discoveryv1.LabelServiceName] != "echo" || got.Annotations != nil {
		t.Errorf("metadata = %+v", got.ObjectMeta)
	}
	if len(got.Endpoints) != 3 || cap(got.Endpoints) != 3 {
		t.Fatalf("endpoints len %d cap %d, want 3 and 3", len(got.Endpoints), cap(got.Endpoints))
	}
	for i, e := range got.Endpoints {
		ready := i != 1
		if e.Conditions.Ready != sharedCondition(&ready) || e.Conditions.Serving != sharedCondition(&ready) ||
			e.Conditions.Terminating != &condFalse {
			t.Errorf("endpoint %d: conditions not shared: %+v", i, e.Conditions)
		}
		pod := []string{"p1", "p2", "p3"}[i]
		if *e.TargetRef != (corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: pod}) {
			t.Errorf("endpoint %d: target %+v", i, *e.TargetRef)
		}
		if e.Hints != nil || e.DeprecatedTopology != nil {
			t.Errorf("endpoint %d: topology kept: %+v %v", i, e.Hints, e.DeprecatedTopology)
		}
		if *e.NodeName != "n1" || *e.Zone != "eu-1" || *e.Hostname != pod || e.Addresses[0] == "" {
			t.Errorf("endpoint %d: %+v", i, e)
		}
	}
	if got.Endpoints[0].NodeName != got.Endpoints[2].NodeName || got.Endpoints[0].Zone != got.Endpoints[1].Zone {
		t.Error("the endpoints of a node (a zone) do not share its name")
	}
	// Interning is best effort: an interned value lasts while a handle to
	// it does (or until the next collection).
	h := unique.Make("n1")
	n1, n2 := transformedNode(t, "n1"), transformedNode(t, "n1")
	if unsafe.StringData(n1) != unsafe.StringData(n2) {
		t.Error("node names not interned across slices")
	}
	runtime.KeepAlive(h)
	if *got.Endpoints[1].Conditions.Ready {
		t.Error("a not-ready endpoint turned ready")
	}
	if again, _ := transformObject(got); again != got || *got.Endpoints[0].Conditions.Ready != true {
		t.Error("transforming twice changed the slice")
	}

	// What the registry reads of it is unchanged.
	eps := endpointsFromSlices("c1", "", []*discoveryv1.EndpointSlice{got}, endpointLookup{
		node: func(string) *corev1.Node { return nil },
		pod:  func(string, string) *podInfo { return &podInfo{shared: unique.Make(podShared{serviceAccount: "sa"})} },
	})
	if len(eps) != 3 || !eps[0].Ready || eps[1].Ready || eps[0].Pod != "p1" || eps[0].ServiceAccount != "sa" ||
		eps[0].Ports["grpc"] != 9000 {
		t.Errorf("endpoints = %+v", eps)
	}
}

// transformedNode returns the node name of a one-endpoint slice as the
// cache holds it.
func transformedNode(t *testing.T, node string) string {
	t.Helper()
	sl := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{
		Addresses: []string{"10.0.0.1"}, NodeName: ptr.To(strings.Clone(node))}}}
	out, err := transformObject(sl)
	if err != nil {
		t.Fatal(err)
	}
	return *out.(*discoveryv1.EndpointSlice).Endpoints[0].NodeName
}
