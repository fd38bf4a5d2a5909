package istioconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// Version is the version of every kind's group the watcher reads: Istio's
// storage version; v1beta1 and v1alpha3 objects are the same objects.
const Version = "v1"

// Options configure a Watcher.
type Options struct {
	// Config is the client configuration of the config cluster. Required.
	Config *rest.Config
	// DomainSuffix resolves short hostnames; default cluster.local.
	DomainSuffix string
	// RootNamespace holds mesh-wide policy; default
	// istioconfig.DefaultRootNamespace.
	RootNamespace string
	Log           logr.Logger
	// Registerer receives the watcher's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Clock stamps lastTransitionTime and times the status writer's retry
	// backoff. Default the real clock.
	Clock clock.WithTicker
	// OnChange receives each new snapshot: first once both kinds have
	// listed (even when empty), then after every change of an applied
	// object. It is called from one goroutine, never under a lock of the
	// watcher, and a burst of changes made while it runs is one call. It
	// may block; changes meanwhile wait. nil ignores snapshots.
	OnChange func(*istioconfig.Snapshot)
	// WriteStatus reports whether this replica writes the status of the
	// object of key; nil means always. It is called from the watcher's
	// goroutine after every round, for every object whose status is not
	// what it should be: it must be cheap and must not block. When its
	// answers change (e.g. ownership moved), call Watcher.RecheckStatus.
	WriteStatus func(istioconfig.Key) bool
}

// Watcher watches the Istio config of the config cluster. Run runs it.
type Watcher struct {
	opts    Options
	cache   cache.Cache
	client  client.Client // uncached: status patches and fresh reads on conflict
	metrics *metrics
	log     logr.Logger

	wake    chan struct{}                                         // capacity 1: a round is due
	statusQ workqueue.TypedRateLimitingInterface[istioconfig.Key] // keys whose status to write

	mu sync.Mutex // guards the fields below; held for map work only, never for I/O or OnChange
	// dirty are the keys changed since the loop last took them.
	dirty map[istioconfig.Key]struct{}
	// entries are the objects held, written by the loop only.
	entries map[istioconfig.Key]*entry
	// snap is the last snapshot published, gen its number (1 for the
	// first), lost the hosts each object lost in it.
	snap *istioconfig.Snapshot
	gen  uint64
	lost map[istioconfig.Key][]istioconfig.Shadowed
	// warnings are what is wrong between objects, in snap
	// (istioconfig.Snapshot.Warnings); external those others found
	// (SetExternalWarnings), by source.
	warnings map[istioconfig.Key][]string
	external map[string]map[istioconfig.Key][]string
	synced   bool

	// crds says, by kind, whether the config cluster has a CRD that
	// serves it (onCRD); crdsChanged that the loop has not reconciled
	// the watches with it yet; absent are the kinds not watched, for
	// configz.
	crds        map[string]bool
	crdsChanged bool
	// nsChanged says a namespace changed since the last snapshot: its
	// labels may select other routes.
	nsChanged bool
	absent    []string
	// kinds are the watches of the kinds whose CRD is present; the loop's
	// alone.
	kinds map[string]*kindWatch

	// patchedFrom is, per key, the resourceVersion the writer's last
	// successful patch was made against, until the cache has moved past
	// it. Owned by the writer goroutine.
	patchedFrom map[istioconfig.Key]string
}

// gvk is the GroupVersionKind of kind in the watched version.
func gvk(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: validate.GroupOf(kind), Version: versionOf(kind), Kind: validate.APIKind(kind)}
}

// versionOf is the version of kind the watcher reads: Version for Istio's
// kinds, validate.WatchedVersion for the Gateway API's.
func versionOf(kind string) string {
	if validate.IsGatewayAPI(kind) {
		return validate.WatchedVersion(kind)
	}
	return Version
}

