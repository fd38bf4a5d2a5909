//go:build linux

package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshfed/meshfed/pkg/xdsnode"
	"github.com/meshfed/meshfed/spoke/inject"
)

// Sidecar pods: Istio's own data plane, pilot-agent driving upstream
// Envoy, configured by the hub, in a Pod of the pod network. The agent's
// environment and flags are what the spoke's `sidecar` injection template
// renders for the Pod (the template runs for real, through
// spoke/inject), plus what running outside a kubelet needs:
//
//   - ISTIO_META_INTERCEPTION_MODE=NONE: istio-init's iptables rules are not
//     installed, so Envoy must bind its listeners for real;
//   - CLOUD_PLATFORM=none: otherwise pilot-agent probes cloud metadata
//     addresses to learn its platform;
//   - HOST_IP: the kubelet's status.hostIP, here the pod network gateway;
//   - PROXY_CONFIG: the template's (discoveryAddress) plus the Envoy binary
//     (binaryPath), absolute paths for configPath and the bootstrap
//     template (pilot-agent's defaults are relative to /), the control
//     plane's authentication policy, one Envoy worker, and a short drain.
//
// The kubelet's part is done by the framework: the Pod's working directory
// holds the projected token (a real TokenRequest token of the Pod's
// ServiceAccount, with the template's audience) and istio-ca-root-cert at
// the template's mount paths, and the downward-API labels file.

// HubServiceName is the hub's name in the Pods' /etc/hosts: the Service
// name istiod has, which the hub's CA serving certificate carries, so that
// pilot-agent verifies the CA (and the TLS xDS port) as it would in a
// cluster. It maps to the pod network gateway, where the hub listens.
const HubServiceName = "istiod." + RemoteSecretNamespace + ".svc"

// Envoy's and pilot-agent's fixed ports inside a Pod.
const (
	EnvoyAdminPort      = 15000
	AgentStatusPort     = 15020
	EnvoyReadinessPort  = 15021
	EnvoyPrometheusPort = 15090
)

// SidecarStopGrace is how long Sidecar.Stop waits after SIGTERM.
const SidecarStopGrace = 10 * time.Second

// SidecarXDS says how pilot-agent reaches the hub's xDS.
type SidecarXDS int

const (
	// SidecarXDSTLS dials SidecarOptions.XDSTLSAddr with Istio's default,
	// controlPlaneAuthPolicy MUTUAL_TLS: the workload certificate as the
	// client certificate, the hub verified as HubServiceName. The default.
	SidecarXDSTLS SidecarXDS = iota
	// SidecarXDSPlaintext dials the hub's plaintext xDS port
	// (HubOptions.PlaintextXDS) with controlPlaneAuthPolicy NONE:
	// unauthenticated, for a test that says why.
	SidecarXDSPlaintext
)

// SidecarOptions describe one sidecar Pod.
type SidecarOptions struct {
	// Cluster is the remote cluster the Pod lives in. Required.
	Cluster *RemoteCluster
	// Pod is the network namespace the processes run in. Required.
	Pod *Pod
	// Hub is the control plane: xDS and CA. It must listen where Pods
	// reach it (HubOptions.ListenHost = PodNetworkGateway). Required.
	Hub *Hub
	// Name is the Pod's name. Required.
	Name string
	// Namespace of the Pod. Default "default".
	Namespace string
	// ServiceAccount runs the Pod. Default: Workload's, else "default".
	ServiceAccount string
	// Workload, when set, makes the Pod an endpoint of the workload's
	// Service: the Pod carries its app label, and its address is added to
	// the workload's EndpointSlice (ready as the workload's SetReady says).
	// Deploy such workloads with zero replicas and do not Scale them:
	// Scale rewrites the slice from its own replicas.
	Workload *Workload
	// Labels are extra Pod labels.
	Labels map[string]string
	// AppPorts are the application container's ports in the Pod spec.
	// Default: the workload's target port, if any.
	AppPorts []uint16
	// XDS chooses the xDS transport; XDSTLSAddr is the hub's TLS xDS
	// address (its port is used with HubServiceName) for SidecarXDSTLS,
	// default Hub.CAAddr().
	XDS        SidecarXDS
	XDSTLSAddr string
	// PilotAgentBinary, EnvoyBinary and BootstrapTemplate are required;
	// the test helper fills them from the environment.
	PilotAgentBinary, EnvoyBinary, BootstrapTemplate string
	// RootsPEM is the istio-ca-root-cert the Pod mounts. Default: the
	// roots of the hub's /debug/trustz.
	RootsPEM []byte
	// ProxyConfig fields override PROXY_CONFIG's.
	ProxyConfig map[string]any
	// Env is extra environment (KEY=value), applied last.
	Env []string
	// Gateway makes the Pod a gateway, as Istio's gateway chart deploys
	// one: its only container is istio-proxy (image "auto"), rendered by
	// the spoke's gateway template into pilot-agent `proxy router`, which
	// binds its Gateways' ports in the Pod. Its node ID is of type router.
	Gateway bool
	// Network is the spoke chart's network value for the Pod's cluster,
	// which the injector writes as ISTIO_META_NETWORK (a Pod label
	// topology.istio.io/network wins). Default none: the hub then takes
	// the cluster's network.
	Network string
}

