package remotes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/meshfed/meshfed/pkg/model"
)

// ShardSink receives what cluster watchers compute. *store.Store is one.
type ShardSink interface {
	NextGeneration(model.ClusterID) model.Generation
	ReplaceCluster(c model.ClusterID, gen model.Generation, shards map[model.Hostname]*model.ServiceShard) error
	UpdateShard(c model.ClusterID, gen model.Generation, h model.Hostname, shard *model.ServiceShard) error
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Sink   ShardSink
	Status *Status
	// DomainSuffix builds hostnames; default cluster.local.
	DomainSuffix string
	// DiscoverySelector, when not nil, limits discovery to Services in
	// namespaces whose labels it matches (Istio's discoverySelectors).
	DiscoverySelector labels.Selector
	// SyncTimeout is how long a cluster may take to list before it is
	// reported unreachable (it keeps trying). Default 30s.
	SyncTimeout time.Duration
	// ProbeInterval is how often a cluster's reachability is probed (one
	// small list request). Default 5s; never longer than SyncTimeout.
	ProbeInterval time.Duration
	// Reconnect, when set, is called when a cluster's apiserver answers a
	// probe again after failing one: it builds the cluster's client and
	// watches anew (Provider.Reconnect). client-go's informers back off
	// up to 30 s between failed watches and do not learn that the
	// apiserver is back, so without it changes made after the outage
	// wait for the next attempt. The cluster shows syncing until the new
	// watches have listed and published.
	Reconnect func(model.ClusterID)
	// SystemNamespace is the namespace whose model.LabelTopologyNetwork
	// is a cluster's network. Default DefaultSystemNamespace.
	SystemNamespace string
	// Resolve finds the addresses of a gateway's load balancer hostname.
	// Default the system resolver.
	Resolve Resolver
	// Clock times the sync timeout, the probes and the retry delays of
	// each cluster's work queue. Default the real clock.
	Clock clock.WithTicker
	Log   logr.Logger
}

// Watcher turns the objects of every engaged remote cluster into service
// shards. It implements multicluster.Aware and manager.Runnable.
type Watcher struct {
	opts WatcherOptions

	mu      sync.Mutex // guards engaged
	engaged map[model.ClusterID]cluster.Cluster

	wg sync.WaitGroup // one per running cluster watch
}

var _ multicluster.Aware = (*Watcher)(nil)

// NewWatcher returns a Watcher.
func NewWatcher(opts WatcherOptions) *Watcher {
	if opts.DomainSuffix == "" {
		opts.DomainSuffix = model.DefaultDomainSuffix
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = 30 * time.Second
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	opts.ProbeInterval = min(opts.ProbeInterval, opts.SyncTimeout)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.SystemNamespace == "" {
		opts.SystemNamespace = DefaultSystemNamespace
	}
	if opts.Resolve == nil {
		opts.Resolve = resolveHost
	}
	return &Watcher{opts: opts, engaged: map[model.ClusterID]cluster.Cluster{}}
}

// Start blocks until ctx ends and every cluster watch has stopped.
func (w *Watcher) Start(ctx context.Context) error {
	<-ctx.Done()
	w.wg.Wait()
	return nil
}

// Engage starts watching cl, which NewRemoteCluster built, until ctx ends.
// It does not block: listing an unreachable cluster must not hold up the
// others.
func (w *Watcher) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	id := model.ClusterID(name)
	pods, ok := podsOf(cl)
	if !ok {
		return fmt.Errorf("remotes: cluster %s was not built by NewRemoteCluster: %w", id, errNoPodCache)
	}
	w.mu.Lock()
	if w.engaged[id] == cl {
		w.mu.Unlock()
		return nil
	}
	w.engaged[id] = cl
	w.mu.Unlock()

	st, _ := w.opts.Status.Get(id)
	cw := &clusterWatch{
		w:       w,
		id:      id,
		scope:   st.Scope,
		gen:     w.opts.Sink.NextGeneration(id),
		cl:      cl,
		pods:    pods,
		log:     w.opts.Log.WithValues("cluster", id),
		podSvc:  map[string]map[string]string{},
		podMore: map[types.NamespacedName][]types.NamespacedName{},
		nodSvc:  map[string]map[types.NamespacedName]struct{}{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			// The retry delays wait on the injected clock too.
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Clock: w.opts.Clock}),
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			if w.engaged[id] == cl {
				delete(w.engaged, id)
			}
			w.mu.Unlock()
		}()
		cw.run(ctx)
	}()
	return nil
}

