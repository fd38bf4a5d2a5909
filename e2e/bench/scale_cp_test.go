package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
		opts := framework.HubOptions{ReplicaID: fmt.Sprintf("scale-%d", i), Args: args, Binary: bin}
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

// istiodPlane is one Istio pilot-discovery process run outside Kubernetes
// against the fleet's config cluster.
type istiodPlane struct {
	cmd              *exec.Cmd
	done             chan struct{}
	xdsAddr, httpURL string
	monURL           string
}

// startIstiod runs pilot-discovery as an external istiod: the config
// cluster by kubeconfig, remote clusters by the same remote secrets,
// plaintext xDS on a free port, no CA and no webhooks, EDS debounce off
// (its fastest setting for endpoint changes). It runs in its own working
// directory, where it writes what it would write under / in a pod.
func startIstiod(b *testing.B, f *framework.Fleet, bin string) controlPlane {
	addrs, err := framework.FreeAddrs(5)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	logf, err := os.Create(filepath.Join(dir, "istiod.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "discovery",
		"--kubeconfig="+f.Config().KubeconfigFile(),
		"--grpcAddr="+addrs[0],
		"--httpAddr="+addrs[1],
		"--monitoringAddr="+addrs[2],
		"--httpsAddr="+addrs[3],
		"--secureGRPCAddr=",
		"--domain=cluster.local",
		"--clusterID=config",
		"--log_output_level=default:warn,ads:warn,delta:warn,model:error,kube:warn,krt:warn",
	)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"POD_NAMESPACE="+framework.RemoteSecretNamespace,
		"POD_NAME=istiod-scale",
		"REVISION=default",
		"PILOT_ENABLE_EDS_DEBOUNCE=false",
		"ENABLE_CA_SERVER=false",
		"INJECTION_WEBHOOK_CONFIG_NAME=",
		"VALIDATION_WEBHOOK_CONFIG_NAME=",
		"CLOUD_PLATFORM=none",
		"ISTIOD_CUSTOM_HOST=localhost",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &istiodPlane{cmd: cmd, done: make(chan struct{}), xdsAddr: addrs[0], httpURL: "http://" + addrs[1], monURL: "http://" + addrs[2]}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	ctx, cancel := context.WithTimeout(b.Context(), settleTimeout)
	defer cancel()
	// An istiod that exits ends the wait at once.
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := testutil.Poll(ctx, settleTimeout, 200*time.Millisecond, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.httpURL+"/ready", nil)
		resp, err := scaleHTTP.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("istiod /ready: %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		log, _ := os.ReadFile(logf.Name())
		b.Fatalf("%v\n%s", err, tail(string(log), 40))
	}
	return p
}

func (p *istiodPlane) replicas() []cpReplica {
	return []cpReplica{{xdsAddr: p.xdsAddr, pid: p.cmd.Process.Pid, debugURL: p.httpURL, metricsURL: p.monURL + "/metrics"}}
}

func (p *istiodPlane) stop() error {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
