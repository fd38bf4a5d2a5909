//go:build linux

package framework

import (
	"context"
	"testing"
	"time"
)

// Environment variables naming the Istio data-plane binaries (read by the
// test helpers only, like the others in testing.go).
const (
	// EnvEnvoyBinary names upstream Envoy (make envoy).
	EnvEnvoyBinary = "MESHFED_ENVOY_BIN"
	// EnvPilotAgentBinary names Istio's pilot-agent (make istio-assets);
	// Envoy's bootstrap template envoy_bootstrap_tmpl.json lies next to it.
	EnvPilotAgentBinary = "MESHFED_PILOT_AGENT_BIN"
	// EnvIstioctlBinary names istioctl (make istio-assets).
	EnvIstioctlBinary = "MESHFED_ISTIOCTL_BIN"
)

// BootstrapTemplateName is the file, next to pilot-agent, holding the
// Envoy bootstrap template of Istio's proxy image
// (/var/lib/istio/envoy/envoy_bootstrap_tmpl.json there).
const BootstrapTemplateName = "envoy_bootstrap_tmpl.json"

// SidecarBinaries fills the binaries of opts from the environment; it
// fails the test (no skip: `make e2e` installs them) when one is missing.
func SidecarBinaries(t testing.TB, opts *SidecarOptions) {
	t.Helper()
	if err := opts.BinariesFromEnv(); err != nil {
		t.Fatalf("%v", err)
	}
}

// StartTestSidecar starts a sidecar Pod with binaries from the environment,
// waits for Envoy's admin interface, and stops it in t.Cleanup; after a
// failing test it logs the end of pilot-agent's and Envoy's output.
func StartTestSidecar(t testing.TB, f *Fleet, opts SidecarOptions) *Sidecar {
	t.Helper()
	SidecarBinaries(t, &opts)
	s, err := f.StartSidecar(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting sidecar %s: %v", opts.Name, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping sidecar %s: %v", opts.Name, err)
		}
		if t.Failed() {
			t.Logf("sidecar %s (%s) log %s, last lines:\n%s", opts.Name, s.IP(), s.LogPath(), s.logTail(60))
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.WaitAdmin(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	return s
}
