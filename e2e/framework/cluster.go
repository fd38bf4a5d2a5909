package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/pki"
)

// Names the Istio remote-secret format uses.
const (
	// RemoteSecretNamespace is where the hub looks for remote secrets.
	RemoteSecretNamespace = "istio-system"
	// MultiClusterLabel marks a Secret as a remote secret (value "true").
	MultiClusterLabel = "istio/multiCluster"
	// ClusterAnnotation is the annotation istioctl writes on a remote
	// secret that holds exactly one cluster.
	ClusterAnnotation = "networking.istio.io/cluster"
	// HubUser is the user name of the hub's credentials in remote secrets.
	HubUser = "meshfed-hub"
)

// Cluster is one real kube-apiserver with its own etcd. ConfigCluster and
// RemoteCluster embed it.
type Cluster struct {
	name           string
	dir            string
	env            *envtest.Environment
	cfg            *rest.Config
	client         client.Client
	kubeconfig     []byte
	kubeconfigPath string
	logs           []*os.File
	stateDirs      []string // certificates and etcd data, removed by Stop

	stopOnce sync.Once
	stopErr  error
}

// startCluster starts etcd and kube-apiserver for a cluster called name,
// writing their output and an admin kubeconfig under <fleet dir>/<name>.
func (f *Fleet) startCluster(ctx context.Context, name string) (_ *Cluster, retErr error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := filepath.Join(f.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{name: name, dir: dir}
	defer func() {
		if retErr != nil {
			_ = c.Stop()
		}
	}()
	apiLog, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return nil, err
	}
	c.logs = append(c.logs, apiLog)
	etcdLog, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	c.logs = append(c.logs, etcdLog)

	useExisting := false
	env := &envtest.Environment{
		Scheme:                   f.scheme,
		BinaryAssetsDirectory:    f.opts.AssetsDir,
		UseExistingCluster:       &useExisting, // never read USE_EXISTING_CLUSTER
		ControlPlaneStartTimeout: f.opts.StartTimeout,
		ControlPlaneStopTimeout:  f.opts.StopTimeout,
	}
	// Explicit paths: envtest would otherwise let KUBEBUILDER_ASSETS and
	// TEST_ASSET_* override BinaryAssetsDirectory.
	// Certificates and etcd data live under the fleet's directory too, so
	// a crashed test leaves a single directory behind; Stop removes them
	// even when the logs are kept.
	c.stateDirs = []string{filepath.Join(dir, "certs"), filepath.Join(dir, "etcd-data")}
	for _, d := range c.stateDirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	env.ControlPlane.APIServer = &envtest.APIServer{Path: f.apiserverPath, CertDir: c.stateDirs[0], Out: apiLog, Err: apiLog}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: f.etcdPath, DataDir: c.stateDirs[1], Out: etcdLog, Err: etcdLog}
	env.ControlPlane.KubectlPath = filepath.Join(f.opts.AssetsDir, "kubectl")
	for k, v := range f.opts.APIServerFlags {
		env.ControlPlane.APIServer.Configure().Set(k, v)
	}
	for k, v := range f.opts.EtcdFlags {
		env.ControlPlane.Etcd.Configure().Set(k, v)
	}
	c.env = env

	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver (logs in %s): %w", dir, err)
	}
	c.cfg = cfg
	c.kubeconfig = env.KubeConfig
	c.kubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.kubeconfigPath, c.kubeconfig, 0o600); err != nil {
		return nil, err
	}
	c.client, err = client.New(cfg, client.Options{Scheme: f.scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", name, err)
	}
	return c, nil
}

// Name returns "config" for the config cluster and the cluster ID for a
// remote cluster.
func (c *Cluster) Name() string { return c.name }

