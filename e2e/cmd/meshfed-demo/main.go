// Command meshfed-demo runs a local fleet end to end: a config cluster and
// four remote clusters (real kube-apiservers), two federated meshfed hub
// replicas, xDS-enabled gRPC echo backends in three clusters, and proxyless
// gRPC clients that reach them through the hub, every call over mTLS with
// certificates from the hub's CA. It prints how the clients' RPCs spread
// over the clusters, how traffic fails over when the local cluster's
// endpoints go away or a hub replica dies, and how the CA's root is rotated
// under traffic. Ctrl-C stops it at any point and cleans up.
//
// `make demo` runs it with KUBEBUILDER_ASSETS and MESHFED_HUB_BIN set.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

type options struct {
	assets, hubBin string
	calls          int
	keep           bool
	verbose        bool
}

func main() {
	var opts options
	flag.StringVar(&opts.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory of kube-apiserver and etcd")
	flag.StringVar(&opts.hubBin, "hub", os.Getenv("MESHFED_HUB_BIN"), "meshfed-hub binary (built when empty)")
	flag.IntVar(&opts.calls, "calls", 60, "RPCs per measurement")
	flag.BoolVar(&opts.keep, "keep", false, "keep the fleet running after the demo, until Ctrl-C")
	flag.BoolVar(&opts.verbose, "v", false, "show the hub's log")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, os.Stdout); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Println("\ninterrupted; everything is stopped")
			return
		}
		fmt.Fprintln(os.Stderr, "meshfed-demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	out   io.Writer
	start time.Time
	step  int
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Fprintf(d.out, "\n[%5.1fs] %d. %s\n", time.Since(d.start).Seconds(), d.step, fmt.Sprintf(format, args...))
}

func (d *demo) detail(format string, args ...any) {
	fmt.Fprintf(d.out, "          %s\n", fmt.Sprintf(format, args...))
}

