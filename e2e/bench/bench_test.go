package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/xdsgen"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// Bounds for a hung run. They are limits, not performance claims.
const (
	// convergenceBudget bounds one convergence sub-benchmark after its
	// fleet has started.
	convergenceBudget = 15 * time.Minute
	// heapBudget bounds one heap sub-benchmark after its fleet has started.
	heapBudget = 30 * time.Minute
	// changeTimeout bounds the wait for one change to reach the watcher.
	changeTimeout = 30 * time.Second
	// settleTimeout bounds waits for the hub to reach a known state.
	settleTimeout = 2 * time.Minute
)

// TestMain silences controller-runtime's global logger, which envtest logs
// through; unset, it prints a warning with a stack trace in the middle of
// the figures. Started as BenchmarkADSFloor's server, the binary serves
// instead.
func TestMain(m *testing.M) {
	if floorMain() {
		return
	}
	ctrllog.SetLogger(logr.Discard())
	m.Run()
}

// ---------------------------------------------------------------------------
// BenchmarkEndpointConvergence

const (
	convNamespace = "bench"
	convService   = "echo"
	convReplicas  = 2
	// convWarmup changes run before measuring and are not counted.
	convWarmup = 10
	// convChanges is the number of measured changes per b.Loop iteration.
	convChanges = 500
)

// BenchmarkEndpointConvergence measures the latency from an EndpointSlice
// write in a remote cluster to the ClusterLoadAssignment that reflects it on
// a raw ADS stream. See the package documentation.
func BenchmarkEndpointConvergence(b *testing.B) {
	b.Run("remotes=1", func(b *testing.B) { benchConvergence(b, 1, 1) })
	b.Run("remotes=3", func(b *testing.B) { benchConvergence(b, 3, 1) })
	// Three replicas: the watcher is connected to a replica that does not
	// watch the changed cluster, so every change crosses a peer stream.
	b.Run("remotes=3/replicas=3/non-owner", func(b *testing.B) { benchConvergence(b, 3, 3) })
}

func benchConvergence(b *testing.B, remotes, replicas int) {
	f := framework.NewTestFleet(b, framework.FleetOptions{Remotes: framework.Remotes(remotes)})
	ctx, cancel := context.WithTimeout(b.Context(), convergenceBudget)
	defer cancel()

	// The same service in every cluster, so the assignment merges them all.
	rs := f.Remotes()
	workloads := make([]*framework.Workload, len(rs))
	for i, r := range rs {
		w, err := r.DeployWorkload(ctx, framework.WorkloadOptions{
			Namespace: convNamespace, Service: convService, Replicas: convReplicas,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(w.Stop)
		workloads[i] = w
	}
	if err := f.Config().PutRemoteSecret(ctx, "bench-remotes", rs...); err != nil {
		b.Fatal(err)
	}
	hubs := startReplicas(b, f, replicas, nil)
	hub := hubs[0]

	// The watcher lives in the first cluster; the changes happen in the
	// last one (the same cluster when there is only one).
	home, changed := rs[0], workloads[len(workloads)-1]
	if replicas > 1 {
		hub = nonOwner(b, ctx, hubs, changed.Cluster().ID)
	}
	watcher := framework.NewTestADSWatcher(b, hub.XDSAddr(), watcherNode(home, "convergence-watcher"))
	name := xdsgen.ClusterName(changed.Hostname(), uint32(changed.Options().ServicePort))
	if err := watcher.WatchEDS(name); err != nil {
		b.Fatal(err)
	}

	flipper := newReadyFlipper(changed, workloads...)
	if _, err := awaitAssignment(ctx, watcher, name, time.Time{}, flipper.want(), settleTimeout); err != nil {
		b.Fatalf("initial assignment: %v", err)
	}

	// flip changes the flipped endpoint's ready condition and returns how
	// long the apiserver write took and how long until the watcher had it.
	flip := func() (write, converge time.Duration, err error) {
		start, write, check, err := flipper.flip(ctx)
		if err != nil {
			return 0, 0, err
		}
		u, err := awaitAssignment(ctx, watcher, name, start, check, changeTimeout)
		if err != nil {
			return 0, 0, fmt.Errorf("change to ready=%v of %s: %w", flipper.wantsReady(), flipper.flipped, err)
		}
		return write, u.Received.Sub(start), nil
	}

	for range convWarmup {
		if _, _, err := flip(); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	var writes, converges []time.Duration
	for b.Loop() {
		for range convChanges {
			w, c, err := flip()
			if err != nil {
				b.Fatal(err)
			}
			writes = append(writes, w)
			converges = append(converges, c)
		}
	}

	b.ReportMetric(0, "ns/op") // one op is a whole series of changes
	b.ReportMetric(msOf(percentile(converges, 50)), "p50-ms")
	b.ReportMetric(msOf(percentile(converges, 90)), "p90-ms")
	b.ReportMetric(msOf(percentile(converges, 99)), "p99-ms")
	b.ReportMetric(msOf(percentile(converges, 100)), "max-ms")
	b.ReportMetric(msOf(percentile(writes, 50)), "write-p50-ms")
	b.ReportMetric(msOf(percentile(writes, 99)), "write-p99-ms")
	b.ReportMetric(float64(len(converges)), "changes")
}

// wantReady returns a check that an assignment holds exactly the endpoints
// that ready marks ready. It copies ready.
func wantReady(ready map[netip.AddrPort]bool) func(*endpointv3.ClusterLoadAssignment) error {
	var want []netip.AddrPort
	for a, ok := range ready {
		if ok {
			want = append(want, a)
		}
	}
	slices.SortFunc(want, netip.AddrPort.Compare)
	return func(cla *endpointv3.ClusterLoadAssignment) error {
		got, err := assignmentAddrs(cla)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("assignment holds %v, want %v", got, want)
		}
		return nil
	}
}

// assignmentAddrs returns the sorted addresses of every endpoint of cla.
func assignmentAddrs(cla *endpointv3.ClusterLoadAssignment) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			ip, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				return nil, fmt.Errorf("endpoint address %q: %w", sa.GetAddress(), err)
			}
			out = append(out, netip.AddrPortFrom(ip, uint16(sa.GetPortValue())))
		}
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out, nil
}

