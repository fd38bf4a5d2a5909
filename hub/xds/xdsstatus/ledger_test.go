package xdsstatus

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counter is a cache's version counter, as the ledger reads it.
type counter struct{ n uint64 }

func (c *counter) Version() uint64 { return c.n }

// BenchmarkTracker10kEpochs is BenchmarkTracker10k with config epochs:
// every record looks the epochs of its ACKed versions up in a ledger of
// 10,000 caches (a sidecar's worth each), 64 seals deep.
func BenchmarkTracker10kEpochs(b *testing.B) {
	l := NewLedger("hub-0")
	caches := make([]*counter, 10000)
	ids := make([]uint64, len(caches))
	for i := range caches {
		ids[i] = l.Reserve()
		caches[i] = &counter{}
		l.Observe(ids[i], caches[i])
	}
	for range MaxMarks {
		l.Begin(nil)
		for _, c := range caches {
			c.n++
		}
		l.Seal()
	}
	tr := NewTracker("hub-0", nil, prometheus.NewRegistry())
	tr.UseEpochs(l.EpochOf)
	benchTracker(b, tr, func(i, n int) string { return fmt.Sprintf("%d.%d", ids[i], 32+n%32) })
}
