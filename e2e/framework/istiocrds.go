package framework

import (
	"context"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// IstioCRDFile is the hub chart's file of Istio networking CRDs
// (VirtualService, DestinationRule, ServiceEntry, Sidecar), relative to the
// module root: what `helm install` of the hub chart installs from crds/.
const IstioCRDFile = "remote-charts/hub/crds/networking.istio.io.yaml"

// installIstioCRDs installs IstioCRDFile into c and waits until the
// apiserver serves every version of them. The file is read from the
// module containing the working directory, as the hub binary is built
// from it: tests and `make demo` run inside the module.
func installIstioCRDs(ctx context.Context, c *Cluster) error {
	root, err := ModuleRoot(ctx, "")
	if err != nil {
		return err
	}
	// InstallCRDs creates the CRDs and polls discovery until each version
	// is served (Established alone does not say the endpoints answer).
	if _, err := envtest.InstallCRDs(c.cfg, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(root, IstioCRDFile)},
		ErrorIfPathMissing: true,
	}); err != nil {
		return fmt.Errorf("framework: installing the Istio CRDs in %s: %w", c.name, err)
	}
	return nil
}