// errNoPodCache is why a cluster not built by NewRemoteCluster cannot be
// watched: the watcher reads Pods from the podCache such a cluster carries.
var errNoPodCache = errors.New("no pod cache")

// clusterWatch is the watch of one cluster by one generation of watcher.
type clusterWatch struct {
	w    *Watcher
	id   model.ClusterID
	gen  model.Generation
	cl   cluster.Cluster
	pods *podCache
	log  logr.Logger
	// scope is the cluster's own discovery scope, applied with the
	// hub-wide DiscoverySelector.
	scope Scope

	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]

	mu sync.Mutex // guards podSvc, podMore and nodSvc
	// podSvc, podMore and nodSvc index the services whose shards used a
	// Pod or a Node, so a change of either recomputes exactly those
	// services. A Pod backs one Service of its namespace as a rule: podSvc
	// holds that one by namespace, then Pod name (two strings an entry,
	// ~66 bytes, shared with the EndpointSlices), and podMore any other
	// link of a Pod (to a second Service, or one of another namespace),
	// never one in podSvc nor twice.
	podSvc  map[string]map[string]string
	podMore map[types.NamespacedName][]types.NamespacedName
	nodSvc  map[string]map[types.NamespacedName]struct{}
}

func (cw *clusterWatch) run(ctx context.Context) {
	// The queue lives as long as the cluster: its end unblocks processNext.
	stop := context.AfterFunc(ctx, cw.queue.ShutDown)
	defer func() {
		if stop() {
			cw.queue.ShutDown()
		}
	}()
	status := cw.w.opts.Status
	secret := ""
	if st, ok := status.Get(cw.id); ok {
		secret = st.Secret
	}
	start := cw.w.opts.Clock.Now()
	if err := cw.addHandlers(ctx); err != nil {
		if ctx.Err() == nil {
			cw.log.Error(err, "cannot watch cluster")
			status.Set(cw.id, secret, StateUnreachable, err.Error())
			status.CountError(string(cw.id), ReasonClientError)
		}
		return
	}
	published := make(chan struct{})
	go cw.monitor(ctx, secret, published)
	if !cw.waitForSync(ctx) {
		return // ctx ended: the cluster was removed or replaced
	}
	shards, err := cw.computeAll(ctx)
	if err != nil {
		if ctx.Err() == nil {
			cw.log.Error(err, "initial listing failed")
			status.Set(cw.id, secret, StateUnreachable, err.Error())
		}
		return
	}
	if err := cw.w.opts.Sink.ReplaceCluster(cw.id, cw.gen, shards); err != nil {
		cw.log.Info("state not published", "reason", err.Error())
		return
	}
	close(published)
	status.SetDropped(cw.id, time.Time{})
	if st, _ := status.Get(cw.id); st.State != StateUnreachable {
		status.Set(cw.id, secret, StateSynced, "")
	}
	cw.log.Info("cluster synced", "services", len(shards), "took", cw.w.opts.Clock.Since(start).String())
	for cw.processNext(ctx) {
	}
}

// waitForSync waits for the cluster's informers, its Pod informers
// included; it returns false when ctx ends first.
func (cw *clusterWatch) waitForSync(ctx context.Context) bool {
	return cw.cl.GetCache().WaitForCacheSync(ctx) && cw.pods.waitForSync(ctx)
}