func (o *SidecarOptions) defaults() error {
	switch {
	case o.Cluster == nil, o.Pod == nil, o.Hub == nil:
		return errors.New("framework: SidecarOptions needs Cluster, Pod and Hub")
	case o.Name == "":
		return errors.New("framework: SidecarOptions.Name is empty")
	case o.PilotAgentBinary == "" || o.EnvoyBinary == "" || o.BootstrapTemplate == "":
		return errors.New("framework: SidecarOptions needs PilotAgentBinary, EnvoyBinary and BootstrapTemplate")
	case o.XDS == SidecarXDSPlaintext && o.Hub.XDSAddr() == "":
		return fmt.Errorf("framework: SidecarXDSPlaintext needs hub %s started with HubOptions.PlaintextXDS", o.Hub.ReplicaID())
	}
	if o.XDSTLSAddr == "" {
		o.XDSTLSAddr = o.Hub.CAAddr()
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Workload != nil {
		if o.Workload.Cluster() != o.Cluster {
			return errors.New("framework: the sidecar's workload is in another cluster")
		}
		if o.Workload.Options().Namespace != o.Namespace {
			return errors.New("framework: the sidecar's workload is in another namespace")
		}
		if o.ServiceAccount == "" {
			o.ServiceAccount = o.Workload.Options().ServiceAccount
		}
		if len(o.AppPorts) == 0 {
			o.AppPorts = []uint16{o.Workload.TargetPort()}
		}
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = "default"
	}
	return nil
}

// Sidecar is a running sidecar Pod: its Kubernetes Pod object, and
// pilot-agent (with Envoy as its child) in the Pod's network namespace.
type Sidecar struct {
	opts   SidecarOptions
	dir    string
	nodeID string
	spec   *corev1.Pod // as created
	*process
}

// StartSidecar registers the Pod in its cluster (a Pod object as the
// spoke's injector renders it, status Running with the Pod's IP, and an
// endpoint in the workload's EndpointSlice) and starts pilot-agent in the
// Pod. It returns once the agent runs; use WaitAdmin or WaitReady.
func (f *Fleet) StartSidecar(ctx context.Context, opts SidecarOptions) (_ *Sidecar, retErr error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	r := opts.Cluster
	if err := r.EnsureServiceAccount(ctx, opts.Namespace, opts.ServiceAccount); err != nil {
		return nil, err
	}
	if err := r.ensureNode(ctx); err != nil {
		return nil, err
	}
	if err := opts.Pod.SetHost(HubServiceName, hubHost(opts.Hub)); err != nil {
		return nil, err
	}
	pod, err := injectedPod(opts)
	if err != nil {
		return nil, err
	}
	proxy := containerNamed(pod.Spec.Containers, "istio-proxy")
	if proxy == nil {
		return nil, errors.New("framework: the sidecar template rendered no istio-proxy container")
	}
	s := &Sidecar{
		opts: opts,
		dir:  filepath.Join(f.dir, "pods", string(r.ID)+"."+opts.Namespace+"."+opts.Name),
		nodeID: xdsnode.SidecarID(opts.Pod.IP().String(), opts.Name, opts.Namespace,
			r.domainSuffix()),
	}
	if opts.Gateway {
		id, err := xdsnode.ParseID(s.nodeID)
		if err != nil {
			return nil, err
		}
		id.Type = xdsnode.TypeRouter
		s.nodeID = id.String()
	}
	if err := s.prepareDir(ctx, pod, proxy); err != nil {
		return nil, err
	}
	if err := s.createPod(ctx, pod); err != nil {
		return nil, err
	}
	env, err := s.agentEnv(pod, proxy)
	if err != nil {
		return nil, err
	}
	args := expandArgs(proxy.Args, env)
	cmdArgs := opts.Pod.commandArgs("env", append([]string{"-C", s.dir, opts.PilotAgentBinary}, args...)...)
	proc, err := f.startProcess("sidecar "+opts.Name, filepath.Join(f.dir, "pods"), string(r.ID)+"."+opts.Namespace+"."+opts.Name,
		opts.Pod.net.ipCmd, cmdArgs, env)
	if err != nil {
		return nil, err
	}
	s.process = proc
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, s.Stop())
		}
	}()
	if opts.Workload != nil {
		if err := s.addEndpoint(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// hubHost is the address part of the hub's listen addresses.
func hubHost(h *Hub) netip.Addr {
	ap, err := netip.ParseAddrPort(h.CAAddr())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

func addrPort(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return port
}

// domainSuffix is the clusters' DNS domain; the fleet uses Istio's default.
func (r *RemoteCluster) domainSuffix() string { return "cluster.local" }

// injectedPod renders the Pod through the spoke's injector with the values
// the spoke chart would write for this cluster and hub.
func injectedPod(opts SidecarOptions) (*corev1.Pod, error) {
	hub := hubHost(opts.Hub)
	if !podNetworkPrefix.Contains(hub) { // segments route the bridge's prefix too
		return nil, fmt.Errorf("framework: hub %s listens on %s, which Pods cannot reach; start it with HubOptions.ListenHost %s",
			opts.Hub.ReplicaID(), opts.Hub.CAAddr(), PodNetworkGateway)
	}
	values := map[string]any{
		"clusterID":        string(opts.Cluster.ID),
		"trustDomain":      "cluster.local",
		"domainSuffix":     opts.Cluster.domainSuffix(),
		"discoveryAddress": net.JoinHostPort(HubServiceName, addrPort(opts.XDSTLSAddr)),
		"caAddress":        net.JoinHostPort(HubServiceName, addrPort(opts.Hub.CAAddr())),
		"proxy":            map[string]any{"image": "e2e.meshfed.io/istio-proxy:local"},
		"agent":            map[string]any{"image": "e2e.meshfed.io/meshfed-agent:local"},
	}
	if opts.Network != "" {
		values["network"] = opts.Network
	}
	cfg, err := inject.NewConfig(inject.ConfigFile{Templates: inject.BuiltinTemplates()}, values)
	if err != nil {
		return nil, fmt.Errorf("framework: injection config: %w", err)
	}
	labels := map[string]string{}
	if opts.Workload != nil {
		labels["app"] = opts.Workload.Options().Service
	}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	noToken := false
	app := corev1.Container{Name: "app", Image: "e2e.meshfed.io/echo:latest"}
	for _, p := range opts.AppPorts {
		app.Ports = append(app.Ports, corev1.ContainerPort{ContainerPort: int32(p), Protocol: corev1.ProtocolTCP})
	}
	var annotations map[string]string
	if opts.Gateway {
		app = corev1.Container{Name: "istio-proxy", Image: "auto"}
		annotations = map[string]string{inject.AnnotationTemplates: inject.TemplateGateway}
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                     opts.Cluster.NodeName(),
			ServiceAccountName:           opts.ServiceAccount,
			AutomountServiceAccountToken: &noToken,
			Containers:                   []corev1.Container{app},
		},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	out, err := cfg.Inject(raw, opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("framework: injecting pod %s: %w", opts.Name, err)
	}
	injected := &corev1.Pod{}
	if err := json.Unmarshal(out, injected); err != nil {
		return nil, fmt.Errorf("framework: injected pod: %w", err)
	}
	// Fields the kubelet and the apiserver would fill, which the agent's
	// downward-API environment reads.
	injected.Status.PodIP = opts.Pod.IP().String()
	injected.Status.HostIP = PodNetworkGateway.String()
	return injected, nil
}

func containerNamed(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func volumeNamed(vs []corev1.Volume, name string) *corev1.Volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}

// mountPath is where c mounts volume name, inside the Pod's directory.
func (s *Sidecar) mountPath(c *corev1.Container, name string) (string, error) {
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return filepath.Join(s.dir, m.MountPath), nil
		}
	}
	return "", fmt.Errorf("framework: istio-proxy mounts no volume %q", name)
}

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = 107

// prepareDir lays out the Pod's working directory as the kubelet would
// mount its volumes: the projected token, the CA roots, the labels file.
func (s *Sidecar) prepareDir(ctx context.Context, pod *corev1.Pod, proxy *corev1.Container) error {
	// pilot-agent listens on unix sockets under the directory (SDS, xDS).
	if sock := filepath.Join(s.dir, "var/run/secrets/workload-spiffe-uds/socket"); len(sock) > maxSocketPath {
		return fmt.Errorf("framework: pod directory %s is too long for unix sockets; use a shorter fleet TempDir", s.dir)
	}
	for _, d := range []string{"etc/istio/proxy", "var/lib/istio/data", "var/run/secrets/workload-spiffe-uds",
		"var/run/secrets/credential-uds", "var/run/secrets/workload-spiffe-credentials"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return fmt.Errorf("framework: pod directory: %w", err)
		}
	}
	if err := s.writeToken(ctx, pod, proxy); err != nil {
		return err
	}
	roots := s.opts.RootsPEM
	if roots == nil {
		tz, err := s.opts.Hub.Trustz(ctx)
		if err != nil {
			return err
		}
		for _, r := range tz.Roots {
			roots = append(roots, r.PEM...)
		}
	}
	if len(roots) == 0 {
		return errors.New("framework: no CA roots for istio-ca-root-cert (the hub's trust bundle is empty)")
	}
	caDir, err := s.mountPath(proxy, "istiod-ca-cert")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(caDir, "root-cert.pem"), roots); err != nil {
		return err
	}
	podInfo, err := s.mountPath(proxy, "istio-podinfo")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(podInfo, "labels"), downwardMap(pod.Labels))
}

