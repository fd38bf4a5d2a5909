package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/meshfed/meshfed/pkg/model"
)

// Default values of FleetOptions.
const (
	// DefaultStartTimeout bounds the start of each control-plane process
	// (etcd, kube-apiserver). envtest's own default of 20 s is too short when
	// several apiservers start at once on a small machine.
	DefaultStartTimeout = 90 * time.Second
	// DefaultStopTimeout bounds the graceful stop of each control-plane
	// process before it is killed.
	DefaultStopTimeout = 20 * time.Second
)

// FleetOptions describes a fleet: one config cluster and any number of
// remote clusters, each a real kube-apiserver with its own etcd.
type FleetOptions struct {
	// AssetsDir is the directory that holds the kube-apiserver and etcd
	// binaries (what KUBEBUILDER_ASSETS names). Required. The framework
	// never reads KUBEBUILDER_ASSETS itself; the test helpers and demo
	// programs pass it down.
	AssetsDir string

	// Remotes lists the remote clusters to start with the fleet. More can
	// be added later with Fleet.AddRemoteCluster. See Remotes(n).
	Remotes []RemoteClusterOptions

	// HubBinary is the path of a built meshfed-hub binary, used by
	// Fleet.StartHub. When empty, HubBinaryFunc is asked on first use.
	HubBinary string
	// HubBinaryFunc returns the path of the meshfed-hub binary, for
	// example by building it. It is called at most once per fleet, on the
	// first StartHub, so fleets that never start a hub never pay for it.
	HubBinaryFunc func(ctx context.Context) (string, error)

	// NoIstioCRDs starts the config cluster without the Istio CRDs (a
	// cluster where Istio was never installed); ConfigCluster.InstallIstioCRDs
	// installs them later.
	NoIstioCRDs bool

	// TempDir is the directory for kubeconfigs and logs of this fleet.
	// Empty means a new directory under os.TempDir(), removed by Stop
	// unless KeepTempDir is set. A given TempDir is never removed.
	TempDir string
	// KeepTempDir keeps the fleet's own temporary directory after Stop,
	// for reading logs.
	KeepTempDir bool

	// LogOutput, when set, also receives the output of hub processes, each
	// line prefixed with the hub's replica ID. The output always goes to a
	// log file under the fleet's temporary directory as well.
	LogOutput io.Writer

	// StartTimeout bounds the start of each etcd and kube-apiserver
	// process. Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// StopTimeout bounds the graceful stop of each etcd and kube-apiserver
	// process. Zero means DefaultStopTimeout.
	StopTimeout time.Duration

	// APIServerFlags are extra kube-apiserver flags (name without the
	// leading dashes → value) for every cluster of the fleet.
	APIServerFlags map[string]string
	// EtcdFlags are extra etcd flags for every cluster of the fleet, for
	// example {"unsafe-no-fsync": "true"} to trade durability for speed.
	EtcdFlags map[string]string

	// NoParentDeathSignal disables the wrapper that makes etcd and
	// kube-apiserver die with the test process (see doc.go, "Processes").
	NoParentDeathSignal bool
}

// RemoteClusterOptions describes one remote cluster.
type RemoteClusterOptions struct {
	// ID is the cluster ID: the data key in remote secrets and the
	// CLUSTER_ID of proxies in the cluster. Required, unique in a fleet.
	ID model.ClusterID
	// Locality is the region and zone of the cluster's Node, hence of
	// every endpoint that runs in it.
	Locality model.Locality
}

// Remotes returns options for n remote clusters named cluster-1 … cluster-n,
// all in region r1, cluster-i in zone zi.
func Remotes(n int) []RemoteClusterOptions {
	out := make([]RemoteClusterOptions, n)
	for i := range out {
		out[i] = RemoteClusterOptions{
			ID:       model.ClusterID(fmt.Sprintf("cluster-%d", i+1)),
			Locality: model.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", i+1)},
		}
	}
	return out
}