// monitor reports the cluster's reachability until ctx ends. Informers
// retry a refused connection silently (client-go's watch-list loop never
// surfaces it), so the cause of an unreachable cluster comes from a probe:
// a one-item list of Namespaces, which also proves the credentials. It runs
// at once and then every ProbeInterval, on its multiples (nextProbe); a cluster not published within SyncTimeout
// is reported unreachable with the last probe's error.
func (cw *clusterWatch) monitor(ctx context.Context, secret string, published <-chan struct{}) {
	opts := cw.w.opts
	probeTimer := opts.Clock.NewTimer(nextProbe(opts.Clock.Now(), opts.ProbeInterval))
	defer probeTimer.Stop()
	timeout := opts.Clock.NewTimer(opts.SyncTimeout)
	defer timeout.Stop()
	isPublished := func() bool {
		select {
		case <-published:
			return true
		default:
			return false
		}
	}
	var lastErr error
	// Under a drop-after policy, a timer runs from the first failed probe
	// of an outage; when it fires before a probe succeeds, the cluster's
	// endpoints are dropped until it answers again.
	var dropTimer clock.Timer
	var dropC <-chan time.Time
	dropped := false
	stopDrop := func() {
		if dropTimer != nil {
			dropTimer.Stop()
			dropTimer, dropC = nil, nil
		}
	}
	defer stopDrop()
	probe := func() {
		pctx, cancel := context.WithTimeout(ctx, opts.ProbeInterval)
		defer cancel()
		var nsl corev1.NamespaceList
		err := cw.cl.GetAPIReader().List(pctx, &nsl, client.Limit(1))
		if ctx.Err() != nil {
			return
		}
		st, _ := opts.Status.Get(cw.id)
		switch {
		case err != nil:
			if lastErr == nil {
				cw.log.Error(err, "remote cluster unreachable")
				if d := st.StalePolicy.DropAfter; d > 0 && isPublished() && !dropped {
					dropTimer = opts.Clock.NewTimer(d)
					dropC = dropTimer.C()
				}
			}
			lastErr = err
			opts.Status.Set(cw.id, "", StateUnreachable, err.Error())
			opts.Status.CountError(string(cw.id), ReasonUnreachable)
		case lastErr != nil && opts.Reconnect != nil:
			// Back after an outage: the informers may be waiting out
			// their backoff, so the cluster's watches start afresh. The
			// old state (or, dropped, none) serves until the new watcher
			// publishes.
			lastErr = nil
			stopDrop()
			opts.Status.Set(cw.id, "", StateSyncing, "")
			opts.Status.CountReconnect(cw.id)
			cw.log.Info("remote cluster reachable again; restarting its watches")
			opts.Reconnect(cw.id)
		case st.State == StateUnreachable || st.State == StateTimeout:
			lastErr = nil
			stopDrop()
			if dropped {
				cw.restoreEndpoints(ctx)
				dropped = false
			}
			if isPublished() {
				opts.Status.Set(cw.id, "", StateSynced, "")
				cw.log.Info("remote cluster reachable again")
			} else {
				opts.Status.Set(cw.id, "", StateSyncing, "")
			}
		}
	}
	probe()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout.C():
			if !isPublished() {
				msg := fmt.Sprintf("not synced after %s", opts.SyncTimeout)
				state := StateTimeout // it answers, but listing is slow
				if lastErr != nil {
					msg += ": " + lastErr.Error()
					state = StateUnreachable
				}
				cw.log.Info("remote cluster not synced yet", "timeout", opts.SyncTimeout.String(), "state", state)
				opts.Status.Set(cw.id, secret, state, msg)
			}
		case <-probeTimer.C():
			probe()
			probeTimer.Reset(nextProbe(opts.Clock.Now(), opts.ProbeInterval))
		case <-dropC:
			dropTimer, dropC = nil, nil
			if lastErr != nil && !dropped {
				dropped = cw.dropEndpoints(ctx)
			}
		}
	}
}

// nextProbe returns how long from now until the next multiple of every
// (counted from time.Time's zero). Every cluster's probes fall on the same instants,
// so a hub watching many clusters wakes once per interval for all of them
// rather than once per cluster (on a small VM a wakeup of an idle Go
// process costs about 0.2 ms of CPU).
func nextProbe(now time.Time, every time.Duration) time.Duration {
	return now.Truncate(every).Add(every).Sub(now)
}