// writeToken writes the projected service-account token of the template's
// istio-token volume: a real token for the Pod's ServiceAccount from the
// cluster's apiserver, with the volume's audience and lifetime.
func (s *Sidecar) writeToken(ctx context.Context, pod *corev1.Pod, proxy *corev1.Container) error {
	vol := volumeNamed(pod.Spec.Volumes, "istio-token")
	if vol == nil || vol.Projected == nil || len(vol.Projected.Sources) == 0 || vol.Projected.Sources[0].ServiceAccountToken == nil {
		return errors.New("framework: the sidecar template has no projected istio-token volume")
	}
	src := vol.Projected.Sources[0].ServiceAccountToken
	dir, err := s.mountPath(proxy, "istio-token")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(s.opts.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(s.opts.Namespace).CreateToken(ctx, s.opts.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{src.Audience}, ExpirationSeconds: src.ExpirationSeconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("framework: token for %s/%s in %s: %w", s.opts.Namespace, s.opts.ServiceAccount, s.opts.Cluster.ID, err)
	}
	return writeFile(filepath.Join(dir, src.Path), []byte(tr.Status.Token))
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	return nil
}

// createPod creates the injected Pod and sets its status as the kubelet
// would: Running and Ready, with the Pod's IP.
func (s *Sidecar) createPod(ctx context.Context, pod *corev1.Pod) error {
	c := s.opts.Cluster.client
	status := pod.Status
	obj := pod.DeepCopy()
	obj.Status = corev1.PodStatus{}
	if err := c.Create(ctx, obj); err != nil {
		return fmt.Errorf("framework: creating pod %s/%s in %s: %w", s.opts.Namespace, s.opts.Name, s.opts.Cluster.ID, err)
	}
	if err := SetPodRunning(ctx, c, obj, status.PodIP, status.HostIP); err != nil {
		return fmt.Errorf("framework: pod in %s: %w", s.opts.Cluster.ID, err)
	}
	s.spec = obj
	return nil
}

// addEndpoint adds the Pod to its workload's EndpointSlice.
func (s *Sidecar) addEndpoint(ctx context.Context) error {
	w := s.opts.Workload
	node := s.opts.Cluster.NodeName()
	var zone *string
	if z := s.opts.Cluster.Locality.Zone; z != "" {
		zone = &z
	}
	ip := s.opts.Pod.IP().String()
	return w.UpdateEndpointSlice(ctx, func(es *discoveryv1.EndpointSlice) {
		es.Endpoints = slices.DeleteFunc(es.Endpoints, func(e discoveryv1.Endpoint) bool { return slices.Contains(e.Addresses, ip) })
		ready, serving, terminating := w.ready, w.ready, false // UpdateEndpointSlice holds w.mu
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node,
			Zone:       zone,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: s.opts.Namespace, Name: s.opts.Name, UID: s.spec.UID},
		})
	})
}