// New returns a Watcher of the config cluster that opts.Config names.
func New(opts Options) (*Watcher, error) {
	if opts.Config == nil {
		return nil, errors.New("istioconfig: Options.Config is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.WriteStatus == nil {
		opts.WriteStatus = func(istioconfig.Key) bool { return true }
	}
	w := &Watcher{
		opts: opts, log: opts.Log,
		wake: make(chan struct{}, 1),
		statusQ: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[istioconfig.Key](),
			workqueue.TypedRateLimitingQueueConfig[istioconfig.Key]{Clock: opts.Clock}),
		dirty:       map[istioconfig.Key]struct{}{},
		entries:     map[istioconfig.Key]*entry{},
		patchedFrom: map[istioconfig.Key]string{},
		crds:        map[string]bool{},
		kinds:       map[string]*kindWatch{},
		absent:      slices.Clone(istioconfig.Kinds),
	}
	mapper := staticRESTMapper()
	var err error
	w.cache, err = cache.New(opts.Config, cache.Options{
		Scheme: runtime.NewScheme(), Mapper: mapper,
		DefaultTransform: toolscache.TransformFunc(stripObject),
		// The watcher only reads what the cache returns (patches go to
		// fresh objects): no copy per read.
		DefaultUnsafeDisableDeepCopy: ptr.To(true),
		DefaultWatchErrorHandler:     w.watchError,
		ReaderFailOnMissingInformer:  true,
		ByObject: map[client.Object]cache.ByObject{
			crdObject():       {Transform: stripCRD},
			namespaceObject(): {Transform: stripNamespace},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("istioconfig: cache: %w", err)
	}
	w.client, err = client.New(opts.Config, client.Options{Scheme: runtime.NewScheme(), Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("istioconfig: client: %w", err)
	}
	// Registered last: a Watcher that could not be built leaves none.
	if w.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("istioconfig: metrics: %w", err)
	}
	return w, nil
}

// crdObject is an empty CustomResourceDefinition, to name the kind.
func crdObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	return u
}

// staticRESTMapper maps the watched kinds (and CRDs) without discovery,
// so the watcher starts whether or not the CRDs exist yet.
func staticRESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.AddSpecific(crdGVK, crdGVK.GroupVersion().WithResource("customresourcedefinitions"),
		crdGVK.GroupVersion().WithResource("customresourcedefinition"), meta.RESTScopeRoot)
	m.AddSpecific(namespaceGVK, namespaceGVK.GroupVersion().WithResource("namespaces"),
		namespaceGVK.GroupVersion().WithResource("namespace"), meta.RESTScopeRoot)
	for _, k := range istioconfig.Kinds {
		gv := gvk(k).GroupVersion()
		scope := meta.RESTScopeNamespace
		if validate.ClusterScoped(k) {
			scope = meta.RESTScopeRoot
		}
		m.AddSpecific(gvk(k), gv.WithResource(validate.Resources[k]), gv.WithResource(strings.ToLower(validate.APIKind(k))), scope)
	}
	return m
}

// stripObject drops what the watcher never reads before an object enters
// the cache: managed fields, and annotations, where
// kubectl.kubernetes.io/last-applied-configuration repeats the whole spec.
func stripObject(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
		u.SetAnnotations(nil)
	}
	return obj, nil
}

func (w *Watcher) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	// A watch that ends or whose resourceVersion expired is routine: the
	// reflector lists again.
	if ctx.Err() != nil || errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	// Kinds are watched only while their CRD exists; a CRD removed under
	// a running watch fails it until the loop stops it.
	w.log.Error(err, "watching Istio config failed; retrying", "reflector", r.TypeDescription())
}

// SetExternalWarnings sets the warnings that source (another part of the
// hub) finds about objects, such as a Gateway's credential that cannot be
// read: they join the objects' own in their status, /debug/configz and
// meshfed_config_objects_with_warnings, replacing what source set before.
// It does not block.
func (w *Watcher) SetExternalWarnings(source string, warnings map[istioconfig.Key][]string) {
	w.mu.Lock()
	if w.external == nil {
		w.external = map[string]map[istioconfig.Key][]string{}
	}
	same := len(w.external[source]) == len(warnings)
	for k, v := range warnings {
		same = same && slices.Equal(w.external[source][k], v)
	}
	w.external[source] = warnings
	w.mu.Unlock()
	if !same {
		w.poke()
	}
}

// warningsLocked are k's warnings, its own and external, sorted; the
// caller holds mu.
func (w *Watcher) warningsLocked(k istioconfig.Key) []string {
	out := w.warnings[k]
	for _, src := range w.external {
		if ws := src[k]; len(ws) > 0 {
			out = append(slices.Clone(out), ws...)
		}
	}
	if len(out) > len(w.warnings[k]) {
		slices.Sort(out)
	}
	return out
}

// RecheckStatus makes the watcher compare every object's status again,
// asking WriteStatus anew: call it when WriteStatus's answers may have
// changed. It does not block.
func (w *Watcher) RecheckStatus() { w.poke() }

// Snapshot returns the last snapshot published, nil before the first.
func (w *Watcher) Snapshot() *istioconfig.Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap
}

