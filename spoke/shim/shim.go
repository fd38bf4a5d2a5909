package shim

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/trustapi"
)

// The ConfigMap written into each namespace, as Istio names it.
const (
	ConfigMapName = "istio-ca-root-cert"
	ConfigMapKey  = "root-cert.pem"
	// LabelIstioConfig is the label istiod puts on the ConfigMap.
	LabelIstioConfig = "istio.io/config"
)

// Options configure the shim. DefaultOptions gives the defaults.
type Options struct {
	// HubAddr is the hub's CA address (TLS, host:port), e.g.
	// meshfed-hub.example.com:15012. Required.
	HubAddr string
	// HubRoots verify the hub's CA serving certificate. When nil,
	// HubRootsFile is read; when both are empty, the system roots.
	HubRoots     *x509.CertPool
	HubRootsFile string
	// ServerName overrides the name checked in the hub's certificate
	// (default the host of HubAddr).
	ServerName string
	// ClusterID is this cluster's ID as the hub knows it (its remote
	// secret's key). Required.
	ClusterID string
	// TokenFunc returns the service account token sent to the hub
	// (audience istio-ca); it is called on every (re)connect. When nil,
	// TokenFile is read on every (re)connect.
	TokenFunc func(context.Context) (string, error)
	// TokenFile is a projected service account token, e.g.
	// /var/run/secrets/tokens/istio-token.
	TokenFile string
	// Client is the workload cluster's client. Required.
	Client kubernetes.Interface
	// NamespaceSelector selects the namespaces that get the ConfigMap.
	// Nil or empty: every namespace but ExcludeNamespaces.
	NamespaceSelector labels.Selector
	// ExcludeNamespaces never get the ConfigMap. Default kube-system,
	// kube-public, kube-node-lease.
	ExcludeNamespaces []string
	// Version is sent to the hub as x-meshfed-spoke-version.
	Version string
	// MinBackoff and MaxBackoff bound the reconnect delay (doubling, with
	// jitter). Default 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Workers write ConfigMaps concurrently. Default 2.
	Workers int
	// Log receives structured logs.
	Log logr.Logger
	// Metrics, when set, receives the shim's metrics.
	Metrics prometheus.Registerer
	// Clock times the reconnect backoff. Default the real clock.
	Clock clock.WithTicker
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		ExcludeNamespaces: []string{"kube-system", "kube-public", "kube-node-lease"},
		MinBackoff:        500 * time.Millisecond,
		MaxBackoff:        30 * time.Second,
		Workers:           2,
		Log:               logr.Discard(),
		Clock:             clock.RealClock{},
	}
}

func (o *Options) defaults() error {
	d := DefaultOptions()
	switch {
	case o.HubAddr == "":
		return errors.New("shim: hub address is required")
	case o.ClusterID == "":
		return errors.New("shim: cluster ID is required")
	case o.Client == nil:
		return errors.New("shim: kubernetes client is required")
	case o.TokenFunc == nil && o.TokenFile == "":
		return errors.New("shim: a token source (TokenFunc or TokenFile) is required")
	}
	if o.ExcludeNamespaces == nil {
		o.ExcludeNamespaces = d.ExcludeNamespaces
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = d.MinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(d.MaxBackoff, o.MinBackoff)
	}
	if o.Workers <= 0 {
		o.Workers = d.Workers
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.TokenFunc == nil {
		file := o.TokenFile
		o.TokenFunc = func(context.Context) (string, error) {
			b, err := os.ReadFile(file)
			if err != nil {
				return "", fmt.Errorf("shim: token: %w", err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	return nil
}

type metrics struct {
	writes    *prometheus.CounterVec
	connected prometheus.Gauge
	updates   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_spoke_root_cert_writes_total",
			Help: "Writes of the istio-ca-root-cert ConfigMap, by result (created, updated, error).",
		}, []string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_spoke_trust_bundle_connected",
			Help: "1 while the trust-bundle stream to the hub is open.",
		}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_spoke_trust_bundle_updates_total",
			Help: "Trust bundles received from the hub that differed from the previous one.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.writes, m.connected, m.updates} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("shim: metrics: %w", err)
			}
		}
	}
	return m, nil
}

