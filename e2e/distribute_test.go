package e2e

import (
	"fmt"
	"math"
	"testing"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// echoDistribute weights proxies of region-1: 80 % to region-1, 20 % to
// region-2, nothing to region-3.
const echoDistribute = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: demo}
spec:
  host: echo
  trafficPolicy:
    loadBalancer:
      simple: ROUND_ROBIN
      localityLbSetting:
        distribute:
        - from: region-1/*
          to: {"region-1/*": 80, "region-2/*": 20}
`

// TestLocalityDistribute: a DestinationRule's localityLbSetting.distribute
// splits the calls of proxyless clients in region-1 80/20 between
// region-1 and region-2 (within a binomial 99.9 % bound over 1,000 calls)
// and sends none to region-3, while a client of region-3, which no entry
// names, keeps the default priorities: its own cluster only.
func TestLocalityDistribute(t *testing.T) {
	f, hubs := versionedFleet(t, 1)
	hub := hubs[0]
	inRegion1 := clientIn(t, f, hub, "cluster-1")
	inRegion3 := clientIn(t, f, hub, "cluster-3")
	expectClusters(t, inRegion1, 10, "cluster-1")
	applyIstio(t, f, echoDistribute)
	testutil.Eventually(t, converge, poll, func() error {
		counts, err := inRegion1.Spread(t.Context(), 100)
		if err != nil {
			return err
		}
		by := framework.ByCluster(counts)
		if by["cluster-2"] == 0 || by["cluster-3"] != 0 {
			return fmt.Errorf("answers by cluster %v, want cluster-1 and cluster-2 only", by)
		}
		return nil
	})
	const n, p = 1000, 0.2
	counts, err := inRegion1.Spread(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	by := framework.ByCluster(counts)
	// 99.9 % two-sided normal bound of a binomial(n, p): 3.29 standard
	// deviations.
	slack := 3.29 * math.Sqrt(n*p*(1-p))
	if got := float64(by["cluster-2"]); math.Abs(got-n*p) > slack || by["cluster-3"] != 0 || by["cluster-1"]+by["cluster-2"] != n {
		t.Fatalf("over %d calls: %v; want cluster-2 within %.0f±%.0f and none in cluster-3", n, by, n*p, slack)
	}
	t.Logf("distribute 80/20 over %d calls: %v", n, by)
	expectClusters(t, inRegion3, 20, "cluster-3")
}