// dropEndpoints deletes every service shard of the cluster, its
// stale-endpoint policy having run out while it is unreachable: its
// endpoints leave every load assignment, here and (replicated) on every
// replica, and traffic fails over. The shards to delete are those its
// informers hold, which are what it published. It reports whether they
// were dropped.
func (cw *clusterWatch) dropEndpoints(ctx context.Context) bool {
	opts := cw.w.opts
	shards, err := cw.computeAll(ctx)
	for h := range shards {
		if err != nil {
			break
		}
		err = opts.Sink.UpdateShard(cw.id, cw.gen, h, nil)
	}
	if err != nil {
		cw.log.Info("stale endpoints not dropped", "reason", err.Error())
		return false
	}
	st, _ := opts.Status.Get(cw.id)
	cw.log.Info("remote cluster unreachable too long: endpoints dropped", "policy", st.StalePolicy.String(), "services", len(shards))
	opts.Status.SetDropped(cw.id, opts.Clock.Now())
	opts.Status.CountError(string(cw.id), ReasonEndpointsDropped)
	return true
}

// restoreEndpoints publishes again what the cluster's informers hold,
// after its endpoints were dropped, when no Reconnect rebuilds the
// cluster (which publishes afresh by itself).
func (cw *clusterWatch) restoreEndpoints(ctx context.Context) {
	opts := cw.w.opts
	shards, err := cw.computeAll(ctx)
	for h, sh := range shards {
		if err != nil {
			break
		}
		err = opts.Sink.UpdateShard(cw.id, cw.gen, h, sh)
	}
	if err != nil {
		cw.log.Info("dropped endpoints not restored yet", "reason", err.Error())
		return
	}
	opts.Status.SetDropped(cw.id, time.Time{})
}

