package credentials

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/meshfed/meshfed/pkg/model"
)

// Ref names one Secret of a remote cluster.
type Ref struct {
	Cluster         model.ClusterID
	Namespace, Name string
}

func (r Ref) String() string { return string(r.Cluster) + "/" + r.Namespace + "/" + r.Name }

// Clusters gives the client configuration of a remote cluster of the
// fleet (remotes.Provider.ClusterConfig).
type Clusters interface {
	ClusterConfig(model.ClusterID) (*rest.Config, bool)
}

// Options configure a Watcher.
type Options struct {
	// Clusters reach the remote clusters. Required.
	Clusters Clusters
	Log      logr.Logger
	// Registerer receives the watcher's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Watcher watches the Secrets its subscribers name. It is safe for
// concurrent use; the zero value is not usable, call New.
type Watcher struct {
	opts Options
	// watchedGauge counts the Secrets watched.
	watchedGauge prometheus.Gauge

	mu      sync.Mutex // guards secrets and each watched's fields
	secrets map[Ref]*watched
	nextID  int
}

// watched is one Secret's watch and what it saw.
type watched struct {
	subs   map[int]func()
	data   map[string][]byte // nil while absent
	synced bool              // the first list answered
	err    error             // why the watch cannot start (no such cluster)
	cancel context.CancelFunc
}

// New returns a Watcher that watches nothing yet.
func New(opts Options) (*Watcher, error) {
	if opts.Clusters == nil {
		return nil, fmt.Errorf("credentials: Options.Clusters is required")
	}
	w := &Watcher{opts: opts, secrets: map[Ref]*watched{},
		watchedGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_credentials_secrets_watched",
			Help: "Kubernetes Secrets watched because a proxy of this replica names them (credentialName).",
		})}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(w.watchedGauge); err != nil {
			return nil, fmt.Errorf("credentials: metrics: %w", err)
		}
	}
	return w, nil
}

// Subscribe watches ref until unsubscribe is called, and calls changed
// whenever what Get returns for it may have changed (its first list
// included, and at once when the Secret is known already). changed runs
// on another goroutine than Subscribe's, never under the Watcher's lock;
// it must not block. Subscriptions of one Ref share its watch.
func (w *Watcher) Subscribe(ref Ref, changed func()) (unsubscribe func()) {
	w.mu.Lock()
	s := w.secrets[ref]
	start := s == nil
	if start {
		s = &watched{subs: map[int]func(){}}
		w.secrets[ref] = s
		w.watchedGauge.Set(float64(len(w.secrets)))
	}
	id := w.nextID
	w.nextID++
	s.subs[id] = changed
	known := s.synced || s.err != nil
	w.mu.Unlock()
	switch {
	case start:
		w.start(ref, s)
	case known:
		// What the watch has seen is news to this subscriber; told on
		// another goroutine, as every change is, so that the caller may
		// hold its own lock.
		go changed()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(s.subs, id)
			if len(s.subs) == 0 && w.secrets[ref] == s {
				delete(w.secrets, ref)
				w.watchedGauge.Set(float64(len(w.secrets)))
				if s.cancel != nil {
					s.cancel()
				}
			}
		})
	}
}

// Get returns the data of ref's Secret as last seen (nil when it does
// not exist), whether its watch has listed it yet, and why it cannot be
// watched. The map must not be modified.
func (w *Watcher) Get(ref Ref) (data map[string][]byte, synced bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.secrets[ref]
	if s == nil {
		return nil, false, nil
	}
	return s.data, s.synced, s.err
}

// start runs the watch of ref's Secret, or records why it cannot.
func (w *Watcher) start(ref Ref, s *watched) {
	cfg, ok := w.opts.Clusters.ClusterConfig(ref.Cluster)
	var cs kubernetes.Interface
	var err error
	if !ok {
		err = fmt.Errorf("credentials: no remote secret defines cluster %q", ref.Cluster)
	} else if cs, err = kubernetes.NewForConfig(cfg); err != nil {
		err = fmt.Errorf("credentials: client of cluster %s: %w", ref.Cluster, err)
	}
	if err != nil {
		w.mu.Lock()
		s.err, s.synced = err, true
		subs := w.subsLocked(s)
		w.mu.Unlock()
		go notify(subs)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	s.cancel = cancel
	if w.secrets[ref] != s {
		cancel() // unsubscribed meanwhile
	}
	w.mu.Unlock()
	lw := toolscache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "secrets", ref.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
		})
	inf := toolscache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, toolscache.Indexers{})
	set := func(obj any) {
		sec, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		w.update(s, sec.Data, true)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(any) { w.update(s, nil, true) },
	})
	if err != nil { // only for an informer that has stopped
		cancel()
		return
	}
	// A refused or failing list (no RBAC on Secrets there, the apiserver
	// down) is the subscribers' to report; the reflector retries with
	// its backoff (0.8 s to 30 s), which bounds this log.
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *toolscache.Reflector, err error) {
		w.opts.Log.V(1).Info("watching a credential Secret failed; retrying", "secret", ref.String(), "error", err.Error())
		w.fail(s, fmt.Errorf("credentials: watching Secret %s: %w", ref, err))
	})
	go inf.RunWithContext(ctx)
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			w.update(s, nil, false)
		}
	}()
}

// fail records why s's watch does not list, until it next does, and
// notifies the subscribers.
func (w *Watcher) fail(s *watched, err error) {
	w.mu.Lock()
	s.err = err
	subs := w.subsLocked(s)
	w.mu.Unlock()
	notify(subs)
}

// update records data (when set) and the first list, and notifies the
// subscribers.
func (w *Watcher) update(s *watched, data map[string][]byte, set bool) {
	w.mu.Lock()
	if set {
		s.data = data
	}
	s.synced, s.err = true, nil
	subs := w.subsLocked(s)
	w.mu.Unlock()
	notify(subs)
}

func (w *Watcher) subsLocked(s *watched) []func() {
	out := make([]func(), 0, len(s.subs))
	for _, f := range s.subs {
		out = append(out, f)
	}
	return out
}

func notify(subs []func()) {
	for _, f := range subs {
		f()
	}
}