// awaitAssignment reads the watcher's updates until one for name, received
// no earlier than since, passes check, and returns it. Updates for other
// names, earlier ones and ones that fail check are skipped.
func awaitAssignment(ctx context.Context, w *framework.ADSWatcher, name string, since time.Time,
	check func(*endpointv3.ClusterLoadAssignment) error, timeout time.Duration) (framework.EDSUpdate, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	last := errors.New("no assignment received")
	for {
		select {
		case u, ok := <-w.Updates():
			if !ok {
				return framework.EDSUpdate{}, fmt.Errorf("watcher stream ended: %w", w.Err())
			}
			if u.Assignment.GetClusterName() != name || u.Received.Before(since) {
				continue
			}
			if err := check(u.Assignment); err != nil {
				last = err
				continue
			}
			return u, nil
		case <-timer.C:
			return framework.EDSUpdate{}, fmt.Errorf("no matching assignment for %s within %s (last: %w)", name, timeout, last)
		case <-ctx.Done():
			return framework.EDSUpdate{}, fmt.Errorf("waiting for %s: %w (last: %w)", name, ctx.Err(), last)
		}
	}
}

// ---------------------------------------------------------------------------
// BenchmarkHubHeapPerEndpoint

const (
	heapServices = 200
	heapWorkers  = 8
	heapPort     = 8080
	heapPortName = "grpc"
)

// BenchmarkHubHeapPerEndpoint measures the hub's live heap per endpoint it
// serves. See the package documentation.
func BenchmarkHubHeapPerEndpoint(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run("endpoints="+strconv.Itoa(n), func(b *testing.B) { benchHeap(b, n) })
	}
}

