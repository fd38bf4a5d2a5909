package replication

import "github.com/prometheus/client_golang/prometheus"

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
			Help: "Replicated writes refused, by kind and reason (duplicate, stale, gap, removed, invalid).",
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
func (r *Replicator) registerOwned(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshfed_federation_owned_clusters",
		Help: "Remote clusters this replica watches (owns).",
	}, func() float64 {
		n := 0
		for c := range r.digest() {
			if r.own.Owns(c) {
				n++
			}
		}
		return float64(n)
	}))
}

// registerTrust exports the federated trust bundle, read at scrape time:
// its roots by state, and when the first of them expires (alert on it: an
// expired root breaks every handshake under it).
func (r *Replicator) registerTrust(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	count := func(retiring bool) func() float64 {
		return func() float64 {
			n := 0
			for _, root := range r.TrustRoots() {
				if !root.RetireAt.IsZero() == retiring {
					n++
				}
			}
			return float64(n)
		}
	}
	for state, retiring := range map[string]bool{"active": false, "retiring": true} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "meshfed_trust_bundle_roots",
			Help:        "Roots of the federated trust bundle, by state: active, or retiring after a rotation.",
			ConstLabels: prometheus.Labels{"state": state},
		}, count(retiring)))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshfed_trust_bundle_first_expiry_timestamp_seconds",
		Help: "When the first root of the federated trust bundle expires (Unix time); 0 when the bundle is empty.",
	}, func() float64 {
		var first float64
		for _, root := range r.TrustRoots() {
			if t := float64(root.NotAfter.Unix()); !root.NotAfter.IsZero() && (first == 0 || t < first) {
				first = t
			}
		}
		return first
	}))
}