// addHandlers registers event handlers on the cluster's informers. The
// informers start without blocking; WaitForCacheSync waits for them.
func (cw *clusterWatch) addHandlers(ctx context.Context) error {
	c := cw.cl.GetCache()
	add := func(obj client.Object, h toolscache.ResourceEventHandler) error {
		inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		_, err = inf.AddEventHandler(h)
		return err
	}
	svcKey := func(obj any) {
		if o := metaOf(obj); o != nil {
			cw.queue.Add(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
		}
	}
	sliceKey := func(obj any) {
		if o := metaOf(obj); o != nil {
			if name := o.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
				cw.queue.Add(types.NamespacedName{Namespace: o.GetNamespace(), Name: name})
			}
		}
	}
	nodeKey := func(obj any) {
		if o := metaOf(obj); o != nil {
			cw.enqueueIndexed(func() map[types.NamespacedName]struct{} { return cw.nodSvc[o.GetName()] })
		}
	}
	nsKey := func(obj any) {
		o := metaOf(obj)
		switch {
		case o == nil:
		case o.GetName() == cw.w.opts.SystemNamespace:
			// Its network label is every endpoint's default.
			cw.enqueueNamespace(ctx, "")
		case cw.filtersNamespaces():
			cw.enqueueNamespace(ctx, o.GetName())
		}
	}
	for _, reg := range []struct {
		obj client.Object
		fn  func(any)
	}{
		{&corev1.Service{}, svcKey},
		{&discoveryv1.EndpointSlice{}, sliceKey},
		{&corev1.Node{}, nodeKey},
		{&corev1.Namespace{}, nsKey},
	} {
		fn := reg.fn
		h := toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { fn(obj) },
			UpdateFunc: func(_, obj any) { fn(obj) },
			DeleteFunc: func(obj any) { fn(obj) },
		}
		if err := add(reg.obj, h); err != nil {
			return err
		}
	}
	// A Pod event recomputes the services that use the Pod; an update
	// that leaves what they read unchanged (a status change) none. A
	// deleted Pod's links go: the services it backed recompute, and those
	// whose slices still name it link it again.
	podKey := func(obj any) {
		if p := podOf(obj); p != nil {
			cw.queueAll(cw.podServices(types.NamespacedName{Namespace: p.namespace(), Name: p.name}, false))
		}
	}
	err := cw.pods.addEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: podKey,
		UpdateFunc: func(old, obj any) {
			if o, p := podOf(old), podOf(obj); o == nil || p == nil || !o.sameForRegistry(p) {
				podKey(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if p := podOf(obj); p != nil {
				cw.queueAll(cw.podServices(types.NamespacedName{Namespace: p.namespace(), Name: p.name}, true))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	return nil
}

func metaOf(obj any) client.Object {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, _ := obj.(client.Object)
	return o
}

func (cw *clusterWatch) enqueueIndexed(set func() map[types.NamespacedName]struct{}) {
	cw.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(set()))
	for k := range set() {
		keys = append(keys, k)
	}
	cw.mu.Unlock()
	cw.queueAll(keys)
}

func (cw *clusterWatch) queueAll(keys []types.NamespacedName) {
	for _, k := range keys {
		cw.queue.Add(k)
	}
}

// podServices returns the services whose shards used Pod pod, and with
// forget drops those links.
func (cw *clusterWatch) podServices(pod types.NamespacedName, forget bool) []types.NamespacedName {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	byName := cw.podSvc[pod.Namespace]
	svc, ok := byName[pod.Name]
	more := cw.podMore[pod]
	if !ok && len(more) == 0 {
		return nil
	}
	out := make([]types.NamespacedName, 0, 1+len(more))
	if ok {
		out = append(out, types.NamespacedName{Namespace: pod.Namespace, Name: svc})
	}
	out = append(out, more...)
	if forget {
		delete(byName, pod.Name)
		if len(byName) == 0 {
			delete(cw.podSvc, pod.Namespace)
		}
		delete(cw.podMore, pod)
	}
	return out
}

// enqueueNamespace queues every Service of namespace ns ("": of the
// cluster).
func (cw *clusterWatch) enqueueNamespace(ctx context.Context, ns string) {
	var svcs corev1.ServiceList
	if err := cw.cl.GetCache().List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range svcs.Items {
		cw.queue.Add(types.NamespacedName{Namespace: svcs.Items[i].Namespace, Name: svcs.Items[i].Name})
	}
}

func (cw *clusterWatch) processNext(ctx context.Context) bool {
	key, quit := cw.queue.Get()
	if quit {
		return false
	}
	defer cw.queue.Done(key)
	shard, h, err := cw.compute(ctx, key)
	if err == nil {
		err = cw.w.opts.Sink.UpdateShard(cw.id, cw.gen, h, shard)
		if errors.Is(err, model.ErrStaleGeneration) {
			return false // replaced or removed: this watch is over
		}
	}
	if err != nil {
		cw.log.Error(err, "recomputing service", "service", key)
		cw.queue.AddRateLimited(key)
		return true
	}
	cw.queue.Forget(key)
	return true
}

// computeAll lists every Service of the cluster into shards.
func (cw *clusterWatch) computeAll(ctx context.Context) (map[model.Hostname]*model.ServiceShard, error) {
	var svcs corev1.ServiceList
	if err := cw.cl.GetCache().List(ctx, &svcs); err != nil {
		return nil, err
	}
	out := make(map[model.Hostname]*model.ServiceShard, len(svcs.Items))
	for i := range svcs.Items {
		s := &svcs.Items[i]
		shard, h, err := cw.compute(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
		if err != nil {
			return nil, err
		}
		if shard != nil {
			out[h] = shard
		}
	}
	return out, nil
}

// filtersNamespaces tells whether services are discovered by their
// namespace's labels: the hub-wide selector or the cluster's scope.
func (cw *clusterWatch) filtersNamespaces() bool {
	return cw.w.opts.DiscoverySelector != nil || cw.scope.Selector != nil
}

// inScope tells whether a namespace with these labels is discovered: it
// matches both the hub-wide selector and the cluster's scope.
func (cw *clusterWatch) inScope(ns labels.Set) bool {
	if sel := cw.w.opts.DiscoverySelector; sel != nil && !sel.Matches(ns) {
		return false
	}
	return cw.scope.matches(ns)
}

// compute builds the shard of Service key from the cache; nil when the
// Service is gone or outside the discovery selector.
func (cw *clusterWatch) compute(ctx context.Context, key types.NamespacedName) (*model.ServiceShard, model.Hostname, error) {
	c := cw.cl.GetCache()
	h := model.ServiceHostname(key.Name, key.Namespace, cw.w.opts.DomainSuffix)
	var svc corev1.Service
	if err := c.Get(ctx, key, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			cw.index(key, nil, nil)
			return nil, h, nil
		}
		return nil, h, err
	}
	if cw.filtersNamespaces() {
		var ns corev1.Namespace
		if err := c.Get(ctx, types.NamespacedName{Name: key.Namespace}, &ns); err != nil || !cw.inScope(labels.Set(ns.Labels)) {
			cw.index(key, nil, nil)
			return nil, h, client.IgnoreNotFound(err)
		}
	}
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(key.Namespace),
		client.MatchingFields{IndexSliceService: key.Name}); err != nil {
		return nil, h, err
	}
	slices := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		slices[i] = &list.Items[i]
	}
	// Linked before they are read: an event of a Pod or Node stored after
	// the read below finds the link, and recomputes the service.
	pods, nodes := endpointRefs(slices)
	cw.index(key, pods, nodes)
	look := endpointLookup{
		node: func(name string) *corev1.Node {
			var n corev1.Node
			if c.Get(ctx, types.NamespacedName{Name: name}, &n) != nil {
				return nil
			}
			return &n
		},
		pod: cw.pods.get,
	}
	network := cw.network(ctx)
	shard := &model.ServiceShard{
		Service:   serviceFromKube(&svc, cw.w.opts.DomainSuffix),
		Endpoints: endpointsFromSlices(cw.id, network, slices, look),
		Network:   network,
		Gateway:   gatewayOf(ctx, &svc, cw.w.opts.Resolve),
	}
	return shard, h, nil
}