func benchHeap(b *testing.B, n int) {
	if n%heapServices != 0 {
		b.Fatalf("endpoint count %d is not a multiple of %d services", n, heapServices)
	}
	f := framework.NewTestFleet(b, framework.FleetOptions{
		Remotes: framework.Remotes(1),
		// Loading speed only; the hub sees the same objects.
		EtcdFlags: map[string]string{"unsafe-no-fsync": "true"},
		// envtest's default service range, a /24, holds fewer ClusterIPs
		// than two iterations' Services.
		APIServerFlags: map[string]string{"service-cluster-ip-range": "10.0.0.0/16"},
	})
	ctx, cancel := context.WithTimeout(b.Context(), heapBudget)
	defer cancel()
	r := f.Remotes()[0]
	if err := ensureNode(ctx, r); err != nil {
		b.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "bench-remote", r); err != nil {
		b.Fatal(err)
	}
	hub := framework.StartTestHub(b, f, framework.HubOptions{PlaintextXDS: true})
	waitSynced(b, ctx, hub, r.ID)

	watcher := framework.NewTestADSWatcher(b, hub.XDSAddr(), watcherNode(r, "heap-watcher"))
	eds := trackEDS(watcher)

	var (
		subscribed         []string
		perEndpoint        []float64
		heapAfter          uint64
		objects            int
		loadTime, syncTime time.Duration
	)
	for iter := 0; b.Loop(); iter++ {
		ns := "heap-" + strconv.Itoa(iter)
		plan := planHeap(ns, n, iter*n)
		if err := r.EnsureNamespace(ctx, ns); err != nil {
			b.Fatal(err)
		}
		if err := plan.createServiceAccounts(ctx, r.Client()); err != nil {
			b.Fatal(err)
		}
		// Subscribe before loading: the names do not exist yet, so nothing
		// is sent, but the watcher's proxy group is built (the hub builds a
		// group's assignments when its first EDS request comes in) and from
		// then on every push builds the group's assignments too.
		subscribed = append(subscribed, plan.edsNames()...)
		if err := watcher.WatchEDS(subscribed...); err != nil {
			b.Fatal(err)
		}
		var baseEndpoints int
		if err := testutil.Poll(ctx, settleTimeout, 100*time.Millisecond, func() error {
			v, err := hubMetric(ctx, hub, "meshfed_xds_proxy_groups_total")
			if err != nil {
				return err
			}
			if v < 1 {
				return errors.New("the watcher's proxy group is not built yet")
			}
			baseEndpoints, err = registryzEndpoints(ctx, hub, r.ID)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		before, err := hubHeapAlloc(ctx, hub)
		if err != nil {
			b.Fatal(err)
		}

		start := time.Now()
		if err := plan.load(ctx, r); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		loadTime += took
		objects += plan.objects()

		if err := testutil.Poll(ctx, settleTimeout, 500*time.Millisecond, func() error {
			total, err := registryzEndpoints(ctx, hub, r.ID)
			if err != nil {
				return err
			}
			if got := total - baseEndpoints; got != n {
				return fmt.Errorf("registryz counts %d new endpoints in %s, want %d", got, r.ID, n)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if err := testutil.Poll(ctx, settleTimeout, 100*time.Millisecond, func() error {
			if err := watcher.Err(); err != nil {
				return err
			}
			if got := eds.total(plan.edsNames()); got != n {
				return fmt.Errorf("watcher holds %d of %d endpoints", got, n)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		syncTime += eds.lastReceived().Sub(start)

		heapAfter, err = hubHeapAlloc(ctx, hub)
		if err != nil {
			b.Fatal(err)
		}
		perEndpoint = append(perEndpoint, (float64(heapAfter)-float64(before))/float64(n))
		b.Logf("iteration %d: %d endpoints, heap %d -> %d bytes, loaded in %s",
			iter, n, before, heapAfter, took.Round(time.Millisecond))
	}

	iters := float64(len(perEndpoint))
	b.ReportMetric(0, "ns/op") // one op is a whole load
	b.ReportMetric(mean(perEndpoint), "heap-bytes/endpoint")
	b.ReportMetric(float64(heapAfter)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(objects)/loadTime.Seconds(), "objects/s")
	b.ReportMetric(loadTime.Seconds()/iters, "load-s")
	b.ReportMetric(syncTime.Seconds()/iters, "sync-s")
}

// heapPlan is the objects of one load: services × perService endpoints, in
// namespace ns, with Pod IPs numbered from firstIP.
type heapPlan struct {
	ns         string
	perService int
	firstIP    int
}

func planHeap(ns string, n, firstIP int) *heapPlan {
	return &heapPlan{ns: ns, perService: n / heapServices, firstIP: firstIP}
}

func (p *heapPlan) service(s int) string { return fmt.Sprintf("svc-%03d", s) }

func (p *heapPlan) pod(s, i int) string { return fmt.Sprintf("svc-%03d-%05d", s, i) }

// podIP returns the address of endpoint i of service s: 10.X.A.B with
// B in 1..254, X from 100 up, never loopback and never a fleet echo address.
func (p *heapPlan) podIP(s, i int) netip.Addr {
	k := p.firstIP + s*p.perService + i
	const perX = 256 * 254
	return netip.AddrFrom4([4]byte{10, byte(100 + k/perX), byte(k % perX / 254), byte(k%254 + 1)})
}

func (p *heapPlan) hostname(s int) model.Hostname {
	return model.ServiceHostname(p.service(s), p.ns, "")
}

func (p *heapPlan) edsNames() []string {
	out := make([]string, heapServices)
	for s := range out {
		out[s] = xdsgen.ClusterName(p.hostname(s), heapPort)
	}
	return out
}

// objects counts the Pods, Services and EndpointSlices of the plan.
func (p *heapPlan) objects() int { return heapServices * (p.perService + 2) }

func (p *heapPlan) createServiceAccounts(ctx context.Context, c client.Client) error {
	for s := range heapServices {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.service(s)}}
		if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating service account %s: %w", sa.Name, err)
		}
	}
	return nil
}

// load writes every Pod (with its status), then every Service and its
// EndpointSlice, with heapWorkers concurrent writers. Pods go first so that
// the hub computes each service once, with its Pods already known.
func (p *heapPlan) load(ctx context.Context, r *framework.RemoteCluster) error {
	c := r.Client()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(heapWorkers)
	for s := range heapServices {
		for i := range p.perService {
			g.Go(func() error { return p.createPod(gctx, c, r.NodeName(), s, i) })
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(heapWorkers)
	for s := range heapServices {
		g.Go(func() error { return p.createService(gctx, r, s) })
	}
	return g.Wait()
}

func (p *heapPlan) createPod(ctx context.Context, c client.Client, node string, s, i int) error {
	noToken := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.ns,
			Name:      p.pod(s, i),
			Labels:    map[string]string{"app": p.service(s)},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			ServiceAccountName:           p.service(s),
			AutomountServiceAccountToken: &noToken,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "e2e.meshfed.io/echo:latest",
				Ports: []corev1.ContainerPort{{Name: heapPortName, ContainerPort: heapPort, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	return framework.SetPodRunning(ctx, c, pod, p.podIP(s, i).String(), "")
}

func (p *heapPlan) createService(ctx context.Context, r *framework.RemoteCluster, s int) error {
	c := r.Client()
	name := p.service(s)
	svc := benchService(p.ns, name, heapPortName, "grpc")
	svc.Labels = map[string]string{"app": name}
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating service %s: %w", name, err)
	}
	node := r.NodeName()
	zone := r.Locality.Zone
	ready, serving, terminating := true, true, false
	eps := make([]discoveryv1.Endpoint, p.perService)
	for i := range eps {
		eps[i] = discoveryv1.Endpoint{
			Addresses:  []string{p.podIP(s, i).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node,
			Zone:       &zone,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.ns, Name: p.pod(s, i)},
		}
	}
	es := benchSlice(svc, eps)
	if err := c.Create(ctx, es); err != nil {
		return fmt.Errorf("creating endpoint slice %s: %w", es.Name, err)
	}
	return nil
}

// benchService is a ClusterIP Service with one TCP port, heapPort, named
// portName, of appProtocol.
func benchService(ns, name, portName, appProtocol string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{
				Name: portName, Port: heapPort, Protocol: corev1.ProtocolTCP,
				AppProtocol: &appProtocol, TargetPort: intstr.FromInt32(heapPort),
			}},
		},
	}
}

// benchSlice is an EndpointSlice of svc (a benchService) holding eps, as
// an EndpointSlice controller would write it; there is none in the fleet.
func benchSlice(svc *corev1.Service, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	sp := svc.Spec.Ports[0]
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      svc.Name + "-bench",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   framework.ManagedByValue,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: &sp.Name, Port: &sp.Port, Protocol: &sp.Protocol, AppProtocol: sp.AppProtocol,
		}},
		Endpoints: eps,
	}
}

// ensureNode creates the cluster's Node with its locality labels, as
// DeployWorkload would, for Pods written without the framework.
func ensureNode(ctx context.Context, r *framework.RemoteCluster) error {
	labels := map[string]string{"kubernetes.io/hostname": r.NodeName()}
	if r.Locality.Region != "" {
		labels[corev1.LabelTopologyRegion] = r.Locality.Region
	}
	if r.Locality.Zone != "" {
		labels[corev1.LabelTopologyZone] = r.Locality.Zone
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName(), Labels: labels}}
	if err := r.Client().Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node in %s: %w", r.ID, err)
	}
	return nil
}

