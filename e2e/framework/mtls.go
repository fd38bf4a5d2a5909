package framework

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/xds"

	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// CertRefreshInterval is how often grpc-go's file_watcher provider of the
// framework's bootstraps re-reads the certificate files: a change an agent
// wrote is in use by its workload at most this much later.
const CertRefreshInterval = time.Second

// CertAudience is the token audience of the hub's CA.
const CertAudience = "istio-ca"

// ListenPod listens where the fleet pod with IP podIP listens (LocalAddr of
// podIP, port port; 0 picks one) and returns a listener whose Addr reports
// the Pod IP instead of the loopback address. This completes the fleet's
// pod network for servers: an xDS-enabled gRPC server names its inbound
// listener after Addr, and so asks the hub for the Pod IP that the
// EndpointSlice names, while DialPod sends clients to the loopback address.
func ListenPod(podIP netip.Addr, port uint16) (net.Listener, error) {
	local, ok := LocalAddr(podIP)
	if !ok {
		return nil, fmt.Errorf("framework: %s is no fleet pod IP", podIP)
	}
	l, err := net.Listen("tcp", netip.AddrPortFrom(local, port).String())
	if err != nil {
		return nil, err
	}
	ap, err := netip.ParseAddrPort(l.Addr().String())
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return &podListener{Listener: l, addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(podIP, ap.Port()))}, nil
}

type podListener struct {
	net.Listener
	addr net.Addr
}

func (l *podListener) Addr() net.Addr { return l.addr }

// CertOptions say where a workload gets its certificate: the hub's CA.
type CertOptions struct {
	// CAAddr is the hub's CA address (Hub.CAAddr). Required.
	CAAddr string
	// CARoots verify the CA's serving certificate (the trust bundle,
	// Hub.Trustz). Required.
	CARoots *x509.CertPool
	// ServerName is checked in the CA's certificate. Default "localhost".
	ServerName string
	// TTL of the certificates; default one hour.
	TTL time.Duration
}

// CertAgent is a running pkg/agent for one workload identity: it keeps
// cert-chain.pem, key.pem and root-cert.pem in Dir, where grpc-go's
// file_watcher certificate provider reads them.
type CertAgent struct {
	agent  *agent.Agent
	dir    string
	cancel context.CancelFunc
	done   chan struct{}
}

// StartCertAgent starts an agent for service account ns/sa of cluster r,
// authenticating with real TokenRequest tokens (audience CertAudience) of
// r's apiserver, writing into dir, and waits for the first certificate (at
// most until ctx ends). The service account must exist.
func (r *RemoteCluster) StartCertAgent(ctx context.Context, ns, sa, dir string, opts CertOptions) (*CertAgent, error) {
	if opts.CAAddr == "" || opts.CARoots == nil {
		return nil, errors.New("framework: CertOptions needs CAAddr and CARoots")
	}
	if opts.ServerName == "" {
		opts.ServerName = "localhost"
	}
	if opts.TTL == 0 {
		opts.TTL = time.Hour
	}
	token := func(ctx context.Context) (string, error) {
		return r.ServiceAccountToken(ctx, ns, sa, CertAudience)
	}
	a, err := agent.New(agent.Options{
		CAAddr: opts.CAAddr, CARoots: opts.CARoots, ServerName: opts.ServerName,
		ClusterID: string(r.ID), TokenFunc: token, Dir: dir, TTL: opts.TTL, Log: logr.Discard(),
	})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(context.Background())
	ca := &CertAgent{agent: a, dir: dir, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ca.done)
		_ = a.Run(actx)
	}()
	select {
	case <-a.Ready():
		return ca, nil
	case <-ctx.Done():
		ca.Stop()
		return nil, fmt.Errorf("framework: no certificate for %s/%s in %s: %w", ns, sa, r.ID, ctx.Err())
	}
}

// Dir is where the agent writes the certificate files.
func (a *CertAgent) Dir() string { return a.dir }

// Agent returns the running agent.
func (a *CertAgent) Agent() *agent.Agent { return a.agent }

// Stop stops the agent and waits for it; the files stay. Idempotent.
func (a *CertAgent) Stop() {
	a.cancel()
	<-a.done
}

