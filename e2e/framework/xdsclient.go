package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/xds" // also registers the xDS balancers

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// ClientOptions describes one proxyless gRPC client (a "pod" that dials
// services through the hub).
type ClientOptions struct {
	// HubAddr is the host:port of the hub's xDS server: its authenticated
	// port (Hub.CAAddr) with ServerTLS, else its plaintext port
	// (HubOptions.PlaintextXDS). Required.
	HubAddr string
	// ServerTLS dials HubAddr over mutual TLS, presenting the certificate
	// in CertDir and verifying the hub against its roots, as the bootstraps
	// meshfed-agent writes do; the hub holds the certificate's identity
	// against the node. Needs CertDir.
	ServerTLS bool
	// Cluster is the client's cluster ID (node metadata CLUSTER_ID).
	Cluster model.ClusterID
	// Namespace is the client's namespace. Default "default".
	Namespace string
	// Locality is the client's node locality.
	Locality model.Locality
	// Name is the client's pod name. Default "client".
	Name string
	// IP is the client's pod IP in its node ID. Default 127.0.0.1.
	IP string
	// Network, when set, is the NETWORK node metadata.
	Network string
	// Labels, when set, is the LABELS node metadata.
	Labels map[string]string
	// DialOptions are added to every Dial (after the framework's own).
	DialOptions []grpc.DialOption
	// CertDir, when set, holds the client's certificate files
	// (CertAgent.Dir): the bootstrap then declares the certificate provider
	// xdsnode.CertProviderInstance reading them, and Dial uses xDS transport
	// credentials, so the client speaks mTLS where the hub's clusters say
	// so and plaintext elsewhere.
	CertDir string
	// Bootstrap, when set, is a bootstrap written elsewhere (by
	// meshfed-agent, say), used as it is: HubAddr and the node fields
	// above are ignored, and Dial uses xDS credentials when it declares
	// certificate providers.
	Bootstrap []byte
}

// XDSClient is a proxyless gRPC xDS client with its own bootstrap: its own
// node ID, locality and metadata. Many live side by side in one process.
//
// How that works in grpc-go v1.85: xds.NewXDSResolverWithConfigForTesting
// returns a resolver builder that keeps the bootstrap bytes; every Build of
// it (one per grpc.ClientConn, i.e. per Dial) parses them and creates a new
// xdsclient.Pool holding a new xDS client (see newBuilderWithConfigForTesting
// in internal/xds/resolver/xds_resolver.go and NewPool in
// internal/xds/xdsclient/pool.go). Nothing is shared with the global pool
// or with other builders, so each XDSClient shows its own node to the hub,
// and each XDSConn has its own ADS stream. The cluster and endpoint
// balancers get the xDS client from the resolver state, so they too use
// the connection's own stream.
type XDSClient struct {
	opts      ClientOptions
	nodeID    string
	bootstrap []byte
	builder   resolver.Builder
	secure    bool // the bootstrap declares certificate providers

	mu     sync.Mutex
	conns  []*XDSConn
	closed bool
}