// edsTracker keeps the endpoint count of the latest assignment of each name
// an ADSWatcher received. Draining the watcher also keeps its stream
// flowing: a watcher whose buffer is full stops reading.
type edsTracker struct {
	mu       sync.Mutex
	counts   map[string]int
	received time.Time
}

func trackEDS(w *framework.ADSWatcher) *edsTracker {
	t := &edsTracker{counts: map[string]int{}}
	go func() {
		for u := range w.Updates() {
			n := 0
			for _, loc := range u.Assignment.GetEndpoints() {
				n += len(loc.GetLbEndpoints())
			}
			t.mu.Lock()
			t.counts[u.Assignment.GetClusterName()] = n
			t.received = u.Received
			t.mu.Unlock()
		}
	}()
	return t
}

// total sums the endpoints of the latest assignments of names.
func (t *edsTracker) total(names []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, name := range names {
		n += t.counts[name]
	}
	return n
}

// lastReceived returns when the latest assignment was received.
func (t *edsTracker) lastReceived() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.received
}

// ---------------------------------------------------------------------------
// Hub observations

// waitSynced waits until the hub reports cluster id synced.
func waitSynced(b *testing.B, ctx context.Context, hub *framework.Hub, id model.ClusterID) {
	b.Helper()
	if err := testutil.Poll(ctx, settleTimeout, 100*time.Millisecond, func() error {
		rz, err := hub.Registryz(ctx)
		if err != nil {
			return err
		}
		c, ok := rz.Cluster(id)
		if !ok || c.State != debugdoc.ClusterSynced {
			return fmt.Errorf("cluster %s not synced: %+v", id, c)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

// registryzEndpoints returns how many endpoints cluster id contributes to
// the hub's registry.
func registryzEndpoints(ctx context.Context, hub *framework.Hub, id model.ClusterID) (int, error) {
	rz, err := hub.Registryz(ctx)
	if err != nil {
		return 0, err
	}
	c, ok := rz.Cluster(id)
	if !ok {
		return 0, fmt.Errorf("cluster %s not in registryz", id)
	}
	return c.Endpoints, nil
}

// heapReadings is how many times the heap is read; the least value counts,
// to damp allocations that happen between the forced GC and the reading.
const heapReadings = 3

// hubHeapAlloc returns the hub's HeapAlloc right after a GC, the least of
// heapReadings readings (hubHeapAllocAt).
func hubHeapAlloc(ctx context.Context, hub *framework.Hub) (uint64, error) {
	return hubHeapAllocAt(ctx, hub.MonitoringURL())
}

// hubMetric returns the value of an unlabelled metric from the hub's
// /metrics.
func hubMetric(ctx context.Context, hub *framework.Hub, name string) (float64, error) {
	return scrapeMetric(ctx, hub.MonitoringURL()+"/metrics", name)
}

// ---------------------------------------------------------------------------
// Helpers

// watcherNode is the identity of a raw ADS watcher living in cluster r.
func watcherNode(r *framework.RemoteCluster, name string) *corev3.Node {
	return &corev3.Node{
		Id:       xdsnode.SidecarID("10.250.0.1", name, convNamespace, model.DefaultDomainSuffix),
		Locality: &corev3.Locality{Region: r.Locality.Region, Zone: r.Locality.Zone, SubZone: r.Locality.SubZone},
		Metadata: xdsnode.Metadata{ClusterID: r.ID, Namespace: convNamespace}.Struct(),
	}
}

// percentile returns the p-th percentile (nearest rank) of ds; 100 is the
// maximum. It does not modify ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
