package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// ManagedByValue is the endpointslice.kubernetes.io/managed-by label of the
// EndpointSlices the framework writes.
const ManagedByValue = "e2e.meshfed.io"

// WorkloadOptions describes a workload: a Service and its replicas, each a
// Pod backed by a real gRPC echo server.
type WorkloadOptions struct {
	// Namespace of every object. Default "default".
	Namespace string
	// Service is the Service name, also the app label and pod-name prefix.
	// Required.
	Service string
	// ServicePort is the port clients dial. Default 8080.
	ServicePort uint32
	// PortName names the service port. Default "grpc".
	PortName string
	// AppProtocol is the appProtocol of the Service port and the
	// EndpointSlice port, which selects the protocol Envoy sidecars speak
	// (grpc, http, http2, tcp). Default "grpc".
	AppProtocol string
	// ServiceAccount runs the Pods. Default: the service name.
	ServiceAccount string
	// Replicas is the initial number of replicas; zero is allowed.
	Replicas int
	// PodLabels are labels of every replica's Pod besides app=<Service>
	// (which they may not change), e.g. version: v1 for DestinationRule
	// subsets. Default none.
	PodLabels map[string]string
	// Faults, when set, make every replica's echo server misbehave (fail
	// calls, answer late) from its start; see SetFaults to change them
	// while the workload runs. Default: every replica behaves.
	Faults *EchoFaults
	// XDS, when set, makes every replica an xDS-enabled gRPC server
	// (StartXDSEchoServer) that takes its inbound listener, and with it its
	// security, from the hub. Default: plain gRPC echo servers.
	XDS *XDSWorkloadOptions
}

// XDSWorkloadOptions make a workload's replicas xDS-enabled gRPC servers.
type XDSWorkloadOptions struct {
	// HubAddr is the hub's xDS address: with Certs its authenticated port
	// (Hub.CAAddr), which every replica dials over mutual TLS with its own
	// certificate; without, its plaintext port (HubOptions.PlaintextXDS).
	// Required.
	HubAddr string
	// Certs, when set, gives every replica its own certificate agent
	// (StartCertAgent, for the workload's service account), whose files
	// the replica's bootstrap names as certificate provider "default", so
	// the replica can serve mTLS, and as its channel credentials to the
	// hub. Without it the replicas serve plaintext.
	Certs *CertOptions
	// MaxConnectionAge, when set, makes each replica's gRPC server close
	// connections after about that long (grpc keepalive MaxConnectionAge):
	// clients reconnect, so every connection handshakes with the
	// certificates and roots of the moment.
	MaxConnectionAge time.Duration
}