func run(ctx context.Context, opts options, out io.Writer) error {
	if opts.assets == "" {
		return errors.New("no kube-apiserver/etcd: run `make demo`, or pass -assets (the output of `bash e2e/kubeassets/build.sh --print-dir`)")
	}
	d := &demo{out: out, start: time.Now()}
	fopts := framework.FleetOptions{AssetsDir: opts.assets, HubBinary: opts.hubBin}
	if opts.hubBin == "" {
		fopts.HubBinaryFunc = func(ctx context.Context) (string, error) {
			return framework.BuildHubBinary(ctx, framework.BuildOptions{})
		}
	}
	if opts.verbose {
		fopts.LogOutput = out
	}
	for i := 1; i <= 3; i++ {
		fopts.Remotes = append(fopts.Remotes, framework.RemoteClusterOptions{
			ID:       model.ClusterID(fmt.Sprintf("cluster-%d", i)),
			Locality: model.Locality{Region: fmt.Sprintf("region-%d", i), Zone: fmt.Sprintf("zone-%d", i)},
		})
	}
	fopts.Remotes = append(fopts.Remotes, framework.RemoteClusterOptions{ID: "edge", Locality: model.Locality{Region: "elsewhere"}})

	// The Pods of the Envoy part are network namespaces on a bridge, made
	// before the fleet so that they go after the hubs listening on it.
	var podNet *framework.PodNetwork
	skipped := sidecarsSkipped()
	if skipped == "" {
		var err error
		if podNet, err = framework.NewPodNetwork(ctx, framework.PodNetworkOptions{}); err != nil {
			return fmt.Errorf("pod network for the Envoy sidecars: %w", err)
		}
		defer func() { _ = podNet.Close() }()
	}

	d.say("Starting a config cluster and 4 remote clusters (a real kube-apiserver and etcd each)...")
	fleet, err := framework.NewFleet(ctx, fopts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "\nStopping the fleet (hub, apiservers, etcds, backends)...")
		if err := fleet.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping fleet:", err)
		}
	}()
	for _, r := range fleet.Remotes() {
		d.detail("%s  %s  region=%s", r.ID, r.Host(), r.Locality.Region)
	}

	d.say("Writing Istio-format remote secrets into the config cluster: remote-a = {cluster-1, cluster-2}, remote-b = {cluster-3}, remote-edge = {edge}")
	cfg := fleet.Config()
	if err := cfg.PutRemoteSecret(ctx, "remote-a", fleet.Remote("cluster-1"), fleet.Remote("cluster-2")); err != nil {
		return err
	}
	if err := cfg.PutRemoteSecret(ctx, "remote-b", fleet.Remote("cluster-3")); err != nil {
		return err
	}
	if err := cfg.PutRemoteSecret(ctx, "remote-edge", fleet.Remote("edge")); err != nil {
		return err
	}

	d.say("Starting two meshfed-hub replicas (encrypted gossip, mTLS peer streams, workload CA, mTLS in xDS) and waiting for /readyz...")
	keyFile := filepath.Join(fleet.TempDir(), "gossip.key")
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		return err
	}
	var hubs []*framework.Hub
	for i := range 2 {
		ho := framework.HubOptions{ReplicaID: fmt.Sprintf("hub-%d", i), GossipKeyFile: keyFile, Join: hubs, Args: hubArgs}
		if podNet != nil { // where the Pods reach it
			ho.ListenHost = podNet.Gateway().String()
		}
		h, err := fleet.StartHub(ctx, ho)
		if err != nil {
			return err
		}
		readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = h.WaitReady(readyCtx)
		cancel()
		if err != nil {
			return err
		}
		d.detail("%s: xDS and CA (mutual TLS) %s   monitoring %s   console %s/ (log %s)", h.ReplicaID(), h.CAAddr(), h.MonitoringURL(), h.MonitoringURL(), h.LogPath())
		hubs = append(hubs, h)
	}
	hub := hubs[1] // the clients' replica
	if err := testutil.Poll(ctx, 30*time.Second, 50*time.Millisecond, func() error {
		fz, err := hub.Federationz(ctx)
		if err != nil {
			return err
		}
		if len(fz.Members) != 2 {
			return fmt.Errorf("%d members", len(fz.Members))
		}
		return nil
	}); err != nil {
		return err
	}
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	rootsPEM, roots, err := hub.TrustBundle(bctx)
	bcancel()
	if err != nil {
		return err
	}
	certs := &framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots, TTL: certTTL}
	d.detail("the CA signs with the root it created in istio-ca-secret; leaves live %v and are renewed at half-life", certTTL)

	d.say("Deploying echo.demo (2 replicas, each an xDS-enabled gRPC server with its own certificate agent) in cluster-1..3, Pods labelled version=v1..v3...")
	workloads := map[model.ClusterID]*framework.Workload{}
	for _, r := range fleet.Remotes()[:3] {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2,
			PodLabels: map[string]string{"version": "v" + strings.TrimPrefix(string(r.ID), "cluster-")},
			XDS:       &framework.XDSWorkloadOptions{HubAddr: hub.CAAddr(), Certs: certs}})
		if err != nil {
			return err
		}
		defer w.Stop()
		workloads[r.ID] = w
	}
	for _, r := range fleet.Remotes()[:3] {
		w := workloads[r.ID]
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := w.WaitServing(wctx)
		cancel()
		if err != nil {
			return err
		}
		for _, rep := range w.Replicas() {
			d.detail("%-22s pod IP %-12s listening on %s  spiffe://cluster.local/ns/demo/sa/echo", rep.Identity, rep.PodIP, rep.Addr)
		}
	}
	if err := printRegistry(ctx, d, hub); err != nil {
		return err
	}

	target := workloads["cluster-1"].Target()
	local, localAgent, err := client(ctx, fleet, hub, certs, fleet.Remote("cluster-1"), target)
	if err != nil {
		return err
	}
	defer localAgent.Stop()
	defer local.Close()
	d.say("A proxyless gRPC client in cluster-1 dials %s: its own cluster first", target)
	if err := spread(ctx, d, local, opts.calls, "cluster-1"); err != nil {
		return err
	}

	d.say("cluster-1's echo endpoints turn not ready (the servers keep running): traffic fails over")
	if err := workloads["cluster-1"].SetReady(ctx, false); err != nil {
		return err
	}
	if err := spread(ctx, d, local, opts.calls, "cluster-2", "cluster-3"); err != nil {
		return err
	}

	d.say("cluster-1's endpoints are ready again: traffic returns home")
	if err := workloads["cluster-1"].SetReady(ctx, true); err != nil {
		return err
	}
	if err := spread(ctx, d, local, opts.calls, "cluster-1"); err != nil {
		return err
	}

	far, farAgent, err := client(ctx, fleet, hub, certs, fleet.Remote("edge"), target)
	if err != nil {
		return err
	}
	defer farAgent.Stop()
	defer far.Close()
	d.say("A client in cluster \"edge\", which has no echo backends, spreads over all three clusters")
	if err := spread(ctx, d, far, opts.calls, "cluster-1", "cluster-2", "cluster-3"); err != nil {
		return err
	}

	if err := istioSplit(ctx, d, cfg, hub, far, opts.calls); err != nil {
		return err
	}

	d.say("SIGKILL hub-0: hub-1 takes over the clusters hub-0 watched; the clients (on hub-1) keep their endpoints")
	before, err := hub.Federationz(ctx)
	if err != nil {
		return err
	}
	if err := hubs[0].Kill(); err != nil {
		return err
	}
	if err := testutil.Poll(ctx, 30*time.Second, 20*time.Millisecond, func() error {
		fz, err := hub.Federationz(ctx)
		if err != nil {
			return err
		}
		for _, c := range fz.Clusters {
			if c.Version.Owner != hub.ReplicaID() {
				return fmt.Errorf("%s still from %s", c.ID, c.Version.Owner)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for _, c := range before.Clusters {
		d.detail("%-10s was watched by %s, now by %s", c.ID, strings.Join(c.Owners, ","), hub.ReplicaID())
	}
	if err := spread(ctx, d, far, opts.calls, "cluster-1", "cluster-2", "cluster-3"); err != nil {
		return err
	}

	d.say("Rotating the CA's root in one edit of cacerts (new CA, new and old roots) while the edge client calls without pause")
	dirs := []string{localAgent.Dir(), farAgent.Dir()}
	for _, w := range workloads {
		for _, rep := range w.Replicas() {
			dirs = append(dirs, rep.CertDir)
		}
	}
	if err := rotate(ctx, d, cfg, hub, far, dirs, rootsPEM); err != nil {
		return err
	}

	d.say("Deleting secret remote-b: cluster-3 leaves the mesh without a hub restart")
	if err := cfg.DeleteRemoteSecret(ctx, "remote-b"); err != nil {
		return err
	}
	if err := spread(ctx, d, far, opts.calls, "cluster-1", "cluster-2"); err != nil {
		return err
	}

	if podNet == nil {
		d.say("Skipping the Envoy sidecars and the ingress gateway: %s; the proxyless part above ran in full", skipped)
	} else {
		stopPods, err := envoyDemo(ctx, d, fleet, podNet, hub)
		defer stopPods()
		if err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "\nDemo complete in %.1fs.\n", time.Since(d.start).Seconds())
	if opts.keep {
		fmt.Fprintf(out, "The fleet keeps running: open the fleet console at %s/ (any hub's monitoring URL above works), or try curl %s/debug/registryz or %s/metrics. Ctrl-C stops everything.\n",
			hub.MonitoringURL(), hub.MonitoringURL(), hub.MonitoringURL())
		<-ctx.Done()
	}
	return nil
}

// Settings of the demo's CA: short leaves, so that a root rotation runs its
// course in seconds.
const (
	certTTL    = 20 * time.Second
	rootSpread = 3 * time.Second
)

var hubArgs = []string{"--xds-mtls",
	"--workload-cert-ttl=" + certTTL.String(), "--max-workload-cert-ttl=" + certTTL.String(),
	"--root-spread=" + rootSpread.String(), "--root-retire-grace=2s"}

// client starts a certificate agent for service account demo/client of
// cluster r and a proxyless gRPC client in r that uses its files, and dials
// target; it returns the agent too.
func client(ctx context.Context, fleet *framework.Fleet, hub *framework.Hub, certs *framework.CertOptions, r *framework.RemoteCluster, target string) (*framework.XDSConn, *framework.CertAgent, error) {
	if err := r.EnsureServiceAccount(ctx, "demo", "client"); err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(fleet.TempDir(), "certs-client-"+string(r.ID))
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ag, err := r.StartCertAgent(actx, "demo", "client", dir, *certs)
	if err != nil {
		return nil, nil, err
	}
	c, err := framework.NewXDSClient(ctx, framework.ClientOptions{
		HubAddr: hub.CAAddr(), ServerTLS: true, CertDir: dir,
		Cluster: r.ID, Namespace: "demo", Locality: r.Locality, Name: "client-" + string(r.ID),
	})
	if err != nil {
		return nil, nil, err
	}
	conn, err := c.Dial(target)
	if err != nil {
		ag.Stop()
		return nil, nil, err
	}
	return conn, ag, nil
}

// rotate replaces the CA's root in one edit of cacerts, then drops the old
// root, while conn is called without pause, and reports what happened.
func rotate(ctx context.Context, d *demo, cfg *framework.ConfigCluster, hub *framework.Hub, conn *framework.XDSConn, dirs []string, oldRootsPEM []byte) error {
	newRoot, err := pki.NewCA("meshfed demo root 2", 365*24*time.Hour, time.Now())
	if err != nil {
		return err
	}
	keyPEM, err := newRoot.KeyPEM()
	if err != nil {
		return err
	}
	var ok, failed atomic.Int64
	tctx, stopTraffic := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tctx.Err() == nil {
			cctx, cancel := context.WithTimeout(tctx, 5*time.Second)
			_, err := conn.Call(cctx)
			cancel()
			switch {
			case err == nil:
				ok.Add(1)
			case tctx.Err() == nil:
				failed.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { stopTraffic(); <-done }()
	start := time.Now()
	issuedBy := func(cn string) error {
		for _, dir := range dirs {
			b, err := os.ReadFile(filepath.Join(dir, agent.CertChainFile))
			if err != nil {
				return err
			}
			block, _ := pem.Decode(b)
			if block == nil {
				return fmt.Errorf("%s: no certificate", dir)
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return err
			}
			if leaf.Issuer.CommonName != cn {
				return fmt.Errorf("a leaf is still issued by %q", leaf.Issuer.CommonName)
			}
		}
		return nil
	}
	if err := cfg.PutCACertsPEM(ctx, newRoot.CertPEM, keyPEM, append(bytes.Clone(newRoot.CertPEM), oldRootsPEM...)); err != nil {
		return err
	}
	if err := testutil.Poll(ctx, time.Minute, 50*time.Millisecond, func() error { return issuedBy(newRoot.Cert.Subject.CommonName) }); err != nil {
		return err
	}
	d.detail("after %.1fs every workload and client holds a leaf of the new root (the hub staged the new CA for %v while its root spread)",
		time.Since(start).Seconds(), rootSpread)
	if err := cfg.PutCACertsPEM(ctx, newRoot.CertPEM, keyPEM, newRoot.CertPEM); err != nil {
		return err
	}
	var retiring string
	err = testutil.Poll(ctx, 2*time.Minute, 50*time.Millisecond, func() error {
		tz, err := hub.Trustz(ctx)
		if err != nil {
			return err
		}
		for _, r := range tz.Roots {
			if r.RetireAt != "" {
				retiring = r.RetireAt
			}
		}
		if len(tz.Roots) != 1 || !tz.Has(ca.Fingerprint(newRoot.Cert)) {
			return fmt.Errorf("%d roots", len(tz.Roots))
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.detail("after %.1fs the old root left the trust bundle (it retired at %s, once its last leaf had expired)",
		time.Since(start).Seconds(), retiring)
	stopTraffic()
	<-done
	d.detail("%d calls answered during the rotation, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d calls failed during the root rotation", failed.Load())
	}
	return nil
}

// spread waits until RPCs come from exactly the clusters want (the hub's
// push takes milliseconds; the client then connects), then prints a table.
func spread(ctx context.Context, d *demo, conn *framework.XDSConn, n int, want ...model.ClusterID) error {
	began := time.Now()
	var counts map[string]int
	err := testutil.Poll(ctx, 30*time.Second, 20*time.Millisecond, func() error {
		c, err := conn.Spread(ctx, n)
		if err != nil {
			return err
		}
		got := slices.Sorted(maps.Keys(framework.ByCluster(c)))
		if !slices.Equal(got, want) {
			return fmt.Errorf("answers from %v, waiting for %v", got, want)
		}
		counts = c
		return nil
	})
	if err != nil {
		return err
	}
	d.detail("%d RPCs, as seen %s after the change:", n, time.Since(began).Round(time.Millisecond))
	byCluster := framework.ByCluster(counts)
	for _, c := range slices.Sorted(maps.Keys(byCluster)) {
		var pods []string
		for _, id := range slices.Sorted(maps.Keys(counts)) {
			if strings.HasPrefix(id, string(c)+"/") {
				pods = append(pods, fmt.Sprintf("%s=%d", strings.TrimPrefix(id, string(c)+"/"), counts[id]))
			}
		}
		d.detail("  %-10s %3d  %s  (%s)", c, byCluster[c], strings.Repeat("#", byCluster[c]*40/n), strings.Join(pods, " "))
	}
	return nil
}

// The demo's Istio config: echo's subsets by Pod label, and a split of
// its traffic between two of them.
const (
	echoSubsets = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`
	echoSplit = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: demo}
spec:
  hosts: [echo]
  http:
  - route:
    - {destination: {host: echo, subset: v1}, weight: 80}
    - {destination: {host: echo, subset: v2}, weight: 20}
`
)

// istioSplit applies a DestinationRule and a VirtualService that split
// echo 80/20 between v1 (cluster-1) and v2 (cluster-2), shows the split
// and the hub's /debug/configz, and removes them again.
func istioSplit(ctx context.Context, d *demo, cfg *framework.ConfigCluster, hub *framework.Hub, conn *framework.XDSConn, calls int) error {
	d.say("A DestinationRule (subsets v1, v2 by Pod label) and a VirtualService (80/20) in the config cluster: the edge client's calls split between cluster-1 and cluster-2")
	for _, doc := range []string{echoSubsets, echoSplit} {
		if err := cfg.ApplyIstio(ctx, doc); err != nil {
			return err
		}
	}
	if err := spread(ctx, d, conn, calls, "cluster-1", "cluster-2"); err != nil {
		return err
	}
	cz, err := hub.Configz(ctx)
	if err != nil {
		return err
	}
	for _, o := range cz.Objects {
		d.detail("/debug/configz: %s %s/%s generation %d %s", o.Kind, o.Namespace, o.Name, o.Generation, o.State)
	}

	d.say("Deleting them: the default spread over all three clusters comes back")
	for _, kind := range []string{"VirtualService", "DestinationRule"} {
		if err := cfg.DeleteIstio(ctx, kind, "demo", "echo"); err != nil {
			return err
		}
	}
	return spread(ctx, d, conn, calls, "cluster-1", "cluster-2", "cluster-3")
}

func printRegistry(ctx context.Context, d *demo, hub *framework.Hub) error {
	rz, err := hub.Registryz(ctx)
	if err != nil {
		return err
	}
	fz, err := hub.Federationz(ctx)
	if err != nil {
		return err
	}
	for _, c := range rz.Clusters {
		d.detail("cluster %-10s secret %-22s watched by %-6s services=%d endpoints=%d (on %s: %s)",
			c.ID, c.Secret, strings.Join(fz.Owners(c.ID), ","), c.Services, c.Endpoints, hub.ReplicaID(), c.State)
	}
	return nil
}
