package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count and time webhook requests. One Metrics is shared by every
// webhook of a process (the "webhook" label tells them apart). A nil
// *Metrics records nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the webhook metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_spoke_webhook_requests_total",
			Help: "Admission requests answered, by webhook (inject, validate) and result (allowed, denied, mutated, error).",
		}, []string{"webhook", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshfed_spoke_webhook_duration_seconds",
			Help: "Time to answer an admission request, from reading the body to writing the response.",
			// 0.25 ms … 4 s: an injection is well under a millisecond;
			// the apiserver gives up after the configured timeout (10 s).
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15),
		}, []string{"webhook"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *Metrics) observe(webhook string, r Result, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(webhook, string(r)).Inc()
	m.duration.WithLabelValues(webhook).Observe(d.Seconds())
}