func (o *WorkloadOptions) defaults() error {
	if o.Service == "" {
		return errors.New("framework: WorkloadOptions.Service is empty")
	}
	if o.Replicas < 0 {
		return fmt.Errorf("framework: negative replica count %d", o.Replicas)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.ServicePort == 0 {
		o.ServicePort = 8080
	}
	if o.ServicePort > 65535 {
		return fmt.Errorf("framework: service port %d out of range", o.ServicePort)
	}
	if o.PortName == "" {
		o.PortName = "grpc"
	}
	if o.AppProtocol == "" {
		o.AppProtocol = "grpc"
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = o.Service
	}
	if o.XDS != nil && o.XDS.HubAddr == "" {
		return errors.New("framework: WorkloadOptions.XDS.HubAddr is empty")
	}
	if v, ok := o.PodLabels["app"]; ok && v != o.Service {
		return fmt.Errorf("framework: WorkloadOptions.PodLabels sets app=%q, not the service %q", v, o.Service)
	}
	o.PodLabels = maps.Clone(o.PodLabels)
	if o.Faults != nil {
		f := *o.Faults
		o.Faults = &f
	}
	return nil
}

// podLabels returns the labels of a replica's Pod: app=<Service>,
// security.istio.io/tlsMode=istio (istioconfig.TLSModeLabel, by which
// clients' auto mTLS knows the Pod terminates mutual TLS) for xDS servers
// with certificates, as grpc-agent injection labels a Pod, then PodLabels.
func (w *Workload) podLabels() map[string]string {
	out := map[string]string{"app": w.opts.Service}
	if w.opts.XDS != nil && w.opts.XDS.Certs != nil {
		out[istioconfig.TLSModeLabel] = istioconfig.TLSModeIstio
	}
	maps.Copy(out, w.opts.PodLabels)
	return out
}

// Replica is one running replica of a workload.
type Replica struct {
	// Pod is the Pod's name.
	Pod string
	// PodIP is the replica's address in the Pod status and the
	// EndpointSlice, 10.X.A.B.
	PodIP netip.Addr
	// Addr is where the replica's echo server really listens: 127.X.A.B
	// and the target port. DialPod maps PodIP to it.
	Addr netip.AddrPort
	// Identity is what the replica answers: "<cluster>/<pod>".
	Identity string
	// CertDir holds the replica's certificate files (XDS.Certs only).
	CertDir string
}

type replica struct {
	pod    string
	podIP  netip.Addr
	uid    types.UID
	server *EchoServer
	agent  *CertAgent // with XDS.Certs only
}

// Workload is a deployed service in one remote cluster. Its methods are
// safe for concurrent use; they are serialized.
type Workload struct {
	cluster *RemoteCluster
	opts    WorkloadOptions

	mu         sync.Mutex
	targetPort uint16
	ready      bool
	nextPod    int
	replicas   []*replica
	slice      *discoveryv1.EndpointSlice // as last written
	stopped    bool
}

// DeployWorkload creates, in the cluster: the namespace, the cluster's Node
// (labelled with its locality), a ServiceAccount, a Service with one port
// (appProtocol as the options say), one Pod per replica with its status.podIP set, and one
// EndpointSlice naming every replica as ready. There is no controller
// manager in the fleet, so the framework keeps that EndpointSlice itself.
// Each replica is a real echo server with its own Pod IP 10.X.A.B,
// listening on 127.X.A.B (see LocalAddr); all replicas share one target
// port.
func (r *RemoteCluster) DeployWorkload(ctx context.Context, opts WorkloadOptions) (_ *Workload, retErr error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	w := &Workload{cluster: r, opts: opts, ready: true}
	defer func() {
		if retErr != nil {
			w.Stop()
		}
	}()
	c := r.client
	if err := r.EnsureNamespace(ctx, opts.Namespace); err != nil {
		return nil, err
	}
	if err := r.ensureNode(ctx); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.ServiceAccount}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, w.errorf("creating service account: %w", err)
	}

	// Start the servers first: the target port is chosen by the first one.
	added, err := w.startReplicas(ctx, opts.Replicas)
	if err != nil {
		return nil, err
	}
	w.replicas = added

	appProtocol := opts.AppProtocol
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Service, Labels: map[string]string{"app": opts.Service}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{
				Name:        opts.PortName,
				Port:        int32(opts.ServicePort),
				Protocol:    corev1.ProtocolTCP,
				AppProtocol: &appProtocol,
				TargetPort:  intstr.FromInt32(int32(w.port())),
			}},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		return nil, w.errorf("creating service: %w", err)
	}
	if err := w.createPods(ctx, added); err != nil {
		return nil, err
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: opts.Namespace,
			Name:      opts.Service + "-e2e",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: opts.Service,
				discoveryv1.LabelManagedBy:   ManagedByValue,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{w.slicePort()},
		Endpoints:   w.endpoints(),
	}
	if err := c.Create(ctx, es); err != nil {
		return nil, w.errorf("creating endpoint slice: %w", err)
	}
	w.slice = es

	r.wlMu.Lock()
	r.workloads = append(r.workloads, w)
	r.wlMu.Unlock()
	return w, nil
}

func (w *Workload) errorf(format string, args ...any) error {
	return fmt.Errorf("framework: workload %s/%s in %s: "+format,
		append([]any{w.opts.Namespace, w.opts.Service, w.cluster.ID}, args...)...)
}