// NewXDSClient prepares a client whose bootstrap points at opts.HubAddr.
// No connection is made until the first RPC of a Dial. ctx is unused today
// and reserved for setup that may need it.
func NewXDSClient(_ context.Context, opts ClientOptions) (*XDSClient, error) {
	if opts.Bootstrap != nil {
		return clientFromBootstrap(opts)
	}
	if opts.HubAddr == "" {
		return nil, errors.New("framework: ClientOptions.HubAddr is empty")
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Name == "" {
		opts.Name = "client"
	}
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	nodeID := xdsnode.SidecarID(opts.IP, opts.Name, opts.Namespace, model.DefaultDomainSuffix)
	bs, err := xdsnode.Bootstrap{
		ServerURI: opts.HubAddr,
		ServerTLS: opts.ServerTLS,
		NodeID:    nodeID,
		Metadata: xdsnode.Metadata{
			ClusterID: opts.Cluster, Namespace: opts.Namespace, Network: opts.Network, Labels: opts.Labels,
		},
		Locality:            opts.Locality,
		CertDir:             opts.CertDir,
		CertRefreshInterval: CertRefreshInterval,
	}.JSON()
	if err != nil {
		return nil, fmt.Errorf("framework: xDS bootstrap: %w", err)
	}
	builder, err := xds.NewXDSResolverWithConfigForTesting(bs)
	if err != nil {
		return nil, fmt.Errorf("framework: xDS resolver: %w", err)
	}
	return &XDSClient{opts: opts, nodeID: nodeID, bootstrap: bs, builder: builder, secure: opts.CertDir != ""}, nil
}

func clientFromBootstrap(opts ClientOptions) (*XDSClient, error) {
	b, err := xdsnode.ParseBootstrap(opts.Bootstrap)
	if err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	builder, err := xds.NewXDSResolverWithConfigForTesting(opts.Bootstrap)
	if err != nil {
		return nil, fmt.Errorf("framework: xDS resolver: %w", err)
	}
	return &XDSClient{opts: opts, nodeID: b.NodeID, bootstrap: slices.Clone(opts.Bootstrap), builder: builder,
		secure: len(b.CertProviders) > 0}, nil
}

// NodeID returns the node ID the client presents to the hub.
func (c *XDSClient) NodeID() string { return c.nodeID }

// Bootstrap returns the client's bootstrap JSON.
func (c *XDSClient) Bootstrap() []byte { return slices.Clone(c.bootstrap) }

// Options returns the client's options with defaults applied.
func (c *XDSClient) Options() ClientOptions { return c.opts }

// Dial creates a channel to target, e.g.
// "xds:///echo.demo.svc.cluster.local:8080", resolved through the hub. The
// channel connects lazily; data-plane connections are plaintext and go
// through DialPod, so the Pod IPs the hub hands out reach the replicas'
// loopback listeners. With ClientOptions.CertDir they use mTLS where the
// hub's clusters ask for it. (The channel to the hub itself is made by grpc-go's
// xDS client and does not use this dialer.)
func (c *XDSClient) Dial(target string) (*XDSConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("framework: xDS client is closed")
	}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if c.secure {
		xc, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: creds})
		if err != nil {
			return nil, fmt.Errorf("framework: xDS credentials: %w", err)
		}
		creds = xc
	}
	opts := append([]grpc.DialOption{
		grpc.WithResolvers(c.builder),
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(DialPod),
	}, c.opts.DialOptions...)
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("framework: dialing %s: %w", target, err)
	}
	conn := &XDSConn{cc: cc, target: target}
	c.conns = append(c.conns, conn)
	return conn, nil
}

// Close closes every channel the client dialed.
func (c *XDSClient) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns, c.closed = nil, true
	c.mu.Unlock()
	var errs []error
	for _, conn := range conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// XDSConn is one channel of an XDSClient.
type XDSConn struct {
	cc        *grpc.ClientConn
	target    string
	closeOnce sync.Once
	closeErr  error
}

// Target returns the dialed target.
func (c *XDSConn) Target() string { return c.target }

// ClientConn returns the underlying channel, for calls of other services.
func (c *XDSConn) ClientConn() *grpc.ClientConn { return c.cc }

// Call sends one echo RPC and returns the identity of the backend that
// answered ("<cluster>/<pod>").
func (c *XDSConn) Call(ctx context.Context, opts ...grpc.CallOption) (string, error) {
	id, err := CallEcho(ctx, c.cc, opts...)
	if err != nil {
		return "", fmt.Errorf("framework: echo via %s: %w", c.target, err)
	}
	return id, nil
}

// Spread sends n echo RPCs one after another and counts the answers by
// backend identity. On error it returns the counts so far with the error.
func (c *XDSConn) Spread(ctx context.Context, n int) (map[string]int, error) {
	counts := map[string]int{}
	for i := range n {
		id, err := c.Call(ctx)
		if err != nil {
			return counts, fmt.Errorf("call %d of %d: %w", i+1, n, err)
		}
		counts[id]++
	}
	return counts, nil
}

// Close closes the channel. Idempotent.
func (c *XDSConn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.cc.Close() })
	return c.closeErr
}

// ByCluster sums Spread counts by cluster, the part of each identity before
// the first "/".
func ByCluster(counts map[string]int) map[model.ClusterID]int {
	out := map[model.ClusterID]int{}
	for id, n := range counts {
		cluster, _, _ := strings.Cut(id, "/")
		out[model.ClusterID(cluster)] += n
	}
	return out
}