// shim is one Run.
type shim struct {
	opts     Options
	m        *metrics
	queue    workqueue.TypedRateLimitingInterface[string]
	nsLister cache.Indexer
	cmLister cache.Indexer
	excluded map[string]bool

	// mu guards bundle and pem: the stream goroutine swaps them in
	// setBundle and the workers read pem in reconcile. No API call is made
	// under it.
	mu     sync.Mutex
	bundle trustapi.Bundle
	pem    []byte // nil until the first non-empty bundle
}

// Run keeps the trust bundle flowing until ctx ends. It returns an error
// only for bad options; the hub being unreachable is not an error.
func Run(ctx context.Context, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return err
	}
	creds, err := transportCredentials(opts)
	if err != nil {
		return err
	}
	s := &shim{
		opts:     opts,
		m:        m,
		excluded: map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "istio-ca-root-cert"}),
	}
	for _, ns := range opts.ExcludeNamespaces {
		s.excluded[ns] = true
	}

	nsFactory := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			if opts.NamespaceSelector != nil && !opts.NamespaceSelector.Empty() {
				lo.LabelSelector = opts.NamespaceSelector.String()
			}
		}))
	cmFactory := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
		}))
	nsInf := nsFactory.Core().V1().Namespaces().Informer()
	cmInf := cmFactory.Core().V1().ConfigMaps().Informer()
	s.nsLister, s.cmLister = nsInf.GetIndexer(), cmInf.GetIndexer()
	enqueueNS := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			s.queue.Add(ns.Name)
		}
	}
	enqueueCM := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			s.queue.Add(cm.Namespace)
		}
	}
	if _, err := nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueNS, UpdateFunc: func(_, n any) { enqueueNS(n) },
	}); err != nil {
		return err
	}
	if _, err := cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, n any) { enqueueCM(n) }, DeleteFunc: enqueueCM,
	}); err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	defer s.queue.ShutDown()
	nsFactory.Start(gctx.Done())
	cmFactory.Start(gctx.Done())
	g.Go(func() error {
		<-gctx.Done()
		s.queue.ShutDown()
		nsFactory.Shutdown()
		cmFactory.Shutdown()
		return nil
	})
	g.Go(func() error {
		if !cache.WaitForCacheSync(gctx.Done(), nsInf.HasSynced, cmInf.HasSynced) {
			return nil
		}
		opts.Log.Info("namespace and ConfigMap caches synced")
		for range opts.Workers {
			g.Go(func() error {
				for s.work(gctx) {
				}
				return nil
			})
		}
		return nil
	})
	g.Go(func() error { s.watchHub(gctx, creds); return nil })
	return g.Wait()
}

func transportCredentials(opts Options) (credentials.TransportCredentials, error) {
	roots := opts.HubRoots
	if roots == nil && opts.HubRootsFile != "" {
		b, err := os.ReadFile(opts.HubRootsFile)
		if err != nil {
			return nil, fmt.Errorf("shim: hub roots: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("shim: hub roots: no certificate in %s", opts.HubRootsFile)
		}
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: opts.ServerName}), nil
}

