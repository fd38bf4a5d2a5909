package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
)

// TestFleet starts a config cluster and two remote clusters and exercises
// everything that needs no hub: workloads and their objects, real traffic
// to every replica, Scale/SetReady/UpdateEndpointSlice, remote secrets,
// kubeconfigs, the hub process plumbing (against a stand-in), and that
// Stop leaves no process behind.
func TestFleet(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var hubOut syncBuffer
	f := NewTestFleet(t, FleetOptions{
		Remotes:   Remotes(2),
		HubBinary: self, // the stand-in; see stubhub_test.go
		LogOutput: &hubOut,
	})
	ctx := t.Context()
	r1, r2 := f.Remotes()[0], f.Remotes()[1]
	if r1.ID != "cluster-1" || r2.ID != "cluster-2" || f.Remote("cluster-2") != r2 || f.Remote("nope") != nil {
		t.Fatalf("remotes: %s %s", r1.ID, r2.ID)
	}

	t.Run("workloads", func(t *testing.T) { testWorkloads(t, f) })
	t.Run("slice churn", func(t *testing.T) { testSliceChurn(t, r1) })
	t.Run("secrets", func(t *testing.T) { testSecrets(t, f) })
	t.Run("kubeconfigs", func(t *testing.T) { testKubeconfigs(t, f) })
	t.Run("hub process", func(t *testing.T) { testHubProcess(t, f, &hubOut) })

	// Stop explicitly (the cleanup's Stop is then a no-op) and check that
	// every child process is gone.
	children := childProcesses(t)
	names := map[string]int{}
	for _, comm := range children {
		names[comm]++
	}
	t.Logf("child processes before Stop: %v", names)
	if names["kube-apiserver"] != 3 || names["etcd"] != 3 {
		t.Errorf("want 3 kube-apiserver and 3 etcd children, got %v", names)
	}
	logRSS(t, children)
	start := time.Now()
	if err := f.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("fleet stopped in %s", time.Since(start).Round(time.Millisecond))
	for pid, comm := range children {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("process %d (%s) still exists after Stop", pid, comm)
		}
	}
	for _, w := range r1.Workloads() {
		for _, ep := range w.EndpointSlice().Endpoints {
			local, ok := LocalAddr(netip.MustParseAddr(ep.Addresses[0]))
			if !ok {
				t.Errorf("endpoint %s is no fleet pod IP", ep.Addresses[0])
			}
			assertRefused(t, netip.AddrPortFrom(local, w.TargetPort()).String())
		}
	}
	if _, err := f.StartHub(ctx, HubOptions{}); err == nil {
		t.Errorf("StartHub on a stopped fleet succeeded")
	}
}

