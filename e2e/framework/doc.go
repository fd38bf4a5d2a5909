// Package framework is meshfed's fleet test framework. It builds a fleet out
// of real parts and lets end-to-end tests, benchmarks and the demo program
// talk about it in terms of topology:
//
//   - Fleet: everything below, started together and stopped together.
//   - ConfigCluster: a kube-apiserver (with its own etcd) holding the
//     Istio-format remote secrets the hub reads, with the hub chart's
//     networking.istio.io and security.istio.io CRDs installed, so tests
//     can write the mesh's VirtualServices, DestinationRules,
//     PeerAuthentications and AuthorizationPolicies.
//   - RemoteCluster: a workload cluster, another kube-apiserver + etcd,
//     with an ID, a locality, and credentials for the hub.
//   - Hub: a meshfed-hub child process serving xDS and monitoring.
//   - Workload: a Service in a remote cluster whose replicas are Pods backed
//     by real gRPC echo servers; their Pods may carry labels (PodLabels,
//     SetPodLabels) and the servers may fail or stall on demand (Faults,
//     SetFaults, SetReplicaFaults).
//   - XDSClient: a proxyless grpc-go xDS client with its own node identity,
//     resolving xds:/// targets through the hub and sending real RPCs.
//   - ADSWatcher: a raw ADS stream for measuring EDS push latency.
//   - PodNetwork, Pod and Sidecar: network namespaces on a bridge, and
//     Istio's pilot-agent + Envoy running in them (see Pods).
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
// sleep) until it reaches both clusters. The client dials the hub's
// authenticated port (its CA's, like istiod's 15012) over mutual TLS with
// the certificate a cert agent keeps for demo/client-0; the plaintext port
// is closed unless HubOptions.PlaintextXDS opens it:
//
//	ag := framework.StartTestCertAgent(t, r1, hub, "demo", "client-0")
//	c := framework.NewTestXDSClient(t, framework.ClientOptions{
//		HubAddr: hub.CAAddr(), ServerTLS: true, CertDir: ag.Dir(),
//		Cluster: r1.ID, Namespace: "demo", Name: "client-0", Locality: r1.Locality})
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
// # Pods
//
// Envoy sidecars bind fixed ports (15000, 15020, 15021, 15090, …), so each
// needs a network namespace of its own. A PodNetwork is a bridge in the
// host namespace with the gateway address 198.18.0.1 out of 198.18.0.0/15
// (RFC 2544's benchmark range: not loopback, so the apiserver takes it in
// EndpointSlices, and never routed off the machine); each Pod is a
// network namespace joined to it by a veth, with the next address
// 198.18.A.B. Pod.Dial, Pod.Listen and Pod.HTTPClient make sockets inside
// the Pod, so apps served by the test process (StartHTTPEcho,
// StartTCPEcho, StartGRPCEcho) listen on the Pod's loopback as a Pod's app
// container would, and clients call from inside it. The host reaches Pod
// addresses over the bridge, so a proxyless XDSClient of the test process
// reaches sidecar Pods directly. One pod network exists per machine at a
// time (an flock; a second waits), and it needs root.
//
// A Sidecar is the spoke injector's real output for a Pod (the sidecar
// template rendered through spoke/inject) run outside a kubelet: the Pod
// object with its status, the projected token and CA roots at the
// template's mount paths, and pilot-agent, driving upstream Envoy, in the
// Pod's namespace with INTERCEPTION_MODE NONE (no iptables: Envoy binds
// 127.0.0.1:<service port> outbound and <Pod IP>:<target port> inbound).
// With SidecarOptions.Workload the Pod becomes an endpoint of that
// workload (deploy it with zero replicas). StartTestSidecar reads
// MESHFED_ENVOY_BIN and MESHFED_PILOT_AGENT_BIN (the bootstrap template
// lies next to pilot-agent). The hub must listen on the gateway
// (HubOptions.ListenHost). Create the network before the fleet, so that
// cleanups, which run last-in first-out, remove it last, after the
// sidecars and the hub:
//
//	net := framework.NewTestPodNetwork(t)
//	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})
//	err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...)
//	hub := framework.StartTestHub(t, f, framework.HubOptions{ListenHost: net.Gateway().String()})
//	pod := framework.NewTestPod(t, net, framework.PodOptions{Name: "client"})
//	sc := framework.StartTestSidecar(t, f, framework.SidecarOptions{
//		Cluster: f.Remotes()[0], Pod: pod, Hub: hub, Name: "client-0", Namespace: "demo"})
//	err = sc.WaitReady(ctx) // Envoy has its first listeners and clusters
//
// Sidecar.Admin, DynamicConfig and ClusterPriorities read Envoy's admin
// interface; WorkloadCertificate asks pilot-agent's SDS socket.
//
// An Envoy (StartEnvoy, StartTestEnvoy) is upstream Envoy on a bootstrap
// of the test's own, without pilot-agent or a Pod, for benchmarks and for
// checks of generated resources; ValidateEnvoy runs `envoy --mode
// validate` on a bootstrap. SocketAddress, GRPCCluster, ADSConfig and
// HTTP2ProtocolOptions build such bootstraps. StartEnvoy returns once the
// admin answers: Envoy writes its admin address before it builds the
// bootstrap's clusters, so the file alone does not say it took them.
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
