package remotes

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestPortProtocol(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  *string
		want model.Protocol
	}{
		{"grpc", nil, model.ProtocolGRPC},
		{"grpc-web", nil, model.ProtocolGRPC},
		{"http-api", nil, model.ProtocolHTTP},
		{"http2", nil, model.ProtocolHTTP2},
		{"tcp-db", nil, model.ProtocolTCP},
		{"", nil, model.ProtocolTCP},
		{"web", ptr.To("grpc"), model.ProtocolGRPC},
		{"grpc", ptr.To("kubernetes.io/h2c"), model.ProtocolHTTP2},
		{"grpc", ptr.To("mysql"), model.ProtocolGRPC}, // unknown appProtocol: fall back to the name
	} {
		if got := portProtocol(tc.name, tc.app); got != tc.want {
			t.Errorf("portProtocol(%q, %v) = %s, want %s", tc.name, ptr.Deref(tc.app, ""), got, tc.want)
		}
	}
}

func TestEndpointsFromSlices(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		LabelRegion: "eu", LabelZone: "eu-1", LabelSubZone: "rack-7"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "echo", "version": "v1"}},
		Spec: corev1.PodSpec{ServiceAccountName: "sa"}}
	look := endpointLookup{
		node: func(name string) *corev1.Node {
			if name == "n1" {
				return node
			}
			return nil
		},
		pod: func(ns, name string) *corev1.Pod {
			if ns == "demo" && name == "p1" {
				return pod
			}
			return nil
		},
	}
	ep := func(addr string, ready *bool, podName string) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To("n1"),
			Conditions: discoveryv1.EndpointConditions{Ready: ready}}
		if podName != "" {
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: podName}
		}
		return e
	}
	slices := []*discoveryv1.EndpointSlice{
		{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "a"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9000)}},
			Endpoints: []discoveryv1.Endpoint{
				ep("10.0.0.2", ptr.To(false), ""),
				ep("10.0.0.1", nil, "p1"), // nil ready means ready
				ep("not-an-ip", nil, ""),
			},
		},
		{
			// The same address in a second slice, ready there: one endpoint, ready.
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "b"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9000)}},
			Endpoints:   []discoveryv1.Endpoint{ep("10.0.0.2", ptr.To(true), "")},
		},
		{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "fqdn"},
			AddressType: discoveryv1.AddressTypeFQDN,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"example.com"}}},
		},
	}
	got := endpointsFromSlices("c1", slices, look)
	if len(got) != 2 {
		t.Fatalf("got %d endpoints: %+v", len(got), got)
	}
	first, second := got[0], got[1]
	if first.Address.String() != "10.0.0.1" || !first.Ready || first.ServiceAccount != "sa" || first.Pod != "p1" ||
		first.Locality != (model.Locality{Region: "eu", Zone: "eu-1", SubZone: "rack-7"}) || first.Ports["grpc"] != 9000 {
		t.Errorf("first endpoint = %+v", first)
	}
	if want := model.NewLabels(pod.Labels); first.Labels != want {
		t.Errorf("first endpoint's labels = %v, want the Pod's %v", first.Labels, want)
	}
	if second.Address.String() != "10.0.0.2" || !second.Ready || second.Cluster != "c1" || !second.Labels.IsZero() {
		t.Errorf("deduplicated endpoint = %+v", second)
	}
}

func TestTransformKeepsPodLabels(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "echo", "version": "v1"},
			Annotations: map[string]string{"big": "dropped"}},
		Spec: corev1.PodSpec{ServiceAccountName: "sa", Containers: []corev1.Container{{Name: "c"}}},
	}
	out, err := transformObject(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if p.Labels["version"] != "v1" || p.Labels["app"] != "echo" || p.Annotations != nil || p.Spec.Containers != nil ||
		p.Spec.ServiceAccountName != "sa" {
		t.Errorf("transformed pod = %+v", p)
	}
}

// BenchmarkTransformedPodHeap measures the informer heap a transformed Pod
// keeps, with its labels (as the watcher keeps them, for subsets) and
// without (as before): six labels of an Istio-injected Deployment.
// Figures: retained-B/pod.
func BenchmarkTransformedPodHeap(b *testing.B) {
	const pods = 5_000
	newPod := func(i int) *corev1.Pod {
		s := func(v string) string { return strings.Clone(v) }
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("echo-7d9f8c-%05d", i), Namespace: s("demo"),
				Labels: map[string]string{s("app"): s("echo"), s("version"): s("v1"), s("pod-template-hash"): s("7d9f8c"),
					s("security.istio.io/tlsMode"): s("istio"), s("service.istio.io/canonical-name"): s("echo"),
					s("service.istio.io/canonical-revision"): s("v1")},
				Annotations: map[string]string{s("sidecar.istio.io/status"): s(strings.Repeat("x", 200))}},
			Spec:   corev1.PodSpec{ServiceAccountName: s("echo"), NodeName: s("node-1"), Containers: []corev1.Container{{Name: s("echo"), Image: s("echo:1")}}},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("10.0.%d.%d", i/256, i%256), Phase: corev1.PodRunning},
		}
	}
	for _, keep := range []bool{true, false} {
		b.Run(fmt.Sprintf("labels=%v", keep), func(b *testing.B) {
			var per float64
			for b.Loop() {
				before := liveHeap()
				kept := make([]*corev1.Pod, pods)
				for i := range kept {
					obj, _ := transformObject(newPod(i))
					p := obj.(*corev1.Pod)
					if !keep {
						p.Labels = nil
					}
					kept[i] = p
				}
				per = float64(liveHeap()-before) / pods
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(per, "retained-B/pod")
		})
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
