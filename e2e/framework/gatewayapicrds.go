package framework

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// GatewayAPIModule is the module whose CRDs the Gateway API tests install:
// the one go.mod pins, read from the module cache (never copied here).
const GatewayAPIModule = "sigs.k8s.io/gateway-api"

// GatewayAPICRDFiles are the CRDs installed, relative to the module:
// the standard channel's, and the experimental TLSRoute (v1alpha2), which
// v1.4 has in no other channel.
var GatewayAPICRDFiles = []string{
	"config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml",
	"config/crd/standard/gateway.networking.k8s.io_gateways.yaml",
	"config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
	"config/crd/standard/gateway.networking.k8s.io_grpcroutes.yaml",
	"config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml",
	"config/crd/experimental/gateway.networking.k8s.io_tlsroutes.yaml",
}

// InstallGatewayAPICRDs installs the Gateway API's CRDs (GatewayAPICRDFiles
// of the module go.mod pins) into the config cluster and waits until the
// apiserver serves them.
func (c *ConfigCluster) InstallGatewayAPICRDs(ctx context.Context) error {
	root, err := ModuleRoot(ctx, "")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", GatewayAPIModule)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("framework: locating %s: %w: %s", GatewayAPIModule, err, ee.Stderr)
		}
		return fmt.Errorf("framework: locating %s: %w", GatewayAPIModule, err)
	}
	dir := strings.TrimSpace(string(out))
	paths := make([]string, len(GatewayAPICRDFiles))
	for i, f := range GatewayAPICRDFiles {
		paths[i] = filepath.Join(dir, f)
	}
	if _, err := envtest.InstallCRDs(c.cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("framework: installing the Gateway API CRDs in %s: %w", c.name, err)
	}
	return nil
}
