package xds

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/hub/xds/ads"
	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// Authn configures how the authenticated services (Server.RegisterAuthenticated)
// establish who a caller is, as istiod does on its port 15012: a client
// certificate of the mesh first, else a Kubernetes token.
type Authn struct {
	// Tokens reviews a bearer token with the apiserver of the cluster that
	// issued it: the CA's *ca.Authenticator, so xDS shares its
	// per-cluster clients, rate limits and review cache. Required for
	// token callers; without it they are refused.
	Tokens ca.TokenAuthenticator
	// Roots returns, PEM, the roots a client certificate must chain to:
	// the mesh's federated trust bundle. Called for each stream that
	// presents a certificate; must not block. Without it certificates are
	// refused.
	Roots func() []byte
	// ConfigCluster reviews the token of a caller that names no cluster,
	// neither in its ClusterID metadata nor in its node's CLUSTER_ID
	// (istioctl sends neither), as istiod reviews such tokens with its own
	// cluster's apiserver. Empty refuses such callers.
	ConfigCluster model.ClusterID
}

// authnStreamKey marks the context of a stream that arrived through an
// authenticated service.
type authnStreamKey struct{}

// authenticator authenticates the streams of the authenticated services.
// What it keeps of a stream, its credentials from its opening to its
// first request (where the node it speaks for is known) and the identity
// proven then, lives in the stream's conn (streamAuth). Safe for
// concurrent use.
type authenticator struct {
	authn    Authn
	clk      clock.PassiveClock
	log      logr.Logger
	failures *prometheus.CounterVec
	roots    rootPool
	// refusalLog bounds the info-level logs of refusals (a client
	// retrying a forged token must not flood the log); the rest go to
	// debug level, all of them are counted in failures.
	refusalLog *rate.Limiter
}

// streamAuth is what the authenticator keeps of one stream, in its conn.
type streamAuth struct {
	// required: the stream came through an authenticated service.
	required bool
	cred     credential // what the caller presented
	// caller is the identity proven at the first request, against which
	// a later request that names another node is held; nil before.
	caller *Caller
}

// credential is what a caller presented.
type credential struct {
	cert    *Caller // a verified client certificate's identity
	token   string
	cluster model.ClusterID // from ClusterID metadata
	peer    string          // the peer's address, for logs
}

func newAuthenticator(authn Authn, clk clock.PassiveClock, log logr.Logger, reg prometheus.Registerer) *authenticator {
	a := &authenticator{
		authn: authn, clk: clk, log: log, refusalLog: rate.NewLimiter(refusalLogRate, refusalLogBurst),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_auth_failures_total",
			Help: "xDS and CSDS calls refused on the authenticated port, by reason.",
		}, []string{"reason"}),
	}
	for _, r := range reasons {
		a.failures.WithLabelValues(r.reason)
	}
	if reg != nil {
		reg.MustRegister(a.failures)
	}
	return a
}

// opened takes the credentials of a stream of an authenticated service;
// other streams pass untouched. A stream without usable credentials is
// refused at once: no node is needed to know that.
func (a *authenticator) opened(ctx context.Context) (streamAuth, error) {
	if ctx.Value(authnStreamKey{}) == nil {
		return streamAuth{}, nil
	}
	cred, err := a.credentialOf(ctx)
	if err != nil {
		return streamAuth{}, a.refuse(err, cred.peer, "")
	}
	return streamAuth{required: true, cred: cred}, nil
}

// request authorizes a stream's request whose node is new to it. At the
// first, the node says whom the caller speaks for: the token is reviewed
// with ctx, the stream's (against the node's cluster when the metadata
// named none), and the identity held against the node. A later request
// that names another node is held against the same identity, so that a
// stream cannot speak for another workload than the one it proved.
// Streams of other services pass.
func (a *authenticator) request(ctx context.Context, st *streamAuth, node *corev3.Node) error {
	if !st.required {
		return nil
	}
	if st.caller != nil {
		if err := checkNode(*st.caller, node); err != nil {
			return a.refuse(err, "", node.GetId())
		}
		return nil
	}
	caller, err := a.callerOf(ctx, st.cred, node)
	if err == nil {
		err = checkNode(caller, node)
	}
	if err != nil {
		return a.refuse(err, st.cred.peer, node.GetId())
	}
	st.caller = &caller
	st.cred.token = "" // reviewed: not kept longer than needed
	a.log.V(1).Info("xDS stream authenticated", "node", node.GetId(), "caller", caller.String(), "peer", st.cred.peer)
	return nil
}

// call authenticates one CSDS call: any identity of the mesh may read
// proxy status, so there is no node to match.
func (a *authenticator) call(ctx context.Context) error {
	cred, err := a.credentialOf(ctx)
	if err == nil {
		_, err = a.callerOf(ctx, cred, nil)
	}
	if err != nil {
		return a.refuse(err, cred.peer, "")
	}
	return nil
}

