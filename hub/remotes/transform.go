package remotes

import (
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/meshfed/meshfed/pkg/model"
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

// transformObject shrinks an object before it enters the informer's store:
// a Node keeps only its topology labels; a Service, an EndpointSlice and a
// Namespace lose the metadata nobody reads, and an EndpointSlice's
// endpoints keep only what endpointsFromSlices reads (leanEndpoint). Pods
// are not in this cache: see podCache.
var transformObject toolscache.TransformFunc = func(obj any) (any, error) {
	switch o := obj.(type) {
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
		// A network's gateway keeps what gatewayOf reads: its port
		// annotation and its load balancer's addresses.
		gwPort := o.Annotations[model.AnnotationGatewayPort]
		isGateway := o.Labels[model.LabelTopologyNetwork] != ""
		stripMeta(&o.ObjectMeta, true)
		if isGateway {
			if gwPort != "" {
				o.Annotations = map[string]string{model.AnnotationGatewayPort: gwPort}
			}
			o.Status = corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: o.Status.LoadBalancer.Ingress}}
		} else {
			o.Status = corev1.ServiceStatus{}
		}
	case *discoveryv1.EndpointSlice:
		stripMeta(&o.ObjectMeta, true)
		o.Labels = internLabels(o.Labels)
		o.Namespace = intern(o.Namespace)
		if cap(o.Endpoints) > len(o.Endpoints) {
			// Decoding appends: up to half the array can be spare.
			o.Endpoints = slices.Clone(o.Endpoints)
		}
		shared := map[string]*string{}
		for i := range o.Endpoints {
			leanEndpoint(&o.Endpoints[i], shared)
		}
	case *corev1.Namespace:
		stripMeta(&o.ObjectMeta, true)
		o.Spec = corev1.NamespaceSpec{}
	}
	return obj, nil
}

// Shared condition values of the endpoints in the cache. Read-only, as
// every object of the cache is (DefaultUnsafeDisableDeepCopy: readers get
// the stored objects themselves and never modify them).
var condTrue, condFalse = true, false

// sharedCondition returns a pointer to a shared value equal to *b (nil for
// nil), so that an endpoint's three conditions cost no allocation each.
func sharedCondition(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &condTrue
	default:
		return &condFalse
	}
}

// leanEndpoint keeps of an EndpointSlice's endpoint what the registry
// reads: its addresses, conditions (shared values), node, and the kind,
// namespace and name of its target (the Pod). Node, zone and hostname are
// interned, and the endpoints of one slice on one node (or zone) share one
// pointer to its name, found in shared; topology hints and the deprecated
// topology are dropped.
func leanEndpoint(e *discoveryv1.Endpoint, shared map[string]*string) {
	e.Conditions = discoveryv1.EndpointConditions{
		Ready:       sharedCondition(e.Conditions.Ready),
		Serving:     sharedCondition(e.Conditions.Serving),
		Terminating: sharedCondition(e.Conditions.Terminating),
	}
	if r := e.TargetRef; r != nil {
		*r = corev1.ObjectReference{Kind: intern(r.Kind), Namespace: intern(r.Namespace), Name: r.Name}
	}
	share := func(s *string) *string {
		if s == nil {
			return nil
		}
		if p, ok := shared[*s]; ok {
			return p
		}
		*s = intern(*s)
		shared[*s] = s
		return s
	}
	e.NodeName, e.Zone = share(e.NodeName), share(e.Zone)
	if e.Hostname != nil {
		*e.Hostname = intern(*e.Hostname)
	}
	e.Hints = nil
	e.DeprecatedTopology = nil
}

// intern returns s with the storage of every other interned string equal to
// it; best effort, as internLabels.
func intern(s string) string { return unique.Make(s).Value() }

// internLabels returns m, right-sized, with every key and value interned:
// objects of one kind carry the same few labels (an EndpointSlice those of
// its Service and controller), so the informer's store shares their strings
// instead of holding a copy per object. Best effort, as federation's
// intern: no handle is kept, so a string is shared by the objects decoded
// between two garbage collections, which still turns a copy per object
// into a few.
func internLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = intern(v)
	}
	return out
}
