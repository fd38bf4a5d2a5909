package remotes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/remotesecret"
)

// ClusterRemover drops the state of a cluster that is no longer defined.
type ClusterRemover interface {
	RemoveCluster(model.ClusterID)
}

// ProviderOptions configure a Provider.
type ProviderOptions struct {
	// Remover drops the state of removed clusters (the hub's store).
	Remover ClusterRemover
	Status  *Status
	Log     logr.Logger
	// Ownership decides which clusters this replica watches; nil means all.
	Ownership Ownership
	// NewCluster builds a cluster from its client configuration; nil means
	// NewRemoteCluster. The Watcher engages only clusters NewRemoteCluster
	// built (it reads their Pods from the podCache they carry): a
	// replacement may change the configuration it is given, not the
	// cluster's type.
	NewCluster func(id model.ClusterID, cfg *rest.Config, scope Scope, st *Status) (cluster.Cluster, error)
	// StopGrace bounds how long the provider's end waits for the remote
	// clusters' caches to stop; default DefaultStopGrace.
	StopGrace time.Duration
	// Namespace holds the remote secrets; default DefaultSystemNamespace.
	Namespace string
	// ProbeInterval is how often the config cluster is probed, so that
	// its return after an outage is seen at once (the remote secrets are
	// then listed anew); 0 turns the probe off.
	ProbeInterval time.Duration
	// Clock times StopGrace and the probes; default the real clock.
	Clock clock.Clock
}

// DefaultStopGrace is how long a stopping provider waits for the remote
// clusters' caches. They stop as soon as their contexts end, except where
// client-go's watch-list mode is on: a reflector of it (v0.36) waits out its
// retry backoff, up to 30 s after an outage, without looking at its context
// (the hub turns the mode off: pkg/kubegates). Whatever has not stopped
// within the grace ends with the process, rather than keeping a hub past its
// termination grace.
const DefaultStopGrace = 2 * time.Second

// Ownership tells whether this replica should watch a cluster. Owns must
// be cheap and must not block; Changed signals (coalesced) that the answer
// may have changed for any cluster.
type Ownership interface {
	Owns(model.ClusterID) bool
	Changed() <-chan struct{}
}

// remote is one running remote cluster.
type remote struct {
	secret     string
	kubeconfig []byte
	scope      Scope
	cl         cluster.Cluster
	cancel     context.CancelFunc
	done       chan struct{} // closed when cl.Start has returned
}

// Provider is a multicluster-runtime provider of the clusters named by the
// remote secrets of the config cluster. Call SetupWithManager before the
// manager starts; the manager runs it.
type Provider struct {
	opts  ProviderOptions
	local manager.Manager

	mu       sync.RWMutex // guards clusters and indexes
	clusters map[model.ClusterID]*remote
	indexes  []func(context.Context, cluster.Cluster) error

	// Owned by the reconcile goroutine.
	owners  map[model.ClusterID]string               // cluster -> secret defining it
	entries map[string]map[model.ClusterID]struct{}  // secret -> its cluster IDs (valid or not)
	defined map[model.ClusterID]remotesecret.Cluster // valid entries, watched here or not
	scopes  map[model.ClusterID]Scope                // discovery scope of each defined cluster

	configMu sync.RWMutex // guards configs
	configs  map[model.ClusterID]*rest.Config

	synced atomic.Bool
	wg     sync.WaitGroup // running clusters

	// queue is the reconcile loop's, set while Start runs (Reconnect).
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[types.NamespacedName]]

	sourceMu sync.Mutex    // guards source
	source   *secretSource // the remote-secret cache, set while Start runs
}

// reconnectNamespace marks a queue key that asks for a cluster to be
// reconnected (its Name is the cluster ID): it can never be a Secret's
// namespace.
const reconnectNamespace = "\x00reconnect"

// Reconnect asks for cluster id's client and watches to be built anew, as
// for new credentials, if this replica runs it: the new watcher lists
// everything at once, and the old state serves until it publishes. It
// does not block and is safe for concurrent use; requests for one cluster
// coalesce.
func (p *Provider) Reconnect(id model.ClusterID) {
	if q := p.queue.Load(); q != nil {
		(*q).Add(types.NamespacedName{Namespace: reconnectNamespace, Name: string(id)})
	}
}

var (
	_ multicluster.Provider         = (*Provider)(nil)
	_ multicluster.ProviderRunnable = (*Provider)(nil)
)

