package istioconfig

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

// Kinds whose CRD is absent, as istiod's delayed informers treat them: a
// kind counts as read and empty while the config cluster has no CRD that
// serves it (established, with the watched version served), so readiness never waits
// for it; its watch starts when the CRD appears and stops, its objects
// dropped, when the CRD goes. The CRDs are watched (cluster-wide get,
// list and watch of customresourcedefinitions), stripped to what decides
// this: a cluster's CRDs carry large schemas.

// crdGVK is the CustomResourceDefinition kind.
var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// crdName is the name of the CRD of kind: <plural>.<group>.
func crdName(kind string) string { return validate.Resources[kind] + "." + validate.GroupOf(kind) }

// kindOfCRD is the watched kind whose CRD is named name, "" for another.
func kindOfCRD(name string) string {
	for _, k := range istioconfig.Kinds {
		if crdName(k) == name {
			return k
		}
	}
	return ""
}

// servesWatched reports whether the CRD u is established and serves
// version.
func servesWatched(u *unstructured.Unstructured, version string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	established := false
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			established = true
		}
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if m["name"] == version && m["served"] == true {
			return established
		}
	}
	return false
}

// stripCRD keeps of a CRD only its name, its versions' names and served
// flags, and its conditions.
func stripCRD(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{}
	out.SetGroupVersionKind(crdGVK)
	out.SetName(u.GetName())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetUID(u.GetUID())
	if kindOfCRD(u.GetName()) == "" {
		return out, nil // not ours: nothing kept
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var kept []any
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok {
			kept = append(kept, map[string]any{"name": m["name"], "served": m["served"]})
		}
	}
	_ = unstructured.SetNestedSlice(out.Object, kept, "spec", "versions")
	if conds, ok, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); ok {
		_ = unstructured.SetNestedSlice(out.Object, conds, "status", "conditions")
	}
	return out, nil
}

// kindWatch is the watch of one kind whose CRD is present.
type kindWatch struct {
	reg toolscache.ResourceEventHandlerRegistration
	inf cache.Informer
}

// onCRD records whether the CRD obj serves its kind, and wakes the loop
// when that changed.
func (w *Watcher) onCRD(obj any, deleted bool) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	kind := kindOfCRD(u.GetName())
	if kind == "" {
		return
	}
	present := !deleted && servesWatched(u, versionOf(kind))
	w.mu.Lock()
	changed := w.crds[kind] != present
	w.crds[kind] = present
	if changed {
		w.crdsChanged = true
	}
	w.mu.Unlock()
	if changed {
		w.poke()
	}
}

// watchCRDs starts the CRD informer and returns its handler's sync.
func (w *Watcher) watchCRDs(ctx context.Context) (toolscache.InformerSynced, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	inf, err := w.cache.GetInformer(ctx, u, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("istioconfig: informer of CRDs: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.onCRD(o, false) },
		UpdateFunc: func(_, o any) { w.onCRD(o, false) },
		DeleteFunc: func(o any) { w.onCRD(o, true) },
	})
	if err != nil {
		return nil, fmt.Errorf("istioconfig: watching CRDs: %w", err)
	}
	return reg.HasSynced, nil
}