// Synced reports whether the first snapshot has been published.
func (w *Watcher) Synced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

func (w *Watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default: // a round is due already; it will see this change too
	}
}

func (w *Watcher) markDirty(kind string, obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.dirty[istioconfig.Key{Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName()}] = struct{}{}
	w.mu.Unlock()
	w.poke()
}

// Run watches until ctx ends, and returns once everything it started has
// stopped. It returns an error only when the watch cannot be set up. Call
// it once.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// However Run returns: stop the cache and the writer (whose Get
	// returns once the queue is shut down and drained), and wait for them.
	defer func() {
		cancel()
		w.statusQ.ShutDown()
		wg.Wait()
	}()
	crdsSynced, err := w.watchCRDs(ctx)
	if err != nil {
		return err
	}
	nsSynced, err := w.watchNamespaces(ctx)
	if err != nil {
		return err
	}
	cacheErr := make(chan error, 1)
	wg.Go(func() { cacheErr <- w.cache.Start(ctx) })
	wg.Go(func() {
		for w.writeNext(ctx) {
		}
	})
	// First which kinds exist, then every object of those: all present
	// at start have been marked dirty once the handlers have synced, so
	// the first round sees them all. A kind without its CRD counts as
	// listed (and empty).
	if ok, err := w.waitSynced(ctx, cacheErr, crdsSynced, nsSynced); !ok {
		return err
	}
	synced, err := w.reconcileKinds(ctx)
	if err != nil {
		return err
	}
	if ok, err := w.waitSynced(ctx, cacheErr, synced...); !ok {
		return err
	}
	w.round(ctx, true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-cacheErr:
			return cacheFailed(err)
		case <-w.wake:
			w.mu.Lock()
			reconcile := w.crdsChanged
			w.mu.Unlock()
			if reconcile {
				// A watch started here lists in the background: its
				// objects arrive as changes, and the loop does not wait.
				if _, err := w.reconcileKinds(ctx); err != nil {
					return err
				}
			}
			w.round(ctx, false)
		}
	}
}

// waitSynced waits for synced, or for the cache to fail or ctx to end:
// then it reports false, with the cache's error.
func (w *Watcher) waitSynced(ctx context.Context, cacheErr <-chan error, synced ...toolscache.InformerSynced) (bool, error) {
	if len(synced) == 0 {
		return true, nil
	}
	listed := make(chan bool, 1)
	go func() { listed <- toolscache.WaitForCacheSync(ctx.Done(), synced...) }()
	select {
	case err := <-cacheErr:
		return false, cacheFailed(err)
	case ok := <-listed:
		return ok, nil
	}
}

func cacheFailed(err error) error {
	if err != nil {
		return fmt.Errorf("istioconfig: cache: %w", err)
	}
	return nil
}

// round takes every dirty key, brings its entry up to date, publishes a
// snapshot when an applied object changed (or first is set), and queues
// the status writes due.
func (w *Watcher) round(ctx context.Context, first bool) {
	w.mu.Lock()
	dirty := w.dirty
	w.dirty = map[istioconfig.Key]struct{}{}
	w.mu.Unlock()

	// Only this goroutine writes entries, so it reads them unlocked.
	updates := map[istioconfig.Key]*entry{} // nil: the object is gone
	w.mu.Lock()
	nsChanged := w.nsChanged
	w.nsChanged = false
	w.mu.Unlock()
	// A namespace's labels matter only where a listener selects by them;
	// the snapshot reuses its translation otherwise.
	changed := first || (nsChanged && w.snapSelectsNamespaces())
	for k := range dirty {
		next, err := w.read(ctx, k)
		if err != nil {
			w.log.Error(err, "reading Istio config from the cache", "object", k)
			continue
		}
		old := w.entries[k]
		if old == nil && next == nil {
			continue
		}
		updates[k] = next
		// Only a change of what applies makes a new snapshot: a status
		// write, or a rejected object staying rejected, does not.
		if appliedOf(old) != appliedOf(next) {
			changed = true
		}
	}

	w.mu.Lock()
	for k, e := range updates {
		if e == nil {
			delete(w.entries, k)
			w.statusQ.Add(k) // for the writer to forget it
		} else {
			w.entries[k] = e
		}
	}
	var objs []istioconfig.Object
	if changed {
		for _, e := range w.entries {
			if e.obj != nil {
				objs = append(objs, e.obj)
			}
		}
	}
	w.mu.Unlock()

	if changed {
		w.mu.Lock()
		prev := w.snap
		w.mu.Unlock()
		snap := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{DomainSuffix: w.opts.DomainSuffix, RootNamespace: w.opts.RootNamespace,
			Previous: prev, NamespaceLabels: w.gatewayNamespaceLabels(ctx)}, objs)
		lost := map[istioconfig.Key][]istioconfig.Shadowed{}
		for _, s := range snap.Shadowed() {
			lost[s.Lost] = append(lost[s.Lost], s)
		}
		w.mu.Lock()
		w.snap, w.lost, w.warnings, w.synced = snap, lost, snap.Warnings(), true
		w.gen++
		w.mu.Unlock()
		if w.opts.OnChange != nil {
			w.opts.OnChange(snap)
		}
	}
	w.queueStatus()
}