// watchHub keeps a Watch stream open, reconnecting with backoff.
func (s *shim) watchHub(ctx context.Context, creds credentials.TransportCredentials) {
	log := s.opts.Log.WithValues("hub", s.opts.HubAddr)
	cc, err := grpc.NewClient(s.opts.HubAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		// Only a malformed target; nothing to retry.
		log.Error(err, "cannot dial the hub; keeping the current ConfigMaps")
		<-ctx.Done()
		return
	}
	defer cc.Close()
	backoff := s.opts.MinBackoff
	for ctx.Err() == nil {
		got, err := s.stream(ctx, cc)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = s.opts.MinBackoff
		}
		log.Info("trust bundle stream ended; reconnecting", "err", errString(err), "after", backoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(wait):
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// stream runs one Watch; got reports whether a bundle arrived.
func (s *shim) stream(ctx context.Context, cc *grpc.ClientConn) (got bool, err error) {
	token, err := s.opts.TokenFunc(ctx)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	md := []string{
		trustapi.MetadataAuthorization, "Bearer " + token,
		trustapi.MetadataClusterID, s.opts.ClusterID,
		trustapi.MetadataClient, trustapi.ClientSpoke,
	}
	if s.opts.Version != "" {
		md = append(md, trustapi.MetadataSpokeVersion, s.opts.Version)
	}
	st, err := trustapi.Watch(metadata.AppendToOutgoingContext(ctx, md...), cc)
	if err != nil {
		return false, err
	}
	for {
		msg, err := st.Recv()
		if err != nil {
			s.m.connected.Set(0)
			return got, err
		}
		if !got {
			s.opts.Log.Info("watching the hub's trust bundle", "hub", s.opts.HubAddr)
		}
		got = true
		s.m.connected.Set(1)
		b, err := trustapi.Decode(msg)
		if err != nil {
			return got, err
		}
		s.setBundle(b)
	}
}

// setBundle keeps b and rewrites every namespace when it changed. An empty
// bundle is ignored: the last roots stay.
func (s *shim) setBundle(b trustapi.Bundle) {
	pem := b.PEM()
	s.mu.Lock()
	if len(pem) == 0 {
		s.mu.Unlock()
		s.opts.Log.Info("the hub sent an empty trust bundle; keeping the last one", "version", b.Version)
		return
	}
	if bytes.Equal(pem, s.pem) {
		s.mu.Unlock()
		return
	}
	s.bundle, s.pem = b, pem
	s.mu.Unlock()
	s.m.updates.Inc()
	s.opts.Log.Info("trust bundle changed", "version", b.Version, "roots", len(b.Roots))
	for _, k := range s.nsLister.ListKeys() {
		s.queue.Add(k)
	}
}

func (s *shim) currentPEM() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pem
}

func (s *shim) work(ctx context.Context) bool {
	ns, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(ns)
	if err := s.reconcile(ctx, ns); err != nil {
		if ctx.Err() == nil {
			s.opts.Log.V(1).Info("writing istio-ca-root-cert failed; retrying", "namespace", ns, "err", err.Error())
		}
		s.queue.AddRateLimited(ns)
		return true
	}
	s.queue.Forget(ns)
	return true
}

// reconcile makes istio-ca-root-cert of namespace ns hold the bundle.
func (s *shim) reconcile(ctx context.Context, ns string) error {
	pem := s.currentPEM()
	if pem == nil || s.excluded[ns] {
		return nil
	}
	obj, ok, err := s.nsLister.GetByKey(ns)
	if err != nil || !ok {
		return err // not a selected namespace (or gone)
	}
	if n := obj.(*corev1.Namespace); n.Status.Phase == corev1.NamespaceTerminating || n.DeletionTimestamp != nil {
		return nil
	}
	want := string(pem)
	cms := s.opts.Client.CoreV1().ConfigMaps(ns)
	obj, ok, err = s.cmLister.GetByKey(ns + "/" + ConfigMapName)
	if err != nil {
		return err
	}
	if !ok {
		_, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ns, Labels: map[string]string{LabelIstioConfig: "true"}},
			Data:       map[string]string{ConfigMapKey: want},
		}, metav1.CreateOptions{})
		switch {
		case err == nil:
			s.m.writes.WithLabelValues("created").Inc()
			return nil
		case apierrors.IsAlreadyExists(err):
			return err // the cache is behind; retry once it has the object
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "being terminated"):
			return nil
		}
		s.m.writes.WithLabelValues("error").Inc()
		return err
	}
	cm := obj.(*corev1.ConfigMap)
	if cm.Data[ConfigMapKey] == want && cm.Labels[LabelIstioConfig] == "true" {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Data[ConfigMapKey] = want
	cm.Labels[LabelIstioConfig] = "true"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return err // the cache is behind; retry
		}
		s.m.writes.WithLabelValues("error").Inc()
		return err
	}
	s.m.writes.WithLabelValues("updated").Inc()
	return nil
}