// credentialOf reads the caller's credentials from a stream context: a
// client certificate, verified here against the roots of the moment, or
// else the bearer token and the ClusterID metadata. A certificate that
// does not verify is refused even when a token comes with it, as istiod's
// handshake would refuse it.
func (a *authenticator) credentialOf(ctx context.Context) (credential, error) {
	var cred credential
	p, ok := peer.FromContext(ctx)
	if !ok {
		p = &peer.Peer{}
	}
	if p.Addr != nil {
		cred.peer = p.Addr.String()
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		caller, err := a.verify(info.State.PeerCertificates)
		if err != nil {
			return cred, err
		}
		cred.cert = &caller
		return cred, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	token, err := ca.BearerTokenOf(md)
	if err != nil {
		return cred, fmt.Errorf("%w: no client certificate, and %w", ErrNoCredentials, err)
	}
	cred.token, cred.cluster = token, ca.ClusterIDOf(md)
	return cred, nil
}

// verify checks that a client certificate chains to the mesh roots for
// client authentication and returns the workloads its SPIFFE IDs name.
// Any trust domain of the bundle is accepted, as istiod accepts any
// SPIFFE ID that chains to its roots.
func (a *authenticator) verify(chain []*x509.Certificate) (Caller, error) {
	if a.authn.Roots == nil {
		return Caller{}, fmt.Errorf("%w: this hub takes no client certificates", ErrBadCertificate)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: a.roots.get(a.authn.Roots()), Intermediates: inter,
		CurrentTime: a.clk.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return Caller{}, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	caller := Caller{Via: ViaCertificate}
	for _, u := range leaf.URIs {
		if p, ok := principalOf(u); ok {
			caller.Principals = append(caller.Principals, p)
		}
	}
	if len(caller.Principals) == 0 {
		return Caller{}, fmt.Errorf("%w: certificate %q names no spiffe://<trust domain>/ns/<ns>/sa/<sa>", ErrBadCertificate, leaf.Subject.String())
	}
	return caller, nil
}

// callerOf returns the identity cred proves. A token is reviewed by the
// cluster its ClusterID metadata names, else by the node's CLUSTER_ID,
// else by the config cluster.
func (a *authenticator) callerOf(ctx context.Context, cred credential, node *corev3.Node) (Caller, error) {
	if cred.cert != nil {
		return *cred.cert, nil
	}
	cluster := cred.cluster
	if cluster == "" {
		cluster = xdsnode.ClusterOf(node.GetMetadata())
	}
	if cluster == "" {
		cluster = a.authn.ConfigCluster
	}
	if a.authn.Tokens == nil {
		return Caller{}, fmt.Errorf("%w: this hub reviews no tokens", ErrNoCredentials)
	}
	id, err := a.authn.Tokens.Authenticate(ctx, cluster, cred.token)
	if err != nil {
		return Caller{}, err
	}
	return Caller{
		Principals: []Principal{{Namespace: id.Namespace, ServiceAccount: id.ServiceAccount}},
		Cluster:    id.Cluster, Via: ViaToken,
	}, nil
}

// refuse counts and logs a refusal and returns it as the status at the
// wire: PermissionDenied for an identity that may not speak for its node,
// Unavailable when the hub could not review the token, Unauthenticated
// otherwise.
func (a *authenticator) refuse(err error, peerAddr, nodeID string) error {
	reason := reasonOf(err)
	a.failures.WithLabelValues(reason).Inc()
	log := a.log.V(1)
	if a.refusalLog.AllowN(a.clk.Now(), 1) {
		log = a.log
	}
	log.Info("xDS call refused", "reason", reason, "peer", peerAddr, "node", xdsstatus.Clip(nodeID, maxLoggedDetailBytes), "error", err.Error())
	code := codes.Unauthenticated
	switch {
	case denied(err):
		code = codes.PermissionDenied
	case errors.Is(err, ca.ErrTokenReview):
		code = codes.Unavailable
	}
	return grpcstatus.Error(code, err.Error())
}

// rootPool is the certificate pool of the last roots PEM asked for, parsed
// again only when the PEM changes (a rotation).
type rootPool struct {
	mu   sync.Mutex // guards pem and pool
	pem  []byte
	pool *x509.CertPool
}

func (r *rootPool) get(pem []byte) *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool == nil || !bytes.Equal(pem, r.pem) {
		r.pool = x509.NewCertPool()
		r.pool.AppendCertsFromPEM(pem)
		r.pem = bytes.Clone(pem)
	}
	return r.pool
}

// authenticatedADS is the ADS service of the authenticated port: the one
// stream server of the Server, whose conns authenticate a stream that
// comes this way (its context is marked).
type authenticatedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	inner *ads.Server
}

func (s authenticatedADS) StreamAggregatedResources(st grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	return s.inner.StreamAggregatedResources(markedStream[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]{st, markAuthn(st.Context())})
}

func (s authenticatedADS) DeltaAggregatedResources(st grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]) error {
	return s.inner.DeltaAggregatedResources(markedStream[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]{st, markAuthn(st.Context())})
}

func markAuthn(ctx context.Context) context.Context {
	return context.WithValue(ctx, authnStreamKey{}, true)
}

// markedStream is a stream with a marked context.
type markedStream[Req, Resp any] struct {
	grpc.BidiStreamingServer[Req, Resp]
	ctx context.Context
}

func (m markedStream[Req, Resp]) Context() context.Context { return m.ctx }

// authenticatedCSDS is CSDS on the authenticated port: every call is
// authenticated first.
type authenticatedCSDS struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer
	inner *xdsstatus.CSDS
	authn *authenticator
}

func (c authenticatedCSDS) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	if err := c.authn.call(ctx); err != nil {
		return nil, err
	}
	return c.inner.FetchClientStatus(ctx, req)
}

func (c authenticatedCSDS) StreamClientStatus(st statusv3.ClientStatusDiscoveryService_StreamClientStatusServer) error {
	if err := c.authn.call(st.Context()); err != nil {
		return err
	}
	return c.inner.StreamClientStatus(st)
}
