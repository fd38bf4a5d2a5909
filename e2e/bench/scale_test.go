package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// The envelope's size. `make bench` runs the defaults (a small fleet);
// `make bench-scale` passes the full one after -args.
var (
	scaleClusters  = flag.Int("scale.clusters", 2, "BenchmarkScale: remote clusters (one kube-apiserver each)")
	scaleServices  = flag.Int("scale.services", 200, "BenchmarkScale: services per cluster, half local to it, half in every cluster")
	scaleEndpoints = flag.Int("scale.endpoints", 20, "BenchmarkScale: endpoints (Pods) per service and cluster")
	scaleClients   = flag.Int("scale.clients", 200, "BenchmarkScale: ADS clients (distinct proxies, SotW and Delta alternating)")
	scaleChanges   = flag.Int("scale.changes", 50, "BenchmarkScale: EndpointSlice changes measured")
	scaleReplicas  = flag.String("scale.replicas", "1,3", "BenchmarkScale: hub replica counts to run, comma-separated")
	scaleBaseline  = flag.String("scale.baseline-hub", "", "BenchmarkScale: another meshfed-hub binary to run side by side (e.g. the last release)")
	scaleIstiod    = flag.String("scale.istiod", "", "BenchmarkScale: Istio's pilot-discovery binary to run side by side (make istiod)")
	scaleOut       = flag.String("scale.out", "", "BenchmarkScale: directory for scale.json and scale.svg (default: none written)")
	scaleSubscribe = flag.String("scale.subscribe", "few", "BenchmarkScale: what each client subscribes to: few (eleven services, as a proxyless gRPC client) or all (every service, as an Envoy sidecar without a Sidecar scope)")
	scalePods      = flag.Bool("scale.pods", true, "BenchmarkScale: endpoints are Pods; false: the EndpointSlices name no Pod (as for VMs), and no Pod is made")
	scaleIdle      = flag.Duration("scale.idle", 10*time.Second, "BenchmarkScale: how long the control plane's idle CPU is measured with every client connected, once it has settled after the changes")
	scaleProfiles  = flag.Bool("scale.profiles", false, "BenchmarkScale: save the first replica's heap profiles after sync and with the clients, and a CPU profile of the changes, into -scale.out")
)

// Bounds for a hung run; not performance claims.
const (
	scaleLoadBudget   = 60 * time.Minute
	scaleSyncTimeout  = 20 * time.Minute
	scaleChangeBudget = 2 * time.Minute
	scaleWorkers      = 4 // concurrent writers per cluster while loading
	scalePort         = 8080
	scaleShared       = "shared"
	scaleRegions      = 4
)

// scaleConfig is the fleet of one BenchmarkScale run.
type scaleConfig struct {
	clusters, services, endpoints, clients, changes int
	// subscribeAll: every client subscribes to every service's
	// assignment, as an Envoy sidecar does (-scale.subscribe=all).
	subscribeAll bool
	// noPods: the EndpointSlices name no Pod (-scale.pods=false).
	noPods bool
	// idle is how long idle CPU is measured (-scale.idle).
	idle time.Duration
}

func (c scaleConfig) local() int  { return c.services / 2 }
func (c scaleConfig) shared() int { return c.services - c.services/2 }

// totalEndpoints is every endpoint of every cluster.
func (c scaleConfig) totalEndpoints() int { return c.clusters * c.services * c.endpoints }

func localNamespace(cluster int) string { return fmt.Sprintf("local-%d", cluster+1) }
func localService(k int) string         { return fmt.Sprintf("svc-%03d", k) }
func sharedService(k int) string        { return fmt.Sprintf("shared-%03d", k) }

func scaleEDSName(name, ns string) string {
	return xdsgen.ClusterName(model.ServiceHostname(name, ns, ""), scalePort)
}

// allNames is the EDS name of every hostname of the fleet.
func (c scaleConfig) allNames() []string {
	var out []string
	for i := range c.clusters {
		for k := range c.local() {
			out = append(out, scaleEDSName(localService(k), localNamespace(i)))
		}
	}
	for k := range c.shared() {
		out = append(out, scaleEDSName(sharedService(k), scaleShared))
	}
	return out
}

// probeName is the service every client watches and every measured change
// touches: the first local service of the first cluster.
func (c scaleConfig) probeName() string { return scaleEDSName(localService(0), localNamespace(0)) }

