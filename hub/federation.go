package hub

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/federation/gossip"
	"github.com/meshfed/meshfed/hub/replication"
	"github.com/meshfed/meshfed/pkg/version"
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
	serverTLS, clientTLS, err := replication.PeerCredentials(ctx, replication.PeerCredentialOptions{
		Self:     opts.ReplicaID,
		CertFile: opts.PeerTLSCert, KeyFile: opts.PeerTLSKey, CAFile: opts.PeerTLSCA,
		Client: c, Namespace: opts.Namespace, Now: opts.Clock.Now(), Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	return replication.New(replication.Options{
		Self:       opts.ReplicaID,
		GossipAddr: opts.GossipAddr, GossipAdvertiseAddr: opts.GossipAdvertiseAddr,
		Join: opts.Join, GossipKey: key,
		PeerAddr: opts.PeerAddr, PeerAdvertiseAddr: peerAdvertiseAddr(opts), Version: version.Get().Version,
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
