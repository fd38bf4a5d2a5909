package gossip

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/meshfed/meshfed/federation"
)

// joinLoop joins the seeds, retrying until one answers or ctx ends.
func (m *Membership) joinLoop(ctx context.Context) {
	seeds := make([]string, 0, len(m.opts.Join))
	for _, s := range m.opts.Join {
		if s != m.LocalAddr() && s != m.self.GossipAddr {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		m.log.Info("no seeds to join; starting a new gossip cluster")
		return
	}
	backoff := joinBackoffMin
	for attempt := 1; ctx.Err() == nil; attempt++ {
		n, err := m.list.Join(seeds)
		if err == nil && n > 0 {
			m.log.Info("joined gossip", "contacted", n, "attempt", attempt, "members", len(m.Members()))
			return
		}
		if err == nil {
			err = errors.New("no seed answered")
		}
		if reason, ok := classifyRejection(err.Error()); ok {
			// A seed refused us (or we it): this side of a key mismatch.
			m.metrics.reject(reason)
		}
		wait := jitter(backoff)
		m.log.Error(err, "joining gossip failed; retrying", "seeds", seeds, "attempt", attempt, "retryIn", wait)
		t := m.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

// departure is a member that went away: its last gossip address, and when.
type departure struct {
	addr string
	at   time.Time
}

// rejoinLoop joins, every RejoinInterval while some member that went away
// within RejoinWindow has not come back, those members' last addresses and
// the seeds (see MembershipOptions.RejoinInterval).
func (m *Membership) rejoinLoop(ctx context.Context) {
	t := m.opts.Clock.NewTicker(m.opts.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		targets, missing := m.rejoinTargets()
		if len(missing) == 0 {
			continue
		}
		n, err := m.list.Join(targets)
		result := "contacted"
		if n == 0 {
			result = "failed"
		}
		m.metrics.rejoins.WithLabelValues(result).Inc()
		m.log.V(1).Info("rejoining members that went away", "missing", missing, "targets", targets, "contacted", n, "error", errString(err))
	}
}

// rejoinTargets returns the addresses to join (the departed members' and
// the seeds, not this replica's) and the IDs of the departed members still
// within RejoinWindow; older ones are forgotten.
func (m *Membership) rejoinTargets() (targets []string, missing []federation.ReplicaID) {
	now := m.opts.Clock.Now()
	m.mu.Lock()
	for id, d := range m.departed {
		if now.Sub(d.at) > m.opts.RejoinWindow {
			delete(m.departed, id)
			continue
		}
		missing = append(missing, id)
		targets = append(targets, d.addr)
	}
	m.mu.Unlock()
	for _, s := range m.opts.Join {
		if s != m.LocalAddr() && s != m.self.GossipAddr && !slices.Contains(targets, s) {
			targets = append(targets, s)
		}
	}
	slices.Sort(missing)
	return targets, missing
}

// jitter spreads d over [d/2, 3d/2) so replicas that start together do not
// retry in lockstep.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
