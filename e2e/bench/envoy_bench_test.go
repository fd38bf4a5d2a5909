//go:build linux

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/encoding/protojson"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

const (
	// mixServices is how many Services, one endpoint each, the mesh holds
	// besides echo: the "1k endpoints" and "1,000 services" of the figures.
	mixServices  = 1000
	mixNamespace = "mesh"
	// mixClients is how many clients of one kind connect at once; ten
	// Envoys with the whole mesh each fit the 2 cores the benchmark is
	// sized for.
	mixClients = 10
	// mixWarmup changes run before measuring and are not counted.
	mixWarmup = 5
	// mixChanges is the number of measured changes per b.Loop iteration.
	mixChanges = 60
	// mixBudget bounds one kind's run after the shared fleet is loaded.
	mixBudget = 10 * time.Minute
	// envoyPoll is how often Envoy's admin is read while a change is
	// awaited; it bounds the resolution of the Envoy latencies.
	envoyPoll = 2 * time.Millisecond
	// envoyNamespace is the Envoys' own namespace (they serve nothing).
	envoyNamespace = "demo"
)

// BenchmarkEnvoyVsProxyless compares the two kinds of proxies the hub
// serves, on one fleet with the same mesh: one remote cluster holding the
// service echo (2 replicas) and mixServices other Services of one endpoint
// each. Each kind gets a fresh hub and mixClients clients, connected to
// the plaintext xDS port without mTLS:
//
//   - kind=proxyless: raw ADS streams (framework.ADSWatcher) that
//     subscribe to the load assignment of every service, as a grpc-go
//     client dialing all of them would;
//   - kind=envoy: real upstream Envoy 1.40 processes, no pilot-agent,
//     bootstrapped with ADS to the hub, node IDs of Istio sidecars and
//     INTERCEPTION_MODE=NONE; they get the whole mesh as listeners,
//     routes, clusters and assignments (Istio's shape).
//
// See the package documentation for the metrics.
func BenchmarkEnvoyVsProxyless(b *testing.B) {
	f := framework.NewTestFleet(b, framework.FleetOptions{
		Remotes: framework.Remotes(1),
		// Loading speed only; the hub sees the same objects.
		EtcdFlags: map[string]string{"unsafe-no-fsync": "true"},
		// envtest's /24 service range holds fewer ClusterIPs than the mesh.
		APIServerFlags: map[string]string{"service-cluster-ip-range": "10.0.0.0/16"},
	})
	envoy := framework.TestEnvoyBinary(b)
	ctx, cancel := context.WithTimeout(b.Context(), settleTimeout)
	defer cancel()
	r := f.Remotes()[0]
	if err := ensureNode(ctx, r); err != nil {
		b.Fatal(err)
	}
	echo, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
		Namespace: convNamespace, Service: convService, Replicas: convReplicas,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(echo.Stop)
	if err := loadMesh(ctx, r, mixServices); err != nil {
		b.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "bench-remote", r); err != nil {
		b.Fatal(err)
	}
	m := &mix{fleet: f, remote: r, echo: echo, envoy: envoy, flipper: newReadyFlipper(echo, echo)}
	b.Run("kind=proxyless", func(b *testing.B) { m.run(b, m.connectProxyless) })
	b.Run("kind=envoy", func(b *testing.B) { m.run(b, m.connectEnvoys) })
}

// mix is the shared fleet of BenchmarkEnvoyVsProxyless.
type mix struct {
	fleet  *framework.Fleet
	remote *framework.RemoteCluster
	echo   *framework.Workload
	envoy  string // Envoy binary
	// flipper churns echo; shared, since each kind starts from the state
	// the other left.
	flipper *readyFlipper
}

// edsNames are the load-assignment names of every service of the mesh.
func (m *mix) edsNames() []string {
	names := []string{xdsgen.ClusterName(m.echo.Hostname(), uint32(m.echo.Options().ServicePort))}
	for s := range mixServices {
		names = append(names, xdsgen.ClusterName(model.ServiceHostname(mixService(s), mixNamespace, ""), heapPort))
	}
	return names
}

// endpoints is how many endpoints the mesh holds.
func (m *mix) endpoints() int { return mixServices + convReplicas }