// Client returns an admin controller-runtime client (no cache) for any
// built-in object of the cluster.
func (c *Cluster) Client() client.Client { return c.client }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Host returns the apiserver URL, https://127.0.0.1:<port>.
func (c *Cluster) Host() string {
	h := strings.TrimSuffix(c.cfg.Host, "/")
	if strings.Contains(h, "://") {
		return h
	}
	return "https://" + h
}

// Kubeconfig returns an admin kubeconfig for the cluster.
func (c *Cluster) Kubeconfig() []byte { return c.kubeconfig }

// KubeconfigFile returns the path of a file holding Kubeconfig, for
// --kubeconfig flags of child processes.
func (c *Cluster) KubeconfigFile() string { return c.kubeconfigPath }

// AddUser provisions a user with a client certificate and returns a
// kubeconfig for it. Without groups such as system:masters the user has no
// permissions, which suits tests of RBAC failures.
func (c *Cluster) AddUser(name string, groups ...string) ([]byte, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("framework: adding user %q to %s: %w", name, c.name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("framework: kubeconfig of user %q in %s: %w", name, c.name, err)
	}
	return kc, nil
}

// Stop stops the cluster's kube-apiserver and etcd and waits for them to
// exit. It is idempotent. Stopping a remote cluster is how a test makes it
// unreachable; a stopped cluster cannot be restarted.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		if c.env != nil {
			if err := c.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("framework: stopping cluster %s: %w", c.name, err))
			}
		}
		for _, l := range c.logs {
			_ = l.Close()
		}
		for _, d := range c.stateDirs {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, fmt.Errorf("framework: %w", err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// EnsureNamespace creates namespace ns unless it exists.
func (c *Cluster) EnsureNamespace(ctx context.Context, ns string) error {
	err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("framework: creating namespace %s in %s: %w", ns, c.name, err)
	}
	return nil
}

// EnsureServiceAccount creates namespace ns and service account ns/name
// in the cluster unless they exist.
func (c *Cluster) EnsureServiceAccount(ctx context.Context, ns, name string) error {
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	err := c.client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("framework: creating service account %s/%s in %s: %w", ns, name, c.name, err)
	}
	return nil
}

// ServiceAccountToken returns a TokenRequest token of service account
// ns/sa (which must exist) for audiences (none: the apiserver's own, as
// kubectl create token gives people), valid for an hour.
func (c *Cluster) ServiceAccountToken(ctx context.Context, ns, sa string, audiences ...string) (string, error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return "", err
	}
	ttl := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("framework: token of %s/%s in %s: %w", ns, sa, c.name, err)
	}
	return tr.Status.Token, nil
}

// ConfigCluster is the cluster the hub reads its remote secrets from.
type ConfigCluster struct {
	*Cluster
}

// PutRemoteSecret creates or replaces the remote secret
// istio-system/<name> so that it names the given clusters: one data key per
// cluster ID whose value is the hub's kubeconfig for that cluster. With one
// cluster it also carries the networking.istio.io/cluster annotation, as
// istioctl writes it.
func (c *ConfigCluster) PutRemoteSecret(ctx context.Context, name string, clusters ...*RemoteCluster) error {
	data := make(map[string][]byte, len(clusters))
	var ann map[string]string
	for _, r := range clusters {
		data[string(r.ID)] = r.HubKubeconfig()
	}
	if len(clusters) == 1 {
		ann = map[string]string{ClusterAnnotation: string(clusters[0].ID)}
	}
	return c.putSecret(ctx, name, data, ann)
}

// PutRawRemoteSecret creates or replaces the remote secret
// istio-system/<name> with exactly the given data, for tests of malformed
// secrets (bad kubeconfigs, invalid cluster IDs, empty secrets).
func (c *ConfigCluster) PutRawRemoteSecret(ctx context.Context, name string, data map[string][]byte) error {
	return c.putSecret(ctx, name, data, nil)
}

