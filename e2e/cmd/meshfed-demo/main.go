// Command meshfed-demo runs a local fleet end to end: a config cluster and
// three remote clusters (real kube-apiservers), one meshfed hub, gRPC echo
// backends in every cluster, and proxyless gRPC clients that reach them
// through the hub. It prints how the clients' RPCs spread over the clusters
// and how traffic fails over when the local cluster's endpoints go away.
// Ctrl-C stops it at any point and cleans up.
//
// `make demo` runs it with KUBEBUILDER_ASSETS and MESHFED_HUB_BIN set.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
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
	"syscall"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
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

	d.say("Starting a config cluster and 3 remote clusters (a real kube-apiserver and etcd each)...")
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

	d.say("Deploying echo.demo (2 replicas, each a real gRPC server) in every remote cluster...")
	workloads := map[model.ClusterID]*framework.Workload{}
	for _, r := range fleet.Remotes() {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
		if err != nil {
			return err
		}
		defer w.Stop()
		workloads[r.ID] = w
		for _, rep := range w.Replicas() {
			d.detail("%-22s pod IP %-12s listening on %s", rep.Identity, rep.PodIP, rep.Addr)
		}
	}

	d.say("Writing Istio-format remote secrets into the config cluster: remote-a = {cluster-1, cluster-2}, remote-b = {cluster-3}")
	cfg := fleet.Config()
	if err := cfg.PutRemoteSecret(ctx, "remote-a", fleet.Remote("cluster-1"), fleet.Remote("cluster-2")); err != nil {
		return err
	}
	if err := cfg.PutRemoteSecret(ctx, "remote-b", fleet.Remote("cluster-3")); err != nil {
		return err
	}

	d.say("Starting two meshfed-hub replicas (encrypted gossip, mTLS peer streams) and waiting for /readyz...")
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
		ho := framework.HubOptions{ReplicaID: fmt.Sprintf("hub-%d", i), GossipKeyFile: keyFile, Join: hubs}
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
		d.detail("%s: xDS %s   monitoring %s (log %s)", h.ReplicaID(), h.XDSAddr(), h.MonitoringURL(), h.LogPath())
		hubs = append(hubs, h)
	}
	hub := hubs[1] // the clients' replica
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func() error {
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
	if err := printRegistry(ctx, d, hub); err != nil {
		return err
	}

	target := workloads["cluster-1"].Target()
	local, err := client(ctx, hub, fleet.Remote("cluster-1").ID, fleet.Remote("cluster-1").Locality, target)
	if err != nil {
		return err
	}
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

	far, err := client(ctx, hub, "edge", model.Locality{Region: "elsewhere"}, target)
	if err != nil {
		return err
	}
	defer far.Close()
	d.say("A client in cluster \"edge\", which has no echo backends, spreads over all three clusters")
	if err := spread(ctx, d, far, opts.calls, "cluster-1", "cluster-2", "cluster-3"); err != nil {
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
	if err := framework.Eventually(ctx, 30*time.Second, 20*time.Millisecond, func() error {
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

	d.say("Deleting secret remote-b: cluster-3 leaves the mesh without a hub restart")
	if err := cfg.DeleteRemoteSecret(ctx, "remote-b"); err != nil {
		return err
	}
	if err := spread(ctx, d, far, opts.calls, "cluster-1", "cluster-2"); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nDemo complete in %.1fs.\n", time.Since(d.start).Seconds())
	if opts.keep {
		fmt.Fprintf(out, "The fleet keeps running: try curl %s/debug/registryz or %s/metrics. Ctrl-C stops everything.\n",
			hub.MonitoringURL(), hub.MonitoringURL())
		<-ctx.Done()
	}
	return nil
}

func client(ctx context.Context, hub *framework.Hub, id model.ClusterID, loc model.Locality, target string) (*framework.XDSConn, error) {
	c, err := framework.NewXDSClient(ctx, framework.ClientOptions{
		HubAddr: hub.XDSAddr(), Cluster: id, Namespace: "demo", Locality: loc, Name: "client-" + string(id),
	})
	if err != nil {
		return nil, err
	}
	return c.Dial(target)
}

// spread waits until RPCs come from exactly the clusters want (the hub's
// push takes milliseconds; the client then connects), then prints a table.
func spread(ctx context.Context, d *demo, conn *framework.XDSConn, n int, want ...model.ClusterID) error {
	began := time.Now()
	var counts map[string]int
	err := framework.Eventually(ctx, 30*time.Second, 20*time.Millisecond, func() error {
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
