// Package framework is meshfed's fleet test framework. It builds a fleet out
// of real parts and lets end-to-end tests, benchmarks and the demo program
// talk about it in terms of topology:
//
//   - Fleet: everything below, started together and stopped together.
//   - ConfigCluster: a kube-apiserver (with its own etcd) holding the
//     Istio-format remote secrets the hub reads.
//   - RemoteCluster: a workload cluster, another kube-apiserver + etcd,
//     with an ID, a locality, and credentials for the hub.
//   - Hub: a meshfed-hub child process serving xDS and monitoring.
//   - Workload: a Service in a remote cluster whose replicas are Pods backed
//     by real gRPC echo servers.
//   - XDSClient: a proxyless grpc-go xDS client with its own node identity,
//     resolving xds:/// targets through the hub and sending real RPCs.
//   - ADSWatcher: a raw ADS stream for measuring EDS push latency.
//
// # Walk-through
//
// A test starts a fleet with the test helper, which reads the environment
// (KUBEBUILDER_ASSETS, MESHFED_HUB_BIN) and registers the cleanup:
//
//	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(2)})
//	ctx := t.Context()
//	r1, r2 := f.Remotes()[0], f.Remotes()[1]
//
// Deploy a service into both clusters. Each replica gets a Pod, an entry in
// the service's EndpointSlice, and an echo server answering "<cluster>/<pod>":
//
//	w1, err := r1.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
//	w2, err := r2.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 1})
//
// Tell the hub about the clusters and start it (StartTestHub waits for
// /readyz):
//
//	err = f.Config().PutRemoteSecret(ctx, "remote-a", r1, r2)
//	hub := framework.StartTestHub(t, f, framework.HubOptions{ReplicaID: "hub-0"})
//
// Send traffic through the hub from a client in cluster-1, and wait (never
// sleep) until it reaches both clusters:
//
//	c := framework.NewTestXDSClient(t, framework.ClientOptions{
//		HubAddr: hub.XDSAddr(), Cluster: r1.ID, Namespace: "demo", Name: "client-0", Locality: r1.Locality})
//	conn, err := c.Dial(w1.Target()) // xds:///echo.demo.svc.cluster.local:8080
//	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
//		counts, err := conn.Spread(ctx, 50)
//		if err != nil {
//			return err
//		}
//		if by := framework.ByCluster(counts); by["cluster-1"] == 0 || by["cluster-2"] == 0 {
//			return fmt.Errorf("traffic by cluster: %v", by)
//		}
//		return nil
//	})
//
// Then change the world and watch the hub follow: w1.Scale, w1.SetReady,
// r2.Stop (the cluster becomes unreachable), f.Config().DeleteRemoteSecret,
// hub.Kill. hub.Registryz shows what the hub believes.
//
// A demo program uses the same API without *testing.T: NewFleet with
// AssetsDir and HubBinary (see BuildHubBinary) set explicitly, and a
// deferred Fleet.Stop.
//
// # Addresses
//
// The apiserver refuses loopback addresses in EndpointSlices, so a replica
// has Pod IP 10.X.A.B (X = 10 + its cluster's index in the fleet) and its
// echo server listens on 127.X.A.B, the same address with the first octet
// swapped (LocalAddr, PodIP). The hub sees and serves the Pod IPs, as it
// would in a real cluster; XDSClient dials data-plane connections through
// DialPod, which does the swap, so the Pod IPs the hub hands out reach the
// right server. All replicas of a workload share one target port, chosen
// free when the workload is deployed.
//
// # Processes
//
// etcd, kube-apiserver and hub processes are children of the test process.
// Fleet.Stop stops all of them and waits for them. If the test process dies
// instead (a panic, a test timeout, SIGKILL), the kernel kills them too:
// hubs are started with a parent-death signal, and etcd and kube-apiserver
// (started by envtest, which offers no such option) run through a small
// setpriv wrapper that sets one. Each control plane keeps its certificates,
// etcd data and logs under the fleet's temporary directory; the test helper
// removes it after a passing test and keeps it (minus etcd data) after a
// failing one, printing the end of every hub log.
//
// # Environment
//
// Only the test helpers (NewTestFleet, TestHubBinary, TestSpokeBinary and
// their twins) read the environment: KUBEBUILDER_ASSETS (the kube-apiserver
// and etcd directory; the test is skipped when it is unset),
// MESHFED_HUB_BIN, MESHFED_CTL_BIN, MESHFED_AGENT_BIN and MESHFED_SPOKE_BIN
// (prebuilt binaries; otherwise each is built once per test process from
// its cmd package) and MESHFED_E2E_VERBOSE (copy hub output to stderr).
// Spokes, like hubs, run as processes of the built binary
// (Fleet.StartSpoke). The core API takes everything as options.
package framework
