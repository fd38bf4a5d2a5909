package framework

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// HubPackage and CtlPackage are the import paths of the hub's and the
// CLI's main packages, relative to the module root.
const (
	HubPackage = "./hub/cmd/meshfed-hub"
	CtlPackage = "./hub/cmd/meshfedctl"
	// AgentPackage is the pod agent's (the grpc-agent template's).
	AgentPackage = "./spoke/cmd/meshfed-agent"
	// SpokePackage is the workload cluster's binary (webhooks and shim).
	SpokePackage = "./spoke/cmd/meshfed-spoke"
)

// BuildOptions tells BuildHubBinary where and how to build.
type BuildOptions struct {
	// Dir is any directory inside the meshfed module; the module root is
	// found with `go env GOMOD` run there. Default: the working directory.
	Dir string
	// Output is the path of the binary. Default: meshfed-hub in a
	// directory under os.TempDir() named after the module root, so repeated
	// runs of one checkout reuse (and overwrite) one file.
	Output string
	// Flags are extra `go build` flags, e.g. "-race".
	Flags []string
	// Package is the main package to build. Default: HubPackage.
	Package string
}

// BuildHubBinary builds meshfed-hub with `go build` and returns its path.
// The binary is written under a temporary name and renamed into place, so
// processes running an older copy, or building concurrently, are not
// disturbed.
func BuildHubBinary(ctx context.Context, opts BuildOptions) (string, error) {
	root, err := ModuleRoot(ctx, opts.Dir)
	if err != nil {
		return "", err
	}
	if opts.Package == "" {
		opts.Package = HubPackage
	}
	out := opts.Output
	if out == "" {
		sum := sha256.Sum256([]byte(root))
		out = filepath.Join(os.TempDir(), "meshfed-e2e-"+hex.EncodeToString(sum[:6]), filepath.Base(opts.Package))
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("framework: %w", err)
	}
	tmp := out + ".tmp." + strconv.Itoa(os.Getpid())
	args := append([]string{"build", "-o", tmp}, opts.Flags...)
	args = append(args, opts.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("framework: go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("framework: %w", err)
	}
	return out, nil
}

// ModuleRoot returns the root directory of the Go module containing dir
// (default: the working directory), using `go env GOMOD`.
func ModuleRoot(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "GOMOD")
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("framework: go env GOMOD: %w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("framework: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("framework: %q is not inside a Go module", dir)
	}
	return filepath.Dir(gomod), nil
}