// appliedOf is e's valid object, nil for a rejected or absent one.
func appliedOf(e *entry) istioconfig.Object {
	if e == nil {
		return nil
	}
	return e.obj
}

// read returns the entry of k as the cache holds it now, nil when the
// object is gone. An object at the generation already held keeps its
// entry (and its object's pointer) with only the status seen updated.
func (w *Watcher) read(ctx context.Context, k istioconfig.Key) (*entry, error) {
	if _, watched := w.kinds[k.Kind]; !watched {
		return nil, nil // its CRD is gone: so are its objects
	}
	u, err := w.get(ctx, w.cache, k)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if old := w.entries[k]; old != nil && old.sameVersion(u) {
		e := *old
		e.seen = carriedOf(u)
		e.apiStatus, _ = u.Object["status"].(map[string]any)
		return &e, nil
	}
	e := evaluate(k.Kind, u)
	if e.obj != nil {
		for _, n := range xdsgen.ConfigNotes(e.obj, w.opts.DomainSuffix) {
			e.notes = append(e.notes, n.Field+": "+n.Reason+" ("+n.Kind.String()+")")
		}
		if se, ok := e.obj.(*istioconfig.ServiceEntry); ok {
			e.notes = append(e.notes, entryNotes(se)...)
		}
	}
	if e.obj == nil {
		w.metrics.rejected.WithLabelValues(k.Kind, e.reason).Inc()
		w.log.Info("Istio config rejected: skipped", "object", k, "generation", e.meta.Generation,
			"reason", e.reason, "errors", e.errs.Error())
	}
	return e, nil
}

// queueStatus queues every object whose status differs from what it
// should be and whose status this replica writes, and updates the gauge.
func (w *Watcher) queueStatus() {
	type due struct {
		k    istioconfig.Key
		seen carried
		want condition
	}
	var todo []due
	states := map[istioconfig.Key]State{}
	w.mu.Lock()
	warned := map[string]int{}
	for k, e := range w.entries {
		lost := w.lost[k]
		states[k] = e.state(lost)
		warnings := w.warningsLocked(k)
		if len(warnings) > 0 {
			warned[k.Kind]++
		}
		if validate.IsGatewayAPI(k.Kind) {
			if want, ok := w.snap.GatewayAPIStatus(k); ok && e.obj != nil &&
				apiStatusDue(k.Kind, e.apiStatus, istioconfig.WithListenerProblems(want, warnings)) {
				todo = append(todo, due{k: k})
			}
			continue
		}
		if want := e.desired(lost, warnings); e.seen.needsWrite(want) {
			todo = append(todo, due{k, e.seen, want})
		}
	}
	w.mu.Unlock()
	w.metrics.setObjects(states)
	for _, kind := range istioconfig.Kinds {
		w.metrics.warned.WithLabelValues(kind).Set(float64(warned[kind]))
	}
	for _, d := range todo {
		if w.opts.WriteStatus(d.k) {
			w.statusQ.Add(d.k)
		}
	}
}

// entryNotes says what of a ServiceEntry proxies do not get: of the entry
// (istioconfig.EntryNotes), and of the services its hosts become
// (xdsgen.ServiceNotes: DNS endpoints a proxy kind does not resolve).
func entryNotes(se *istioconfig.ServiceEntry) []string {
	out := istioconfig.EntryNotes(se)
	for _, h := range se.Spec.GetHosts() {
		if strings.HasPrefix(h, "*") {
			continue // no service (EntryNotes says so)
		}
		ms := istioconfig.EntryService(model.Hostname(strings.ToLower(h)), se)
		if ms == nil {
			continue
		}
		for _, n := range xdsgen.ServiceNotes(ms, nil) {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}
