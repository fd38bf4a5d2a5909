package replication

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/peerstream"
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

// PeerCredentialOptions say where a replica's peer-stream credentials come
// from: PEM files when any is set, else the config cluster's peer CA.
type PeerCredentialOptions struct {
	Self                      federation.ReplicaID
	CertFile, KeyFile, CAFile string
	// Client and Namespace locate PeerCASecret in the config cluster.
	Client    client.Client
	Namespace string
	Now       time.Time
	Log       logr.Logger
}

// PeerCredentials returns the peer stream's mutual-TLS configurations:
// from files when given, else a certificate issued at start-up from the
// config cluster's peer CA (created by whichever replica starts first).
func PeerCredentials(ctx context.Context, o PeerCredentialOptions) (server, client *tls.Config, err error) {
	if o.CertFile != "" || o.KeyFile != "" || o.CAFile != "" {
		server, client, err = peerstream.LoadPeerTLS(o.CertFile, o.KeyFile, o.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("replication: peer TLS files: %w", err)
		}
		return server, client, nil
	}
	ca, err := loadOrCreatePeerCA(ctx, o.Client, o.Namespace, o.Now)
	if err != nil {
		return nil, nil, err
	}
	cert, err := peerstream.PeerCertificate(ca, o.Self, o.Now)
	if err != nil {
		return nil, nil, fmt.Errorf("replication: peer certificate: %w", err)
	}
	o.Log.Info("peer certificate issued from the config cluster's peer CA", "secret", o.Namespace+"/"+PeerCASecret)
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
				return nil, fmt.Errorf("replication: secret %s: %w", key, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("replication: reading %s: %w", key, err)
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
			return nil, fmt.Errorf("replication: creating %s: %w", key, err)
		}
	}
	return nil, fmt.Errorf("replication: could not read or create %s", key)
}
