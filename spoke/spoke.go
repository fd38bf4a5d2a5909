package spoke

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/version"
	"github.com/meshfed/meshfed/spoke/inject"
	"github.com/meshfed/meshfed/spoke/shim"
	"github.com/meshfed/meshfed/spoke/validate"
	"github.com/meshfed/meshfed/spoke/webhook"
)

// Paths served.
const (
	PathInject   = "/inject"
	PathValidate = "/validate"
	PathHealthz  = "/healthz"
	PathReadyz   = "/readyz"
	PathMetrics  = "/metrics"
)

// ConfigMapRef names a ConfigMap.
type ConfigMapRef struct {
	Namespace, Name string
}

// String returns "namespace/name".
func (r ConfigMapRef) String() string { return r.Namespace + "/" + r.Name }

// ParseConfigMapRef parses "namespace/name".
func ParseConfigMapRef(s string) (ConfigMapRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return ConfigMapRef{}, fmt.Errorf("spoke: ConfigMap %q: want namespace/name", s)
	}
	return ConfigMapRef{Namespace: ns, Name: name}, nil
}

// Options configure the spoke. DefaultOptions gives the defaults.
type Options struct {
	// ListenAddr is where the webhooks (/inject, /validate), /healthz,
	// /readyz and /metrics are served, all over HTTPS.
	ListenAddr string
	// CertFile and KeyFile are the PEM serving certificate and key. They
	// are read again when they change, so a rotated Secret takes effect
	// without a restart. When both are empty, a self-signed development
	// certificate is made at start for DevCertHosts.
	CertFile, KeyFile string
	// DevCertHosts are the DNS names and IP addresses of a development
	// certificate, e.g. the webhook Service's
	// meshfed-spoke.istio-system.svc.
	DevCertHosts []string
	// DevCAFile, when set and a development certificate is made, receives
	// the PEM of its CA: the caBundle of the webhook configurations.
	DevCAFile string
	// InjectConfigMap holds the injection templates and values; it is
	// watched, and the last configuration that parsed stays in force.
	InjectConfigMap ConfigMapRef
	// Kubeconfig of the workload cluster; empty means in-cluster config.
	Kubeconfig string
	// RESTConfig, when set, is used instead of Kubeconfig.
	RESTConfig *rest.Config
	// Log receives structured logs.
	Log logr.Logger
	// Metrics receives the spoke's metrics and is served on /metrics. Nil
	// means a new registry with the Go and process collectors. A caller
	// that wants to see every collector (the metrics reference of the docs
	// is generated so) passes one that records them.
	Metrics MetricsRegistry
	// Clock dates the development certificate and times the caBundle
	// checks; the shim's backoff too, unless Shim.Clock is set. Default the
	// real clock.
	Clock clock.WithTicker
	// WebhookConfigs are the spoke's own webhook configurations; their
	// caBundle is kept equal to the serving certificate's CA: the
	// development CA, or CABundleFile. Empty names are skipped.
	WebhookConfigs WebhookConfigs
	// CABundleFile is the PEM CA of CertFile (e.g. ca.crt of a
	// cert-manager Secret), read again at each check.
	CABundleFile string
	// CABundleInterval is how often the caBundles are checked. Default 1m.
	CABundleInterval time.Duration
	// Shim brings the hub's trust bundle into istio-ca-root-cert of each
	// namespace; it runs when Shim.HubAddr is set. Client, Log and Metrics
	// are filled in by Run, and Clock when it is nil.
	Shim shim.Options
}

// MetricsRegistry registers collectors and gathers them, as a
// prometheus.Registry does.
type MetricsRegistry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// DefaultOptions returns the spoke's defaults, Istio's where Istio has one.
func DefaultOptions() Options {
	return Options{
		// istiod's webhook port, so firewall rules written for Istio
		// (GKE private clusters, for one) carry over.
		ListenAddr:      ":15017",
		DevCertHosts:    []string{"localhost", "127.0.0.1", "::1"},
		InjectConfigMap: ConfigMapRef{Namespace: "istio-system", Name: "istio-sidecar-injector"},
		Log:             logr.Discard(),
		Clock:           clock.RealClock{},
		Shim:            shim.DefaultOptions(),
	}
}

// shutdownTimeout bounds the graceful stop of the HTTPS server: the
// apiserver's webhook timeout is 10 s at most by default.
const shutdownTimeout = 10 * time.Second