// NewProvider returns a Provider.
func NewProvider(opts ProviderOptions) *Provider {
	if opts.NewCluster == nil {
		opts.NewCluster = NewRemoteCluster
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = DefaultStopGrace
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultSystemNamespace
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Provider{
		opts:     opts,
		clusters: map[model.ClusterID]*remote{},
		owners:   map[model.ClusterID]string{},
		entries:  map[string]map[model.ClusterID]struct{}{},
		defined:  map[model.ClusterID]remotesecret.Cluster{},
		scopes:   map[model.ClusterID]Scope{},
		configs:  map[model.ClusterID]*rest.Config{},
	}
}

// SetupWithManager gives the provider the config cluster's manager, whose
// cache must be limited to remote secrets (see SecretCacheOptions).
func (p *Provider) SetupWithManager(local manager.Manager) { p.local = local }

// SecretCacheOptions limits a config-cluster cache to the remote secrets of
// namespace ns.
func SecretCacheOptions(ns string) cache.Options {
	sel, _ := metaLabelSelector(remotesecret.MultiClusterLabel + "=true")
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{ns: {}}, Label: sel},
		},
	}
}

// Get returns the running cluster named name.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if r, ok := p.clusters[model.ClusterID(name)]; ok {
		return r.cl, nil
	}
	return nil, fmt.Errorf("cluster %s: %w", name, multicluster.ErrClusterNotFound)
}

// IndexField adds a field index to every cluster, present and future.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	idx := func(ctx context.Context, cl cluster.Cluster) error {
		return cl.GetFieldIndexer().IndexField(ctx, obj, field, extract)
	}
	p.mu.Lock()
	p.indexes = append(p.indexes, idx)
	running := slices.Collect(maps.Values(p.clusters))
	p.mu.Unlock()
	for _, r := range running {
		if err := idx(ctx, r.cl); err != nil {
			return err
		}
	}
	return nil
}

// ClusterConfig returns the client configuration of remote cluster id as
// its remote secret defines it, whether or not this replica watches it (the
// CA reviews tokens against any cluster of the fleet). Callers must not
// modify it.
func (p *Provider) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	p.configMu.RLock()
	defer p.configMu.RUnlock()
	cfg, ok := p.configs[id]
	return cfg, ok
}

// Synced reports whether every remote secret present at start has been
// processed.
func (p *Provider) Synced() bool { return p.synced.Load() }

