package replication

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/hub/store"
)

type metrics struct {
	members   prometheus.Gauge
	moves     prometheus.Counter
	published prometheus.Counter
	applied   *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	resyncs   *prometheus.CounterVec
	lag       prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_federation_owner_candidates",
			Help: "Live, unsuspected replicas that clusters are assigned over.",
		}),
		moves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_federation_ownership_moves_total",
			Help: "Clusters whose owners changed after a membership change.",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_federation_deltas_sent_total",
			Help: "Local snapshots and deltas published to peers.",
		}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_deltas_received_total",
			Help: "Replicated writes applied, by kind (snapshot, delta).",
		}, []string{"kind"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_deltas_rejected_total",
			Help: "Replicated writes refused, by kind and reason (duplicate, stale, gap, removed, invalid; invalid_root: a peer's trust root that is not the CA certificate it says).",
		}, []string{"kind", "reason"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_resync_requests_total",
			Help: "Snapshot requests sent to peers, by cause.",
		}, []string{"cause"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshfed_federation_replication_lag_seconds",
			Help:    "Time from an owner's write to its application on this replica.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.members, m.moves, m.published, m.applied, m.rejected, m.resyncs, m.lag)
	}
	return m
}

// registerOwned exports how many clusters this replica watches.
func (r *Replicator) registerOwned(reg prometheus.Registerer, st *store.Store, own *Ownership) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshfed_federation_owned_clusters",
		Help: "Remote clusters this replica watches (owns).",
	}, func() float64 {
		n := 0
		for c := range st.Digest() {
			if own.Owns(c) {
				n++
			}
		}
		return float64(n)
	}))
}
