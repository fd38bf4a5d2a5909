package remotes

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/meshfed/meshfed/pkg/model"
)

// podInfo is all the hub keeps of a Pod: what the registry reads (labels,
// for DestinationRule subsets; service account; an endpoint's node and
// locality come from its EndpointSlice) and what the
// informer's store needs (namespace, name, resource version). A decoded
// Pod, even stripped, is a 1,192-byte struct plus its maps and strings; a
// podInfo is 48 bytes, plus its name and resource version: its labels are
// interned (model.Labels), and so is what the Pods of a workload have in
// common (podShared), one pointer each.
//
// It is a runtime.Object for client-go's informer: its metadata is made on
// demand by GetObjectMeta (meta.Accessor takes a metav1.ObjectMetaAccessor),
// so no ObjectMeta (232 bytes) is kept per Pod. A podInfo in the store is
// never modified.
type podInfo struct {
	name, resourceVersion string
	labels                model.Labels
	shared                unique.Handle[podShared]
}

// podShared is what many Pods have in common.
type podShared struct {
	namespace, serviceAccount string
}

func (p *podInfo) namespace() string      { return p.shared.Value().namespace }
func (p *podInfo) serviceAccount() string { return p.shared.Value().serviceAccount }

var (
	_ runtime.Object            = (*podInfo)(nil)
	_ metav1.ObjectMetaAccessor = (*podInfo)(nil)
)

// newPodInfo keeps what the hub needs of p.
func newPodInfo(p *corev1.Pod) *podInfo {
	return &podInfo{
		name:            p.Name,
		resourceVersion: p.ResourceVersion,
		labels:          model.NewLabels(p.Labels),
		shared: unique.Make(podShared{
			namespace:      p.Namespace,
			serviceAccount: p.Spec.ServiceAccountName,
		}),
	}
}

// GetObjectKind has no kind to tell: the informer knows it holds Pods.
func (p *podInfo) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies p; its fields are immutable values.
func (p *podInfo) DeepCopyObject() runtime.Object {
	c := *p
	return &c
}

// GetObjectMeta returns new metadata with p's namespace, name and resource
// version, for client-go's key functions and resource-version checks.
func (p *podInfo) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.namespace(), Name: p.name, ResourceVersion: p.resourceVersion}
}

// podTransform turns the Pods a Pod informer decodes into podInfos before
// they enter its store, tombstones included. It is idempotent.
func podTransform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return newPodInfo(o), nil
	case toolscache.DeletedFinalStateUnknown:
		if p, ok := o.Obj.(*corev1.Pod); ok {
			o.Obj = newPodInfo(p)
		}
		return o, nil
	}
	return obj, nil
}

// podOf returns the podInfo of an informer event's object (a tombstone's
// included), nil for anything else.
func podOf(obj any) *podInfo {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, _ := obj.(*podInfo)
	return p
}

// podCache holds the Pods of one remote cluster, as podInfos, in client-go
// informers of its own: the controller-runtime cache can only hold the
// type it is asked for (its reader checks it), and a *corev1.Pod per
// endpoint is most of what a cluster's watch costs. There is one informer
// for the whole cluster or, when the cluster's discovery scope names its
// namespaces, one per named namespace (none if the names exclude each
// other), as for the cluster's other namespaced kinds.
//
// Concurrency: get and addEventHandler are safe for concurrent use, before
// run and while it runs; get never blocks on the network. Handlers are
// called from the informers' goroutines, one event at a time per informer,
// and must not block. run is called once; it returns when its context ends
// and every informer has stopped.
type podCache struct {
	// informers by namespace; metav1.NamespaceAll ("") for the whole
	// cluster. Set at construction, then only read.
	informers map[string]toolscache.SharedIndexInformer
}

// podContentConfig makes a remote's Pod client ask for protobuf, which
// kube-apiserver encodes and client-go decodes several times faster, and
// in fewer bytes, than JSON; JSON remains acceptable.
func podContentConfig(cfg *rest.Config) {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}

// newPodCache builds the Pod informers of cluster id under scope, with the
// client configuration cfg (whose user agent and rate limits it keeps) over
// httpClient (shared with the cluster's other clients). Watch errors are
// reported to st as the cluster's other watches report them.
func newPodCache(id model.ClusterID, cfg *rest.Config, httpClient *http.Client, scope Scope, st *Status) (*podCache, error) {
	cfg = rest.CopyConfig(cfg)
	podContentConfig(cfg)
	core, err := corev1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("remotes: pod client of cluster %s: %w", id, err)
	}
	c := &podCache{informers: map[string]toolscache.SharedIndexInformer{}}
	for _, ns := range scope.podNamespaces() {
		pods := core.Pods(ns)
		lw := &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return pods.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return pods.Watch(ctx, o)
			},
		}
		inf := toolscache.NewSharedIndexInformerWithOptions(
			toolscache.ToListWatcherWithWatchListSemantics(lw, core),
			&corev1.Pod{}, toolscache.SharedIndexInformerOptions{})
		if err := inf.SetTransform(podTransform); err != nil {
			return nil, err
		}
		if err := inf.SetWatchErrorHandlerWithContext(watchErrorHandler(id, st)); err != nil {
			return nil, err
		}
		c.informers[ns] = inf
	}
	return c, nil
}

// podNamespaces returns the namespaces the Pods are watched in: all
// (metav1.NamespaceAll), or those the scope names (possibly none).
func (s Scope) podNamespaces() []string {
	if s.Selector == nil || s.Namespaces == nil {
		return []string{metav1.NamespaceAll}
	}
	return s.Namespaces
}

// run runs the informers until ctx ends and they have stopped.
func (c *podCache) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range c.informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// waitForSync waits for every informer's first listing; it returns false
// when ctx ends first.
func (c *podCache) waitForSync(ctx context.Context) bool {
	for _, inf := range c.informers {
		select {
		case <-inf.HasSyncedChecker().Done():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// addEventHandler adds h to every informer.
func (c *podCache) addEventHandler(h toolscache.ResourceEventHandler) error {
	for _, inf := range c.informers {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// get returns Pod namespace/name, nil when it is not known (or not
// watched).
func (c *podCache) get(namespace, name string) *podInfo {
	inf := c.informers[namespace]
	if inf == nil {
		inf = c.informers[metav1.NamespaceAll]
	}
	if inf == nil {
		return nil
	}
	obj, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*podInfo)
	return p
}

// sameForRegistry reports whether p and o read the same to the registry
// (labels, service account).
func (p *podInfo) sameForRegistry(o *podInfo) bool {
	return p.labels == o.labels && p.shared == o.shared
}
