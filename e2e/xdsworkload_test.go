package e2e

import (
	"context"
	"testing"

	"github.com/meshfed/meshfed/e2e/framework"
)

// deployServing deploys a workload into c with opts, stops it when the
// test ends, and waits until every replica serves.
func deployServing(t *testing.T, c *framework.RemoteCluster, opts framework.WorkloadOptions) *framework.Workload {
	t.Helper()
	ctx := t.Context()
	w, err := c.DeployWorkload(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	wctx, cancel := context.WithTimeout(ctx, converge)
	defer cancel()
	if err := w.WaitServing(wctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// certClientOptions are a proxyless xDS client of namespace demo in c
// whose certificates a cert agent for service account sa (its token
// minted in c) keeps from the hub's CA: the Name is sa.
func certClientOptions(t *testing.T, c *framework.RemoteCluster, hub *framework.Hub, certs *framework.CertOptions, sa string) framework.ClientOptions {
	t.Helper()
	serviceAccountToken(t, c, "demo", sa, framework.CertAudience)
	ctx, cancel := context.WithTimeout(t.Context(), converge)
	defer cancel()
	ag, err := c.StartCertAgent(ctx, "demo", sa, t.TempDir(), *certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ag.Stop)
	return framework.ClientOptions{
		HubAddr: hub.CAAddr(), ServerTLS: true, CertDir: ag.Dir(),
		Cluster: c.ID, Namespace: "demo", Locality: c.Locality, Name: sa,
	}
}

// dialXDS dials target through a proxyless xDS client with opts, closed
// when the test ends.
func dialXDS(t *testing.T, opts framework.ClientOptions, target string) *framework.XDSConn {
	t.Helper()
	conn, err := framework.NewTestXDSClient(t, opts).Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
