package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
)

// Environment variables read by the test helpers (and nowhere else in the
// framework).
const (
	// EnvAssets names the directory of kube-apiserver and etcd.
	EnvAssets = "KUBEBUILDER_ASSETS"
	// EnvHubBinary names a prebuilt meshfed-hub; unset means build it once
	// per test process.
	EnvHubBinary = "MESHFED_HUB_BIN"
	// EnvCtlBinary names a prebuilt meshfedctl; unset means build it once
	// per test process.
	EnvCtlBinary = "MESHFED_CTL_BIN"
	// EnvAgentBinary names a prebuilt meshfed-agent (the pod agent of the
	// grpc-agent injection template); unset means build it once per test
	// process.
	EnvAgentBinary = "MESHFED_AGENT_BIN"
	// EnvSpokeBinary names a prebuilt meshfed-spoke; unset means build it
	// once per test process.
	EnvSpokeBinary = "MESHFED_SPOKE_BIN"
	// EnvVerbose, when non-empty, copies hub output to stderr.
	EnvVerbose = "MESHFED_E2E_VERBOSE"
)

// hubBuild is the one piece of process-wide state: the hub binary is built
// at most once per test process, on first use.
var hubBuild struct {
	once sync.Once
	path string
	err  error
}

// ctlBuild is hubBuild's twin for meshfedctl.
var ctlBuild struct {
	once sync.Once
	path string
	err  error
}

// TestCtlBinary returns the meshfedctl binary for tests: $MESHFED_CTL_BIN
// if set, else a build of ./hub/cmd/meshfedctl made once per process.
func TestCtlBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvCtlBinary); p != "" {
		return p, nil
	}
	ctlBuild.once.Do(func() {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hubBuildTimeout)
		defer cancel()
		ctlBuild.path, ctlBuild.err = BuildHubBinary(bctx, BuildOptions{Package: CtlPackage})
	})
	return ctlBuild.path, ctlBuild.err
}

// agentBuild is hubBuild's twin for meshfed-agent.
var agentBuild struct {
	once sync.Once
	path string
	err  error
}

// TestAgentBinary returns the meshfed-agent binary for tests:
// $MESHFED_AGENT_BIN if set, else a build of ./spoke/cmd/meshfed-agent made
// once per process.
func TestAgentBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvAgentBinary); p != "" {
		return p, nil
	}
	agentBuild.once.Do(func() {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hubBuildTimeout)
		defer cancel()
		agentBuild.path, agentBuild.err = BuildHubBinary(bctx, BuildOptions{Package: AgentPackage})
	})
	return agentBuild.path, agentBuild.err
}

// spokeBuild is hubBuild's twin for meshfed-spoke.
var spokeBuild struct {
	once sync.Once
	path string
	err  error
}

// TestSpokeBinary returns the meshfed-spoke binary for tests:
// $MESHFED_SPOKE_BIN if set, else a build of ./spoke/cmd/meshfed-spoke
// made once per process.
func TestSpokeBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvSpokeBinary); p != "" {
		return p, nil
	}
	spokeBuild.once.Do(func() {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hubBuildTimeout)
		defer cancel()
		spokeBuild.path, spokeBuild.err = BuildHubBinary(bctx, BuildOptions{Package: SpokePackage})
	})
	return spokeBuild.path, spokeBuild.err
}

// Meshfedctl runs the meshfedctl binary with args and returns its standard
// output; a non-zero exit is an error carrying its standard error.
func Meshfedctl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin, err := TestCtlBinary(t.Context())
	if err != nil {
		t.Fatalf("meshfedctl: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("meshfedctl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// hubBuildTimeout bounds the one build of the hub binary.
const hubBuildTimeout = 10 * time.Minute

// TestHubBinary returns the hub binary for tests: $MESHFED_HUB_BIN if set,
// else a build of ./hub/cmd/meshfed-hub made once per process.
func TestHubBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvHubBinary); p != "" {
		return p, nil
	}
	hubBuild.once.Do(func() {
		// The first caller's cancellation must not poison later callers.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hubBuildTimeout)
		defer cancel()
		hubBuild.path, hubBuild.err = BuildHubBinary(bctx, BuildOptions{})
	})
	return hubBuild.path, hubBuild.err
}

