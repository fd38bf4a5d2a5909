// Command meshfed-hub is meshfed's external control plane: it watches the
// remote clusters named by Istio-format remote secrets and serves xDS to
// every proxy in them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/meshfed/meshfed/hub"
)

func main() {
	opts := hub.DefaultOptions()
	fs := flag.NewFlagSet("meshfed-hub", flag.ExitOnError)
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig of the config cluster; in-cluster config when empty")
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the remote secrets")
	fs.StringVar(&opts.XDSAddr, "xds-addr", opts.XDSAddr, "plaintext ADS listen address")
	fs.StringVar(&opts.MonitoringAddr, "monitoring-addr", opts.MonitoringAddr, "address of /metrics, /healthz, /readyz and /debug/")
	fs.StringVar(&opts.ReplicaID, "replica-id", hostname(), "name of this hub replica")
	fs.DurationVar(&opts.ClusterSyncTimeout, "cluster-sync-timeout", opts.ClusterSyncTimeout, "how long readiness waits for remote clusters to sync")
	fs.StringVar(&opts.DomainSuffix, "domain-suffix", opts.DomainSuffix, "cluster domain of service hostnames")
	fs.StringVar(&opts.DiscoverySelector, "discovery-selector", "", "label selector of the namespaces to discover (all when empty)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:])
	opts.Log = zap.New(zap.UseFlagOptions(&zapOpts))
	// controller-runtime and client-go log through process-wide loggers;
	// main is the one place allowed to set them.
	ctrllog.SetLogger(opts.Log)
	klog.SetLogger(opts.Log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := hub.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "meshfed-hub:", err)
		os.Exit(1)
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
