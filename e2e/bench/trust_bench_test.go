package bench

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// rootRuns is the number of new roots BenchmarkRootPropagation adds per
// b.Loop iteration.
const rootRuns = 10

// BenchmarkRootPropagation adds a new root to cacerts (step 1 of a
// rotation), rootRuns times, and measures how long until every one of 3
// replicas serves it in its trust bundle ("bundle-ms": each replica reloads
// the Secret through its watch) and until a workload agent connected to one
// of them has written it into its root-cert.pem ("agent-ms": the hub's
// trust-bundle stream to the agent, then the agent's file write).
func BenchmarkRootPropagation(b *testing.B) {
	f := framework.NewTestFleet(b, framework.FleetOptions{Remotes: framework.Remotes(1)})
	ctx, cancel := context.WithTimeout(b.Context(), convergenceBudget)
	defer cancel()
	now := time.Now()
	signer, err := pki.NewCA("bench root 0", 24*time.Hour, now)
	if err != nil {
		b.Fatal(err)
	}
	roots := []*pki.CA{signer}
	if err := f.Config().PutCACerts(ctx, signer, roots...); err != nil {
		b.Fatal(err)
	}
	if err := f.Config().PutRemoteSecret(ctx, "bench-remotes", f.Remotes()...); err != nil {
		b.Fatal(err)
	}
	hubs := startReplicas(b, f, 3, nil)

	r := f.Remotes()[0]
	pool := x509.NewCertPool()
	pool.AddCert(signer.Cert)
	if err := r.EnsureServiceAccount(ctx, "bench", "agent"); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ag, err := r.StartCertAgent(ctx, "bench", "agent", dir, framework.CertOptions{CAAddr: hubs[2].CAAddr(), CARoots: pool})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ag.Stop)

	var bundle, agentFile []time.Duration
	for iter := 0; b.Loop(); iter++ {
		for run := range rootRuns {
			root, err := pki.NewCA(fmt.Sprintf("bench root %d.%d", iter, run), 24*time.Hour, now)
			if err != nil {
				b.Fatal(err)
			}
			roots = append(roots, root)
			fp := ca.Fingerprint(root.Cert)
			start := time.Now()
			if err := f.Config().PutCACerts(ctx, signer, roots...); err != nil {
				b.Fatal(err)
			}
			var inBundle time.Duration
			err = testutil.Poll(ctx, settleTimeout, 2*time.Millisecond, func() error {
				if inBundle == 0 {
					for _, h := range hubs {
						tz, err := h.Trustz(ctx)
						if err != nil {
							return err
						}
						if !tz.Has(fp) {
							return fmt.Errorf("%s has not the new root yet", h.ReplicaID())
						}
					}
					inBundle = time.Since(start)
				}
				onDisk, err := os.ReadFile(filepath.Join(dir, agent.RootCertFile))
				if err != nil {
					return err
				}
				if !bytes.Contains(onDisk, bytes.TrimSpace(root.CertPEM)) {
					return fmt.Errorf("the agent has not written the new root yet")
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			bundle = append(bundle, inBundle)
			agentFile = append(agentFile, time.Since(start))
		}
	}
	b.ReportMetric(0, "ns/op") // one op is a series of rotations' first steps
	b.ReportMetric(msOf(percentile(bundle, 50)), "bundle-p50-ms")
	b.ReportMetric(msOf(percentile(bundle, 100)), "bundle-max-ms")
	b.ReportMetric(msOf(percentile(agentFile, 50)), "agent-p50-ms")
	b.ReportMetric(msOf(percentile(agentFile, 100)), "agent-max-ms")
	b.ReportMetric(float64(len(bundle)), "roots")
}