// reconcileKinds starts the watch of each kind whose CRD is present and
// stops that of each whose CRD is gone (marking its objects dirty, to be
// dropped), and returns the syncs of the watches it started. Only the
// loop calls it.
func (w *Watcher) reconcileKinds(ctx context.Context) ([]toolscache.InformerSynced, error) {
	w.mu.Lock()
	want := make(map[string]bool, len(w.crds))
	for k, v := range w.crds {
		want[k] = v
	}
	w.crdsChanged = false
	w.mu.Unlock()
	var started []toolscache.InformerSynced
	for _, kind := range istioconfig.Kinds {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk(kind))
		kw, running := w.kinds[kind]
		switch {
		case want[kind] && !running:
			inf, err := w.cache.GetInformer(ctx, u, cache.BlockUntilSynced(false))
			if err != nil {
				return started, fmt.Errorf("istioconfig: informer of %s: %w", kind, err)
			}
			reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				AddFunc:    func(o any) { w.markDirty(kind, o) },
				UpdateFunc: func(_, o any) { w.markDirty(kind, o) },
				DeleteFunc: func(o any) { w.markDirty(kind, o) },
			})
			if err != nil {
				return started, fmt.Errorf("istioconfig: watching %s: %w", kind, err)
			}
			w.kinds[kind] = &kindWatch{reg: reg, inf: inf}
			started = append(started, reg.HasSynced)
			w.log.Info("watching Istio config kind", "kind", kind, "crd", crdName(kind))
		case !want[kind] && running:
			_ = kw.inf.RemoveEventHandler(kw.reg)
			if err := w.cache.RemoveInformer(ctx, u); err != nil {
				return started, fmt.Errorf("istioconfig: stopping the informer of %s: %w", kind, err)
			}
			delete(w.kinds, kind)
			w.log.Info("Istio config kind absent: its CRD is gone or not served; its objects are dropped", "kind", kind, "crd", crdName(kind))
			w.mu.Lock()
			for k := range w.entries {
				if k.Kind == kind {
					w.dirty[k] = struct{}{}
				}
			}
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	w.absent = w.absent[:0]
	for _, kind := range istioconfig.Kinds {
		if _, ok := w.kinds[kind]; !ok {
			w.absent = append(w.absent, kind)
		}
	}
	w.mu.Unlock()
	return started, nil
}

// Absent returns the kinds whose CRD the config cluster does not have
// (or does not serve in the watched version), sorted.
func (w *Watcher) Absent() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(slices.Values(w.absent))
}

// The config cluster's namespaces: their labels, which Gateway API
// listeners select routes' namespaces by (allowedRoutes.namespaces
// Selector). Only names and labels are kept.

// namespaceGVK is the Namespace kind.
var namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}

func namespaceObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(namespaceGVK)
	return u
}

// stripNamespace keeps a Namespace's name and labels.
func stripNamespace(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := namespaceObject()
	out.SetName(u.GetName())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetUID(u.GetUID())
	out.SetLabels(u.GetLabels())
	return out, nil
}

// onNamespace notes that a namespace's labels may have changed.
func (w *Watcher) onNamespace() {
	w.mu.Lock()
	w.nsChanged = true
	w.mu.Unlock()
	w.poke()
}

// watchNamespaces starts the Namespace informer and returns its
// handler's sync.
func (w *Watcher) watchNamespaces(ctx context.Context) (toolscache.InformerSynced, error) {
	inf, err := w.cache.GetInformer(ctx, namespaceObject(), cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("istioconfig: informer of namespaces: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.onNamespace() },
		UpdateFunc: func(o, n any) { w.onNamespace() },
		DeleteFunc: func(any) { w.onNamespace() },
	})
	if err != nil {
		return nil, fmt.Errorf("istioconfig: watching namespaces: %w", err)
	}
	return reg.HasSynced, nil
}

// namespaceLabels lists the namespaces' labels from the cache.
func (w *Watcher) namespaceLabels(ctx context.Context) map[string]map[string]string {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(namespaceGVK.GroupVersion().WithKind("NamespaceList"))
	if err := w.cache.List(ctx, list); err != nil {
		w.log.Error(err, "listing namespaces from the cache")
		return nil
	}
	out := make(map[string]map[string]string, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].GetName()] = list.Items[i].GetLabels()
	}
	return out
}

// snapSelectsNamespaces reports whether the last snapshot's Gateway API
// translation depends on namespaces' labels.
func (w *Watcher) snapSelectsNamespaces() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap.SelectsNamespaces()
}

// gatewayNamespaceLabels are the namespaces' labels while Gateway API
// Gateways are watched (the only reader of them), else nil. Only the loop
// calls it.
func (w *Watcher) gatewayNamespaceLabels(ctx context.Context) map[string]map[string]string {
	if _, ok := w.kinds[validate.KindKubeGateway]; !ok {
		return nil
	}
	return w.namespaceLabels(ctx)
}
