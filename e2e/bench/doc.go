// Package bench holds meshfed's end-to-end benchmarks: real kube-apiservers,
// the built hub binary as a process, raw ADS streams and upstream Envoy
// processes, assembled by the fleet framework (e2e/framework). `make bench`
// runs them once each:
//
//	KUBEBUILDER_ASSETS=$(bash e2e/kubeassets/build.sh --print-dir) \
//	MESHFED_HUB_BIN=$PWD/bin/meshfed-hub \
//	MESHFED_ENVOY_BIN=$(bash e2e/envoyassets/install.sh --print-path) \
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./e2e/bench/
//
// Without KUBEBUILDER_ASSETS the benchmarks are skipped; without
// MESHFED_ENVOY_BIN BenchmarkEnvoyVsProxyless fails. Each one starts its
// own fleet, so sub-benchmarks printed side by side ran on identical, fresh
// setups one after the other (BenchmarkEnvoyVsProxyless loads one fleet
// and gives each of its sub-benchmarks a fresh hub on it). The figures are reported with
// b.ReportMetric and appear on the benchmark line; the framework's ns/op is
// suppressed because one "op" here is a whole scenario, not a unit of work.
// The machine these run on is small and shared: compare figures within one
// run (ratios, the two sides of a sub-benchmark pair) rather than with
// absolute targets. Nothing here asserts a timing.
//
// The benchmarks' streams dial the hubs' plaintext xDS port
// (framework.HubOptions.PlaintextXDS), which hubs keep closed by default:
// istiod is read on its plaintext 15010 beside meshfed, and the same port
// on both sides keeps the TLS handshakes of thousands of streams out of
// figures that compare control planes. The e2e tests cover the
// authenticated port.
//
// # BenchmarkEndpointConvergence
//
// How long an EndpointSlice change in a remote cluster takes to reach a
// proxy as a ClusterLoadAssignment. The fleet runs a service "echo" with two
// replicas in every remote cluster and one hub; a raw ADS stream
// (framework.ADSWatcher) with node metadata CLUSTER_ID of the first cluster
// subscribes to the EDS resource outbound|8080||echo.bench.svc.cluster.local.
// The benchmark then flips the ready condition of one endpoint of the last
// cluster's slice, over and over, strictly one change at a time: it takes the
// time just before issuing the apiserver Update, and the time the watcher
// read the first response whose assignment holds exactly the ready
// endpoints that change implies (other pushes are skipped, so a stale or
// unrelated update is never taken for the answer). A few warm-up changes
// are not counted.
//
//   - remotes=1: the watcher and the change are in the same, only, cluster.
//   - remotes=3: the watcher is in cluster-1, the change in cluster-3; the
//     hub watches three apiservers and merges three clusters' endpoints.
//
// Metrics:
//
//   - p50-ms, p90-ms, p99-ms, max-ms: convergence latency, from before the
//     Update call to the watcher's receipt of the matching assignment. This
//     includes the apiserver write (etcd commit) and its watch delivery to the
//     hub's informer: the floor below which no hub can go.
//   - write-p50-ms, write-p99-ms: the Update call alone (request to
//     response). The apiserver sends the watch event to the hub at about the
//     time it answers the write, so p50-ms minus write-p50-ms is roughly what
//     the hub adds on top of the write: informer delivery, recomputing the
//     service, the push into the xDS cache and the send on the stream. When
//     the two are close, the apiserver is the bottleneck, not the hub.
//   - changes: how many changes the percentiles are computed over.
//
// # BenchmarkHubHeapPerEndpoint
//
// What one endpoint costs in the hub's heap. One remote cluster, one hub, one
// ADS watcher (CLUSTER_ID of that cluster) subscribed to every EDS name the
// benchmark will create. The benchmark writes 200 Services in namespace
// heap-<iteration>, each with one EndpointSlice of N/200 endpoints, each
// endpoint backed by a Pod (spec.nodeName, serviceAccountName, and
// status.podIP 10.x.y.z set through the status subresource). These objects
// are written directly with the cluster's client by 8 workers; no echo
// servers run, nothing dials the addresses. The cluster's etcd runs with
// --unsafe-no-fsync to keep loading quick; it does not change what the hub
// holds.
//
// The hub's heap is read from its pprof endpoint,
// /debug/pprof/heap?gc=1&debug=1 (gc=1 forces a collection first; the value
// is runtime.MemStats.HeapAlloc, the live heap plus whatever was allocated
// since that collection; the least of three readings is taken). The baseline
// is read once the hub is ready, has synced the still empty cluster and has
// built the watcher's proxy group; the second reading once /debug/registryz
// counts all N new endpoints and the watcher holds assignments with all of
// them.
//
//   - endpoints=2000 and endpoints=20000: N, side by side, so fixed costs and
//     per-endpoint costs can be told apart. Both load 200 Services, so the
//     growth heap-bytes/endpoint × N differs between the two only by the
//     18,000 extra endpoints: that difference divided by 18,000 is the
//     marginal cost of one endpoint, and what remains of the smaller load's
//     growth is the cost of 200 Services (their objects, their listener,
//     route and cluster resources). The figure at 2000 is therefore the
//     higher one; the figure at 20000 is close to the marginal cost.
//
// Metrics:
//
//   - heap-bytes/endpoint: (after − baseline) / N. It covers everything the
//     hub keeps per endpoint: the Pod in its informer cache (stripped by a
//     transform), the endpoint's share of its EndpointSlice and Service, the
//     merged registry, and the generated ClusterLoadAssignments of the one
//     proxy group that is connected (each further proxy group, i.e. cluster
//     or region with connected proxies, adds its own assignments).
//   - heap-MiB: the hub's heap after loading, in MiB.
//   - objects/s: Pods, Services and EndpointSlices created per second of
//     loading (each Pod takes two writes: create and status), for context
//     only: it is the apiserver's speed, not the hub's.
//   - load-s: seconds spent writing the objects; sync-s: seconds from the
//     start of loading until the watcher received the last assignment. When
//     sync-s is about load-s, the hub kept up with the writes.
//
// Each b.Loop iteration loads another N endpoints into a new namespace and
// measures the growth it causes, so -benchtime 2x averages two loads (the
// second on top of the first); the default of make bench is one.
//
// # BenchmarkEnvoyVsProxyless
//
// The two kinds of proxies the hub serves, side by side on one fleet: one
// remote cluster holding echo (2 replicas, as above) and 1,000 other
// Services of one endpoint each (HTTP on 8080, EndpointSlices written
// without Pods). Each kind gets a fresh hub and 10 clients, all on the
// plaintext xDS port, without mTLS (the TLS port's authentication and the
// SDS secrets are left out):
//
//   - kind=proxyless: raw ADS streams (framework.ADSWatcher, SotW) that
//     subscribe to the load assignments of all 1,001 services, as a
//     grpc-go client dialing every one of them would;
//   - kind=envoy: real upstream Envoy 1.40 processes ($MESHFED_ENVOY_BIN;
//     no pilot-agent, one worker thread, no hot restart, admin on an
//     ephemeral loopback port) bootstrapped with SotW ADS to the hub, as
//     Istio sidecar nodes sidecar~127.0.0.X~bench-N.demo~... with
//     CLUSTER_ID, NAMESPACE and INTERCEPTION_MODE=NONE: each gets the
//     whole mesh as Istio's listeners, routes, clusters and assignments,
//     and must ACK every type (no update_rejected).
//
// Echo's endpoint is then flipped 5 times unmeasured and 60 times
// measured, as in BenchmarkEndpointConvergence. The proxyless figure is
// the first watcher's receipt; the Envoy figure is the first read of the
// first Envoy's admin /config_dump (dynamic_endpoint_configs, by name)
// that holds exactly the expected endpoints, read every 2 ms (so it
// includes up to one read's time, admin-read-p50-ms, and one interval).
//
// Metrics (per kind):
//
//   - p50-ms, p99-ms: change → the measured client has it (over 60
//     changes, p99 is the slowest).
//   - hub-cpu-ms/change: the hub process's CPU (process_cpu_seconds_total,
//     10 ms ticks, over the whole series) per change, with the 10 clients
//     connected.
//   - sync-s, hub-sync-cpu-ms/client: from starting the clients until
//     all of them hold the whole mesh (for Envoys this includes starting
//     the processes), and the hub's CPU for it per client.
//   - hub-heap-MiB, hub-heap-KiB/client: the hub's HeapAlloc after a
//     forced GC (as in BenchmarkHubHeapPerEndpoint) with the clients
//     connected, and its growth over the hub without clients, per client.
//   - envoy-rss-MiB, envoy-heap-MiB (Envoy only): mean VmRSS of the Envoy
//     processes and the bytes their allocator reports in use (admin
//     /memory "allocated"). A proxyless client's memory is grpc-go's
//     inside the application; a raw ADS stream has none worth measuring.
//   - bystander-p50-ms, bystander-p99-ms (Envoy only): the latency of a
//     proxyless watcher of echo alone connected to the Envoys' hub. The
//     hub plans every push, load assignments included, under one lock
//     and regenerates each sidecar's listeners and clusters from every
//     service on every push, so a hub serving Envoys delays its
//     proxyless clients too.
//
// # BenchmarkRootPropagation
//
// How fast step 1 of a root rotation spreads: a new root is added to the
// config cluster's cacerts (10 times, one root at a time), and the benchmark
// times, from before the Secret update, until every one of three hub
// replicas lists the root in /debug/trustz (bundle-p50-ms, bundle-max-ms:
// each replica follows the Secret through its own watch) and until a
// workload agent (pkg/agent) connected to the third replica has written it
// into its root-cert.pem (agent-p50-ms, agent-max-ms: the hub's
// trust-bundle stream, then the agent's file generation). Polling is every
// 2 ms. The failover, watch-count and replication benchmarks are described
// with their code (federation_bench_test.go).
//
// # BenchmarkVirtualServiceChange
//
// How long a VirtualService change in the config cluster takes to reach
// 100 proxyless clients (raw ADS streams in three clusters) as a new
// route configuration: a merge patch of a 2-subset split's weights, one
// change at a time, p50/p99 until the last client has it, the first
// client's p50 next to the apiserver write's, and the hub's CPU per change.
// Described in full with its code (istioconfig_bench_test.go). Its pure
// counterpart, BenchmarkPlanConfigChange in pkg/xdsgen, plans one
// VirtualService or DestinationRule change against 1,000 of each (and a
// rebuild of all 1,000 hosts, side by side).
//
// # BenchmarkScale
//
// The scale envelope of a fleet, and the same fleet under other control
// planes side by side. The fleet is loaded once: -scale.clusters remote
// clusters (each a kube-apiserver; cluster-i in zone zi of one of four
// regions), each with -scale.services Services of -scale.endpoints
// endpoints, every endpoint a Pod (labels, service account, node, status
// with its IP) in an EndpointSlice. Half of each cluster's Services are
// its own (namespace local-<i>), half exist in every cluster (namespace
// shared: one hostname, endpoints of every cluster). Then each control
// plane in turn, on the very same objects:
//
//   - meshfed/replicas=N: N hub replicas joined by gossip (one run per
//     -scale.replicas entry), each remote cluster watched by one of them;
//   - baseline/replicas=1: another meshfed-hub binary (-scale.baseline-hub),
//     e.g. the last release, to show a change before and after;
//   - istiod: Istio's pilot-discovery (-scale.istiod, `make istiod`) run
//     outside Kubernetes as an external istiod: the config cluster by
//     kubeconfig, the remotes by the same remote secrets, plaintext xDS,
//     no CA and no webhooks, PILOT_ENABLE_EDS_DEBOUNCE=false (its fastest
//     setting for endpoint changes), everything else its defaults
//     (including PILOT_MAX_REQUESTS_PER_SECOND=25: it refuses new streams
//     beyond 25 a second, and the clients redial).
//
// Each run: the remote secrets are applied (one per cluster) and a Delta
// client outside every cluster, subscribed to every service, waits until
// it holds every endpoint (sync-s, and the control plane's CPU over it,
// sync-cpu-s: utime+stime of its processes from /proc). Once the control
// plane is idle (under 5 % of a core over a second, at most a minute: it
// may still be working through its first listing's events), the heap after a
// forced GC (pprof HeapAlloc, summed over replicas) and RSS follow, per
// endpoint. Then -scale.clients raw ADS clients (framework.LoadClient),
// each its own connection and node (CLUSTER_ID and locality of one
// cluster, round robin; replicas round robin; SotW and Delta alternating,
// Delta ones with fixed 1 MiB flow-control windows as pilot-agent dials,
// SotW ones with grpc-go's defaults as a proxyless client does),
// subscribe to eleven assignments each: the probe service, four of their
// own cluster, four shared, two of another cluster (connect-s, the heap
// with them). Then -scale.changes EndpointSlice writes, strictly one at a
// time, each flipping the ready condition of the probe's first endpoint
// (the first local service of cluster-1): from before the write until the
// last client has the assignment with the implied healthy count
// (change-p50/p99-ms; first-p50 for the first client), and the control
// plane's CPU per 100 changes and read and write system calls per change
// and client (syscalls/update, /proc/<pid>/io); then, with the clients
// still connected and nothing changing, once it has settled (under 5 %
// of a core for a second), its idle CPU (ms a second over -scale.idle,
// 10 s). CPU is each thread's time on a CPU, in nanoseconds
// (/proc/<pid>/task/*/schedstat). Last, a reconnect storm:
// every client closes and all redial at once, until every one holds its
// assignments again
// (storm-s), with the peak heap during it over the steady heap before it
// (live heap, go_gc_heap_live_bytes, where exported; istiod's and older
// hubs' allocated heap otherwise). A refused stream is redialled after 100
// ms, doubling to 2 s, as proxies do; the redials are counted. The secrets
// are deleted and the processes stopped before the next control plane.
//
// The table is printed, and with -scale.out written as scale.txt,
// scale.json and scale.svg (a bar per control plane and figure); with
// -scale.profiles the first replica's heap profiles after sync and with
// the clients connected, a 10 s CPU profile of the changes and an
// execution trace of their first 3 s, and a CPU profile and an execution
// trace of the idle window are saved beside them (the idle figure then
// includes what profiling costs). With -scale.pods=false the EndpointSlices name no Pod and
// none is made (endpoints as of VMs or Pods the hub cannot see): the heap
// a control plane holds per endpoint without Pod records. `make bench` runs the
// defaults (2 clusters x 200 services x 20 endpoints, 200 clients, 50
// changes, 1 and 3 replicas); `make bench-scale` the envelope (20 clusters,
// 80,000 endpoints, 2,000 clients, 200 changes) with istiod, into
// bin/bench-scale.
package bench
