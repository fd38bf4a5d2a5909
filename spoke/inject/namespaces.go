package inject

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NamespaceCache answers namespace labels from an informer's cache and asks
// the apiserver only for a namespace the cache does not know yet: a Pod is
// often created right after its namespace, before the watch has delivered
// it. It is safe for concurrent use.
//
// Why a cache and not the request: an AdmissionRequest carries the Pod, not
// its namespace, and the webhook configuration's namespaceSelector has
// already been evaluated by the apiserver without telling us the result.
// A watch on namespaces costs one connection and a few hundred bytes per
// namespace, and keeps the webhook off the apiserver's request path.
type NamespaceCache struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	lister  corev1listers.NamespaceLister
	synced  cache.InformerSynced
}

// NewNamespaceCache returns a NamespaceCache on client; Run starts it.
func NewNamespaceCache(client kubernetes.Interface) *NamespaceCache {
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Namespaces()
	// Only names and labels are read: drop the rest before it is cached.
	_ = inf.Informer().SetTransform(func(obj any) (any, error) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			ns.Annotations, ns.ManagedFields = nil, nil
			ns.Spec, ns.Status = corev1.NamespaceSpec{}, corev1.NamespaceStatus{}
		}
		return obj, nil
	})
	return &NamespaceCache{client: client, factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Run watches namespaces until ctx ends.
func (c *NamespaceCache) Run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	<-ctx.Done()
	c.factory.Shutdown()
	return nil
}

// Synced reports whether the first list has arrived.
func (c *NamespaceCache) Synced() bool { return c.synced() }

// Labels returns the labels of namespace name. A namespace that does not
// exist has no labels.
func (c *NamespaceCache) Labels(ctx context.Context, name string) (map[string]string, error) {
	if c.synced() {
		ns, err := c.lister.Get(name)
		if err == nil {
			return maps.Clone(ns.Labels), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("inject: namespace cache: %w", err)
		}
	}
	ns, err := c.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("inject: get namespace %s: %w", name, err)
	}
	return ns.Labels, nil
}