// clientNames is what client j subscribes to: every service under
// subscribeAll, else the probe, four services of its own cluster, four
// shared ones and two of another cluster, spread deterministically.
func (c scaleConfig) clientNames(j int) []string {
	if c.subscribeAll {
		return c.allNames()
	}
	own := j % c.clusters
	other := (own + 1 + j/c.clusters) % c.clusters
	names := []string{c.probeName()}
	pick := func(n, seed, mod int) []int {
		var out []int
		for i := range n {
			out = append(out, (seed*7+i*13)%mod)
		}
		return out
	}
	for _, k := range pick(4, j, c.local()) {
		names = append(names, scaleEDSName(localService(k), localNamespace(own)))
	}
	for _, k := range pick(4, j+3, c.shared()) {
		names = append(names, scaleEDSName(sharedService(k), scaleShared))
	}
	for _, k := range pick(2, j+5, c.local()) {
		names = append(names, scaleEDSName(localService(k), localNamespace(other)))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// scaleRemotes spreads the clusters over scaleRegions regions, a zone each.
func scaleRemotes(n int) []framework.RemoteClusterOptions {
	out := make([]framework.RemoteClusterOptions, n)
	for i := range out {
		out[i] = framework.RemoteClusterOptions{
			ID:       model.ClusterID(fmt.Sprintf("cluster-%d", i+1)),
			Locality: model.Locality{Region: fmt.Sprintf("r%d", i%scaleRegions+1), Zone: fmt.Sprintf("z%d", i+1)},
		}
	}
	return out
}

// BenchmarkScale measures the envelope of a fleet: see the package
// documentation.
func BenchmarkScale(b *testing.B) {
	cfg := scaleConfig{
		clusters: *scaleClusters, services: *scaleServices, endpoints: *scaleEndpoints,
		clients: *scaleClients, changes: *scaleChanges, noPods: !*scalePods, idle: *scaleIdle,
	}
	switch *scaleSubscribe {
	case "few":
	case "all":
		cfg.subscribeAll = true
	default:
		b.Fatalf("scale: bad -scale.subscribe %q: few or all", *scaleSubscribe)
	}
	if cfg.services < 2 || cfg.endpoints < 2 || cfg.clusters < 1 || cfg.clients < 1 {
		b.Fatalf("scale: bad size %+v", cfg)
	}
	var replicas []int
	for _, s := range strings.Split(*scaleReplicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("scale: bad -scale.replicas %q", *scaleReplicas)
		}
		replicas = append(replicas, n)
	}
	f := framework.NewTestFleet(b, framework.FleetOptions{
		Remotes:      scaleRemotes(cfg.clusters),
		EtcdFlags:    map[string]string{"unsafe-no-fsync": "true"},
		StartTimeout: 10 * time.Minute,
		// Room for the services' ClusterIPs.
		APIServerFlags: map[string]string{"service-cluster-ip-range": "10.0.0.0/16"},
	})
	ctx, cancel := context.WithTimeout(b.Context(), scaleLoadBudget)
	defer cancel()
	start := time.Now()
	if err := f.Config().EnsureNamespace(ctx, framework.RemoteSecretNamespace); err != nil {
		b.Fatal(err)
	}
	if err := loadScaleFleet(ctx, f, cfg); err != nil {
		b.Fatal(err)
	}
	b.Logf("fleet: %d clusters, %d services and %d endpoints (Pods) each, %d endpoints in all; loaded in %s",
		cfg.clusters, cfg.services, cfg.services*cfg.endpoints, cfg.totalEndpoints(), time.Since(start).Round(time.Second))

	var results []ScaleResult
	run := func(name string, cp func(*testing.B) controlPlane) {
		b.Run(name, func(b *testing.B) {
			var r ScaleResult
			for b.Loop() {
				r = runScale(b, f, cfg, cp(b), strings.ReplaceAll(name, "/", "-"))
			}
			r.Name = name
			reportScale(b, r)
			results = append(results, r)
			// Written after every control plane, so that a long run
			// interrupted later keeps what it measured.
			if *scaleOut != "" {
				if err := writeScaleOutputs(*scaleOut, cfg, results, scaleTable(cfg, results)); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, n := range replicas {
		run(fmt.Sprintf("meshfed/replicas=%d", n), func(b *testing.B) controlPlane { return startMeshfed(b, f, n, "") })
	}
	if *scaleBaseline != "" {
		run("baseline/replicas=1", func(b *testing.B) controlPlane { return startMeshfed(b, f, 1, *scaleBaseline) })
	}
	if *scaleIstiod != "" {
		run("istiod", func(b *testing.B) controlPlane { return startIstiod(b, f, *scaleIstiod) })
	}
	table := scaleTable(cfg, results)
	// On stdout as well: a parent benchmark's log is not printed when its
	// sub-benchmarks pass.
	fmt.Println(table)
	if *scaleOut != "" {
		if err := writeScaleOutputs(*scaleOut, cfg, results, table); err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", filepath.Join(*scaleOut, "scale.{json,svg,txt}"))
	}
}

func reportScale(b *testing.B, r ScaleResult) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(r.SyncS, "sync-s")
	b.ReportMetric(r.SyncCPUS, "sync-cpu-s")
	b.ReportMetric(r.HeapBPerEndpoint, "heap-B/endpoint")
	b.ReportMetric(r.RSSBPerEndpoint, "rss-B/endpoint")
	b.ReportMetric(r.ChangeP50Ms, "change-p50-ms")
	b.ReportMetric(r.ChangeP99Ms, "change-p99-ms")
	b.ReportMetric(r.CPUPer100Changes, "cpu-s/100changes")
	b.ReportMetric(r.ReadsPerUpdate+r.WritesPerUpdate, "syscalls/update")
	b.ReportMetric(r.StormS, "storm-s")
	b.ReportMetric(r.StormPeakHeapRatio, "storm-peak-heap-x")
}

// ---------------------------------------------------------------------------
// Loading the fleet

// loadScaleFleet writes every cluster's Node, namespaces, service accounts,
// Pods (with their status), Services and EndpointSlices, the clusters in
// parallel.
func loadScaleFleet(ctx context.Context, f *framework.Fleet, cfg scaleConfig) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, r := range f.Remotes() {
		g.Go(func() error { return loadScaleCluster(gctx, r, i, cfg) })
	}
	return g.Wait()
}

// scaleService is one Service of one cluster and its Pods' addresses.
type scaleService struct {
	ns, name string
	first    int // index of its first endpoint in the cluster
}

func scaleServicesOf(cluster int, cfg scaleConfig) []scaleService {
	var out []scaleService
	for k := range cfg.local() {
		out = append(out, scaleService{ns: localNamespace(cluster), name: localService(k)})
	}
	for k := range cfg.shared() {
		out = append(out, scaleService{ns: scaleShared, name: sharedService(k)})
	}
	for i := range out {
		out[i].first = i * cfg.endpoints
	}
	return out
}

// scalePodIP is endpoint k of cluster i: 10.(100+i).A.B, never loopback
// and outside the framework's own ranges. Nothing dials it.
func scalePodIP(cluster, k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(100 + cluster), byte(k / 254), byte(k%254 + 1)})
}

func loadScaleCluster(ctx context.Context, r *framework.RemoteCluster, i int, cfg scaleConfig) error {
	if err := ensureNode(ctx, r); err != nil {
		return err
	}
	c := r.Client()
	svcs := scaleServicesOf(i, cfg)
	for _, ns := range []string{localNamespace(i), scaleShared} {
		if err := r.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(scaleWorkers)
	for _, s := range svcs {
		g.Go(func() error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name}}
			if err := c.Create(gctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating service account %s/%s in %s: %w", s.ns, s.name, r.ID, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(scaleWorkers)
	for _, s := range svcs {
		for e := range cfg.endpoints {
			if cfg.noPods {
				break
			}
			g.Go(func() error { return createScalePod(gctx, c, r, s, e, scalePodIP(i, s.first+e)) })
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(scaleWorkers)
	for _, s := range svcs {
		g.Go(func() error { return createScaleService(gctx, r, i, s, cfg.endpoints, !cfg.noPods) })
	}
	return g.Wait()
}

func scalePodName(s scaleService, e int) string { return fmt.Sprintf("%s-%03d", s.name, e) }

func createScalePod(ctx context.Context, c client.Client, r *framework.RemoteCluster, s scaleService, e int, ip netip.Addr) error {
	noToken := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.ns, Name: scalePodName(s, e),
			Labels: map[string]string{"app": s.name, "version": "v1", "pod-template-hash": "5d8f7c9b4"},
		},
		Spec: corev1.PodSpec{
			NodeName: r.NodeName(), ServiceAccountName: s.name, AutomountServiceAccountToken: &noToken,
			Containers: []corev1.Container{{
				Name: "app", Image: "e2e.meshfed.io/echo:latest",
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: scalePort, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pod %s/%s in %s: %w", s.ns, pod.Name, r.ID, err)
	}
	return framework.SetPodRunning(ctx, c, pod, ip.String(), "")
}

// createScaleService makes s with n endpoints, which name their Pods when
// pods is set.
func createScaleService(ctx context.Context, r *framework.RemoteCluster, cluster int, s scaleService, n int, pods bool) error {
	c := r.Client()
	svc := benchService(s.ns, s.name, "grpc", "grpc")
	svc.Spec.Selector = map[string]string{"app": s.name}
	if err := c.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service %s/%s in %s: %w", s.ns, s.name, r.ID, err)
	}
	node, zone := r.NodeName(), r.Locality.Zone
	eps := make([]discoveryv1.Endpoint, n)
	for e := range eps {
		ready, serving, terminating := true, true, false
		eps[e] = discoveryv1.Endpoint{
			Addresses:  []string{scalePodIP(cluster, s.first+e).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node, Zone: &zone,
		}
		if pods {
			eps[e].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.ns, Name: scalePodName(s, e)}
		}
	}
	es := benchSlice(svc, eps)
	if err := c.Create(ctx, es); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating endpoint slice %s/%s in %s: %w", s.ns, es.Name, r.ID, err)
	}
	return nil
}

// ---------------------------------------------------------------------------
// One control plane's run

// controlPlane is one control plane under measurement: meshfed's hub
// replicas, or istiod. Its remote secrets are applied by the run.
type controlPlane interface {
	// replicas are its processes.
	replicas() []cpReplica
	// stop ends every process.
	stop() error
}

// cpReplica is one process of a control plane.
type cpReplica struct {
	xdsAddr string
	pid     int
	// debugURL serves /debug/pprof (http://host:port).
	debugURL string
	// metricsURL serves the Prometheus text format with go_memstats_*.
	metricsURL string
}

func (r cpReplica) cpu() time.Duration {
	d, _ := framework.ProcessCPU(r.pid)
	return d
}

// selfCPU is the bench process's CPU: its clients', mostly.
func selfCPU() time.Duration {
	d, _ := framework.ProcessCPU(os.Getpid())
	return d
}

func cpuOf(cp controlPlane) time.Duration {
	var d time.Duration
	for _, r := range cp.replicas() {
		d += r.cpu()
	}
	return d
}

// syscallsOf sums cp's read and write system calls.
func syscallsOf(cp controlPlane) (reads, writes uint64) {
	for _, r := range cp.replicas() {
		rd, wr, _ := framework.ProcessSyscalls(r.pid)
		reads, writes = reads+rd, writes+wr
	}
	return reads, writes
}

func rssOf(cp controlPlane) uint64 {
	var n uint64
	for _, r := range cp.replicas() {
		v, _ := framework.ProcessRSS(r.pid)
		n += v
	}
	return n
}

func heapOf(ctx context.Context, cp controlPlane) (uint64, error) {
	var n uint64
	for _, r := range cp.replicas() {
		v, err := hubHeapAllocAt(ctx, r.debugURL)
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// hubHeapAllocAt is the least of heapReadings readings of HeapAlloc after
// a forced GC of the Go process serving pprof at url.
func hubHeapAllocAt(ctx context.Context, url string) (uint64, error) {
	best := ^uint64(0)
	for range heapReadings {
		v, err := framework.HeapAllocAt(ctx, scaleHTTP, url)
		if err != nil {
			return 0, err
		}
		best = min(best, v)
	}
	return best, nil
}

// liveHeapOf sums over the replicas the heap the last garbage collection
// found live (go_gc_heap_live_bytes, meshfed's), or, from a process that
// does not export it, go_memstats_heap_alloc_bytes, which also counts
// garbage not yet collected. It reports which one it read.
func liveHeapOf(ctx context.Context, cp controlPlane) (n uint64, live bool) {
	live = true
	for _, r := range cp.replicas() {
		v, err := scrapeMetric(ctx, r.metricsURL, "go_gc_heap_live_bytes")
		if err != nil {
			live = false
			if v, err = scrapeMetric(ctx, r.metricsURL, "go_memstats_heap_alloc_bytes"); err != nil {
				return 0, false
			}
		}
		n += uint64(v)
	}
	return n, live
}

// runScale applies the remote secrets to cp, measures sync, connects the
// clients, measures changes and a reconnect storm, and removes the
// secrets again, so the next control plane starts from the same fleet.
func runScale(b *testing.B, f *framework.Fleet, cfg scaleConfig, cp controlPlane, name string) ScaleResult {
	ctx, cancel := context.WithTimeout(b.Context(), scaleLoadBudget)
	defer cancel()
	defer func() {
		if err := cp.stop(); err != nil {
			b.Errorf("stopping control plane: %v", err)
		}
		for _, r := range f.Remotes() {
			if err := f.Config().DeleteRemoteSecret(ctx, "scale-"+string(r.ID)); err != nil && !apierrors.IsNotFound(err) {
				b.Errorf("deleting remote secret: %v", err)
			}
		}
	}()
	res := ScaleResult{Replicas: len(cp.replicas())}
	reps := cp.replicas()

	// Sync: a Delta client outside every cluster subscribed to every
	// service, until it holds every endpoint.
	all := cfg.allNames()
	var total atomic.Int64
	counts := make(map[string]int, len(all))
	var countsMu sync.Mutex
	probe, err := framework.DialLoadClient(ctx, reps[0].xdsAddr, framework.LoadClientOptions{
		Node:  scaleNode("sync-probe", "", model.Locality{}),
		Delta: true, Names: all,
		OnAssignment: func(name string, healthy int, _ time.Time) {
			countsMu.Lock()
			total.Add(int64(healthy - counts[name]))
			counts[name] = healthy
			countsMu.Unlock()
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()
	cpu0 := cpuOf(cp)
	t0 := time.Now()
	for _, r := range f.Remotes() {
		if err := f.Config().PutRemoteSecret(ctx, "scale-"+string(r.ID), r); err != nil {
			b.Fatal(err)
		}
	}
	want := int64(cfg.totalEndpoints())
	if err := testutil.Poll(ctx, scaleSyncTimeout, 20*time.Millisecond, func() error {
		if got := total.Load(); got != want {
			return fmt.Errorf("the sync probe holds %d of %d endpoints", got, want)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	res.SyncS = time.Since(t0).Seconds()
	res.SyncCPUS = (cpuOf(cp) - cpu0).Seconds()
	if err := probe.Close(); err != nil {
		b.Logf("closing the sync probe: %v", err)
	}
	// The sync probe has every endpoint, but the control plane may still
	// be working through the events of its first listing (a replica
	// recomputing services, replicas exchanging state): what it holds is
	// read once it is idle.
	if err := waitIdle(ctx, cp); err != nil {
		b.Logf("%v; reading the heap anyway", err)
	}
	heap, err := heapOf(ctx, cp)
	if err != nil {
		b.Fatal(err)
	}
	rss := rssOf(cp)
	saveProfile(ctx, b, reps[0], "/debug/pprof/heap?gc=1", "heap-"+name+".pb.gz")
	res.HeapMiB, res.RSSMiB = float64(heap)/(1<<20), float64(rss)/(1<<20)
	res.HeapBPerEndpoint = float64(heap) / float64(cfg.totalEndpoints())
	res.RSSBPerEndpoint = float64(rss) / float64(cfg.totalEndpoints())
	b.Logf("synced %d endpoints in %.2f s (%.2f CPU s); heap %.1f MiB, RSS %.1f MiB",
		want, res.SyncS, res.SyncCPUS, res.HeapMiB, res.RSSMiB)

	// Connect every client.
	fl := newScaleFlock(cfg)
	cpu0, t0 = cpuOf(cp), time.Now()
	if err := fl.dial(ctx, reps); err != nil {
		b.Fatal(err)
	}
	if err := fl.waitSynced(ctx); err != nil {
		b.Fatal(err)
	}
	res.ConnectS = time.Since(t0).Seconds()
	res.ConnectCPUS = (cpuOf(cp) - cpu0).Seconds()
	if heap, err = heapOf(ctx, cp); err != nil {
		b.Fatal(err)
	}
	res.ClientsHeapMiB = float64(heap) / (1 << 20)
	saveProfile(ctx, b, reps[0], "/debug/pprof/heap?gc=1", "heap-clients-"+name+".pb.gz")
	n, lastErr := fl.retries()
	res.ConnectRetries = n
	b.Logf("%d clients connected and synced in %.2f s (%.2f CPU s; %d streams refused or failed and were redialled, last: %v); heap %.1f MiB with them",
		cfg.clients, res.ConnectS, res.ConnectCPUS, n, lastErr, res.ClientsHeapMiB)

	// Changes, one at a time.
	flip, err := newScaleFlipper(ctx, f.Remotes()[0], cfg)
	if err != nil {
		b.Fatal(err)
	}
	var lastLat, firstLat []time.Duration
	// A CPU profile of the changes and an execution trace of their first
	// 3 s (each goroutine's wakeups on a change's path), with
	// -scale.profiles.
	var profiled sync.WaitGroup
	profiled.Go(func() {
		saveProfile(ctx, b, reps[0], "/debug/pprof/profile?seconds=10", "cpu-changes-"+name+".pb.gz")
	})
	profiled.Go(func() {
		saveProfile(ctx, b, reps[0], "/debug/pprof/trace?seconds=3", "trace-changes-"+name+".out")
	})
	cpu0 = cpuOf(cp)
	reads0, writes0 := syscallsOf(cp)
	for k := range cfg.changes {
		want := cfg.endpoints - (k+1)%2 // odd changes take one endpoint out
		fl.expect(want)
		t := time.Now()
		if err := flip.flip(ctx, (k+1)%2 == 0); err != nil {
			b.Fatal(err)
		}
		first, last, err := fl.waitChange(ctx, scaleChangeBudget)
		if err != nil {
			b.Fatalf("change %d: %v", k, err)
		}
		firstLat = append(firstLat, first.Sub(t))
		lastLat = append(lastLat, last.Sub(t))
	}
	res.CPUPer100Changes = (cpuOf(cp) - cpu0).Seconds() * 100 / float64(cfg.changes)
	reads, writes := syscallsOf(cp)
	updates := float64(cfg.changes * cfg.clients)
	res.ReadsPerUpdate, res.WritesPerUpdate = float64(reads-reads0)/updates, float64(writes-writes0)/updates
	profiled.Wait()
	res.ChangeP50Ms, res.ChangeP99Ms = msOf(percentile(lastLat, 50)), msOf(percentile(lastLat, 99))
	if cfg.idle > 0 {
		// Idle is measured once the work of the last change is done (a
		// collection it brought on, a status batch), as for the heap.
		if err := waitIdle(ctx, cp); err != nil {
			b.Logf("%v; measuring idle CPU anyway", err)
		}
		// A CPU profile and an execution trace (which goroutines wake,
		// and why) of the idle window, with -scale.profiles.
		var idleProfiled sync.WaitGroup
		secs := max(1, int(cfg.idle.Seconds()))
		idleProfiled.Go(func() {
			saveProfile(ctx, b, reps[0], fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), "cpu-idle-"+name+".pb.gz")
		})
		idleProfiled.Go(func() {
			saveProfile(ctx, b, reps[0], fmt.Sprintf("/debug/pprof/trace?seconds=%d", secs), "trace-idle-"+name+".out")
		})
		cpu0 := cpuOf(cp)
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(cfg.idle):
		}
		res.IdleCPUMsPerS = (cpuOf(cp) - cpu0).Seconds() * 1000 / cfg.idle.Seconds()
		idleProfiled.Wait()
		b.Logf("idle with %d clients connected: %.1f ms of CPU a second", cfg.clients, res.IdleCPUMsPerS)
	}
	res.FirstP50Ms = msOf(percentile(firstLat, 50))
	b.Logf("%d changes: all %d clients p50 %.1f ms, p99 %.1f ms (first client p50 %.1f ms); %.2f CPU s per 100 changes, %.0f µs and %.2f reads and %.2f writes per proxy update",
		cfg.changes, cfg.clients, res.ChangeP50Ms, res.ChangeP99Ms, res.FirstP50Ms, res.CPUPer100Changes,
		res.CPUPer100Changes*1e6/100/float64(cfg.clients), res.ReadsPerUpdate, res.WritesPerUpdate)

	// Reconnect storm. Peak and steady heap are the live heap (as of the
	// last collection) where the control plane exports it, else the
	// allocated heap, sampled alike before and during the storm.
	steadyHeap, steadyRSS, live := sampleHeap(ctx, cp, 2*time.Second, nil)
	fl.close()
	fl = newScaleFlock(cfg)
	stop := make(chan struct{})
	var peakHeap, peakRSS uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		peakHeap, peakRSS, _ = sampleHeap(ctx, cp, scaleSyncTimeout, stop)
	}()
	t0, cpu0 = time.Now(), cpuOf(cp)
	self0 := selfCPU()
	if err := fl.dial(ctx, reps); err != nil {
		b.Fatal(err)
	}
	err = fl.waitSynced(ctx)
	res.StormS = time.Since(t0).Seconds()
	res.StormCPUS, res.StormClientsCPUS = (cpuOf(cp) - cpu0).Seconds(), (selfCPU() - self0).Seconds()
	res.StormRetries, _ = fl.retries()
	close(stop)
	<-sampled
	fl.close()
	if err != nil {
		b.Fatal(err)
	}
	if steadyHeap > 0 {
		res.StormPeakHeapRatio = float64(peakHeap) / float64(steadyHeap)
	}
	if steadyRSS > 0 {
		res.StormPeakRSSRatio = float64(peakRSS) / float64(steadyRSS)
	}
	heapKind := "live heap"
	if !live {
		heapKind = "allocated heap"
	}
	b.Logf("reconnect storm: %d clients redialled at once, all synced in %.2f s (%.2f CPU s, the clients %.2f CPU s; %d streams refused and redialled); peak %s %.1f MiB over steady %.1f MiB (%.2fx), RSS %.2fx",
		cfg.clients, res.StormS, res.StormCPUS, res.StormClientsCPUS, res.StormRetries, heapKind, float64(peakHeap)/(1<<20), float64(steadyHeap)/(1<<20), res.StormPeakHeapRatio, res.StormPeakRSSRatio)
	return res
}

// waitIdle waits until cp's processes used less than 5 % of one core
// over a second, for at most a minute.
func waitIdle(ctx context.Context, cp controlPlane) error {
	const window, idle = time.Second, 50 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		before := cpuOf(cp)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		if used := cpuOf(cp) - before; used < idle {
			return nil
		}
	}
	return errors.New("the control plane did not settle within a minute")
}

// saveProfile saves a pprof profile of r into -scale.out under file, when
// -scale.profiles is set; a failure is logged, not fatal.
func saveProfile(ctx context.Context, b *testing.B, r cpReplica, path, file string) {
	if !*scaleProfiles || *scaleOut == "" {
		return
	}
	if err := fetchToFile(ctx, r.debugURL+path, filepath.Join(*scaleOut, file)); err != nil {
		b.Logf("profile %s: %v", file, err)
	}
}

// sampleHeap returns the highest heap (see liveHeapOf) and RSS of cp seen
// every 25 ms, until stop is closed or d has passed, and whether the heap
// is the live one.
func sampleHeap(ctx context.Context, cp controlPlane, d time.Duration, stop <-chan struct{}) (heap, rss uint64, live bool) {
	end := time.After(d)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	live = true
	for {
		h, l := liveHeapOf(ctx, cp)
		heap, rss, live = max(heap, h), max(rss, rssOf(cp)), live && l
		select {
		case <-stop:
			return heap, rss, live
		case <-end:
			return heap, rss, live
		case <-ctx.Done():
			return heap, rss, live
		case <-tick.C:
		}
	}
}

// scaleNode is the identity of a load client of cluster (none: outside
// every cluster) at locality.
func scaleNode(name string, cluster model.ClusterID, loc model.Locality) *corev3.Node {
	return &corev3.Node{
		Id:       xdsnode.SidecarID("10.250.0.1", name, "load", model.DefaultDomainSuffix),
		Locality: &corev3.Locality{Region: loc.Region, Zone: loc.Zone},
		Metadata: xdsnode.Metadata{ClusterID: cluster, Namespace: "load"}.Struct(),
	}
}

// ---------------------------------------------------------------------------
// The clients

// scaleFlock is every load client of a run, and what they saw of the
// probe service.
type scaleFlock struct {
	cfg     scaleConfig
	clients []*framework.LoadClient
	// names is what client j subscribes to, probe the assignment whose
	// changes are observed (cfg.clientNames and cfg.probeName).
	names func(j int) []string
	probe string

	mu       sync.Mutex // guards the fields below
	want     int        // the probe's healthy count that means "changed"
	has      []bool     // per client: holds want
	count    int        // clients holding want
	first    time.Time
	last     time.Time
	complete chan struct{} // closed when count reaches every client
}

// pilotAgentWindow is the flow-control window pilot-agent's connection to
// its control plane fixes.
const pilotAgentWindow = 1 << 20

func newScaleFlock(cfg scaleConfig) *scaleFlock {
	return &scaleFlock{cfg: cfg, names: cfg.clientNames, probe: cfg.probeName(), has: make([]bool, cfg.clients), want: -1}
}

// dial connects every client at once, spread over the replicas, clusters
// and both protocols: the Delta clients as pilot-agent connects an Envoy
// sidecar (fixed 1 MiB windows), the SotW ones as a proxyless gRPC client
// (grpc-go's defaults).
func (fl *scaleFlock) dial(ctx context.Context, reps []cpReplica) error {
	fl.clients = make([]*framework.LoadClient, fl.cfg.clients)
	remotes := scaleRemotes(fl.cfg.clusters)
	probe := fl.probe
	g, gctx := errgroup.WithContext(ctx)
	for j := range fl.clients {
		g.Go(func() error {
			rc := remotes[j%len(remotes)]
			delta, window := j%2 == 1, int32(0)
			if delta {
				window = pilotAgentWindow
			}
			c, err := framework.DialLoadClient(context.WithoutCancel(gctx), reps[j%len(reps)].xdsAddr, framework.LoadClientOptions{
				Node:   scaleNode(fmt.Sprintf("load-%04d", j), rc.ID, rc.Locality),
				Delta:  delta,
				Window: window,
				Names:  fl.names(j),
				OnAssignment: func(name string, healthy int, received time.Time) {
					if name == probe {
						fl.observe(j, healthy, received)
					}
				},
			})
			fl.clients[j] = c
			return err
		})
	}
	return g.Wait()
}

func (fl *scaleFlock) observe(j, healthy int, received time.Time) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.complete == nil || fl.has[j] || healthy != fl.want {
		return
	}
	fl.has[j] = true
	fl.count++
	if fl.count == 1 {
		fl.first = received
	}
	if received.After(fl.last) {
		fl.last = received
	}
	if fl.count == len(fl.has) {
		close(fl.complete)
	}
}

// expect starts a change: the probe's healthy count becomes want.
func (fl *scaleFlock) expect(want int) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.want, fl.count = want, 0
	fl.first, fl.last = time.Time{}, time.Time{}
	clear(fl.has)
	fl.complete = make(chan struct{})
}

// waitChange waits until every client holds the expected count and returns
// when the first and the last received it.
func (fl *scaleFlock) waitChange(ctx context.Context, budget time.Duration) (first, last time.Time, err error) {
	fl.mu.Lock()
	done := fl.complete
	fl.mu.Unlock()
	select {
	case <-done:
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return fl.first, fl.last, nil
	case <-time.After(budget):
	case <-ctx.Done():
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return time.Time{}, time.Time{}, fmt.Errorf("%d of %d clients got the change within %s (%w)", fl.count, len(fl.has), budget, fl.errLocked())
}

func (fl *scaleFlock) errLocked() error {
	if n, err := fl.retries(); n > 0 {
		return fmt.Errorf("%d streams failed, the last with: %w", n, err)
	}
	return errors.New("no stream failed")
}

// waitSynced waits until every client holds an assignment of every name
// it subscribed to, with all of the name's endpoints.
func (fl *scaleFlock) waitSynced(ctx context.Context) error {
	return testutil.Poll(ctx, scaleSyncTimeout, 10*time.Millisecond, func() error {
		synced := 0
		for j, c := range fl.clients {
			if c.Received() == len(fl.names(j)) {
				synced++
			}
		}
		if synced < len(fl.clients) {
			return fmt.Errorf("%d of %d clients synced", synced, len(fl.clients))
		}
		return nil
	})
}

// retries counts the clients' failed streams (each was opened again) and
// returns one of their errors.
func (fl *scaleFlock) retries() (int, error) {
	n, last := 0, error(nil)
	for _, c := range fl.clients {
		if c == nil {
			continue
		}
		if k, err := c.Retries(); k > 0 {
			n, last = n+k, err
		}
	}
	return n, last
}

func (fl *scaleFlock) close() {
	var wg sync.WaitGroup
	for _, c := range fl.clients {
		if c != nil {
			wg.Go(func() { _ = c.Close() })
		}
	}
	wg.Wait()
}

// scaleFlipper flips the ready condition of the probe service's first
// endpoint in the first cluster.
type scaleFlipper struct {
	c     client.Client
	slice *discoveryv1.EndpointSlice
}

func newScaleFlipper(ctx context.Context, r *framework.RemoteCluster, cfg scaleConfig) (*scaleFlipper, error) {
	s := scaleServicesOf(0, cfg)[0]
	es := &discoveryv1.EndpointSlice{}
	if err := r.Client().Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.name + "-bench"}, es); err != nil {
		return nil, fmt.Errorf("reading the probe's slice: %w", err)
	}
	return &scaleFlipper{c: r.Client(), slice: es}, nil
}

func (fp *scaleFlipper) flip(ctx context.Context, ready bool) error {
	fp.slice.Endpoints[0].Conditions.Ready = &ready
	return fp.c.Update(ctx, fp.slice)
}
