package peerstream

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/federation"
)

func (p *Peers) reject(from federation.ReplicaID, reason string, err error) {
	p.metrics.rejected.WithLabelValues(reason).Inc()
	p.log.Info("peer message rejected", "peer", from, "reason", reason, "error", err.Error())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// peerMetrics are the transport's Prometheus metrics.
type peerMetrics struct {
	messages  *prometheus.CounterVec
	sent      map[string]prometheus.Counter
	received  map[string]prometheus.Counter
	rejected  *prometheus.CounterVec
	connected prometheus.Gauge
	overflows prometheus.Counter
}

func newPeerMetrics() *peerMetrics {
	m := &peerMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_peer_messages_total",
			Help: "Peer stream frames sent, and received and accepted, by direction and kind.",
		}, []string{"direction", "kind"}),
		sent:     map[string]prometheus.Counter{},
		received: map[string]prometheus.Counter{},
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_federation_peer_messages_rejected_total",
			Help: "Peer stream frames and streams refused, by reason.",
		}, []string{"reason"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_federation_peers_connected",
			Help: "Peers with an open, authenticated stream.",
		}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_federation_peer_send_overflows_total",
			Help: "Peer streams closed because the peer's send queue was full.",
		}),
	}
	// Every label value exists from the start, so that dashboards and
	// rate() see zeros rather than missing series.
	for _, k := range federation.PeerKinds() {
		m.sent[k] = m.messages.WithLabelValues("sent", k)
		m.received[k] = m.messages.WithLabelValues("received", k)
	}
	for _, r := range peerRejectReasons {
		m.rejected.WithLabelValues(r)
	}
	return m
}

func (m *peerMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.messages, m.rejected, m.connected, m.overflows} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