func (w *Workload) port() uint16 { return w.targetPort }

func (w *Workload) slicePort() discoveryv1.EndpointPort {
	name, port, proto, app := w.opts.PortName, int32(w.targetPort), corev1.ProtocolTCP, w.opts.AppProtocol
	return discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &proto, AppProtocol: &app}
}

// maxBindAttempts bounds the addresses tried per replica (or ports for the
// first replica) when another socket already holds one.
const maxBindAttempts = 8

// startReplicas starts n echo servers on fresh addresses. The first server
// of the workload picks the target port; the others reuse it. An address or
// port already taken (another test process uses the same loopback
// addresses) is skipped.
func (w *Workload) startReplicas(ctx context.Context, n int) ([]*replica, error) {
	var out []*replica
	fail := func(err error) ([]*replica, error) {
		w.stopReplicas(out)
		return nil, err
	}
	for range n {
		pod := w.opts.Service + "-" + strconv.Itoa(w.nextPod)
		identity := string(w.cluster.ID) + "/" + pod
		var (
			srv     *EchoServer
			podIP   netip.Addr
			lastErr error
			skipped []netip.Addr
			agent   *CertAgent
		)
		if x := w.opts.XDS; x != nil && x.Certs != nil {
			dir, err := os.MkdirTemp("", "meshfed-certs-")
			if err != nil {
				return fail(w.errorf("replica %s: %w", pod, err))
			}
			agent, err = w.cluster.StartCertAgent(ctx, w.opts.Namespace, w.opts.ServiceAccount, dir, *x.Certs)
			if err != nil {
				_ = os.RemoveAll(dir)
				return fail(w.errorf("replica %s: %w", pod, err))
			}
		}
		for range maxBindAttempts {
			ip, err := w.cluster.ips.get()
			if err != nil {
				lastErr = err
				break
			}
			srv, err = w.startServer(ip, pod, identity, agent)
			if err == nil {
				podIP = ip
				break
			}
			lastErr = err
			if !errors.Is(err, syscall.EADDRINUSE) {
				w.cluster.ips.put(ip)
				break
			}
			skipped = append(skipped, ip) // held elsewhere; try another
		}
		for _, ip := range skipped {
			w.cluster.ips.put(ip)
		}
		if srv == nil {
			if agent != nil {
				agent.Stop()
				_ = os.RemoveAll(agent.Dir())
			}
			return fail(w.errorf("starting replica %s: %w", pod, lastErr))
		}
		if w.targetPort == 0 {
			w.targetPort = srv.Addr().Port()
		}
		// Before the replica is in the EndpointSlice, so before any call.
		srv.SetFaults(w.opts.Faults)
		w.nextPod++
		out = append(out, &replica{pod: pod, podIP: podIP, server: srv, agent: agent})
	}
	if w.targetPort == 0 { // zero replicas: still reserve a port number
		addrs, err := freeAddrs(1)
		if err != nil {
			return fail(w.errorf("choosing a target port: %w", err))
		}
		ap, err := netip.ParseAddrPort(addrs[0])
		if err != nil {
			return fail(w.errorf("choosing a target port: %w", err))
		}
		w.targetPort = ap.Port()
	}
	return out, nil
}

// startServer starts the server of a replica with Pod IP ip on the
// workload's target port (0: pick one): a plain echo server, or with
// WorkloadOptions.XDS an xDS-enabled one.
func (w *Workload) startServer(ip netip.Addr, pod, identity string, agent *CertAgent) (*EchoServer, error) {
	x := w.opts.XDS
	if x == nil {
		local, _ := LocalAddr(ip)
		return StartEchoServer(netip.AddrPortFrom(local, w.targetPort).String(), identity)
	}
	opts := XDSServerOptions{
		HubAddr: x.HubAddr, Cluster: w.cluster.ID, Namespace: w.opts.Namespace, Pod: pod,
		PodIP: ip, Port: w.targetPort, Identity: identity, MaxConnectionAge: x.MaxConnectionAge,
	}
	if agent != nil {
		opts.CertDir, opts.ServerTLS = agent.Dir(), true
	}
	return StartXDSEchoServer(opts)
}