// IP returns the Pod's IP.
func (s *Sidecar) IP() netip.Addr { return s.opts.Pod.IP() }

// Cluster returns the remote cluster the Pod lives in.
func (s *Sidecar) Cluster() *RemoteCluster { return s.opts.Cluster }

// Pod returns the Pod the sidecar runs in.
func (s *Sidecar) Pod() *Pod { return s.opts.Pod }

// Name returns the Pod's name.
func (s *Sidecar) Name() string { return s.opts.Name }

// NodeID returns the xDS node ID pilot-agent gives Envoy,
// sidecar~<ip>~<pod>.<ns>~<ns>.svc.cluster.local.
func (s *Sidecar) NodeID() string { return s.nodeID }

// SPIFFEID returns the workload identity the Pod's certificate must carry.
func (s *Sidecar) SPIFFEID() string {
	return "spiffe://cluster.local/ns/" + s.opts.Namespace + "/sa/" + s.opts.ServiceAccount
}

// Dir returns the Pod's working directory (pilot-agent's "/").
func (s *Sidecar) Dir() string { return s.dir }

// KubePod returns the Pod object as created in the cluster.
func (s *Sidecar) KubePod() *corev1.Pod { return s.spec.DeepCopy() }

// LogPath returns the file collecting pilot-agent's and Envoy's output.
func (s *Sidecar) LogPath() string { return s.logPath }