// Fleet is a running set of clusters and the hub processes that serve them.
// It is safe for concurrent use. Stop releases everything it started.
type Fleet struct {
	opts    FleetOptions
	dir     string
	ownsDir bool
	scheme  *runtime.Scheme
	// apiserverPath and etcdPath are what envtest runs: the parent-death
	// wrappers, or the binaries themselves.
	apiserverPath, etcdPath string
	deadPort                *deadPort

	config *ConfigCluster

	mu        sync.Mutex
	remotes   []*RemoteCluster
	hubs      []*Hub
	spokes    []*Spoke
	istiods   []*Istiod
	nextIndex int
	hubBin    string
	stopped   bool
}

// NewFleet starts the config cluster and the remote clusters of opts
// concurrently and returns when all of them serve. On error, whatever was
// started is stopped again. ctx bounds only the start; the clusters live
// until Stop.
func NewFleet(ctx context.Context, opts FleetOptions) (_ *Fleet, retErr error) {
	if opts.AssetsDir == "" {
		return nil, errors.New("framework: FleetOptions.AssetsDir is empty (set it, e.g. from KUBEBUILDER_ASSETS)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		p := filepath.Join(opts.AssetsDir, bin)
		if st, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("framework: control-plane binary: %w", err)
		} else if st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("framework: control-plane binary %s is not executable", p)
		}
	}
	if err := validateRemotes(nil, opts.Remotes); err != nil {
		return nil, err
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = DefaultStopTimeout
	}

	f := &Fleet{opts: opts, scheme: runtime.NewScheme()}
	if err := clientgoscheme.AddToScheme(f.scheme); err != nil {
		return nil, fmt.Errorf("framework: building scheme: %w", err)
	}
	if opts.TempDir != "" {
		f.dir = opts.TempDir
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return nil, fmt.Errorf("framework: %w", err)
		}
	} else {
		dir, err := os.MkdirTemp("", "meshfed-fleet-")
		if err != nil {
			return nil, fmt.Errorf("framework: %w", err)
		}
		f.dir, f.ownsDir = dir, true
	}
	defer func() {
		if retErr != nil {
			_ = f.Stop()
		}
	}()

	if err := f.prepareBinaries(); err != nil {
		return nil, err
	}
	dp, err := newDeadPort()
	if err != nil {
		return nil, fmt.Errorf("framework: reserving a dead port: %w", err)
	}
	f.deadPort = dp

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		c, err := f.startCluster(gctx, "config")
		if err != nil {
			return fmt.Errorf("framework: config cluster: %w", err)
		}
		if !f.opts.NoIstioCRDs {
			if err := installIstioCRDs(gctx, c); err != nil {
				_ = c.Stop() // not yet f.config, which Stop stops
				return err
			}
		}
		f.mu.Lock()
		f.config = &ConfigCluster{Cluster: c}
		f.mu.Unlock()
		return nil
	})
	f.remotes = make([]*RemoteCluster, len(opts.Remotes))
	for i, ro := range opts.Remotes {
		f.nextIndex++
		g.Go(func() error {
			r, err := f.startRemote(gctx, ro, i)
			f.mu.Lock()
			f.remotes[i] = r // nil on error; Stop skips nil entries
			f.mu.Unlock()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return f, nil
}

// prepareBinaries resolves the control-plane binaries, wrapping them so
// they receive SIGKILL when the process that started them dies.
func (f *Fleet) prepareBinaries() error {
	f.apiserverPath = filepath.Join(f.opts.AssetsDir, "kube-apiserver")
	f.etcdPath = filepath.Join(f.opts.AssetsDir, "etcd")
	if f.opts.NoParentDeathSignal {
		return nil
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil // best effort: without setpriv the processes only die with Stop
	}
	bin := filepath.Join(f.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	wrap := func(real string) (string, error) {
		p := filepath.Join(bin, filepath.Base(real))
		// exec keeps the PID, so envtest's signals still reach the real
		// binary; the parent-death signal survives exec.
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", shellQuote(setpriv), shellQuote(real))
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			return "", fmt.Errorf("framework: writing wrapper: %w", err)
		}
		return p, nil
	}
	if f.apiserverPath, err = wrap(f.apiserverPath); err != nil {
		return err
	}
	f.etcdPath, err = wrap(f.etcdPath)
	return err
}

func validateRemotes(existing []*RemoteCluster, opts []RemoteClusterOptions) error {
	seen := map[model.ClusterID]bool{}
	for _, r := range existing {
		if r != nil {
			seen[r.ID] = true
		}
	}
	for _, o := range opts {
		if o.ID == "" {
			return errors.New("framework: remote cluster with empty ID")
		}
		if seen[o.ID] {
			return fmt.Errorf("framework: duplicate remote cluster ID %q", o.ID)
		}
		seen[o.ID] = true
	}
	return nil
}

// AddRemoteCluster starts one more remote cluster. It does not write any
// remote secret; use ConfigCluster.PutRemoteSecret for that.
func (f *Fleet) AddRemoteCluster(ctx context.Context, opts RemoteClusterOptions) (*RemoteCluster, error) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, errors.New("framework: fleet is stopped")
	}
	if err := validateRemotes(f.remotes, []RemoteClusterOptions{opts}); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	index := f.nextIndex
	f.nextIndex++
	f.remotes = append(f.remotes, nil)
	slot := len(f.remotes) - 1
	f.mu.Unlock()

	r, err := f.startRemote(ctx, opts, index)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.stopped {
		// Stop ran while we were starting; it did not see r.
		err = errors.Join(errors.New("framework: fleet stopped while adding a cluster"), r.Stop())
		r = nil
	}
	f.remotes[slot] = r
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Config returns the config cluster: the one the hub reads remote secrets
// from.
func (f *Fleet) Config() *ConfigCluster { return f.config }

// Remotes returns the remote clusters in the order they were added.
func (f *Fleet) Remotes() []*RemoteCluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*RemoteCluster, 0, len(f.remotes))
	for _, r := range f.remotes {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Remote returns the remote cluster with the given ID, or nil.
func (f *Fleet) Remote(id model.ClusterID) *RemoteCluster {
	for _, r := range f.Remotes() {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// Hubs returns the hub processes started by StartHub, running or not.
func (f *Fleet) Hubs() []*Hub {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hubs)
}

// TempDir returns the fleet's directory of kubeconfigs and logs.
func (f *Fleet) TempDir() string { return f.dir }

// Stop stops every hub, workload and cluster of the fleet and, unless told
// otherwise, removes its temporary directory. It waits for every process
// it started to exit. It is idempotent; the error joins every failure.
func (f *Fleet) Stop() error {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	hubs := slices.Clone(f.hubs)
	spokes := slices.Clone(f.spokes)
	istiods := slices.Clone(f.istiods)
	remotes := slices.Clone(f.remotes)
	config := f.config
	f.mu.Unlock()

	var (
		errMu sync.Mutex
		errs  []error
		wg    sync.WaitGroup
	)
	collect := func(err error) {
		if err != nil {
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		}
	}
	// Hubs, spokes and istiods first, so they do not log the clusters disappearing.
	for _, h := range hubs {
		wg.Go(func() { collect(h.Stop()) })
	}
	for _, s := range spokes {
		wg.Go(func() { collect(s.Stop()) })
	}
	for _, i := range istiods {
		wg.Go(func() { collect(i.Stop()) })
	}
	wg.Wait()
	for _, r := range remotes {
		if r != nil {
			wg.Go(func() { collect(r.Stop()) })
		}
	}
	if config != nil {
		wg.Go(func() { collect(config.Stop()) })
	}
	wg.Wait()
	if f.deadPort != nil {
		collect(f.deadPort.Close())
	}
	if f.ownsDir && !f.opts.KeepTempDir {
		collect(os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}

// hubBinary returns the hub binary path, resolving it once.
func (f *Fleet) hubBinary(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hubBin != "" {
		return f.hubBin, nil
	}
	switch {
	case f.opts.HubBinary != "":
		f.hubBin = f.opts.HubBinary
	case f.opts.HubBinaryFunc != nil:
		p, err := f.opts.HubBinaryFunc(ctx)
		if err != nil {
			return "", fmt.Errorf("framework: hub binary: %w", err)
		}
		f.hubBin = p
	default:
		return "", errors.New("framework: neither FleetOptions.HubBinary nor HubBinaryFunc is set")
	}
	return f.hubBin, nil
}