// AnnotateRemoteSecret merges annotations into the remote secret
// istio-system/<name>; an empty value removes the annotation.
func (c *ConfigCluster) AnnotateRemoteSecret(ctx context.Context, name string, annotations map[string]string) error {
	s := &corev1.Secret{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: RemoteSecretNamespace, Name: name}, s); err != nil {
		return fmt.Errorf("framework: reading remote secret %s: %w", name, err)
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		if v == "" {
			delete(s.Annotations, k)
		} else {
			s.Annotations[k] = v
		}
	}
	if err := c.client.Update(ctx, s); err != nil {
		return fmt.Errorf("framework: annotating remote secret %s: %w", name, err)
	}
	return nil
}

// DeleteRemoteSecret deletes the remote secret istio-system/<name>. A
// missing secret is not an error.
func (c *ConfigCluster) DeleteRemoteSecret(ctx context.Context, name string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: RemoteSecretNamespace, Name: name}}
	if err := c.client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("framework: deleting remote secret %s: %w", name, err)
	}
	return nil
}

func (c *ConfigCluster) putSecret(ctx context.Context, name string, data map[string][]byte, ann map[string]string) error {
	if err := c.EnsureNamespace(ctx, RemoteSecretNamespace); err != nil {
		return err
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   RemoteSecretNamespace,
			Name:        name,
			Labels:      map[string]string{MultiClusterLabel: "true"},
			Annotations: ann,
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	err := c.client.Create(ctx, want)
	if apierrors.IsAlreadyExists(err) {
		got := &corev1.Secret{}
		if err = c.client.Get(ctx, client.ObjectKeyFromObject(want), got); err == nil {
			got.Labels, got.Annotations, got.Data, got.StringData = want.Labels, want.Annotations, want.Data, nil
			err = c.client.Update(ctx, got)
		}
	}
	if err != nil {
		return fmt.Errorf("framework: writing remote secret %s: %w", name, err)
	}
	return nil
}

// RemoteCluster is a workload cluster: the hub watches it through the
// kubeconfig in a remote secret, and workloads deployed in it get real
// gRPC servers with Pod IPs 10.X.A.B listening on 127.X.A.B, X = 10 + the
// cluster's index in the fleet.
type RemoteCluster struct {
	*Cluster
	// ID is the cluster ID.
	ID model.ClusterID
	// Locality is where the cluster's Node, hence its endpoints, run.
	Locality model.Locality

	index         int
	hubKubeconfig []byte
	deadPort      int
	ips           *ipAllocator

	nodeMu      sync.Mutex
	nodeCreated bool

	wlMu      sync.Mutex
	workloads []*Workload
}

func (f *Fleet) startRemote(ctx context.Context, opts RemoteClusterOptions, index int) (*RemoteCluster, error) {
	ips, err := newIPAllocator(index)
	if err != nil {
		return nil, fmt.Errorf("framework: remote cluster %s: %w", opts.ID, err)
	}
	c, err := f.startCluster(ctx, string(opts.ID))
	if err != nil {
		return nil, fmt.Errorf("framework: remote cluster %s: %w", opts.ID, err)
	}
	r := &RemoteCluster{Cluster: c, ID: opts.ID, Locality: opts.Locality, index: index, ips: ips, deadPort: f.deadPort.port}
	r.hubKubeconfig, err = c.AddUser(HubUser, "system:masters")
	if err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return r, nil
}

// Index returns the cluster's position in the fleet (0 for the first remote
// cluster); its Pod IPs are 10.<10+Index>.A.B.
func (r *RemoteCluster) Index() int { return r.index }

// HubKubeconfig returns the kubeconfig of the meshfed-hub user (a member of
// system:masters): what remote secrets carry for this cluster.
func (r *RemoteCluster) HubKubeconfig() []byte { return r.hubKubeconfig }

// DeadKubeconfig returns the hub's kubeconfig with the server replaced by
// https://127.0.0.1:<port> where nothing listens: the fleet holds that port
// bound but not listening, so connections are refused at once for as long
// as the fleet lives.
func (r *RemoteCluster) DeadKubeconfig() ([]byte, error) {
	return KubeconfigVia(r.hubKubeconfig, "127.0.0.1:"+strconv.Itoa(r.deadPort))
}

// KubeconfigVia returns kubeconfig with every cluster's server replaced by
// https://<addr>: a TCP proxy in front of the apiserver that a test can cut
// and restore (an envtest apiserver's serving certificate names 127.0.0.1,
// so a loopback address verifies).
func KubeconfigVia(kubeconfig []byte, addr string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("framework: parsing kubeconfig: %w", err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + addr
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("framework: writing the kubeconfig via %s: %w", addr, err)
	}
	return out, nil
}

// NodeName returns the name of the cluster's single Node.
func (r *RemoteCluster) NodeName() string { return string(r.ID) + "-node" }

// Workloads returns the workloads deployed in the cluster.
func (r *RemoteCluster) Workloads() []*Workload {
	r.wlMu.Lock()
	defer r.wlMu.Unlock()
	out := make([]*Workload, len(r.workloads))
	copy(out, r.workloads)
	return out
}

// Stop stops the workloads' servers and the cluster's control plane.
func (r *RemoteCluster) Stop() error {
	for _, w := range r.Workloads() {
		w.Stop()
	}
	return r.Cluster.Stop()
}

// ensureNode creates the cluster's Node, labelled with its locality.
func (r *RemoteCluster) ensureNode(ctx context.Context) error {
	r.nodeMu.Lock()
	defer r.nodeMu.Unlock()
	if r.nodeCreated {
		return nil
	}
	labels := map[string]string{
		"kubernetes.io/hostname": r.NodeName(),
	}
	if r.Locality.Region != "" {
		labels[corev1.LabelTopologyRegion] = r.Locality.Region
	}
	if r.Locality.Zone != "" {
		labels[corev1.LabelTopologyZone] = r.Locality.Zone
	}
	if r.Locality.SubZone != "" {
		labels["topology.istio.io/subzone"] = r.Locality.SubZone
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName(), Labels: labels}}
	if err := r.client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("framework: creating node in %s: %w", r.ID, err)
	}
	r.nodeCreated = true
	return nil
}

