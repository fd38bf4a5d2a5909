package replication

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/peerstream"
)

// proxyStatusBatchInterval bounds how often local proxy-status changes are
// sent: changes within it travel in one batch, so 10k proxies acking a push
// cost a few messages, not 10k.
const proxyStatusBatchInterval = 250 * time.Millisecond

// fleet replicates the fleet status (proxy status records): local changes
// go out in batches, a (re)connecting peer gets every local record, and
// the records of a replica that left are dropped. It is the mux's handler
// of proxy-status messages.
type fleet struct {
	proxies ProxyStatusSync
	peers   *peerstream.Peers
	m       *metrics
	log     logr.Logger
	clock   clock.WithTicker

	mu   sync.Mutex // guards seen
	seen map[federation.ReplicaID]bool
}

// run publishes local proxy-status changes in batches until ctx ends.
func (f *fleet) run(ctx context.Context) {
	for f.proxies.WaitChanged(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-f.clock.After(proxyStatusBatchInterval):
		}
		encode, ok := f.proxies.TakeChanges()
		// Taken first, then the peers asked: a peer that connects after
		// this look is sent the full status, read after the take.
		if !ok || len(f.peers.Connected()) == 0 {
			continue
		}
		batch, err := encode()
		if err != nil {
			f.log.Error(err, "proxy status batch not encoded")
			continue
		}
		if err := f.peers.Broadcast(&federation.PeerMessage{ProxyStatus: batch}); err != nil {
			f.log.V(1).Info("proxy status broadcast incomplete", "error", err.Error())
		}
	}
}

// Hello implements peerstream.KindHandler.
func (f *fleet) Hello(federation.ReplicaID, *federation.Hello) []*federation.PeerMessage {
	if full := f.proxies.Full(); len(full) > 0 {
		return []*federation.PeerMessage{{ProxyStatus: full}}
	}
	return nil
}

// Receive implements peerstream.KindHandler.
func (f *fleet) Receive(from federation.ReplicaID, msg *federation.PeerMessage) {
	if err := f.proxies.Apply(from, msg.ProxyStatus); err != nil {
		f.m.rejected.WithLabelValues("proxy_status", "invalid").Inc()
		f.log.Error(err, "proxy status from peer refused", "peer", from)
		return
	}
	f.m.applied.WithLabelValues("proxy_status").Inc()
}

// dropDeparted forgets the proxy status of replicas no longer members:
// their proxies have reconnected elsewhere, or are gone.
func (f *fleet) dropDeparted(ids []federation.ReplicaID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := map[federation.ReplicaID]bool{}
	for _, id := range ids {
		now[id] = true
	}
	for id := range f.seen {
		if !now[id] {
			f.proxies.DropReplica(id)
		}
	}
	f.seen = now
}
