package remotes

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

// watchedScheme knows exactly the kinds a cluster watcher reads.
func watchedScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// Adding core and discovery types cannot fail for the built-in schemes.
	_ = corev1.AddToScheme(s)
	_ = discoveryv1.AddToScheme(s)
	return s
}

// staticRESTMapper maps the watched kinds without asking the remote
// apiserver for discovery documents: one request less per cluster, and an
// unreachable cluster fails in its watches (where the error is reported)
// rather than in mapping.
func staticRESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	// Each kind and its list: a cache narrowed to some namespaces (a
	// cluster's discovery scope) asks the mapper whether a list is
	// namespaced by the list's own kind.
	add := func(gv schema.GroupVersion, kind string, scope meta.RESTScope) {
		m.Add(gv.WithKind(kind), scope)
		m.Add(gv.WithKind(kind+"List"), scope)
	}
	core := corev1.SchemeGroupVersion
	add(core, "Service", meta.RESTScopeNamespace)
	add(core, "Pod", meta.RESTScopeNamespace)
	add(core, "Node", meta.RESTScopeRoot)
	add(core, "Namespace", meta.RESTScopeRoot)
	add(discoveryv1.SchemeGroupVersion, "EndpointSlice", meta.RESTScopeNamespace)
	return m
}

// stripMeta keeps the object metadata the registry uses.
func stripMeta(m *metav1.ObjectMeta, keepLabels bool) {
	m.ManagedFields = nil
	m.Annotations = nil
	m.OwnerReferences = nil
	m.Finalizers = nil
	if !keepLabels {
		m.Labels = nil
	}
}

// transformObject shrinks an object before it enters the informer's store.
// A Pod keeps only its labels (DestinationRule subsets select endpoints by
// them), service account, node and IPs; a Node only its topology labels.
var transformObject toolscache.TransformFunc = func(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		stripMeta(&o.ObjectMeta, true)
		o.Labels = internLabels(o.Labels)
		o.Spec = corev1.PodSpec{ServiceAccountName: o.Spec.ServiceAccountName, NodeName: o.Spec.NodeName}
		o.Status = corev1.PodStatus{PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs, Phase: o.Status.Phase}
	case *corev1.Node:
		labels := map[string]string{}
		for _, k := range []string{LabelRegion, LabelZone, LabelSubZone} {
			if v, ok := o.Labels[k]; ok {
				labels[k] = v
			}
		}
		stripMeta(&o.ObjectMeta, false)
		o.Labels = labels
		o.Spec = corev1.NodeSpec{}
		o.Status = corev1.NodeStatus{}
	case *corev1.Service:
		stripMeta(&o.ObjectMeta, true)
		o.Status = corev1.ServiceStatus{}
	case *discoveryv1.EndpointSlice:
		stripMeta(&o.ObjectMeta, true)
	case *corev1.Namespace:
		stripMeta(&o.ObjectMeta, true)
		o.Spec = corev1.NamespaceSpec{}
	}
	return obj, nil
}

// internLabels returns m, right-sized, with every key and value interned:
// the Pods of one Deployment carry the same labels, so the informer's store
// shares their strings instead of holding a copy per Pod
// (BenchmarkTransformedPodHeap: six labels cost ~500 B per Pod as decoded,
// ~340 B interned). Best effort, as federation's intern: no handle is kept,
// so a string is shared by the Pods decoded between two garbage
// collections, which still turns a copy per Pod into a few per Deployment.
func internLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[unique.Make(k).Value()] = unique.Make(v).Value()
	}
	return out
}
