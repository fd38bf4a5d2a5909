package ca_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/model"
)

// BenchmarkCreateCertificate measures CreateCertificate over TLS gRPC
// against a real remote apiserver, with the review cache (every request
// after a token's first is a hit) and without it (every request is a
// TokenReview to the apiserver), side by side. Each parallel client has its
// own token, so concurrent misses are not coalesced into one review. The
// apiserver, the hub and the clients share the machine, so the figures are
// ratios more than absolutes.
func BenchmarkCreateCertificate(b *testing.B) {
	f := startFleet(b)
	const clients = 8
	c1 := f.cluster("cluster-1")
	var tokens [clients]string
	for i := range tokens {
		tokens[i] = c1.token(b, "demo", "echo", []string{"istio-ca"}, nil)
	}
	csr, _ := newCSR(b, nil, nil) // the server does not mind that it repeats
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"cache=hit", time.Minute}, {"cache=miss", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			counted := newCountingClusters(c1)
			s := startCA(b, f, caConfig{authn: ca.AuthenticatorOptions{
				CacheTTL: bc.ttl, Clusters: counted,
				QPS: -1, // measure the review, not the client-side limit (100/s by default)
			}})
			for _, tok := range tokens { // warm the connection and, with the cache, each token
				if _, err := s.request(b.Context(), "cluster-1", tok, csr, 0); err != nil {
					b.Fatal(err)
				}
			}
			counted.reviews.Store(0)
			var next atomic.Int64
			b.SetParallelism(clients / 2) // GOMAXPROCS is 2 here
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				tok := tokens[int(next.Add(1)-1)%clients]
				for pb.Next() {
					if _, err := s.request(b.Context(), "cluster-1", tok, csr, 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "CSRs/s")
			b.ReportMetric(float64(counted.reviews.Load())/float64(b.N), "reviews/op")
		})
	}
}

// countingClusters is cluster-1 alone, counting the requests the
// Authenticator sends to its apiserver.
type countingClusters struct {
	cfg     *rest.Config
	reviews atomic.Int64
}

func newCountingClusters(c *remoteCluster) *countingClusters {
	cc := &countingClusters{cfg: rest.CopyConfig(c.cfg)}
	cc.cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			cc.reviews.Add(1)
			return rt.RoundTrip(r)
		})
	}
	return cc
}

func (cc *countingClusters) ClusterConfig(id model.ClusterID) (*rest.Config, bool) {
	return cc.cfg, id == "cluster-1"
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
