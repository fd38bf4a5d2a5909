package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/gossip"
	"github.com/meshfed/meshfed/federation/peerstream"
	"github.com/meshfed/meshfed/hub/replication"
	"github.com/meshfed/meshfed/pkg/pki"
)

// PeerCASecret is the config-cluster Secret holding the CA that issues the
// replicas' peer certificates when no --peer-tls-* files are given.
const PeerCASecret = "meshfed-peer-ca"

// Keys of PeerCASecret.
const (
	peerCACertKey = "ca-cert.pem"
	peerCAKeyKey  = "ca-key.pem"
)

func newReplicator(ctx context.Context, opts Options, c client.Client, deps replication.Deps, log logr.Logger, reg prometheus.Registerer) (*replication.Replicator, error) {
	var key []byte
	if opts.GossipKeyFile != "" {
		raw, err := os.ReadFile(opts.GossipKeyFile)
		if err != nil {
			return nil, fmt.Errorf("hub: gossip key: %w", err)
		}
		if key, err = gossip.ParseGossipKey(raw); err != nil {
			return nil, fmt.Errorf("hub: gossip key %s: %w", opts.GossipKeyFile, err)
		}
	} else {
		log.Info("no --gossip-key-file: replica gossip is NOT encrypted")
	}
	serverTLS, clientTLS, err := peerTLS(ctx, opts, c, log)
	if err != nil {
		return nil, err
	}
	return replication.New(replication.Options{
		Self:       federation.ReplicaID(opts.ReplicaID),
		GossipAddr: opts.GossipAddr, GossipAdvertiseAddr: opts.GossipAdvertiseAddr,
		Join: opts.Join, GossipKey: key,
		PeerAddr: opts.PeerAddr, PeerAdvertiseAddr: peerAdvertiseAddr(opts),
		ServerTLS: serverTLS, ClientTLS: clientTLS,
		Log: log.WithName("federation"), Metrics: reg, Clock: opts.Clock,
	}, deps)
}

// peerAdvertiseAddr is the address other replicas dial: the explicit one,
// else PeerAddr with the gossip advertise host when PeerAddr has no host.
func peerAdvertiseAddr(opts Options) string {
	if opts.PeerAdvertiseAddr != "" {
		return opts.PeerAdvertiseAddr
	}
	host, port, err := net.SplitHostPort(opts.PeerAddr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return opts.PeerAddr
	}
	for _, a := range []string{opts.GossipAdvertiseAddr, opts.GossipAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
			return net.JoinHostPort(h, port)
		}
	}
	return "" // let membership fill in its advertise host
}

// peerTLS returns the peer transport's mTLS configuration: from files when
// given, else from the config cluster's peer CA.
func peerTLS(ctx context.Context, opts Options, c client.Client, log logr.Logger) (server, client *tls.Config, err error) {
	if opts.PeerTLSCert != "" || opts.PeerTLSKey != "" || opts.PeerTLSCA != "" {
		server, client, err = peerstream.LoadPeerTLS(opts.PeerTLSCert, opts.PeerTLSKey, opts.PeerTLSCA)
		if err != nil {
			return nil, nil, fmt.Errorf("hub: peer TLS files: %w", err)
		}
		return server, client, nil
	}
	ca, err := loadOrCreatePeerCA(ctx, c, opts.Namespace, opts.Clock.Now())
	if err != nil {
		return nil, nil, err
	}
	cert, err := peerstream.PeerCertificate(ca, federation.ReplicaID(opts.ReplicaID), opts.Clock.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("hub: peer certificate: %w", err)
	}
	log.Info("peer certificate issued from the config cluster's peer CA", "secret", opts.Namespace+"/"+PeerCASecret)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	server, client = peerstream.PeerTLS(pool, cert)
	return server, client, nil
}

// loadOrCreatePeerCA reads the peer CA from the config cluster, creating it
// if absent. When replicas race to create it, Create fails for all but one
// and the others read the winner's: every replica ends with the same CA.
func loadOrCreatePeerCA(ctx context.Context, c client.Client, ns string, now time.Time) (*pki.CA, error) {
	key := client.ObjectKey{Namespace: ns, Name: PeerCASecret}
	for attempt := 0; attempt < 3; attempt++ {
		var sec corev1.Secret
		err := c.Get(ctx, key, &sec)
		if err == nil {
			ca, err := pki.LoadCA(sec.Data[peerCACertKey], sec.Data[peerCAKeyKey])
			if err != nil {
				return nil, fmt.Errorf("hub: secret %s: %w", key, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("hub: reading %s: %w", key, err)
		}
		// Ten years: the peer CA only signs short-lived replica
		// certificates issued at start-up.
		ca, err := pki.NewCA("meshfed peer CA", 10*365*24*time.Hour, now)
		if err != nil {
			return nil, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		sec = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: PeerCASecret,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "meshfed-hub"}},
			Data: map[string][]byte{peerCACertKey: ca.CertPEM, peerCAKeyKey: keyPEM},
		}
		switch err := c.Create(ctx, &sec); {
		case err == nil:
			return ca, nil
		case apierrors.IsAlreadyExists(err):
			continue // another replica won the race: read its CA
		default:
			return nil, fmt.Errorf("hub: creating %s: %w", key, err)
		}
	}
	return nil, fmt.Errorf("hub: could not read or create %s", key)
}
