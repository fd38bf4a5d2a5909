package hub

import (
	"encoding/json"
	"fmt"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/xds"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// proxyStatus joins this replica's proxy-status tracker and the records
// of every other replica into one proxystatus.Fleet, which CSDS and
// meshfedctl answer from; it is the replication.ProxyStatusSync of the
// hub. Local changes reach the fleet in the batches that also go to the
// peers, so every replica sees the same view within a batch interval.
type proxyStatus struct {
	self    string
	tracker *xds.StatusTracker
	fleet   *proxystatus.Fleet
}

// proxyStatusBatch is the wire form of a batch of records.
type proxyStatusBatch struct {
	// Full replaces everything known of the sender (sent on connect).
	Full    bool                 `json:"full,omitempty"`
	Changed []proxystatus.Record `json:"changed,omitempty"`
	Removed []string             `json:"removed,omitempty"`
}

func newProxyStatus(self string, tracker *xds.StatusTracker) *proxyStatus {
	return &proxyStatus{self: self, tracker: tracker, fleet: proxystatus.NewFleet()}
}

// All implements xds.StatusSource: the whole fleet's proxies.
func (p *proxyStatus) All() []proxystatus.Record { return p.fleet.All() }

// Full returns every local record as a full batch.
func (p *proxyStatus) Full() json.RawMessage {
	recs := p.tracker.Records()
	if len(recs) == 0 {
		return nil
	}
	raw, _ := json.Marshal(proxyStatusBatch{Full: true, Changed: recs})
	return raw
}

// TakeChanges moves the tracker's changes into the local fleet and returns
// them as a batch for the peers.
func (p *proxyStatus) TakeChanges() (json.RawMessage, bool) {
	changed, removed := p.tracker.TakeChanges()
	if len(changed) == 0 && len(removed) == 0 {
		return nil, false
	}
	p.fleet.Upsert(p.self, changed)
	p.fleet.Remove(p.self, removed)
	raw, err := json.Marshal(proxyStatusBatch{Changed: changed, Removed: removed})
	if err != nil {
		return nil, false
	}
	return raw, true
}

// Changed signals that the tracker has changes.
func (p *proxyStatus) Changed() <-chan struct{} { return p.tracker.Changes() }

// Apply merges a peer's batch. A record must name its sender as replica: a
// peer cannot speak for another.
func (p *proxyStatus) Apply(from federation.ReplicaID, raw json.RawMessage) error {
	var b proxyStatusBatch
	if err := json.Unmarshal(raw, &b); err != nil {
		return fmt.Errorf("proxy status batch: %w", err)
	}
	for _, r := range b.Changed {
		if r.Replica != string(from) {
			return fmt.Errorf("proxy status batch from %s carries a record of replica %q", from, r.Replica)
		}
	}
	if b.Full {
		p.fleet.Replace(string(from), b.Changed)
		return nil
	}
	p.fleet.Upsert(string(from), b.Changed)
	p.fleet.Remove(string(from), b.Removed)
	return nil
}

// DropReplica forgets a departed replica's proxies.
func (p *proxyStatus) DropReplica(id federation.ReplicaID) { p.fleet.DropReplica(string(id)) }
