// Command meshfed-hub is meshfed's external control plane: it watches the
// remote clusters named by Istio-format remote secrets and serves xDS to
// every proxy in them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/xds"
	"github.com/meshfed/meshfed/pkg/kubegates"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/version"
)

func main() {
	opts := hub.DefaultOptions()
	fs := flag.NewFlagSet("meshfed-hub", flag.ExitOnError)
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig of the config cluster; in-cluster config when empty")
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the remote secrets")
	fs.StringVar(&opts.XDSAddr, "xds-addr", opts.XDSAddr, "plaintext, unauthenticated ADS and CSDS listen address, e.g. :15010: whoever reaches it reads every proxy's configuration; off (empty) by default: proxies dial --ca-addr, authenticated")
	fs.BoolVar(&opts.XDSMTLS, "xds-mtls", opts.XDSMTLS, "the mesh-wide mode of a server port that no PeerAuthentication sets: STRICT with it, DISABLE without; clients then use mTLS (auto mTLS) to the endpoints that take it. Proxyless proxies that serve or call mTLS need certificate provider \"default\" in their bootstrap")
	fs.IntVar(&opts.XDSLimits.MaxStreams, "xds-max-streams", xds.DefaultMaxStreams, "ADS streams open at once over both xDS ports; more are refused with RESOURCE_EXHAUSTED")
	fs.Float64Var(&opts.XDSLimits.StreamRate, "xds-stream-rate", xds.DefaultStreamRate, "new ADS streams a second accepted over both xDS ports, on average")
	fs.IntVar(&opts.XDSLimits.StreamBurst, "xds-stream-burst", xds.DefaultStreamBurst, "new ADS streams accepted at once beyond --xds-stream-rate (a reconnect storm)")
	fs.BoolVar(&opts.XDSServeUnknownClusters, "xds-serve-unknown-clusters", false, "serve xDS clients whose CLUSTER_ID no remote secret names (refused with InvalidArgument by default, once the secrets are read; the config cluster's ID and an empty one are always served)")
	fs.DurationVar(&opts.XDSLimits.HandshakeTimeout, "xds-handshake-timeout", xds.DefaultHandshakeTimeout, "time a new xDS connection has for its TLS handshake and HTTP/2 preface")
	fs.StringVar(&opts.MonitoringAddr, "monitoring-addr", opts.MonitoringAddr, "HTTP address of /metrics, /healthz and /readyz (open to all), and of the /debug/ documents, the fleet console and /debug/pprof/ (behind --debug-auth)")
	fs.BoolVar(&opts.MonitoringTLS, "monitoring-tls", false, "serve the monitoring port over TLS with the CA port's certificate, asking for client certificates (needed for --debug-identities)")
	debugIdentities := fs.String("debug-identities", "", "comma-separated workload identities (spiffe://<trust domain>/ns/<ns>/sa/<sa>) whose mesh client certificate reads /debug/, the console and pprof without a token (with --monitoring-tls)")
	fs.BoolVar(&opts.DebugAuth, "debug-auth", opts.DebugAuth, "answer /debug/, the console and pprof on the monitoring port only for a Kubernetes token (Authorization: Bearer, or the console's sign-in) that the config cluster's TokenReview accepts and whose user may get fleet.meshfed.io; false is unsafe: anyone who reaches the port reads the mesh")
	replicaID := fs.String("replica-id", "", "name of this hub replica (letters, digits, '.', '-', '_'; default: the host name)")
	fs.DurationVar(&opts.ClusterSyncTimeout, "cluster-sync-timeout", opts.ClusterSyncTimeout, "how long readiness waits for remote clusters to sync; slower ones are reported unreachable")
	fs.DurationVar(&opts.ClusterProbeInterval, "cluster-probe-interval", opts.ClusterProbeInterval, "how often each remote apiserver is probed: how soon an outage is seen (and a stale-endpoints drop-after timer starts) and a return restarts the cluster's watches; the config cluster is probed as often, and its return lists the remote secrets anew at once; at most --cluster-sync-timeout")
	fs.StringVar(&opts.DomainSuffix, "domain-suffix", opts.DomainSuffix, "cluster domain of service hostnames")
	fs.StringVar(&opts.DiscoverySelector, "discovery-selector", "", "label selector of the namespaces to discover (all when empty)")
	fs.StringVar(&opts.GossipAddr, "gossip-addr", opts.GossipAddr, "memberlist bind address (TCP and UDP) for replica gossip")
	fs.StringVar(&opts.GossipAdvertiseAddr, "gossip-advertise-addr", "", "gossip address other replicas use (default: derived from --gossip-addr)")
	join := fs.String("join", "", "comma-separated gossip seeds (host:port); retried until one answers")
	fs.StringVar(&opts.GossipKeyFile, "gossip-key-file", "", "file with the gossip encryption key (16/24/32 bytes, raw or base64); gossip is plaintext without it")
	fs.StringVar(&opts.PeerAddr, "peer-addr", opts.PeerAddr, "replica-to-replica gRPC (mTLS) listen address")
	fs.StringVar(&opts.PeerAdvertiseAddr, "peer-advertise-addr", "", "peer address other replicas dial (default: derived)")
	fs.StringVar(&opts.PeerTLSCert, "peer-tls-cert", "", "PEM certificate for peer mTLS (default: issued from a CA the first replica stores in Secret meshfed-peer-ca of --namespace)")
	fs.StringVar(&opts.PeerTLSKey, "peer-tls-key", "", "PEM key for --peer-tls-cert")
	fs.StringVar(&opts.PeerTLSCA, "peer-tls-ca", "", "PEM CA bundle that peer certificates must chain to")
	fs.IntVar(&opts.WatchReplicas, "watch-replicas", opts.WatchReplicas, "how many live replicas watch each remote cluster")
	fs.StringVar(&opts.CAAddr, "ca-addr", opts.CAAddr, "TLS listen address of the workload certificate API (Istio's CreateCertificate) and of authenticated ADS and CSDS, like istiod's 15012; empty disables both")
	fs.Func("xds-san", "another DNS name or IP of the --ca-addr serving certificate: the host proxies dial as their discoveryAddress, or their ISTIOD_SAN (repeatable)", func(v string) error {
		if v = strings.TrimSpace(v); v == "" {
			return errors.New("empty name")
		}
		opts.XDSSANs = append(opts.XDSSANs, v)
		return nil
	})
	fs.Func("config-cluster-id", "cluster ID of the config cluster, which reviews the token of an xDS caller that names no cluster (istioctl); a remote cluster of that ID is asked instead (default \""+string(opts.ConfigClusterID)+"\")", func(v string) error {
		opts.ConfigClusterID = model.ClusterID(strings.TrimSpace(v))
		return nil
	})
	fs.Var(&opts.TrustDomain, "trust-domain", "SPIFFE trust domain of workload certificates")
	caAudience := fs.String("ca-audience", strings.Join(opts.CAAudiences, ","), "comma-separated token audiences the CA accepts")
	fs.DurationVar(&opts.WorkloadCertTTL, "workload-cert-ttl", opts.WorkloadCertTTL, "lifetime of a workload certificate whose request names none")
	fs.DurationVar(&opts.MaxWorkloadCertTTL, "max-workload-cert-ttl", opts.MaxWorkloadCertTTL, "longest workload certificate lifetime; longer requests are cut to it")
	fs.DurationVar(&opts.RootSpread, "root-spread", opts.RootSpread, "how long a new CA root must have been in the trust bundle before the CA signs under it; a cacerts edit that signs under a younger root is staged until then (negative: at once)")
	fs.DurationVar(&opts.RootRetireGrace, "root-retire-grace", opts.RootRetireGrace, "how long a root removed from the CA secret stays trusted after the last certificate signed under it expires (clock and reload skew between replicas)")
	caDNSNames := fs.String("ca-dns-names", "", "comma-separated DNS names of the CA's serving certificate; istiod.istio-system.svc, localhost, 127.0.0.1 and ::1 are always added (default istiod.<namespace>.svc,meshfed-hub.<namespace>.svc)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	_ = fs.Parse(os.Args[1:])
	if *replicaID == "" {
		*replicaID = hostname()
	}
	opts.ReplicaID = federation.ReplicaID(*replicaID)
	if *showVersion {
		fmt.Println("meshfed-hub", version.Get())
		return
	}
	for _, j := range strings.Split(*join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			opts.Join = append(opts.Join, j)
		}
	}
	opts.CAAudiences = splitList(*caAudience)
	opts.CADNSNames = splitList(*caDNSNames)
	opts.DebugIdentities = splitList(*debugIdentities)
	opts.Log = zap.New(zap.UseFlagOptions(&zapOpts))
	// controller-runtime and client-go log through process-wide loggers;
	// main is the one place allowed to set them.
	ctrllog.SetLogger(opts.Log)
	klog.SetLogger(opts.Log)
	// Informers that honour their context when stopped (see kubegates).
	kubegates.DisableWatchList()

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

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