func (w *Workload) stopReplicas(rs []*replica) {
	var wg sync.WaitGroup
	for _, rep := range rs {
		wg.Go(func() {
			rep.server.Stop()
			if rep.agent != nil {
				rep.agent.Stop()
				_ = os.RemoveAll(rep.agent.Dir())
			}
			w.cluster.ips.put(rep.podIP)
		})
	}
	wg.Wait()
}

// WaitServing waits until every running replica serves; xDS-enabled
// replicas serve once the hub sent their inbound listener.
func (w *Workload) WaitServing(ctx context.Context) error {
	w.mu.Lock()
	rs := slices.Clone(w.replicas)
	w.mu.Unlock()
	for _, rep := range rs {
		if err := rep.server.WaitServing(ctx); err != nil {
			return w.errorf("%w", err)
		}
	}
	return nil
}

// PeerIDs maps the identity of every running replica to the client SPIFFE
// ID of the last call it answered (empty: none, or no client certificate).
func (w *Workload) PeerIDs() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	if w.stopped {
		return out
	}
	for _, rep := range w.replicas {
		out[rep.server.Identity()] = rep.server.PeerID()
	}
	return out
}

// PeerIssuers counts, over the running replicas, the calls answered by the
// issuer (common name) of the client certificate.
func (w *Workload) PeerIssuers() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, rep := range w.replicas {
		for k, v := range rep.server.PeerIssuers() {
			out[k] += v
		}
	}
	return out
}

// createPods creates a Pod per replica and sets its status (Running,
// Ready, podIP) through the status subresource.
func (w *Workload) createPods(ctx context.Context, rs []*replica) error {
	c := w.cluster.client
	noToken := false
	for _, rep := range rs {
		ip := rep.podIP.String()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: w.opts.Namespace,
				Name:      rep.pod,
				Labels:    w.podLabels(),
			},
			Spec: corev1.PodSpec{
				NodeName:                     w.cluster.NodeName(),
				ServiceAccountName:           w.opts.ServiceAccount,
				AutomountServiceAccountToken: &noToken,
				Containers: []corev1.Container{{
					Name:  "echo",
					Image: "e2e.meshfed.io/echo:latest",
					Ports: []corev1.ContainerPort{{Name: w.opts.PortName, ContainerPort: int32(w.targetPort), Protocol: corev1.ProtocolTCP}},
				}},
			},
		}
		if err := c.Create(ctx, pod); err != nil {
			return w.errorf("creating pod %s: %w", rep.pod, err)
		}
		rep.uid = pod.UID
		if err := SetPodRunning(ctx, c, pod, ip, ""); err != nil {
			return w.errorf("%w", err)
		}
	}
	return nil
}

// SetPodRunning sets the status of pod, just created, as the kubelet
// would once its containers run: Running and Ready with the Pod's IP (and
// the node's, hostIP, when set). There is no kubelet in the fleet, and the
// spoke and the hub read Pods by their status.
func SetPodRunning(ctx context.Context, c client.Client, pod *corev1.Pod, podIP, hostIP string) error {
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     podIP,
		PodIPs:    []corev1.PodIP{{IP: podIP}},
		HostIP:    hostIP,
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("setting status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (w *Workload) deletePods(ctx context.Context, rs []*replica) error {
	var errs []error
	for _, rep := range rs {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: rep.pod}}
		// Grace period 0: no kubelet will ever confirm a graceful delete.
		if err := w.cluster.client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, w.errorf("deleting pod %s: %w", rep.pod, err))
		}
	}
	return errors.Join(errs...)
}

