package inject

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Store holds the configuration in force. The zero Store holds none; it is
// safe for concurrent use, and Current never blocks.
type Store struct {
	cur atomic.Pointer[Config]
}

// Current returns the configuration in force, or nil.
func (s *Store) Current() *Config { return s.cur.Load() }

// Set replaces the configuration in force.
func (s *Store) Set(c *Config) { s.cur.Store(c) }

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Client reads the ConfigMap. Required.
	Client kubernetes.Interface
	// Namespace and Name of the injection ConfigMap. Required.
	Namespace, Name string
	// Store receives every configuration that parses. Required.
	Store *Store
	// Metrics, when set, receives meshfed_spoke_inject_config_loads_total.
	Metrics prometheus.Registerer
	Log     logr.Logger
}

// Watcher keeps a Store up to date with the injection ConfigMap. A
// ConfigMap that does not parse is logged and counted and the previous
// configuration stays in force; a deleted ConfigMap leaves the last
// configuration in force too. So injection never depends on the apiserver
// or the hub being reachable once a configuration has been loaded.
type Watcher struct {
	opts  WatcherOptions
	loads *prometheus.CounterVec
}

// NewWatcher returns a Watcher; Run starts it.
func NewWatcher(opts WatcherOptions) *Watcher {
	w := &Watcher{opts: opts, loads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_spoke_inject_config_loads_total",
		Help: "Injection ConfigMap versions read, by result (ok, error); on error the previous configuration stays in force.",
	}, []string{"result"})}
	if opts.Metrics != nil {
		opts.Metrics.MustRegister(w.loads)
	}
	return w
}

// Run watches the ConfigMap until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(w.opts.Client, 0,
		informers.WithNamespace(w.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.opts.Name).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.load(obj) },
		UpdateFunc: func(_, obj any) { w.load(obj) },
		DeleteFunc: func(any) {
			w.opts.Log.Info("injection ConfigMap deleted; the last configuration stays in force",
				"configmap", w.opts.Namespace+"/"+w.opts.Name)
		},
	}); err != nil {
		return fmt.Errorf("inject: watching ConfigMap: %w", err)
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

func (w *Watcher) load(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	log := w.opts.Log.WithValues("configmap", cm.Namespace+"/"+cm.Name, "resourceVersion", cm.ResourceVersion)
	cfg, err := ParseConfigMap(cm.Data)
	if err != nil {
		w.loads.WithLabelValues("error").Inc()
		state := "no configuration is in force yet"
		if w.opts.Store.Current() != nil {
			state = "the previous configuration stays in force"
		}
		log.Error(err, "refusing injection configuration; "+state)
		return
	}
	w.opts.Store.Set(cfg)
	w.loads.WithLabelValues("ok").Inc()
	log.Info("injection configuration loaded", "templates", cfg.Templates(), "defaultTemplates", cfg.DefaultTemplates())
}