func testWorkloads(t *testing.T, f *Fleet) {
	ctx := t.Context()
	workloads := map[model.ClusterID]*Workload{}
	for _, r := range f.Remotes() {
		start := time.Now()
		w, err := r.DeployWorkload(ctx, WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: deployed 2 replicas in %s", r.ID, time.Since(start).Round(time.Millisecond))
		workloads[r.ID] = w
		checkObjects(t, r, w, 2)
		checkTraffic(t, w)
	}
	w1 := workloads["cluster-1"]
	if w1.Hostname() != "echo.demo.svc.cluster.local" || w1.Target() != "xds:///echo.demo.svc.cluster.local:8080" {
		t.Errorf("hostname %s target %s", w1.Hostname(), w1.Target())
	}
	if rep := w1.Replicas()[0]; rep.PodIP.String() != "10.10.0.1" || rep.Addr.Addr().String() != "127.10.0.1" {
		t.Errorf("first replica of cluster-1: pod IP %s at %s, want 10.10.0.1 at 127.10.0.1", rep.PodIP, rep.Addr)
	}
	if got := workloads["cluster-2"].Replicas()[1].PodIP.String(); got != "10.11.0.2" {
		t.Errorf("second replica of cluster-2 has pod IP %s, want 10.11.0.2", got)
	}

	// Scale up, then down.
	if err := w1.Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, f.Remote("cluster-1"), w1, 3)
	checkTraffic(t, w1)
	gone := w1.Replicas()[1:]
	if err := w1.Scale(ctx, 1); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, f.Remote("cluster-1"), w1, 1)
	checkTraffic(t, w1)
	for _, rep := range gone {
		assertRefused(t, rep.Addr.String())
	}
	if want := []string{"cluster-1/echo-0"}; !slices.Equal(w1.Backends(), want) {
		t.Errorf("Backends() = %v, want %v", w1.Backends(), want)
	}
	// New replicas get new pod names and reuse freed addresses.
	if err := w1.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if want := []string{"cluster-1/echo-0", "cluster-1/echo-3"}; !slices.Equal(w1.Backends(), want) {
		t.Errorf("Backends() = %v, want %v", w1.Backends(), want)
	}
	checkObjects(t, f.Remote("cluster-1"), w1, 2)

	// Readiness flips in the slice only; the servers keep answering.
	if err := w1.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	es := readSlice(t, f.Remote("cluster-1"), w1)
	for _, ep := range es.Endpoints {
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			t.Errorf("endpoint %v still ready", ep.Addresses)
		}
	}
	checkTraffic(t, w1)
	if err := w1.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, f.Remote("cluster-1"), w1, 2)

	// A workload may start with no replicas.
	idle, err := f.Remote("cluster-2").DeployWorkload(ctx, WorkloadOptions{Namespace: "demo", Service: "idle", ServicePort: 9090, PortName: "grpc-idle"})
	if err != nil {
		t.Fatal(err)
	}
	checkObjects(t, f.Remote("cluster-2"), idle, 0)
	if err := idle.Scale(ctx, 1); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, f.Remote("cluster-2"), idle, 1)
	checkTraffic(t, idle)
	if got := idle.Replicas()[0].PodIP.String(); got != "10.11.0.3" {
		t.Errorf("idle replica has pod IP %s, want 10.11.0.3", got)
	}

	// Delete removes the objects.
	if err := idle.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	c := f.Remote("cluster-2").Client()
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "idle"}, &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("service after Delete: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "idle-e2e"}, &discoveryv1.EndpointSlice{}); !apierrors.IsNotFound(err) {
		t.Errorf("slice after Delete: %v", err)
	}
	if _, err := f.Remote("cluster-2").DeployWorkload(ctx, WorkloadOptions{Namespace: "demo", Service: "echo"}); err == nil {
		t.Errorf("deploying a second workload with the same service name succeeded")
	}
}

func readSlice(t *testing.T, r *RemoteCluster, w *Workload) *discoveryv1.EndpointSlice {
	t.Helper()
	es := &discoveryv1.EndpointSlice{}
	o := w.Options()
	if err := r.Client().Get(t.Context(), client.ObjectKey{Namespace: o.Namespace, Name: o.Service + "-e2e"}, es); err != nil {
		t.Fatal(err)
	}
	return es
}

// checkObjects reads back every object of w and compares it with what
// DeployWorkload promises.
func checkObjects(t *testing.T, r *RemoteCluster, w *Workload, replicas int) {
	t.Helper()
	ctx := t.Context()
	c := r.Client()
	o := w.Options()

	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: r.NodeName()}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[corev1.LabelTopologyRegion] != r.Locality.Region || node.Labels[corev1.LabelTopologyZone] != r.Locality.Zone {
		t.Errorf("node labels %v, want locality %v", node.Labels, r.Locality)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.ServiceAccount}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("service account: %v", err)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Service}, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != o.PortName || svc.Spec.Ports[0].Port != int32(o.ServicePort) ||
		svc.Spec.Ports[0].AppProtocol == nil || *svc.Spec.Ports[0].AppProtocol != "grpc" {
		t.Errorf("service ports %+v", svc.Spec.Ports)
	}

	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(o.Namespace), client.MatchingLabels{"app": o.Service}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != replicas {
		t.Fatalf("%d pods, want %d", len(pods.Items), replicas)
	}
	podByName := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		podByName[p.Name] = p
		if p.Spec.NodeName != r.NodeName() || p.Spec.ServiceAccountName != o.ServiceAccount ||
			p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: node %q sa %q ip %q phase %s", p.Name, p.Spec.NodeName, p.Spec.ServiceAccountName, p.Status.PodIP, p.Status.Phase)
		}
	}

	es := readSlice(t, r, w)
	if es.Labels[discoveryv1.LabelServiceName] != o.Service || es.Labels[discoveryv1.LabelManagedBy] != ManagedByValue ||
		es.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("slice labels %v type %s", es.Labels, es.AddressType)
	}
	if len(es.Ports) != 1 || *es.Ports[0].Name != o.PortName || *es.Ports[0].Port != int32(w.TargetPort()) {
		t.Errorf("slice ports %+v, want %s:%d", es.Ports, o.PortName, w.TargetPort())
	}
	if len(es.Endpoints) != replicas {
		t.Fatalf("%d endpoints, want %d", len(es.Endpoints), replicas)
	}
	reps := w.Replicas()
	for i, ep := range es.Endpoints {
		rep := reps[i]
		pod := podByName[rep.Pod]
		if len(ep.Addresses) != 1 || ep.Addresses[0] != rep.PodIP.String() || ep.Addresses[0] != pod.Status.PodIP {
			t.Errorf("endpoint %v, replica %s at %s, pod IP %s", ep.Addresses, rep.Pod, rep.Addr, pod.Status.PodIP)
		}
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || ep.NodeName == nil || *ep.NodeName != r.NodeName() {
			t.Errorf("endpoint %v conditions %+v node %v", ep.Addresses, ep.Conditions, ep.NodeName)
		}
		if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || ep.TargetRef.Name != rep.Pod || ep.TargetRef.UID != pod.UID {
			t.Errorf("endpoint %v targetRef %+v, want pod %s", ep.Addresses, ep.TargetRef, rep.Pod)
		}
	}
}

