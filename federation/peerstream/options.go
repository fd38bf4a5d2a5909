package peerstream

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/pki"
)

// PeerOptions configure Peers. Zero durations and sizes take the defaults
// given on each field.
type PeerOptions struct {
	// Self is this replica; it must match the identity in the certificates
	// of TLS and ClientTLS.
	Self federation.ReplicaID
	// ListenAddr is the address to serve peers on, such as ":7947" or
	// "127.0.0.1:0".
	ListenAddr string
	// TLS is the server side. It must require and verify client
	// certificates (tls.RequireAndVerifyClientCert); PeerTLS makes one.
	TLS *tls.Config
	// ClientTLS is the dialing side; PeerTLS makes one. Peers adds to it a
	// check that the server is the replica it meant to dial.
	ClientTLS *tls.Config
	// TrustDomain, when set, is the only SPIFFE trust domain accepted in
	// peer certificates. When empty any trust domain is accepted: the CA
	// pool of TLS and ClientTLS is then the trust boundary, which suffices
	// for a CA that signs only replica certificates.
	TrustDomain pki.TrustDomain
	// Handler receives hellos and messages. Required.
	Handler PeerHandler
	// OnPeerDown, when set, is called when the stream to a peer closes
	// and no newer stream from that peer has replaced it: the peer died,
	// restarted, was partitioned, fell behind, or was removed by
	// SetPeers. It is an early signal of failure, seconds before gossip.
	// It runs on the stream's goroutine and must not block long; it is
	// not called while Run shuts down.
	OnPeerDown func(federation.ReplicaID)
	// LocalDigest returns this replica's digest for its Hello. It is
	// called from stream goroutines, concurrently, and must not block. Nil
	// sends an empty digest.
	LocalDigest func() federation.Digest
	// Log receives connection events and rejections.
	Log logr.Logger
	// Metrics, when set, registers the transport's metrics.
	Metrics prometheus.Registerer

	// SendQueue is how many frames may wait for each peer; default 1024.
	// Catch-up messages do not count. When the queue is full, the stream
	// is closed and the overflow counted: the peer reconnects and catches
	// up with snapshots, which is cheaper than buffering without bound for
	// a peer that cannot keep up.
	SendQueue int
	// HelloTimeout bounds the wait for the peer's Hello; default 10s. A
	// connection that sends nothing must not hold a stream open.
	HelloTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the wait between attempts to
	// dial a peer, doubling from min to max with jitter; defaults 100ms
	// and 5s. A restarted replica is found again within ReconnectMax,
	// well before gossip would declare it dead (5-14 s).
	ReconnectMin, ReconnectMax time.Duration
	// Keepalive is the interval of HTTP/2 pings on an idle connection and
	// the time to wait for their answer; default 5s. A peer that vanishes
	// without closing its connection (a partition, a frozen VM) is noticed
	// within about twice this, an early signal of failure.
	Keepalive time.Duration
	// Clock times the redial backoff and the hello timeout; default the
	// real clock. (gRPC's own connection backoff and keepalives run on
	// the real clock.)
	Clock clock.WithTicker
}

func (o *PeerOptions) defaults() {
	if o.SendQueue <= 0 {
		o.SendQueue = 1024
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 10 * time.Second
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = 100 * time.Millisecond
	}
	if o.ReconnectMax <= 0 {
		o.ReconnectMax = 5 * time.Second
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.Keepalive <= 0 {
		o.Keepalive = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.LocalDigest == nil {
		o.LocalDigest = func() federation.Digest { return federation.Digest{} }
	}
}

func (o *PeerOptions) validate() error {
	if err := o.Self.Validate(); err != nil {
		return fmt.Errorf("%w: Self: %w", ErrInvalidPeerOptions, err)
	}
	if o.ListenAddr == "" {
		return fmt.Errorf("%w: ListenAddr is empty", ErrInvalidPeerOptions)
	}
	if o.Handler == nil {
		return fmt.Errorf("%w: Handler is nil", ErrInvalidPeerOptions)
	}
	if o.TLS == nil || o.ClientTLS == nil {
		return fmt.Errorf("%w: TLS and ClientTLS are required (mutual TLS)", ErrInvalidPeerOptions)
	}
	if o.TLS.ClientAuth != tls.RequireAndVerifyClientCert || o.TLS.ClientCAs == nil {
		return fmt.Errorf("%w: TLS must require and verify client certificates against ClientCAs", ErrInvalidPeerOptions)
	}
	if len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil && o.TLS.GetConfigForClient == nil {
		return fmt.Errorf("%w: TLS has no certificate", ErrInvalidPeerOptions)
	}
	if len(o.ClientTLS.Certificates) == 0 && o.ClientTLS.GetClientCertificate == nil {
		return fmt.Errorf("%w: ClientTLS has no client certificate", ErrInvalidPeerOptions)
	}
	if o.ClientTLS.InsecureSkipVerify && o.ClientTLS.VerifyConnection == nil && o.ClientTLS.VerifyPeerCertificate == nil {
		return fmt.Errorf("%w: ClientTLS skips verification without verifying the server itself", ErrInvalidPeerOptions)
	}
	if o.TrustDomain != "" {
		if err := checkTrustDomain(o.TrustDomain); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidPeerOptions, err)
		}
	}
	return nil
}