// endpoints returns the slice endpoints of the current replicas.
func (w *Workload) endpoints() []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, 0, len(w.replicas))
	node := w.cluster.NodeName()
	var zone *string
	if z := w.cluster.Locality.Zone; z != "" {
		zone = &z
	}
	for _, rep := range w.replicas {
		ready, serving, terminating := w.ready, w.ready, false
		out = append(out, discoveryv1.Endpoint{
			Addresses:  []string{rep.podIP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node,
			Zone:       zone,
			TargetRef: &corev1.ObjectReference{
				Kind: "Pod", Namespace: w.opts.Namespace, Name: rep.pod, UID: rep.uid,
			},
		})
	}
	return out
}

// Scale sets the number of replicas. Scaling up starts servers, creates
// their Pods, then rewrites the EndpointSlice; scaling down removes the
// newest replicas from the EndpointSlice first, then deletes their Pods
// and stops their servers. Endpoints added with UpdateEndpointSlice are
// replaced.
func (w *Workload) Scale(ctx context.Context, n int) error {
	if n < 0 {
		return w.errorf("negative replica count %d", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return w.errorf("stopped")
	}
	switch cur := len(w.replicas); {
	case n > cur:
		added, err := w.startReplicas(ctx, n-cur)
		if err != nil {
			return err
		}
		w.replicas = append(w.replicas, added...)
		if err := w.createPods(ctx, added); err != nil {
			return err
		}
	case n < cur:
		removed := slices.Clone(w.replicas[n:])
		w.replicas = w.replicas[:n]
		err := w.updateSlice(ctx, func(es *discoveryv1.EndpointSlice) { es.Endpoints = w.endpoints() })
		err = errors.Join(err, w.deletePods(ctx, removed))
		w.stopReplicas(removed)
		return err
	default:
		return nil
	}
	return w.updateSlice(ctx, func(es *discoveryv1.EndpointSlice) { es.Endpoints = w.endpoints() })
}

// SetReady sets conditions.ready (and serving) of every endpoint of the
// slice; the servers keep running. Replicas added later get the same value.
func (w *Workload) SetReady(ctx context.Context, ready bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ready = ready
	return w.updateSlice(ctx, func(es *discoveryv1.EndpointSlice) {
		for i := range es.Endpoints {
			r, s := ready, ready
			es.Endpoints[i].Conditions.Ready = &r
			es.Endpoints[i].Conditions.Serving = &s
		}
	})
}

// SetFaults makes every replica's echo server, running and added later,
// misbehave as f says from its next call on (nil: behave), counting calls
// afresh for FailEvery. f is copied.
func (w *Workload) SetFaults(f *EchoFaults) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.opts.Faults = nil
	if f != nil {
		c := *f
		w.opts.Faults = &c
	}
	for _, rep := range w.replicas {
		rep.server.SetFaults(f)
	}
}

// SetReplicaFaults makes the echo server of the running replica whose Pod
// is pod misbehave as f says (nil: behave), as SetFaults does; the other
// replicas and those added later keep theirs.
func (w *Workload) SetReplicaFaults(pod string, f *EchoFaults) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rep := range w.replicas {
		if rep.pod == pod {
			rep.server.SetFaults(f)
			return nil
		}
	}
	return w.errorf("no running replica %s", pod)
}

// SetPodLabels replaces the PodLabels of every replica's Pod, running and
// added later (a relabel, as a canary's promotion does); app=<Service>
// stays. The EndpointSlice is left as it is: the hub must notice the Pods'
// change itself.
func (w *Workload) SetPodLabels(ctx context.Context, labels map[string]string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := labels["app"]; ok && v != w.opts.Service {
		return w.errorf("pod labels set app=%q", v)
	}
	old := w.opts.PodLabels
	w.opts.PodLabels = maps.Clone(labels)
	c := w.cluster.client
	for _, rep := range w.replicas {
		for attempt := 0; ; attempt++ {
			var pod corev1.Pod
			if err := c.Get(ctx, types.NamespacedName{Namespace: w.opts.Namespace, Name: rep.pod}, &pod); err != nil {
				return w.errorf("reading pod %s: %w", rep.pod, err)
			}
			// Labels others wrote (the apiserver copies the Node's topology
			// labels onto a new Pod) stay.
			for k := range old {
				delete(pod.Labels, k)
			}
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			maps.Copy(pod.Labels, w.podLabels())
			err := c.Update(ctx, &pod)
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) || attempt == maxConflictRetries {
				return w.errorf("relabelling pod %s: %w", rep.pod, err)
			}
		}
	}
	return nil
}