// checkTraffic dials every replica directly (no xDS) and checks that it
// answers with its own identity.
func checkTraffic(t *testing.T, w *Workload) {
	t.Helper()
	for _, rep := range w.Replicas() {
		cc, err := grpc.NewClient("passthrough:///"+rep.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		got, err := CallEcho(ctx, cc)
		cancel()
		_ = cc.Close()
		if err != nil {
			t.Errorf("echo %s at %s: %v", rep.Pod, rep.Addr, err)
		} else if got != rep.Identity || got != string(w.Cluster().ID)+"/"+rep.Pod {
			t.Errorf("replica %s answered %q, want %q", rep.Pod, got, rep.Identity)
		}
	}
}

func assertRefused(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		_ = conn.Close()
		t.Errorf("%s still accepts connections", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing %s: %v, want connection refused", addr, err)
	}
}

// testSliceChurn rewrites one slice many times, as the convergence
// benchmark will, and checks the conflict path.
func testSliceChurn(t *testing.T, r *RemoteCluster) {
	ctx := t.Context()
	w, err := r.DeployWorkload(ctx, WorkloadOptions{Namespace: "churn", Service: "churn", Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	start := time.Now()
	for i := range n {
		err := w.UpdateEndpointSlice(ctx, func(es *discoveryv1.EndpointSlice) {
			ready := i%2 == 0
			es.Endpoints[0].Conditions.Ready = &ready
			if es.Annotations == nil {
				es.Annotations = map[string]string{}
			}
			es.Annotations["e2e.meshfed.io/iteration"] = strconv.Itoa(i)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	t.Logf("%d EndpointSlice updates in %s (%s each)", n, el.Round(time.Millisecond), (el / n).Round(time.Microsecond))

	// Someone else writes the slice: the next update conflicts, re-reads
	// and keeps both changes.
	other := readSlice(t, r, w)
	other.Labels["written-by"] = "someone-else"
	if err := r.Client().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	calls := 0
	if err := w.UpdateEndpointSlice(ctx, func(es *discoveryv1.EndpointSlice) {
		calls++
		es.Annotations["e2e.meshfed.io/iteration"] = "last"
	}); err != nil {
		t.Fatal(err)
	}
	got := readSlice(t, r, w)
	if calls != 2 || got.Labels["written-by"] != "someone-else" || got.Annotations["e2e.meshfed.io/iteration"] != "last" {
		t.Errorf("after conflict: %d mutate calls, labels %v, annotations %v", calls, got.Labels, got.Annotations)
	}
}

func testSecrets(t *testing.T, f *Fleet) {
	ctx := t.Context()
	cfg := f.Config()
	r1, r2 := f.Remotes()[0], f.Remotes()[1]
	get := func(name string) *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := cfg.Client().Get(ctx, client.ObjectKey{Namespace: RemoteSecretNamespace, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	if err := cfg.PutRemoteSecret(ctx, "remote-a", r1, r2); err != nil {
		t.Fatal(err)
	}
	s := get("remote-a")
	if s.Labels[MultiClusterLabel] != "true" || len(s.Data) != 2 ||
		!bytes.Equal(s.Data["cluster-1"], r1.HubKubeconfig()) || !bytes.Equal(s.Data["cluster-2"], r2.HubKubeconfig()) {
		t.Fatalf("secret labels %v keys %v", s.Labels, slices.Sorted(mapsKeys(s.Data)))
	}
	// The kubeconfig in the secret works, as the hub will use it.
	for id, kc := range s.Data {
		rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(rc, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes); err != nil {
			t.Errorf("listing nodes of %s with the secret's kubeconfig: %v", id, err)
		}
		if !strings.Contains(rc.Host, "127.0.0.1") || strings.TrimSuffix(rc.Host, "/") != f.Remote(model.ClusterID(id)).Host() {
			t.Errorf("secret entry %s points at %s, cluster at %s", id, rc.Host, f.Remote(model.ClusterID(id)).Host())
		}
	}

	// Update in place: one cluster left, annotated as istioctl does.
	if err := cfg.PutRemoteSecret(ctx, "remote-a", r2); err != nil {
		t.Fatal(err)
	}
	s = get("remote-a")
	if len(s.Data) != 1 || s.Data["cluster-2"] == nil || s.Annotations[ClusterAnnotation] != "cluster-2" {
		t.Errorf("updated secret: keys %v annotations %v", slices.Sorted(mapsKeys(s.Data)), s.Annotations)
	}
	if err := cfg.AnnotateRemoteSecret(ctx, "remote-a", map[string]string{"x": "y", ClusterAnnotation: ""}); err != nil {
		t.Fatal(err)
	}
	if s = get("remote-a"); s.Annotations["x"] != "y" || s.Annotations[ClusterAnnotation] != "" {
		t.Errorf("annotations %v", s.Annotations)
	}

	raw := map[string][]byte{"Bad_Cluster": []byte("not a kubeconfig")}
	if err := cfg.PutRawRemoteSecret(ctx, "bad", raw); err != nil {
		t.Fatal(err)
	}
	if s = get("bad"); !reflect.DeepEqual(s.Data, raw) || s.Labels[MultiClusterLabel] != "true" {
		t.Errorf("raw secret %v", s.Data)
	}
	for range 2 { // deleting is idempotent
		if err := cfg.DeleteRemoteSecret(ctx, "bad"); err != nil {
			t.Fatal(err)
		}
	}
	if err := cfg.Client().Get(ctx, client.ObjectKey{Namespace: RemoteSecretNamespace, Name: "bad"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("secret after delete: %v", err)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func testKubeconfigs(t *testing.T, f *Fleet) {
	ctx := t.Context()
	// The admin kubeconfig file the hub gets with --kubeconfig.
	rc, err := clientcmd.BuildConfigFromFlags("", f.Config().KubeconfigFile())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(rc, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: RemoteSecretNamespace}, &corev1.Namespace{}); err != nil {
		t.Errorf("config cluster via KubeconfigFile: %v", err)
	}

	// A dead kubeconfig is refused quickly.
	dead, err := f.Remotes()[0].DeadKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	rc, err = clientcmd.RESTConfigFromKubeConfig(dead)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 5 * time.Second
	c, err = client.New(rc, client.Options{})
	if err == nil {
		err = c.List(ctx, &corev1.NamespaceList{})
	}
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("dead kubeconfig: %v, want connection refused", err)
	}

	// A user without groups has no permissions.
	weak, err := f.Remotes()[1].AddUser("nobody")
	if err != nil {
		t.Fatal(err)
	}
	rc, err = clientcmd.RESTConfigFromKubeConfig(weak)
	if err != nil {
		t.Fatal(err)
	}
	c, err = client.New(rc, client.Options{})
	if err == nil {
		err = c.List(ctx, &corev1.NamespaceList{})
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("user without groups: %v, want forbidden", err)
	}
}

func testHubProcess(t *testing.T, f *Fleet, out *syncBuffer) {
	ctx := t.Context()
	env := []string{stubHubEnv + "=1"}
	h, err := f.StartHub(ctx, HubOptions{ReplicaID: "stub-0", Args: []string{"--extra=yes"}, Env: env, PlaintextXDS: true})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h.XDSAddr(), "127.0.0.1:") || !strings.HasPrefix(h.MonitoringURL(), "http://127.0.0.1:") {
		t.Errorf("addresses %s %s", h.XDSAddr(), h.MonitoringURL())
	}
	rz, err := h.Registryz(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := &debugdoc.Registryz{
		Replica: "stub-0",
		Clusters: []debugdoc.RegistryzCluster{{ID: "cluster-1", Secret: "istio-system/remote-a", State: debugdoc.ClusterSynced,
			Generation: 3, Services: 1, Endpoints: 2}},
		SecretErrors: []debugdoc.SecretError{{Secret: "istio-system/bad", Error: "no clusters"}},
		Services: []debugdoc.RegistryzService{{
			Hostname: "echo.demo.svc.cluster.local",
			Ports:    []model.ServicePort{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC}},
			Endpoints: []model.Endpoint{{Cluster: "cluster-1", Address: netip.MustParseAddr("127.0.10.1"),
				Locality: model.Locality{Region: "r1", Zone: "z1"}, Ready: true, ServiceAccount: "echo",
				Pod: "echo-0", Ports: map[string]uint32{"grpc": 18080}}},
		}},
	}
	if !reflect.DeepEqual(rz, want) {
		t.Errorf("registryz:\n got %+v\nwant %+v", rz, want)
	}
	if c, ok := rz.Cluster("cluster-1"); !ok || c.State != debugdoc.ClusterSynced {
		t.Errorf("Cluster(cluster-1) = %+v, %v", c, ok)
	}
	if s, ok := rz.Service("echo.demo.svc.cluster.local"); !ok || len(s.ReadyEndpoints("cluster-1")) != 1 || len(s.ReadyEndpoints("cluster-2")) != 0 {
		t.Errorf("Service() = %+v, %v", s, ok)
	}
	m, err := h.Metrics(ctx)
	if err != nil || !strings.Contains(m, `meshfed_stub_info{replica="stub-0"} 1`) {
		t.Errorf("metrics %q, %v", m, err)
	}

	if err := h.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := h.ExitErr(); err != nil {
		t.Errorf("stub exited with %v after SIGTERM", err)
	}
	logs, err := h.Logs()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[stub-0] starting ", "[stub-0] stub hub stub-0: xds ", "extra=yes",
		"[stub-0] partial line without newline\n", "[stub-0] stub hub stub-0: TERMINATED, exiting", "[stub-0] exited: status 0"} {
		if !strings.Contains(logs, want) {
			t.Errorf("hub log lacks %q:\n%s", want, logs)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("LogOutput lacks %q", want)
		}
	}

	// Kill, and a restart on the same addresses.
	h2, err := f.StartHub(ctx, HubOptions{ReplicaID: "stub-1", Env: env, PlaintextXDS: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if err := h2.Kill(); err != nil {
		t.Errorf("Kill: %v", err)
	}
	var ee interface{ Sys() any }
	if err := h2.ExitErr(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("killed hub exit: %v", err)
	}
	h3, err := f.StartHub(ctx, HubOptions{ReplicaID: "stub-1", Env: env, XDSAddr: h2.XDSAddr(), MonitoringAddr: strings.TrimPrefix(h2.MonitoringURL(), "http://")})
	if err != nil {
		t.Fatal(err)
	}
	if err := h3.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if h3.XDSAddr() != h2.XDSAddr() || len(f.Hubs()) != 3 {
		t.Errorf("restart: %s vs %s, %d hubs", h3.XDSAddr(), h2.XDSAddr(), len(f.Hubs()))
	}
	// h3 is left running: Fleet.Stop must stop it.

	// A hub that exits at once is reported by WaitReady with its log.
	bad, err := f.StartHub(ctx, HubOptions{ReplicaID: "stub-bad", Env: env, Args: []string{"--no-such-flag"}})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.WaitReady(wctx)
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("WaitReady of a failing hub: %v", err)
	}
}

// childProcesses returns the PIDs and names of this process's children.
func childProcesses(t *testing.T) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	out := map[int]string{}
	me := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(s[closing+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me {
			out[pid] = s[open+1 : closing]
		}
	}
	return out
}

func logRSS(t *testing.T, procs map[int]string) {
	for pid, comm := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				t.Logf("pid %d %s: %s", pid, comm, strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")))
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// BenchmarkFleetStart measures how long a config cluster and three remote
// clusters take to start and stop.
func BenchmarkFleetStart(b *testing.B) {
	for b.Loop() {
		start := time.Now()
		f := NewTestFleet(b, FleetOptions{Remotes: Remotes(3)})
		b.ReportMetric(time.Since(start).Seconds(), "start-s/op")
		stop := time.Now()
		if err := f.Stop(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(stop).Seconds(), "stop-s/op")
	}
}

func TestByCluster(t *testing.T) {
	got := ByCluster(map[string]int{"c1/a": 2, "c1/b": 3, "c2/a": 1, "weird": 4})
	want := map[model.ClusterID]int{"c1": 5, "c2": 1, "weird": 4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ByCluster = %v, want %v", got, want)
	}
}

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	w := newPrefixWriter(&b, "[p] ")
	fmt.Fprint(w, "one\ntw")
	fmt.Fprint(w, "o\nthree")
	w.Flush()
	if got, want := b.String(), "[p] one\n[p] two\n[p] three\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestIPAllocator(t *testing.T) {
	a, err := newIPAllocator(2)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := a.get()
	y, _ := a.get()
	if x.String() != "10.12.0.1" || y.String() != "10.12.0.2" {
		t.Errorf("got %s %s", x, y)
	}
	a.put(x)
	if z, _ := a.get(); z != x {
		t.Errorf("released address not reused: %s", z)
	}
	var last netip.Addr
	for range maxPodsPerCluster - 2 {
		if last, err = a.get(); err != nil {
			t.Fatal(err)
		}
	}
	if last.String() != "10.12.255.254" {
		t.Errorf("last address %s", last)
	}
	if _, err := a.get(); err == nil {
		t.Errorf("address handed out beyond the range")
	}
	a.put(netip.MustParseAddr("10.12.1.1"))
	if z, _ := a.get(); z.String() != "10.12.1.1" {
		t.Errorf("released address not reused: %s", z)
	}
	if _, err := newIPAllocator(246); err == nil {
		t.Errorf("cluster index 246 accepted")
	}
}

func TestNodeIDAndBootstrap(t *testing.T) {
	c, err := NewXDSClient(t.Context(), ClientOptions{HubAddr: "127.0.0.1:1", Cluster: "c1", Namespace: "ns", Name: "pod-1",
		Locality: model.Locality{Region: "r", Zone: "z"}, Labels: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID() != "sidecar~127.0.0.1~pod-1.ns~ns.svc.cluster.local" {
		t.Errorf("node ID %s", c.NodeID())
	}
	var compact bytes.Buffer // the bootstrap is indented
	if err := json.Compact(&compact, c.Bootstrap()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"server_uri":"127.0.0.1:1"`, `"channel_creds":[{"type":"insecure"}]`, `"server_features":["xds_v3"]`,
		`"locality":{"region":"r","zone":"z"}`, `"CLUSTER_ID":"c1"`, `"NAMESPACE":"ns"`, `"LABELS":{"app":"x"}`} {
		if !strings.Contains(compact.String(), want) {
			t.Errorf("bootstrap %s lacks %s", compact.String(), want)
		}
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if _, err := c.Dial("xds:///x:1"); err == nil {
		t.Errorf("Dial after Close succeeded")
	}
}

func TestPodAddressing(t *testing.T) {
	local, ok := LocalAddr(netip.MustParseAddr("10.11.2.3"))
	if !ok || local.String() != "127.11.2.3" || PodIP(local).String() != "10.11.2.3" {
		t.Errorf("LocalAddr = %s, %v", local, ok)
	}
	for _, ip := range []string{"10.0.0.5", "192.168.1.1", "::1"} {
		if got, ok := LocalAddr(netip.MustParseAddr(ip)); ok || got.String() != ip {
			t.Errorf("LocalAddr(%s) = %s, %v; want unchanged", ip, got, ok)
		}
	}
	// DialPod reaches a server on 127.X.A.B through its pod IP.
	srv, err := StartEchoServer("127.30.0.7:0", "c/p")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	podAddr := netip.AddrPortFrom(PodIP(srv.Addr().Addr()), srv.Addr().Port()).String()
	cc, err := grpc.NewClient("passthrough:///"+podAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(DialPod))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if id, err := CallEcho(t.Context(), cc); err != nil || id != "c/p" {
		t.Errorf("echo via %s: %q, %v", podAddr, id, err)
	}
	if srv.Served() != 1 {
		t.Errorf("served %d", srv.Served())
	}
}