// NewTestFleet starts a fleet for a test and stops it in t.Cleanup. Empty
// options are filled from the environment: AssetsDir from
// KUBEBUILDER_ASSETS (the test is skipped when that is unset), the hub
// binary from TestHubBinary, LogOutput from MESHFED_E2E_VERBOSE. The
// fleet's directory is removed after a passing test and kept, with the
// tail of every hub log printed, after a failing one.
func NewTestFleet(t testing.TB, opts FleetOptions) *Fleet {
	t.Helper()
	if opts.AssetsDir == "" {
		opts.AssetsDir = os.Getenv(EnvAssets)
		if opts.AssetsDir == "" {
			t.Skipf("%s is not set; run `make e2e`, or set it to the output of `bash e2e/kubeassets/build.sh --print-dir`", EnvAssets)
		}
	}
	if opts.HubBinary == "" && opts.HubBinaryFunc == nil {
		opts.HubBinaryFunc = TestHubBinary
	}
	if opts.LogOutput == nil && os.Getenv(EnvVerbose) != "" {
		opts.LogOutput = os.Stderr
	}
	ownDir := opts.TempDir == ""
	if ownDir {
		dir, err := os.MkdirTemp("", "meshfed-fleet-")
		if err != nil {
			t.Fatalf("framework: %v", err)
		}
		opts.TempDir = dir
	}
	start := time.Now()
	f, err := NewFleet(t.Context(), opts)
	if err != nil {
		if ownDir {
			t.Logf("fleet directory kept: %s", opts.TempDir)
		}
		t.Fatalf("starting fleet: %v", err)
	}
	t.Logf("fleet of 1 config + %d remote clusters started in %s (dir %s)",
		len(opts.Remotes), time.Since(start).Round(time.Millisecond), opts.TempDir)
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping fleet: %v", err)
		}
		if t.Failed() {
			seen := map[string]bool{} // a restarted replica shares its log
			for _, h := range f.Hubs() {
				if !seen[h.LogPath()] {
					seen[h.LogPath()] = true
					t.Logf("hub %s log %s, last lines:\n%s", h.ReplicaID(), h.LogPath(), h.logTail(40))
				}
			}
			t.Logf("fleet directory kept: %s", opts.TempDir)
			return
		}
		if ownDir {
			_ = os.RemoveAll(opts.TempDir)
		}
	})
	return f
}

// StartTestHub starts a hub replica, waits (up to a minute) for /readyz,
// and fails the test if either goes wrong. Fleet.Stop, run by
// NewTestFleet's cleanup, stops it. For a hub that is not expected to get
// ready, use Fleet.StartHub.
func StartTestHub(t testing.TB, f *Fleet, opts HubOptions) *Hub {
	t.Helper()
	h, err := f.StartHub(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting hub: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := h.WaitReady(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	return h
}

// StartTestCertAgent starts a certificate agent for service account ns/sa
// of r (created if missing) whose certificates hub's CA signs, in a
// directory of the test's, stopped in t.Cleanup. Its Dir is a proxyless
// client's CertDir; its TransportCredentials dial the hub's authenticated
// port.
func StartTestCertAgent(t testing.TB, r *RemoteCluster, hub *Hub, ns, sa string) *CertAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := r.EnsureServiceAccount(ctx, ns, sa); err != nil {
		t.Fatalf("%v", err)
	}
	_, roots, err := hub.TrustBundle(ctx)
	if err != nil {
		t.Fatalf("%v", err)
	}
	a, err := r.StartCertAgent(ctx, ns, sa, t.TempDir(), CertOptions{CAAddr: hub.CAAddr(), CARoots: roots})
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(a.Stop)
	return a
}

// AuthenticatedDial is the dial option of a caller of the hub's
// authenticated port with a's certificate, failing the test on error.
func AuthenticatedDial(t testing.TB, a *CertAgent) grpc.DialOption {
	t.Helper()
	creds, err := a.TransportCredentials()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return grpc.WithTransportCredentials(creds)
}

// NewTestXDSClient creates an xDS client closed in t.Cleanup.
func NewTestXDSClient(t testing.TB, opts ClientOptions) *XDSClient {
	t.Helper()
	c, err := NewXDSClient(t.Context(), opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewTestADSWatcher opens an ADS watcher closed in t.Cleanup (see
// NewADSWatcher for dialOpts).
func NewTestADSWatcher(t testing.TB, hubAddr string, node *corev3.Node, dialOpts ...grpc.DialOption) *ADSWatcher {
	t.Helper()
	// Not t.Context(): that is cancelled before cleanups run, and the
	// stream should end by Close, not by surprise.
	w, err := NewADSWatcher(context.WithoutCancel(t.Context()), hubAddr, node, dialOpts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}