// mixClientSet is the clients of one kind, connected to one hub.
type mixClientSet interface {
	// synced waits until every client holds the whole mesh.
	synced(ctx context.Context) error
	// await waits until the measured client (the first) holds an echo
	// assignment passing check, received no earlier than since, and
	// returns when it had it.
	await(ctx context.Context, since time.Time, check func(*endpointv3.ClusterLoadAssignment) error) (time.Time, error)
	// report adds the clients' own figures; the last changes awaits were
	// the measured ones.
	report(ctx context.Context, b *testing.B, changes int) error
}

// run measures one kind: a fresh hub on the loaded fleet, its clients
// connected and synced (memory), then echo churned (latency, CPU).
func (m *mix) run(b *testing.B, connect func(*testing.B, *framework.Hub) mixClientSet) {
	ctx, cancel := context.WithTimeout(b.Context(), mixBudget)
	defer cancel()
	hub := framework.StartTestHub(b, m.fleet, framework.HubOptions{PlaintextXDS: true})
	waitSynced(b, ctx, hub, m.remote.ID)
	if err := testutil.Poll(ctx, settleTimeout, 100*time.Millisecond, func() error {
		// At least: the apiserver's own Service "kubernetes" counts too.
		n, err := registryzEndpoints(ctx, hub, m.remote.ID)
		if err == nil && n < m.endpoints() {
			err = fmt.Errorf("registryz counts %d endpoints, want at least %d", n, m.endpoints())
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	heapBefore := mustHeap(b, ctx, hub)

	cpu0 := mustCPU(b, ctx, hub)
	start := time.Now()
	clients := connect(b, hub)
	if err := clients.synced(ctx); err != nil {
		b.Fatalf("clients never held the mesh: %v", err)
	}
	syncTime := time.Since(start)
	syncCPU := mustCPU(b, ctx, hub) - cpu0
	heapAfter := mustHeap(b, ctx, hub)

	converges, pushCPU := m.churn(b, ctx, hub, clients)

	b.ReportMetric(0, "ns/op") // one op is a whole series of changes
	b.ReportMetric(msOf(percentile(converges, 50)), "p50-ms")
	b.ReportMetric(msOf(percentile(converges, 99)), "p99-ms")
	b.ReportMetric(float64(len(converges)), "changes")
	b.ReportMetric(pushCPU*1000/float64(len(converges)), "hub-cpu-ms/change")
	b.ReportMetric(syncTime.Seconds(), "sync-s")
	b.ReportMetric(syncCPU*1000/mixClients, "hub-sync-cpu-ms/client")
	b.ReportMetric(float64(heapAfter)/(1<<20), "hub-heap-MiB")
	b.ReportMetric((float64(heapAfter)-float64(heapBefore))/mixClients/(1<<10), "hub-heap-KiB/client")
	b.ReportMetric(mixClients, "clients")
	if err := clients.report(ctx, b, len(converges)); err != nil {
		b.Fatal(err)
	}
}

// churn flips echo's endpoint, one change at a time, until each has
// reached the measured client, and returns the measured latencies and the
// hub's CPU seconds over them.
func (m *mix) churn(b *testing.B, ctx context.Context, hub *framework.Hub, clients mixClientSet) ([]time.Duration, float64) {
	b.Helper()
	if _, err := clients.await(ctx, time.Time{}, m.flipper.want()); err != nil {
		b.Fatalf("initial echo assignment: %v", err)
	}
	flip := func() (time.Duration, error) {
		start, _, check, err := m.flipper.flip(ctx)
		if err != nil {
			return 0, err
		}
		had, err := clients.await(ctx, start, check)
		if err != nil {
			return 0, fmt.Errorf("change to ready=%v of %s: %w", m.flipper.wantsReady(), m.flipper.flipped, err)
		}
		return had.Sub(start), nil
	}
	for range mixWarmup {
		if _, err := flip(); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	var converges []time.Duration
	var cpu float64
	for b.Loop() {
		before := mustCPU(b, ctx, hub)
		for range mixChanges {
			c, err := flip()
			if err != nil {
				b.Fatal(err)
			}
			converges = append(converges, c)
		}
		cpu += mustCPU(b, ctx, hub) - before
	}
	return converges, cpu
}

func mustHeap(b *testing.B, ctx context.Context, hub *framework.Hub) uint64 {
	b.Helper()
	v, err := hubHeapAlloc(ctx, hub)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// mustCPU returns the CPU seconds (user and system) the hub process has
// used, from its process_cpu_seconds_total.
func mustCPU(b *testing.B, ctx context.Context, hub *framework.Hub) float64 {
	b.Helper()
	v, err := hubMetric(ctx, hub, "process_cpu_seconds_total")
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// ---------------------------------------------------------------------------
// The mesh

func mixService(s int) string { return fmt.Sprintf("svc-%04d", s) }

// loadMesh writes n Services in mixNamespace, each with an EndpointSlice
// of one ready endpoint 10.200.A.B (never a fleet pod address; nothing
// dials it) and no Pod behind it: the hub needs none to serve it.
func loadMesh(ctx context.Context, r *framework.RemoteCluster, n int) error {
	if err := r.EnsureNamespace(ctx, mixNamespace); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(heapWorkers)
	for s := range n {
		g.Go(func() error { return createMeshService(gctx, r, s) })
	}
	return g.Wait()
}

func createMeshService(ctx context.Context, r *framework.RemoteCluster, s int) error {
	c := r.Client()
	name := mixService(s)
	svc := benchService(mixNamespace, name, "http", "http")
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating service %s: %w", name, err)
	}
	node, zone := r.NodeName(), r.Locality.Zone
	ready := true
	es := benchSlice(svc, []discoveryv1.Endpoint{{
		Addresses:  []string{netip.AddrFrom4([4]byte{10, 200, byte(s / 254), byte(s%254 + 1)}).String()},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		NodeName:   &node,
		Zone:       &zone,
	}})
	if err := c.Create(ctx, es); err != nil {
		return fmt.Errorf("creating endpoint slice %s: %w", es.Name, err)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Proxyless clients

// proxylessSet is mixClients raw ADS streams; the first is measured, the
// others are drained and counted.
type proxylessSet struct {
	measured *framework.ADSWatcher
	others   []*edsTracker
	names    []string
	total    int
}

func (m *mix) connectProxyless(b *testing.B, hub *framework.Hub) mixClientSet {
	s := &proxylessSet{names: m.edsNames(), total: m.endpoints()}
	for i := range mixClients {
		w := framework.NewTestADSWatcher(b, hub.XDSAddr(), watcherNode(m.remote, "proxyless-"+strconv.Itoa(i)))
		if err := w.WatchEDS(s.names...); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			s.measured = w
		} else {
			s.others = append(s.others, trackEDS(w))
		}
	}
	return s
}

func (s *proxylessSet) synced(ctx context.Context) error {
	return testutil.Poll(ctx, settleTimeout, 50*time.Millisecond, func() error {
		for i, t := range s.others {
			if got := t.total(s.names); got != s.total {
				return fmt.Errorf("proxyless client %d holds %d of %d endpoints", i+1, got, s.total)
			}
		}
		return nil
	})
}

func (s *proxylessSet) await(ctx context.Context, since time.Time, check func(*endpointv3.ClusterLoadAssignment) error) (time.Time, error) {
	u, err := awaitAssignment(ctx, s.measured, s.names[0], since, check, changeTimeout)
	return u.Received, err
}

// report adds nothing: a proxyless client's memory is grpc-go's, inside
// the application, and a raw ADS stream has none worth measuring.
func (s *proxylessSet) report(context.Context, *testing.B, int) error { return nil }

// ---------------------------------------------------------------------------
// Envoy clients

// envoySet is mixClients Envoy processes; the first is measured. A
// proxyless client of echo on the same hub, the bystander, is measured
// too: every push waits for the Envoys' regeneration (see the package
// documentation), and this shows what that costs the proxyless clients
// of a hub that also serves Envoys.
type envoySet struct {
	envoys    []*framework.Envoy
	bystander *framework.ADSWatcher
	echo      string          // echo's cluster (and assignment) name
	byLatency []time.Duration // the bystander's latency of each change
	// clusters is how many clusters each Envoy must have active: one per
	// service of the mesh, at least.
	clusters int
	polls    []time.Duration // how long each admin read of a wait took
}

func (m *mix) connectEnvoys(b *testing.B, hub *framework.Hub) mixClientSet {
	xds, err := netip.ParseAddrPort(hub.XDSAddr())
	if err != nil {
		b.Fatalf("hub xDS address: %v", err)
	}
	s := &envoySet{echo: m.edsNames()[0], clusters: mixServices + 1}
	for i := range mixClients {
		ip := netip.AddrFrom4([4]byte{127, 0, 0, byte(11 + i)})
		node := &corev3.Node{
			Id:       xdsnode.SidecarID(ip.String(), "bench-"+strconv.Itoa(i), envoyNamespace, model.DefaultDomainSuffix),
			Cluster:  "bench." + envoyNamespace,
			Locality: &corev3.Locality{Region: m.remote.Locality.Region, Zone: m.remote.Locality.Zone, SubZone: m.remote.Locality.SubZone},
			Metadata: xdsnode.Metadata{
				ClusterID: m.remote.ID, Namespace: envoyNamespace, InterceptionMode: string(xdsgen.InterceptNone),
			}.Struct(),
		}
		// One worker each: mixClients Envoys share the benchmark's 2 cores.
		s.envoys = append(s.envoys, framework.StartTestEnvoy(b, framework.EnvoyOptions{
			Binary: m.envoy, Name: "envoy-" + strconv.Itoa(i), Bootstrap: envoyBootstrap(node, xds),
			LogLevel: "warn", Concurrency: 1,
		}))
	}
	s.bystander = framework.NewTestADSWatcher(b, hub.XDSAddr(), watcherNode(m.remote, "bystander"))
	if err := s.bystander.WatchEDS(s.echo); err != nil {
		b.Fatal(err)
	}
	return s
}

func (s *envoySet) synced(ctx context.Context) error {
	var rejected error // a NACK: stop waiting
	err := testutil.Poll(ctx, settleTimeout, 100*time.Millisecond, func() error {
		for i, e := range s.envoys {
			st, err := envoyStats(ctx, e, `^(cluster_manager\.(active|warming)_clusters|(cluster_manager\.cds|listener_manager\.lds)\.update_rejected)$`)
			if err != nil {
				return fmt.Errorf("envoy %d: %w", i, err)
			}
			for _, k := range []string{"cluster_manager.cds.update_rejected", "listener_manager.lds.update_rejected"} {
				if st[k] != 0 {
					rejected = fmt.Errorf("envoy %d: %s = %d (its log: %s)", i, k, st[k], e.LogPath())
					return nil
				}
			}
			if st["cluster_manager.active_clusters"] < s.clusters || st["cluster_manager.warming_clusters"] != 0 {
				return fmt.Errorf("envoy %d: %d active (want at least %d), %d warming clusters",
					i, st["cluster_manager.active_clusters"], s.clusters, st["cluster_manager.warming_clusters"])
			}
		}
		return nil
	})
	return errors.Join(err, rejected)
}

func (s *envoySet) await(ctx context.Context, since time.Time, check func(*endpointv3.ClusterLoadAssignment) error) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, changeTimeout)
	defer cancel()
	last := errors.New("no admin answer yet")
	for {
		t0 := time.Now()
		cla, err := envoyAssignment(ctx, s.envoys[0], s.echo)
		now := time.Now()
		s.polls = append(s.polls, now.Sub(t0))
		if err == nil {
			if err = check(cla); err == nil {
				return now, s.awaitBystander(ctx, since, check)
			}
		}
		if ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("envoy 0 never held the assignment for %s: %w (last: %w)", s.echo, ctx.Err(), last)
		case <-time.After(envoyPoll):
		}
	}
}

// awaitBystander records when the bystander had the assignment that
// check accepts (it has it by now, or soon: its push is no later).
func (s *envoySet) awaitBystander(ctx context.Context, since time.Time, check func(*endpointv3.ClusterLoadAssignment) error) error {
	u, err := awaitAssignment(ctx, s.bystander, s.echo, since, check, changeTimeout)
	if err != nil {
		return fmt.Errorf("bystander: %w", err)
	}
	s.byLatency = append(s.byLatency, u.Received.Sub(since))
	return nil
}

// report adds Envoy's memory: VmRSS from /proc and the allocated bytes
// its admin /memory reports (tcmalloc's live heap), means over the Envoys,
// and how long one admin read of the measured Envoy took.
func (s *envoySet) report(ctx context.Context, b *testing.B, changes int) error {
	var rss, allocated float64
	for i, e := range s.envoys {
		r, err := processRSS(e.Pid())
		if err != nil {
			return fmt.Errorf("envoy %d: %w", i, err)
		}
		a, err := envoyAllocated(ctx, e)
		if err != nil {
			return fmt.Errorf("envoy %d: %w", i, err)
		}
		rss += float64(r)
		allocated += float64(a)
	}
	n := float64(len(s.envoys))
	b.ReportMetric(rss/n/(1<<20), "envoy-rss-MiB")
	b.ReportMetric(allocated/n/(1<<20), "envoy-heap-MiB")
	b.ReportMetric(msOf(percentile(s.polls, 50)), "admin-read-p50-ms")
	measured := s.byLatency[len(s.byLatency)-changes:]
	b.ReportMetric(msOf(percentile(measured, 50)), "bystander-p50-ms")
	b.ReportMetric(msOf(percentile(measured, 99)), "bystander-p99-ms")
	return nil
}

// envoyBootstrap is the bootstrap of an Envoy whose whole configuration
// comes over ADS from the hub at xds (plaintext), as node.
func envoyBootstrap(node *corev3.Node, xds netip.AddrPort) *bootstrapv3.Bootstrap {
	ads := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
	adsConfig := framework.ADSConfig("xds-grpc")
	adsConfig.SetNodeOnFirstMessageOnly = true
	return &bootstrapv3.Bootstrap{
		Node: node,
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{
			framework.GRPCCluster("xds-grpc", framework.SocketAddress(xds.Addr().String(), uint32(xds.Port()))),
		}},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: adsConfig,
			LdsConfig: ads,
			CdsConfig: ads,
		},
	}
}

// envoyStats returns e's counters and gauges whose names match re.
func envoyStats(ctx context.Context, e *framework.Envoy, re string) (map[string]int, error) {
	body, err := e.Admin(ctx, "/stats?filter="+url.QueryEscape(re))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}

// envoyAssignment returns the load assignment e holds for cluster name,
// from its admin /config_dump.
func envoyAssignment(ctx context.Context, e *framework.Envoy, name string) (*endpointv3.ClusterLoadAssignment, error) {
	body, err := e.Admin(ctx, "/config_dump?resource=dynamic_endpoint_configs&include_eds&name_regex="+
		url.QueryEscape("^"+regexp.QuoteMeta(name)+"$"))
	if err != nil {
		return nil, err
	}
	var dump struct {
		Configs []struct {
			EndpointConfig json.RawMessage `json:"endpoint_config"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(body, &dump); err != nil {
		return nil, fmt.Errorf("config_dump: %w", err)
	}
	if len(dump.Configs) != 1 {
		return nil, fmt.Errorf("config_dump holds %d assignments named %s, want 1", len(dump.Configs), name)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(dump.Configs[0].EndpointConfig, cla); err != nil {
		return nil, fmt.Errorf("config_dump assignment: %w", err)
	}
	return cla, nil
}

// processRSS returns process pid's resident set size, from
// /proc/<pid>/status.
func processRSS(pid int) (uint64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// envoyAllocated returns the bytes e's allocator reports in use (admin
// /memory "allocated").
func envoyAllocated(ctx context.Context, e *framework.Envoy) (uint64, error) {
	body, err := e.Admin(ctx, "/memory")
	if err != nil {
		return 0, err
	}
	var mem struct {
		Allocated string `json:"allocated"`
	}
	if err := json.Unmarshal(body, &mem); err != nil {
		return 0, fmt.Errorf("/memory: %w", err)
	}
	return strconv.ParseUint(mem.Allocated, 10, 64)
}