// network returns the cluster's network: its system namespace's label,
// else the remote secret's default. (A discovery selector that leaves the
// system namespace out leaves only the secret's default.)
func (cw *clusterWatch) network(ctx context.Context) model.Network {
	var ns corev1.Namespace
	if err := cw.cl.GetCache().Get(ctx, types.NamespacedName{Name: cw.w.opts.SystemNamespace}, &ns); err == nil {
		if n := ns.Labels[model.LabelTopologyNetwork]; n != "" {
			return model.Network(n)
		}
	}
	return cw.scope.Network
}

// resolveHost is the default Resolver: the system's, bounded in time, as
// it runs on a cluster's work queue.
func resolveHost(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// index records which Pods and Nodes service key's shard depends on.
func (cw *clusterWatch) index(key types.NamespacedName, pods []types.NamespacedName, nodes []string) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	// Forget old links of key lazily: a stale link only costs one
	// recomputation that finds nothing changed. (A deleted Pod's links go
	// with it: podServices.)
	for _, p := range pods {
		if p.Namespace == key.Namespace {
			byName := cw.podSvc[p.Namespace]
			if byName == nil {
				byName = map[string]string{}
				cw.podSvc[p.Namespace] = byName
			}
			svc, ok := byName[p.Name]
			if !ok {
				byName[p.Name] = key.Name
				continue
			}
			if svc == key.Name {
				continue
			}
		}
		if !slices.Contains(cw.podMore[p], key) {
			cw.podMore[p] = append(cw.podMore[p], key)
		}
	}
	for _, n := range nodes {
		set := cw.nodSvc[n]
		if set == nil {
			set = map[types.NamespacedName]struct{}{}
			cw.nodSvc[n] = set
		}
		set[key] = struct{}{}
	}
}