// PutCACerts creates or replaces the hub's plug-in CA Secret "cacerts" in
// the hub's namespace (RemoteSecretNamespace): signer signs workload
// certificates, roots are what workloads trust (root-cert.pem).
func (c *ConfigCluster) PutCACerts(ctx context.Context, signer *pki.CA, roots ...*pki.CA) error {
	keyPEM, err := signer.KeyPEM()
	if err != nil {
		return fmt.Errorf("framework: cacerts: %w", err)
	}
	var rootsPEM []byte
	for _, r := range roots {
		rootsPEM = append(rootsPEM, r.CertPEM...)
	}
	return c.PutCACertsPEM(ctx, signer.CertPEM, keyPEM, rootsPEM)
}

// PutCACertsPEM is PutCACerts with the Secret's PEM contents: the signing
// CA's certificate and key, and the roots.
func (c *ConfigCluster) PutCACertsPEM(ctx context.Context, certPEM, keyPEM, rootsPEM []byte) error {
	if err := c.EnsureNamespace(ctx, RemoteSecretNamespace); err != nil {
		return err
	}
	data := map[string][]byte{ca.KeyCACert: certPEM, ca.KeyCAKey: keyPEM, ca.KeyRootCert: rootsPEM}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: RemoteSecretNamespace, Name: ca.PluginSecret}, Data: data}
	err := c.client.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		cur := &corev1.Secret{}
		if err = c.client.Get(ctx, client.ObjectKeyFromObject(sec), cur); err == nil {
			cur.Data = data
			err = c.client.Update(ctx, cur)
		}
	}
	if err != nil {
		return fmt.Errorf("framework: writing cacerts: %w", err)
	}
	return nil
}