// Logs returns the output so far.
func (s *Sidecar) Logs() (string, error) {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "", fmt.Errorf("framework: reading sidecar log: %w", err)
	}
	return string(b), nil
}

func (s *Sidecar) logTail(n int) string {
	out, err := s.Logs()
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Running reports whether pilot-agent has not exited.
func (s *Sidecar) Running() bool { return s.running() }

// Stop sends SIGTERM (pilot-agent drains and stops Envoy) and waits, with
// SIGKILL after SidecarStopGrace. Idempotent.
func (s *Sidecar) Stop() error { return s.terminate(syscall.SIGTERM, SidecarStopGrace) }

// BinariesFromEnv fills the empty binary options from the environment:
// EnvoyBinary from EnvEnvoyBinary, PilotAgentBinary from
// EnvPilotAgentBinary, BootstrapTemplate from beside pilot-agent. It says
// which is missing and how to build it.
func (o *SidecarOptions) BinariesFromEnv() error {
	need := func(env string) (string, error) {
		p := os.Getenv(env)
		if p == "" {
			return "", fmt.Errorf("%s is not set; run `make e2e` (it runs `make envoy istio-assets`), or set it to the binary", env)
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w (run `make envoy istio-assets`)", env, err)
		}
		return p, nil
	}
	var err error
	if o.EnvoyBinary == "" {
		if o.EnvoyBinary, err = need(EnvEnvoyBinary); err != nil {
			return err
		}
	}
	if o.PilotAgentBinary == "" {
		if o.PilotAgentBinary, err = need(EnvPilotAgentBinary); err != nil {
			return err
		}
	}
	if o.BootstrapTemplate == "" {
		o.BootstrapTemplate = filepath.Join(filepath.Dir(o.PilotAgentBinary), BootstrapTemplateName)
		if _, err := os.Stat(o.BootstrapTemplate); err != nil {
			return fmt.Errorf("the Envoy bootstrap template: %w (run `make istio-assets`)", err)
		}
	}
	return nil
}
