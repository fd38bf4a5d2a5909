// Command meshfed-agent is the in-Pod agent of the spoke's grpc-agent
// injection template: it obtains the Pod's workload certificate from the
// hub's CA, keeps it fresh in --cert-dir, writes the proxyless gRPC
// application's xDS bootstrap to --grpc-bootstrap, and answers the startup
// probe on --ready-addr. See package spoke/podagent.
//
// Usage:
//
//	meshfed-agent [agent] [flags]
//
// The Pod is described by the environment the template sets: POD_NAME,
// POD_NAMESPACE, INSTANCE_IP, SERVICE_ACCOUNT, ISTIO_META_CLUSTER_ID,
// ISTIO_META_NETWORK, TRUST_DOMAIN and GRPC_XDS_BOOTSTRAP (the default of
// --grpc-bootstrap).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/meshfed/meshfed/pkg/version"
	"github.com/meshfed/meshfed/spoke/podagent"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	opts := podagent.DefaultOptions()
	fs := flag.NewFlagSet("meshfed-agent", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meshfed-agent [agent] [flags]")
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.BootstrapPath, "grpc-bootstrap", "", "where to write the gRPC xDS bootstrap (default $GRPC_XDS_BOOTSTRAP)")
	fs.StringVar(&opts.DiscoveryAddress, "discovery-address", "", "the hub's xDS address, host:port (default --ca-address: the hub's authenticated port)")
	fs.BoolVar(&opts.XDSPlaintext, "xds-plaintext", false, "dial the hub's xDS in plaintext (its unauthenticated port) instead of mutual TLS with the workload's certificate")
	fs.StringVar(&opts.CAAddress, "ca-address", "", "the hub's CA address, host:port (TLS)")
	fs.StringVar(&opts.CertDir, "cert-dir", "", "directory of cert-chain.pem, key.pem and root-cert.pem")
	fs.StringVar(&opts.TokenFile, "token-file", opts.TokenFile, "projected service account token (audience istio-ca) sent to the CA")
	fs.StringVar(&opts.CARootsFile, "ca-roots-file", opts.CARootsFile, "PEM roots that verify the CA's certificate")
	fs.StringVar(&opts.CAServerName, "ca-server-name", "", "name checked in the CA's certificate (default the host of --ca-address)")
	fs.StringVar(&opts.ReadyAddr, "ready-addr", opts.ReadyAddr, "HTTP address of "+podagent.ReadyPath)
	fs.StringVar(&opts.LabelsFile, "pod-labels-file", opts.LabelsFile, "downward API file of the Pod's labels (no labels when absent)")
	fs.DurationVar(&opts.CertTTL, "cert-ttl", 0, "certificate lifetime asked of the CA (0: the CA's default)")
	fs.DurationVar(&opts.CertRefreshInterval, "cert-refresh-interval", opts.CertRefreshInterval, "how often the application's gRPC re-reads the certificate files (bootstrap file_watcher refresh_interval)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	_ = fs.Parse(args)
	if *showVersion {
		fmt.Println("meshfed-agent", version.Get())
		return
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "meshfed-agent: unexpected argument %q (the only subcommand is agent, first)\n", fs.Arg(0))
		fs.Usage()
		os.Exit(2)
	}

	if opts.BootstrapPath == "" {
		opts.BootstrapPath = os.Getenv("GRPC_XDS_BOOTSTRAP")
	}
	opts.PodName = os.Getenv("POD_NAME")
	opts.PodNamespace = os.Getenv("POD_NAMESPACE")
	opts.InstanceIP = os.Getenv("INSTANCE_IP")
	opts.ServiceAccount = os.Getenv("SERVICE_ACCOUNT")
	opts.ClusterID = os.Getenv("ISTIO_META_CLUSTER_ID")
	opts.Network = os.Getenv("ISTIO_META_NETWORK")
	if td := os.Getenv("TRUST_DOMAIN"); td != "" {
		if err := opts.TrustDomain.Set(td); err != nil {
			fmt.Fprintln(os.Stderr, "meshfed-agent: TRUST_DOMAIN:", err)
			os.Exit(2)
		}
	}
	opts.Log = zap.New(zap.UseFlagOptions(&zapOpts))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := podagent.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "meshfed-agent:", err)
		os.Exit(1)
	}
}
