package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// scaleHTTP reads the control planes' debug and metrics endpoints.
var scaleHTTP = &http.Client{Timeout: 30 * time.Second}

// scrapeMetric returns the value of an unlabelled metric at url.
func scrapeMetric(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := scaleHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s does not export %s", url, name)
}

// fetchToFile writes the body of a GET of url to file.
func fetchToFile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return errors.Join(err, out.Close())
	}
	return out.Close()
}

// meshfedPlane is n meshfed hub replicas, joined by gossip.
type meshfedPlane struct{ hubs []*framework.Hub }

// startMeshfed starts n hub replicas of bin (the fleet's hub binary when
// empty) and waits until they are ready and see each other.
func startMeshfed(b *testing.B, f *framework.Fleet, n int, bin string) controlPlane {
	args := []string{
		// Twenty clusters listed at once on a small machine take longer
		// than the default 30 s readiness wait.
		"--cluster-sync-timeout=10m",
		// A reconnect storm redials every client at once.
		"--xds-stream-burst=20000",
	}
	p := &meshfedPlane{}
	for i := range n {
		opts := framework.HubOptions{ReplicaID: fmt.Sprintf("scale-%d", i), Args: args, Binary: bin, PlaintextXDS: true}
		if i > 0 {
			opts.Join = p.hubs[:1]
		}
		p.hubs = append(p.hubs, framework.StartTestHub(b, f, opts))
	}
	ctx, cancel := context.WithTimeout(b.Context(), settleTimeout)
	defer cancel()
	if err := testutil.Poll(ctx, settleTimeout, 100*time.Millisecond, func() error {
		for _, h := range p.hubs {
			fz, err := h.Federationz(ctx)
			if err != nil {
				return err
			}
			if len(fz.Members) != n {
				return fmt.Errorf("hub %s sees %d members, want %d", h.ReplicaID(), len(fz.Members), n)
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return p
}

func (p *meshfedPlane) replicas() []cpReplica {
	out := make([]cpReplica, len(p.hubs))
	for i, h := range p.hubs {
		out[i] = cpReplica{xdsAddr: h.XDSAddr(), pid: h.PID(), debugURL: h.MonitoringURL(), metricsURL: h.MonitoringURL() + "/metrics"}
	}
	return out
}

func (p *meshfedPlane) stop() error {
	var errs []error
	for _, h := range p.hubs {
		errs = append(errs, h.Stop())
	}
	return errors.Join(errs...)
}

// istiodPlane is Istio's pilot-discovery run by the framework as an
// external istiod (framework.StartIstiod) on the fleet.
type istiodPlane struct{ *framework.Istiod }

// startIstiod starts istiod with EDS debounce off, its fastest setting for
// endpoint changes, and waits until it is ready.
func startIstiod(b *testing.B, f *framework.Fleet, bin string) controlPlane {
	ctx, cancel := context.WithTimeout(b.Context(), settleTimeout)
	defer cancel()
	i, err := f.StartIstiod(ctx, framework.IstiodOptions{Binary: bin, Env: []string{"PILOT_ENABLE_EDS_DEBOUNCE=false"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := i.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	return istiodPlane{i}
}

func (p istiodPlane) replicas() []cpReplica {
	return []cpReplica{{xdsAddr: p.XDSAddr(), pid: p.PID(), debugURL: p.DebugURL(), metricsURL: p.MetricsURL()}}
}

func (p istiodPlane) stop() error { return p.Stop() }