// UpdateEndpointSlice applies mutate to a copy of the workload's
// EndpointSlice as last written and updates it: one request when nobody
// else wrote the slice, a re-read and retry on conflict. mutate may run
// more than once. Benchmarks use it to churn the slice.
func (w *Workload) UpdateEndpointSlice(ctx context.Context, mutate func(*discoveryv1.EndpointSlice)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updateSlice(ctx, mutate)
}

const maxConflictRetries = 5

func (w *Workload) updateSlice(ctx context.Context, mutate func(*discoveryv1.EndpointSlice)) error {
	if w.slice == nil {
		return w.errorf("no endpoint slice")
	}
	c := w.cluster.client
	for attempt := 0; ; attempt++ {
		next := w.slice.DeepCopy()
		mutate(next)
		err := c.Update(ctx, next)
		if err == nil {
			w.slice = next
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == maxConflictRetries {
			return w.errorf("updating endpoint slice: %w", err)
		}
		fresh := &discoveryv1.EndpointSlice{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w.slice), fresh); err != nil {
			return w.errorf("re-reading endpoint slice: %w", err)
		}
		w.slice = fresh
	}
}

// EndpointSlice returns a copy of the slice as last written.
func (w *Workload) EndpointSlice() *discoveryv1.EndpointSlice {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.slice.DeepCopy()
}

// Replicas returns the running replicas, oldest first (none after Stop).
func (w *Workload) Replicas() []Replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	out := make([]Replica, len(w.replicas))
	for i, rep := range w.replicas {
		out[i] = Replica{Pod: rep.pod, PodIP: rep.podIP, Addr: rep.server.Addr(), Identity: rep.server.Identity()}
		if rep.agent != nil {
			out[i].CertDir = rep.agent.Dir()
		}
	}
	return out
}

// Backends returns the identities "<cluster>/<pod>" of the running
// replicas, sorted (none after Stop).
func (w *Workload) Backends() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	out := make([]string, len(w.replicas))
	for i, rep := range w.replicas {
		out[i] = rep.server.Identity()
	}
	slices.Sort(out)
	return out
}

// Cluster returns the cluster the workload runs in.
func (w *Workload) Cluster() *RemoteCluster { return w.cluster }

// Options returns the options with defaults applied.
func (w *Workload) Options() WorkloadOptions { return w.opts }

// Hostname returns the service's hostname, <svc>.<ns>.svc.cluster.local.
func (w *Workload) Hostname() model.Hostname {
	return model.ServiceHostname(w.opts.Service, w.opts.Namespace, "")
}

// Target returns the xDS target clients dial:
// xds:///<svc>.<ns>.svc.cluster.local:<service port>.
func (w *Workload) Target() string {
	return "xds:///" + string(w.Hostname()) + ":" + strconv.FormatUint(uint64(w.opts.ServicePort), 10)
}

// TargetPort returns the port every replica listens on.
func (w *Workload) TargetPort() uint16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.targetPort
}

// Stop stops every replica's server and leaves the Kubernetes objects as
// they are: the endpoints stay in the slice but refuse connections. It is
// idempotent.
func (w *Workload) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	w.stopReplicas(w.replicas)
}

// Delete stops the servers and deletes the workload's EndpointSlice, Pods
// and Service. The namespace, ServiceAccount and Node stay.
func (w *Workload) Delete(ctx context.Context) error {
	w.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.cluster.client
	var errs []error
	del := func(obj client.Object) {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, w.errorf("deleting %T %s: %w", obj, obj.GetName(), err))
		}
	}
	if w.slice != nil {
		del(w.slice.DeepCopy())
	}
	errs = append(errs, w.deletePods(ctx, w.replicas))
	del(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.opts.Service}})
	return errors.Join(errs...)
}