// Start watches the remote secrets and engages their clusters with aware
// until ctx ends; then it stops every cluster and waits for them.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	if p.local == nil {
		return errors.New("remotes: provider started without SetupWithManager")
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	defer queue.ShutDown()
	p.queue.Store(&queue)
	defer p.queue.Store(nil)
	src, err := p.startSecretSource(ctx, queue)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	p.sourceMu.Lock()
	p.source = src
	p.sourceMu.Unlock()
	defer func() {
		p.sourceMu.Lock()
		p.source.stop()
		p.sourceMu.Unlock()
	}()
	if p.opts.ProbeInterval > 0 {
		go p.probeConfig(ctx, queue)
	}
	// Every secret present at start is queued now; process them before
	// declaring the provider synced.
	initial := queue.Len()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	if p.opts.Ownership != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-p.opts.Ownership.Changed():
					queue.Add(ownershipKey)
				}
			}
		}()
	}
	for processed := 0; ; processed++ {
		if processed >= initial && !p.synced.Load() {
			p.synced.Store(true)
		}
		key, quit := queue.Get()
		if quit {
			break
		}
		if key == ownershipKey {
			p.rebalance(ctx, aware)
			queue.Done(key)
			continue
		}
		if key == reconnectConfigKey {
			p.reconnectConfig(ctx, queue)
			queue.Done(key)
			continue
		}
		if key.Namespace == reconnectNamespace {
			p.reconnect(ctx, model.ClusterID(key.Name), aware)
			queue.Done(key)
			continue
		}
		if err := p.reconcile(ctx, key, aware); err != nil {
			p.opts.Log.Error(err, "reconciling remote secret", "secret", key)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
	p.stopAll()
	return nil
}

// reconcile brings the running clusters in line with one secret.
func (p *Provider) reconcile(ctx context.Context, key types.NamespacedName, aware multicluster.Aware) error {
	name := key.String()
	log := p.opts.Log.WithValues("secret", name)
	var secret corev1.Secret
	err := p.secrets().Get(ctx, key, &secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var parsed remotesecret.Parsed
	if err == nil {
		parsed, err = remotesecret.Parse(secret.Data)
		if err != nil {
			log.Error(err, "remote secret rejected")
			p.opts.Status.CountError(name, ReasonNoClusters)
			p.opts.Status.SetSecretError(name, err.Error())
		} else {
			p.opts.Status.SetSecretError(name, "")
		}
	} else {
		p.opts.Status.SetSecretError(name, "")
	}

	scope, serr := ParseScope(secret.Annotations[AnnotationDiscoverySelector])
	scope.Network = model.Network(strings.TrimSpace(secret.Annotations[AnnotationNetwork]))
	if serr != nil {
		// Never widened: a running cluster keeps the scope it had, a new
		// one is not started.
		// Counted first: whoever sees the error also sees the count.
		log.Error(serr, "discovery selector rejected")
		p.opts.Status.CountError(name, ReasonDiscoverySelector)
		p.opts.Status.SetSecretError(name, serr.Error())
	}

	policy, perr := ParseStalePolicy(secret.Annotations[AnnotationStaleEndpoints])
	if perr != nil {
		// The endpoints are kept, the safe choice, and the secret says why.
		log.Error(perr, "stale-endpoint policy rejected; keeping endpoints")
		p.opts.Status.CountError(name, ReasonStalePolicy)
		p.opts.Status.SetSecretError(name, perr.Error())
	}

	now := map[model.ClusterID]struct{}{}
	for _, inv := range parsed.Invalid {
		now[inv.ID] = struct{}{}
		if owner, ok := p.owners[inv.ID]; ok && owner != name {
			continue // another secret defines it; this entry is a duplicate
		}
		p.owners[inv.ID] = name
		reason := ReasonInvalidKubeconfig
		if errors.Is(inv.Err, remotesecret.ErrInvalidClusterID) {
			reason = ReasonInvalidClusterID
		}
		p.opts.Status.CountError(string(inv.ID), reason)
		msg := inv.Err.Error()
		state := StateInvalid
		if p.running(inv.ID) {
			// Keep serving with the credentials that worked: a bad edit
			// must not take a healthy cluster down.
			msg = "new kubeconfig rejected, still using the previous one: " + msg
			if st, ok := p.opts.Status.Get(inv.ID); ok {
				state = st.State
			}
		}
		log.Error(inv.Err, "remote cluster entry rejected", "cluster", inv.ID)
		p.opts.Status.Set(inv.ID, name, state, msg)
	}
	for _, c := range parsed.Clusters {
		now[c.ID] = struct{}{}
		if owner, ok := p.owners[c.ID]; ok && owner != name {
			err := fmt.Errorf("cluster %s is already defined by secret %s", c.ID, owner)
			log.Error(err, "remote cluster entry ignored", "cluster", c.ID)
			p.opts.Status.CountError(string(c.ID), ReasonDuplicateCluster)
			p.opts.Status.SetSecretError(name, err.Error())
			continue
		}
		p.owners[c.ID] = name
		if serr != nil && !p.running(c.ID) {
			p.opts.Status.Set(c.ID, name, StateInvalid, serr.Error())
			continue
		}
		if serr == nil {
			p.scopes[c.ID] = scope
		}
		p.defined[c.ID] = c
		p.configMu.Lock()
		p.configs[c.ID] = c.Config
		p.configMu.Unlock()
		p.place(ctx, c.ID, aware, log)
		p.opts.Status.SetStalePolicy(c.ID, policy)
	}
	for id := range p.entries[name] {
		if _, still := now[id]; !still && p.owners[id] == name {
			p.removeCluster(id)
			log.Info("remote cluster removed", "cluster", id)
		}
	}
	if len(now) == 0 {
		delete(p.entries, name)
	} else {
		p.entries[name] = now
	}
	return nil
}

func (p *Provider) running(id model.ClusterID) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	_, ok := p.clusters[id]
	return ok
}

// ownershipKey is the queue key that asks for a rebalance: it can never be
// a Secret's namespaced name.
var ownershipKey = types.NamespacedName{Name: "\x00ownership"}

// owns reports whether this replica should watch cluster id.
func (p *Provider) owns(id model.ClusterID) bool {
	return p.opts.Ownership == nil || p.opts.Ownership.Owns(id)
}

// rebalance starts the defined clusters this replica now owns and stops
// the ones it no longer owns.
func (p *Provider) rebalance(ctx context.Context, aware multicluster.Aware) {
	for _, id := range slices.Sorted(maps.Keys(p.defined)) {
		p.place(ctx, id, aware, p.opts.Log.WithValues("secret", p.owners[id]))
	}
}

// place runs defined cluster id here if this replica owns it, and stops
// watching it otherwise. A cluster this replica stops watching keeps its
// state: its new owner's snapshot replaces it.
func (p *Provider) place(ctx context.Context, id model.ClusterID, aware multicluster.Aware, log logr.Logger) {
	c, ok := p.defined[id]
	if !ok {
		return
	}
	if p.owns(id) {
		p.startCluster(ctx, c, p.owners[id], aware, log, false)
		return
	}
	p.mu.Lock()
	r := p.clusters[id]
	delete(p.clusters, id)
	p.mu.Unlock()
	if r != nil {
		r.cancel()
		log.Info("remote cluster handed to its new owner", "cluster", id)
	}
	if st, ok := p.opts.Status.Get(id); !ok || st.State != StateReplicated {
		p.opts.Status.Set(id, p.owners[id], StateReplicated, "")
	}
	p.opts.Status.SetCredentialExpiry(id, c.TokenExpiry)
}

// reconnect replaces running cluster id with one built anew from the same
// definition.
func (p *Provider) reconnect(ctx context.Context, id model.ClusterID, aware multicluster.Aware) {
	c, ok := p.defined[id]
	if !ok || !p.running(id) {
		return
	}
	log := p.opts.Log.WithValues("secret", p.owners[id])
	p.startCluster(ctx, c, p.owners[id], aware, log, true)
}

// startCluster starts (or, for new credentials or when force is set,
// replaces) cluster c. The old
// cluster is stopped only after the new one is engaged, and its state stays
// in the store until the new watcher publishes: a token rotation is not seen
// by any proxy.
func (p *Provider) startCluster(ctx context.Context, c remotesecret.Cluster, secret string, aware multicluster.Aware, log logr.Logger, force bool) {
	p.mu.RLock()
	old := p.clusters[c.ID]
	indexes := slices.Clone(p.indexes)
	p.mu.RUnlock()
	scope := p.scopes[c.ID]
	if old != nil && bytes.Equal(old.kubeconfig, c.Kubeconfig) && old.scope.same(scope) && !force {
		return
	}
	p.opts.Status.Set(c.ID, secret, StateSyncing, "")
	p.opts.Status.SetCredentialExpiry(c.ID, c.TokenExpiry)
	p.opts.Status.SetScope(c.ID, scope) // before Engage, which reads it
	cl, err := p.opts.NewCluster(c.ID, c.Config, scope, p.opts.Status)
	if err != nil {
		log.Error(err, "cannot create cluster client", "cluster", c.ID)
		p.opts.Status.Set(c.ID, secret, StateInvalid, err.Error())
		p.opts.Status.CountError(string(c.ID), ReasonClientError)
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	r := &remote{secret: secret, kubeconfig: c.Kubeconfig, scope: scope, cl: cl, cancel: cancel, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(r.done)
		if err := cl.Start(cctx); err != nil && cctx.Err() == nil {
			log.Error(err, "remote cluster stopped", "cluster", c.ID)
		}
	}()
	for _, idx := range indexes {
		if err := idx(cctx, cl); err != nil {
			log.Error(err, "indexing remote cluster", "cluster", c.ID)
		}
	}
	p.mu.Lock()
	p.clusters[c.ID] = r
	p.mu.Unlock()
	if err := aware.Engage(cctx, multicluster.ClusterName(c.ID), cl); err != nil {
		log.Error(err, "engaging remote cluster", "cluster", c.ID)
		p.opts.Status.Set(c.ID, secret, StateInvalid, err.Error())
	}
	switch {
	case old != nil && force:
		old.cancel()
		log.Info("remote cluster reconnected", "cluster", c.ID)
	case old != nil && !bytes.Equal(old.kubeconfig, c.Kubeconfig):
		old.cancel()
		log.Info("remote cluster credentials replaced", "cluster", c.ID)
	case old != nil:
		old.cancel()
		log.Info("remote cluster discovery scope or network changed", "cluster", c.ID, "discoverySelector", scope.String(), "network", scope.Network)
	default:
		log.Info("remote cluster added", "cluster", c.ID)
	}
}

// removeCluster stops cluster id and drops its state.
func (p *Provider) removeCluster(id model.ClusterID) {
	p.mu.Lock()
	r := p.clusters[id]
	delete(p.clusters, id)
	p.mu.Unlock()
	if r != nil {
		r.cancel()
	}
	delete(p.owners, id)
	delete(p.defined, id)
	delete(p.scopes, id)
	p.configMu.Lock()
	delete(p.configs, id)
	p.configMu.Unlock()
	p.opts.Remover.RemoveCluster(id)
	p.opts.Status.Delete(id)
}

// stopAll stops every remote cluster and waits, for at most StopGrace, for
// their caches to stop (see DefaultStopGrace).
func (p *Provider) stopAll() {
	p.mu.Lock()
	for _, r := range p.clusters {
		r.cancel()
	}
	p.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-p.opts.Clock.After(p.opts.StopGrace):
		p.opts.Log.Info("remote cluster caches still stopping; not waiting for them", "grace", p.opts.StopGrace.String())
	}
}

// NewRemoteCluster builds the cluster.Cluster of a remote: a cache of the
// four watched kinds other than Pods, objects shrunk by transformObject,
// EndpointSlices indexed by their Service (IndexSliceService), no deep
// copies on read (the watcher never mutates), a static REST mapper; and the
// cluster's Pods in a podCache of their own (pods.go), started and stopped
// with the cluster. Every client asks for protobuf, and watch errors are
// reported to st.
func NewRemoteCluster(id model.ClusterID, cfg *rest.Config, scope Scope, st *Status) (cluster.Cluster, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "meshfed-hub"
	cfg.QPS, cfg.Burst = 50, 100
	cl, err := cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = watchedScheme()
		o.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return staticRESTMapper(), nil }
		defer scope.applyTo(&o.Cache)
		o.Cache = cache.Options{
			DefaultTransform:             transformObject,
			DefaultUnsafeDisableDeepCopy: ptr.To(true),
			DefaultWatchErrorHandler:     watchErrorHandler(id, st),
		}
	})
	if err != nil {
		return nil, err
	}
	// Before the cache starts: an informer takes no index once it runs.
	if err := cl.GetFieldIndexer().IndexField(context.Background(), &discoveryv1.EndpointSlice{}, IndexSliceService, sliceService); err != nil {
		return nil, fmt.Errorf("remotes: indexing the EndpointSlices of cluster %s: %w", id, err)
	}
	pods, err := newPodCache(id, cfg, cl.GetHTTPClient(), scope, st)
	if err != nil {
		return nil, err
	}
	return &remoteCluster{Cluster: cl, pods: pods}, nil
}

