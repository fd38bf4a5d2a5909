package e2e

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// TestCreateRemoteSecret: the spoke chart's reader service account and
// least RBAC, a token from `meshfedctl create-remote-secret`, and the hub
// serves the cluster with nothing more; `--rotate` swaps the token and the
// hub picks it up without a restart.
func TestCreateRemoteSecret(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegions()[:1]})
	ctx := t.Context()
	remote := f.Remote("cluster-1")
	w, err := remote.DeployWorkload(ctx, framework.WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	// Only the reader part of the spoke chart: the hub's identity there.
	if err := remote.EnsureNamespace(ctx, "istio-system"); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(remote.RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, spokeChartDir, "istio-system", nil)
	applied := 0
	for _, u := range r.objects {
		if !strings.Contains(u.GetName(), "reader") || u.GetKind() == "Secret" {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
			client.FieldOwner("meshfed-e2e"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		applied++
	}
	if applied < 3 {
		t.Fatalf("applied %d reader objects, want the service account, cluster role and binding", applied)
	}

	if err := f.Config().EnsureNamespace(ctx, "istio-system"); err != nil {
		t.Fatal(err)
	}
	out, err := framework.Meshfedctl(t, "create-remote-secret", "--name", "cluster-1",
		"--kubeconfig", remote.KubeconfigFile(), "--apply-to", f.Config().KubeconfigFile())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out))
	hub := framework.StartTestHub(t, f, framework.HubOptions{})
	conn := clientIn(t, f, hub, "cluster-1")
	expectClusters(t, conn, 20, "cluster-1")
	before := registryzCluster(t, hub, "cluster-1")
	if before.State != debugdoc.ClusterSynced || before.Secret != "istio-system/istio-remote-secret-cluster-1" {
		t.Fatalf("cluster-1 = %+v", before)
	}

	// A second run without --rotate refuses to clobber the secret.
	if _, err := framework.Meshfedctl(t, "create-remote-secret", "--name", "cluster-1",
		"--kubeconfig", remote.KubeconfigFile(), "--apply-to", f.Config().KubeconfigFile()); err == nil {
		t.Fatal("create-remote-secret overwrote an existing secret without --rotate")
	}
	if _, err := framework.Meshfedctl(t, "create-remote-secret", "--name", "cluster-1", "--rotate",
		"--kubeconfig", remote.KubeconfigFile(), "--apply-to", f.Config().KubeconfigFile()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, converge, poll, func() error {
		c := registryzCluster(t, hub, "cluster-1")
		if c.Generation <= before.Generation || c.State != debugdoc.ClusterSynced {
			return fmt.Errorf("cluster-1 not re-synced with the rotated token: %+v (before %+v)", c, before)
		}
		return nil
	})
	expectClusters(t, conn, 20, "cluster-1")
}