// Run serves the spoke until ctx ends.
//
// Parts, each an errgroup member: the injection ConfigMap watcher, the
// namespace cache, the HTTPS server, the caBundle keeper (when the
// serving certificate's CA is known and WebhookConfigs names a
// configuration) and the config-cluster shim (when Shim.HubAddr is set).
// Only the shim talks to the hub, and it stays off the admission path,
// which answers from memory: Pods keep being injected and configuration
// validated while the hub is unreachable.
func Run(ctx context.Context, opts Options) error {
	if err := opts.validate(); err != nil {
		return err
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	cfg, err := restConfig(opts)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("spoke: kubernetes client: %w", err)
	}
	reg := opts.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if err := reg.Register(version.NewCollector()); err != nil {
		return fmt.Errorf("spoke: metrics: %w", err)
	}
	certs, caFunc, err := servingCert(opts)
	if err != nil {
		return err
	}
	log := opts.Log

	var store inject.Store
	watcher := inject.NewWatcher(inject.WatcherOptions{
		Client: client, Namespace: opts.InjectConfigMap.Namespace, Name: opts.InjectConfigMap.Name,
		Store: &store, Metrics: reg, Log: log.WithName("inject-config"),
	})
	namespaces := inject.NewNamespaceCache(client)
	metrics := webhook.NewMetrics(reg)
	injector := inject.New(inject.Options{Config: &store, Namespaces: namespaces, Log: log.WithName("inject")})
	validator := validate.NewValidator(log.WithName("validate"))

	mux := http.NewServeMux()
	mux.Handle(PathInject, webhook.NewServer("inject", injector, metrics, opts.Clock, log.WithName("webhook")))
	mux.Handle(PathValidate, webhook.NewServer("validate", validator, metrics, opts.Clock, log.WithName("webhook")))
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(&store, namespaces, opts.InjectConfigMap); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	lis, err := net.Listen("tcp", opts.ListenAddr)
	if err != nil {
		return fmt.Errorf("spoke: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
		ErrorLog:          stdlog.New(logWriter{log.WithName("https")}, "", 0),
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return watcher.Run(gctx) })
	g.Go(func() error { return namespaces.Run(gctx) })
	if caFunc != nil && (opts.WebhookConfigs.Mutating != "" || opts.WebhookConfigs.Validating != "") {
		interval := opts.CABundleInterval
		if interval <= 0 {
			interval = time.Minute
		}
		keeper := newCABundleKeeper(client, opts.WebhookConfigs, caFunc, interval, opts.Clock, log.WithName("cabundle"), reg)
		g.Go(func() error { return keeper.Run(gctx) })
	}
	if opts.Shim.HubAddr != "" {
		so := opts.Shim
		so.Client, so.Log, so.Metrics = client, log.WithName("shim"), reg
		if so.Clock == nil {
			so.Clock = opts.Clock
		}
		g.Go(func() error { return shim.Run(gctx, so) })
	}
	g.Go(func() error {
		log.Info("serving webhooks", "addr", lis.Addr().String(), "injectConfigMap", opts.InjectConfigMap.String())
		if err := srv.ServeTLS(lis, "", ""); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("spoke: serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(gctx), shutdownTimeout)
		defer cancel()
		return srv.Shutdown(shutCtx)
	})
	return g.Wait()
}

func (o *Options) validate() error {
	switch {
	case o.ListenAddr == "":
		return errors.New("spoke: listen address is required")
	case o.InjectConfigMap.Namespace == "" || o.InjectConfigMap.Name == "":
		return errors.New("spoke: injection ConfigMap namespace and name are required")
	case (o.CertFile == "") != (o.KeyFile == ""):
		return errors.New("spoke: serving certificate and key go together: set both or neither")
	}
	return nil
}

func restConfig(opts Options) (*rest.Config, error) {
	switch {
	case opts.RESTConfig != nil:
		return rest.CopyConfig(opts.RESTConfig), nil
	case opts.Kubeconfig != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("spoke: kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("spoke: in-cluster config (pass --kubeconfig outside a cluster): %w", err)
	}
	return cfg, nil
}

// servingCert loads the serving certificate, or makes a development one,
// and returns where the caBundle of the webhook configurations comes from
// (nil when unknown: a given certificate without CABundleFile).
func servingCert(opts Options) (certSource, func() ([]byte, error), error) {
	if opts.CertFile != "" {
		var ca func() ([]byte, error)
		if opts.CABundleFile != "" {
			ca = fileCA(opts.CABundleFile)
		}
		src, err := newFileCert(opts.CertFile, opts.KeyFile, opts.Log.WithName("tls"))
		return src, ca, err
	}
	cert, caPEM, err := devCert(opts.DevCertHosts, opts.Clock.Now())
	if err != nil {
		return nil, nil, err
	}
	opts.Log.Info("no serving certificate given: using a self-signed development certificate",
		"hosts", opts.DevCertHosts, "caFile", opts.DevCAFile)
	if opts.DevCAFile != "" {
		if err := os.WriteFile(opts.DevCAFile, caPEM, 0o644); err != nil {
			return nil, nil, fmt.Errorf("spoke: writing development CA: %w", err)
		}
	}
	return staticCert{cert}, func() ([]byte, error) { return caPEM, nil }, nil
}

// notReady says why the spoke cannot answer yet, or "".
func notReady(store *inject.Store, ns *inject.NamespaceCache, cm ConfigMapRef) string {
	var why []string
	if store.Current() == nil {
		why = append(why, "no injection configuration loaded from ConfigMap "+cm.String())
	}
	if !ns.Synced() {
		why = append(why, "namespace cache not synced")
	}
	return strings.Join(why, "; ")
}

// logWriter turns the HTTP server's error log (TLS handshake failures of
// probing clients, mostly) into structured debug logs.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
