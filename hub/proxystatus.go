package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/trustsvc"
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
	// spokes rides along: the spokes' status is small, changes rarely,
	// and must be answered fleet-wide like the proxies'.
	spokes        *spokeStatus
	spokesChanged <-chan struct{} // nil without the CA
	changed       chan struct{}   // tracker or spokes changed (run)
}

// proxyStatusBatch is the wire form of a batch of records.
type proxyStatusBatch struct {
	// Full replaces everything known of the sender (sent on connect).
	Full    bool                 `json:"full,omitempty"`
	Changed []proxystatus.Record `json:"changed,omitempty"`
	Removed []string             `json:"removed,omitempty"`
	// Spokes, when present, replaces the sender's spoke list (always in a
	// full batch; in others only when it changed).
	Spokes *[]trustsvc.SpokeStatus `json:"spokes,omitempty"`
}

// newProxyStatus joins tracker with the others' records; spokes and
// spokesChanged are the local spokes (trustsvc.Service), nil without a CA.
func newProxyStatus(self string, tracker *xds.StatusTracker, spokes func() []trustsvc.SpokeStatus, spokesChanged <-chan struct{}) *proxyStatus {
	return &proxyStatus{
		self: self, tracker: tracker, fleet: proxystatus.NewFleet(),
		spokes: newSpokeStatus(self, spokes), spokesChanged: spokesChanged,
		changed: make(chan struct{}, 1),
	}
}

// run forwards the changes of the tracker and of the spokes to Changed
// until ctx ends.
func (p *proxyStatus) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.tracker.Changes():
		case <-p.spokesChanged:
		}
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// Spokes returns every spoke of the fleet at now (/debug/spokez).
func (p *proxyStatus) Spokes(now time.Time) []trustsvc.SpokeStatus { return p.spokes.all(now) }

// All implements xds.StatusSource: the whole fleet's proxies.
func (p *proxyStatus) All() []proxystatus.Record { return p.fleet.All() }

// Full returns every local record as a full batch.
func (p *proxyStatus) Full() json.RawMessage {
	recs := p.tracker.Records()
	spokes := p.spokes.full()
	if len(recs) == 0 && len(spokes) == 0 {
		return nil
	}
	raw, _ := json.Marshal(proxyStatusBatch{Full: true, Changed: recs, Spokes: &spokes})
	return raw
}

// TakeChanges moves the tracker's changes into the local fleet and returns
// them as a batch for the peers.
func (p *proxyStatus) TakeChanges() (json.RawMessage, bool) {
	changed, removed := p.tracker.TakeChanges()
	spokes, spokesChanged := p.spokes.take()
	if len(changed) == 0 && len(removed) == 0 && !spokesChanged {
		return nil, false
	}
	p.fleet.Upsert(p.self, changed)
	p.fleet.Remove(p.self, removed)
	b := proxyStatusBatch{Changed: changed, Removed: removed}
	if spokesChanged {
		b.Spokes = &spokes
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, false
	}
	return raw, true
}

// Changed signals that the tracker or the spokes have changes.
func (p *proxyStatus) Changed() <-chan struct{} { return p.changed }

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
	if b.Spokes != nil {
		p.spokes.apply(string(from), *b.Spokes)
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
func (p *proxyStatus) DropReplica(id federation.ReplicaID) {
	p.fleet.DropReplica(string(id))
	p.spokes.drop(string(id))
}
