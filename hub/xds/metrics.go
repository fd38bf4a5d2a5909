package xds

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	proxies      prometheus.Gauge
	groups       prometheus.Gauge
	groupsBuilt  prometheus.Counter
	sidecars     prometheus.Gauge
	routeSets    prometheus.Gauge
	pushes       *prometheus.CounterVec
	nacks        *prometheus.CounterVec
	refused      *prometheus.CounterVec
	nackLogs     prometheus.Counter
	unserved     *prometheus.CounterVec
	pushDuration prometheus.Histogram
	// credentialsRefused counts credentials (SDS secrets) not served.
	credentialsRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_xds_connected_proxies",
			Help: "xDS streams open on this hub replica.",
		}),
		groups: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_xds_proxy_groups",
			Help: "Proxy groups (cluster and region) whose load assignments this replica holds: those with an open stream.",
		}),
		groupsBuilt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_xds_proxy_groups_total",
			Help: "Proxy groups (cluster and region) for which load assignments were built; a group built again after its last proxy left counts again.",
		}),
		sidecars: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_xds_envoy_sidecars",
			Help: "Envoy sidecars (node IDs) with an open stream, whose listeners and clusters this replica holds.",
		}),
		routeSets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_xds_route_sets",
			Help: "Route sets besides the default that held Envoy sidecars take, each with route configurations of its own: a route class (the VirtualService matches on clients, sourceLabels and sourceNamespace, that they satisfy) under a Sidecar scope's egress.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_pushes_total",
			Help: "Cache updates that changed resources, by xDS type.",
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_nacks_total",
			Help: "Responses proxies rejected, by xDS type.",
		}, []string{"type"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_requests_refused_total",
			Help: "xDS requests refused, and their streams ended, for what they carry rather than who sent them, by reason (node_too_large, unknown_cluster).",
		}, []string{"reason"}),
		nackLogs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_xds_nack_logs_suppressed_total",
			Help: "First NACKs of a stream logged at debug level instead of info because more than the log rate (10 a second, bursts of 50) arrived.",
		}),
		unserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_unserved_requests_total",
			Help: "xDS requests of a type the hub serves nothing of to the asking proxy (a ztunnel's istio.workload.Address, say), by xDS type (other for types the hub does not know): the type gets no resources and the stream lives on, as with istiod.",
		}, []string{"type"}),
		credentialsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_credentials_refused_total",
			Help: "Credentials (SDS secrets kubernetes://<name> named by credentialName) not served to an Envoy proxy, by reason: unauthenticated (the plaintext port), other_namespace (a Secret of another namespace than the proxy's), unreadable (missing, without the keys, unparsable, or not readable in the proxy's cluster).",
		}, []string{"reason"}),
		pushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshfed_xds_push_duration_seconds",
			Help:    "Time to turn a batch of registry changes into cache updates.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}
	for _, r := range credentialReasons {
		m.credentialsRefused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.proxies, m.groups, m.groupsBuilt, m.sidecars, m.routeSets, m.pushes, m.nacks, m.refused, m.nackLogs, m.unserved, m.pushDuration, m.credentialsRefused)
	}
	return m
}