// XDSServerOptions describe one xDS-enabled echo server: a replica whose
// gRPC server takes its listener (and its security) from the hub.
type XDSServerOptions struct {
	// HubAddr is the hub's xDS address. Required.
	HubAddr string
	// ServerTLS dials HubAddr, the hub's authenticated port (Hub.CAAddr),
	// over mutual TLS with the certificate in CertDir, as meshfed-agent's
	// bootstraps do; without it HubAddr is the plaintext port.
	ServerTLS bool
	// Cluster, Namespace and Pod describe the replica (node ID, metadata).
	Cluster   model.ClusterID
	Namespace string
	Pod       string
	// PodIP is the replica's fleet Pod IP, 10.X.A.B; it listens on
	// LocalAddr(PodIP):Port (see ListenPod). Required.
	PodIP netip.Addr
	// Port to listen on; 0 picks one.
	Port uint16
	// CertDir holds the replica's certificate files (CertAgent.Dir); empty
	// leaves certificate providers out of the bootstrap, and the server
	// can only serve plaintext.
	CertDir string
	// Identity is what the server answers, "<cluster>/<pod>".
	Identity string
	// MaxConnectionAge, when set, is the server's keepalive
	// MaxConnectionAge (see XDSWorkloadOptions).
	MaxConnectionAge time.Duration
}

// StartXDSEchoServer starts an echo server built with xds.NewGRPCServer and
// xDS server credentials (plaintext fallback) with its own bootstrap. The
// server serves only once the hub sent its inbound listener; WaitServing
// waits for that.
func StartXDSEchoServer(opts XDSServerOptions) (*EchoServer, error) {
	if opts.HubAddr == "" || !opts.PodIP.IsValid() {
		return nil, errors.New("framework: XDSServerOptions needs HubAddr and PodIP")
	}
	l, err := ListenPod(opts.PodIP, opts.Port)
	if err != nil {
		return nil, fmt.Errorf("framework: xDS echo server %s: %w", opts.Identity, err)
	}
	ap, _ := netip.ParseAddrPort(l.(*podListener).Listener.Addr().String())
	bs, err := xdsnode.Bootstrap{
		ServerURI:           opts.HubAddr,
		ServerTLS:           opts.ServerTLS,
		NodeID:              xdsnode.SidecarID(opts.PodIP.String(), opts.Pod, opts.Namespace, model.DefaultDomainSuffix),
		Metadata:            xdsnode.Metadata{ClusterID: opts.Cluster, Namespace: opts.Namespace},
		CertDir:             opts.CertDir,
		CertRefreshInterval: CertRefreshInterval,
	}.JSON()
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("framework: xDS bootstrap: %w", err)
	}
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	s := &EchoServer{identity: opts.Identity, addr: ap, done: make(chan struct{}), serving: make(chan struct{})}
	var once sync.Once
	sopts := []grpc.ServerOption{grpc.Creds(creds)}
	if opts.MaxConnectionAge > 0 {
		sopts = append(sopts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: opts.MaxConnectionAge}))
	}
	gs, err := xds.NewGRPCServer(append(sopts,
		xds.BootstrapContentsForTesting(bs),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			s.modeMu.Lock()
			s.modeErr = args.Err
			s.modeMu.Unlock()
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(s.serving) })
			}
		}),
	)...)
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("framework: xDS server: %w", err)
	}
	s.srv = gs
	gs.RegisterService(newEchoServiceDesc(), s)
	go func() {
		defer close(s.done)
		_ = gs.Serve(l)
	}()
	return s, nil
}

// WaitServing waits until an xDS echo server has its listener from the hub
// and serves (immediately for a plain echo server).
func (s *EchoServer) WaitServing(ctx context.Context) error {
	if s.serving == nil {
		return nil
	}
	select {
	case <-s.serving:
		return nil
	case <-ctx.Done():
		s.modeMu.Lock()
		last := s.modeErr
		s.modeMu.Unlock()
		return fmt.Errorf("framework: %s not serving (last error %v): %w", s.identity, last, ctx.Err())
	}
}

// PeerID returns the SPIFFE ID (URI SAN) of the client certificate of the
// last call the server answered, empty when that call had none.
func (s *EchoServer) PeerID() string {
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	return s.peerID
}

// PeerIssuers counts the calls the server answered by the issuer (common
// name) of the client's certificate: which CA generations reached it.
func (s *EchoServer) PeerIssuers() map[string]int {
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	return maps.Clone(s.peerIssuers)
}

// peerOf returns the first URI SAN of the TLS peer certificate of a call,
// and the common name of that certificate's issuer; empty without TLS.
func peerOf(ai credentials.AuthInfo) (id, issuer string) {
	var info credentials.TLSInfo
	switch v := ai.(type) {
	case credentials.TLSInfo:
		info = v
	case *credentials.TLSInfo:
		info = *v
	default:
		return "", ""
	}
	certs := info.State.PeerCertificates
	if len(certs) > 0 {
		issuer = certs[0].Issuer.CommonName
	}
	switch {
	case info.SPIFFEID != nil:
		id = info.SPIFFEID.String()
	case len(certs) > 0 && len(certs[0].URIs) > 0:
		id = certs[0].URIs[0].String()
	}
	return id, issuer
}