// IndexSliceService is the field index of a remote cluster's EndpointSlices
// by the Service they belong to (their kubernetes.io/service-name label):
// the watcher finds a Service's slices by it, in time independent of the
// other slices of the namespace.
const IndexSliceService = "meshfed.service"

// sliceService extracts IndexSliceService.
func sliceService(o client.Object) []string {
	if name := o.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
		return []string{name}
	}
	return nil
}

// remoteCluster is a remote's cluster.Cluster with the podCache the
// watcher reads its Pods from.
type remoteCluster struct {
	cluster.Cluster
	pods *podCache
}

// Start runs the cluster's cache and its Pod informers until ctx ends (or
// the cache fails), and returns once both have stopped.
func (c *remoteCluster) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { c.pods.run(ctx) })
	err := c.Cluster.Start(ctx)
	cancel()
	wg.Wait()
	return err
}

// podsOf returns the podCache of a cluster built by NewRemoteCluster.
func podsOf(cl cluster.Cluster) (*podCache, bool) {
	rc, ok := cl.(*remoteCluster)
	if !ok {
		return nil, false
	}
	return rc.pods, true
}

// watchErrorHandler reports the failed watches of cluster id to st, but not
// the routine ends of a watch, nor those of a stopping cluster.
func watchErrorHandler(id model.ClusterID, st *Status) toolscache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *toolscache.Reflector, err error) {
		if ctx.Err() != nil || isRoutineWatchEnd(err) {
			return
		}
		st.Set(id, "", StateUnreachable, err.Error())
		st.CountError(string(id), ReasonWatchError)
	}
}

func metaLabelSelector(s string) (labels.Selector, error) { return labels.Parse(s) }

// isRoutineWatchEnd tells the watch endings every informer meets in normal
// operation (a closed stream, an expired resource version) from failures.
func isRoutineWatchEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, context.Canceled)
}
