// Command meshfed-spoke runs in each workload cluster: it serves the
// sidecar-injection and Istio-configuration validation webhooks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/meshfed/meshfed/pkg/kubegates"
	"github.com/meshfed/meshfed/pkg/version"
	"github.com/meshfed/meshfed/spoke"
)

func main() {
	opts := spoke.DefaultOptions()
	fs := flag.NewFlagSet("meshfed-spoke", flag.ExitOnError)
	fs.StringVar(&opts.ListenAddr, "listen-addr", opts.ListenAddr, "HTTPS address of /inject, /validate, /healthz, /readyz and /metrics")
	fs.StringVar(&opts.CertFile, "tls-cert-file", "", "PEM serving certificate (re-read when it changes); a self-signed development certificate is made when empty")
	fs.StringVar(&opts.KeyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	devHosts := fs.String("dev-cert-hosts", strings.Join(opts.DevCertHosts, ","), "comma-separated DNS names and IPs of the development certificate")
	fs.StringVar(&opts.DevCAFile, "dev-ca-file", "", "where to write the development certificate's CA (the webhooks' caBundle)")
	fs.StringVar(&opts.WebhookConfigs.Mutating, "injector-webhook-config", "", "MutatingWebhookConfiguration whose caBundle the spoke keeps current")
	fs.StringVar(&opts.WebhookConfigs.Validating, "validator-webhook-config", "", "ValidatingWebhookConfiguration whose caBundle the spoke keeps current")
	fs.StringVar(&opts.CABundleFile, "ca-bundle-file", "", "PEM CA of --tls-cert-file, written into the webhook configurations' caBundle")
	fs.DurationVar(&opts.CABundleInterval, "ca-bundle-interval", opts.CABundleInterval, "how often the webhook configurations' caBundle is checked and mended (0: 1m)")
	cm := fs.String("inject-configmap", opts.InjectConfigMap.String(), "namespace/name of the injection ConfigMap (templates and values)")
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster; in-cluster config when empty")
	fs.StringVar(&opts.Shim.HubAddr, "hub-ca-addr", "", "the hub's CA address (host:port, TLS) to stream the trust bundle from; the shim is off when empty")
	fs.StringVar(&opts.Shim.HubRootsFile, "hub-ca-roots", "", "PEM roots that verify the hub's CA certificate (system roots when empty)")
	fs.StringVar(&opts.Shim.ServerName, "hub-ca-server-name", "", "name checked in the hub's CA certificate (default the host of --hub-ca-addr)")
	fs.StringVar(&opts.Shim.ClusterID, "cluster-id", "", "this cluster's ID, as the hub's remote secret names it")
	fs.StringVar(&opts.Shim.TokenFile, "hub-token-file", "/var/run/secrets/tokens/istio-token", "projected service account token (audience istio-ca) sent to the hub")
	rootNS := fs.String("root-cert-namespace-selector", "", "label selector of the namespaces that get istio-ca-root-cert (all but kube-system, kube-public, kube-node-lease when empty)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println("meshfed-spoke", version.Get())
		return
	}

	ref, err := spoke.ParseConfigMapRef(*cm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshfed-spoke: --inject-configmap:", err)
		os.Exit(2)
	}
	opts.InjectConfigMap = ref
	if *rootNS != "" {
		if opts.Shim.NamespaceSelector, err = labels.Parse(*rootNS); err != nil {
			fmt.Fprintln(os.Stderr, "meshfed-spoke: --root-cert-namespace-selector:", err)
			os.Exit(2)
		}
	}
	opts.Shim.Version = version.Get().Version
	opts.DevCertHosts = nil
	for _, h := range strings.Split(*devHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opts.DevCertHosts = append(opts.DevCertHosts, h)
		}
	}
	opts.Log = zap.New(zap.UseFlagOptions(&zapOpts))
	// client-go logs through klog's process-wide logger; main is the one
	// place allowed to set it.
	klog.SetLogger(opts.Log)
	// Informers that honour their context when stopped (see kubegates).
	kubegates.DisableWatchList()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := spoke.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "meshfed-spoke:", err)
		os.Exit(1)
	}
}
