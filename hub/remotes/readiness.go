package remotes

import (
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/model"
)

// ReadinessOptions configure a Readiness.
type ReadinessOptions struct {
	Provider *Provider
	Status   *Status
	// Held reports whether the state of a cluster has arrived (the hub's
	// store).
	Held interface{ HasCluster(model.ClusterID) bool }
	// SyncTimeout bounds the wait for remote clusters; slower ones are
	// reported unreachable and no longer wait.
	SyncTimeout time.Duration
	Clock       clock.PassiveClock
}

// Readiness is the hub's /readyz: ready once the remote secrets are read
// and every cluster has synced (here, or replicated from its owner),
// failed, or SyncTimeout has passed. It latches: once the hub has served
// its first full view it stays ready, so a cluster added later never takes
// a replica out of its load balancer.
type Readiness struct {
	opts  ReadinessOptions
	start time.Time
	ready atomic.Bool
}

// NewReadiness starts the wait now.
func NewReadiness(opts ReadinessOptions) *Readiness {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Readiness{opts: opts, start: opts.Clock.Now()}
}

// Check reports readiness, and what is awaited when not ready.
func (r *Readiness) Check() (bool, string) {
	if r.ready.Load() {
		return true, ""
	}
	switch {
	case !r.opts.Provider.Synced():
		return false, "remote secrets not read yet"
	case r.opts.Clock.Since(r.start) >= r.opts.SyncTimeout:
	case r.opts.Status.Syncing():
		return false, "remote clusters still syncing"
	case !r.replicated():
		return false, "waiting for peers' state of the clusters other replicas watch"
	}
	r.ready.Store(true)
	return true, ""
}

// replicated reports whether the state of every cluster watched by another
// replica has arrived: a joining replica is ready without listing any
// remote apiserver itself.
func (r *Readiness) replicated() bool {
	for _, c := range r.opts.Status.Clusters() {
		if c.State == StateReplicated && !r.opts.Held.HasCluster(c.ID) {
			return false
		}
	}
	return true
}
