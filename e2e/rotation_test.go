package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/hub/ca"
	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
)

// TestRootRotation rotates the root of the workload CA in Istio's three
// steps, by editing the plug-in Secret cacerts of the config cluster while a
// proxyless client in cluster-1 calls an xDS-enabled server in cluster-2
// over mTLS without pause. The server closes each connection after half a
// second, so the calls keep handshaking with whatever certificates and roots
// the agents hold at that moment; its agent talks to one hub replica, the
// client's to the other. Leaves live 10 s.
//
//  1. add the new root: both replicas' bundles and both agents' roots get it;
//  2. sign with the new root: both agents renew into leaves of the new root;
//  3. drop the old root: it stays trusted (a long-lived leaf of the old root
//     is still accepted) until the last leaf signed under it has expired,
//     then leaves the bundles and the roots, and that leaf is refused.
//
// Not one call fails, and the server answered calls with leaves of both
// roots.
func TestRootRotation(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	now := time.Now()
	oldRoot, err := pki.NewCA("rotation old root", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	newRoot, err := pki.NewCA("rotation new root", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	putCACerts(t, f.Config(), oldRoot, oldRoot)
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	const leafTTL = 10 * time.Second
	args := []string{"--xds-mtls", "--workload-cert-ttl=10s", "--max-workload-cert-ttl=10s", "--root-retire-grace=1s", "--root-spread=3s"}
	key := gossipKey(t, f)
	hub0 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Args: args})
	hub1 := framework.StartTestHub(t, f, framework.HubOptions{GossipKeyFile: key, Join: []*framework.Hub{hub0}, Args: args})
	hubs := []*framework.Hub{hub0, hub1}
	waitBundles(t, hubs, []*pki.CA{oldRoot}, nil)

	caRoots := x509.NewCertPool()
	caRoots.AddCert(oldRoot.Cert)
	c1, c2 := f.Remote("cluster-1"), f.Remote("cluster-2")
	// One server replica: a refused handshake then leaves the client no
	// other backend to hide behind, and fails calls.
	w := deployServing(t, c2, framework.WorkloadOptions{
		Namespace: "demo", Service: "echo", Replicas: 1,
		XDS: &framework.XDSWorkloadOptions{
			HubAddr:          hub0.CAAddr(),
			Certs:            &framework.CertOptions{CAAddr: hub0.CAAddr(), CARoots: caRoots, TTL: leafTTL},
			MaxConnectionAge: 500 * time.Millisecond,
		},
	})
	serverDir := w.Replicas()[0].CertDir

	serviceAccountToken(t, c1, "demo", "client", framework.CertAudience)
	actx, acancel := context.WithTimeout(ctx, converge)
	defer acancel()
	ag, err := c1.StartCertAgent(actx, "demo", "client", t.TempDir(),
		framework.CertOptions{CAAddr: hub1.CAAddr(), CARoots: caRoots, TTL: leafTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ag.Stop)
	client := framework.NewTestXDSClient(t, framework.ClientOptions{
		HubAddr: hub1.CAAddr(), ServerTLS: true, CertDir: ag.Dir(),
		Cluster: c1.ID, Namespace: "demo", Locality: c1.Locality, Name: "client",
	})
	conn, err := client.Dial(w.Target())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	expectClusters(t, conn, 5, "cluster-2")

	// A leaf of the old root that outlives the rotation, as a workload that
	// somehow kept one would hold: it tells when the server stops trusting
	// the old root.
	straggler := straggler(t, oldRoot)
	serverPod := w.Replicas()[0]
	serverAddr := netip.AddrPortFrom(serverPod.PodIP, serverPod.Addr.Port()).String()

	dirs := map[string]string{"client": ag.Dir(), "server": serverDir}
	traffic := startTraffic(ctx, conn, func() string { return describeCerts(dirs) })

	// Step 1: add the new root.
	putCACerts(t, f.Config(), oldRoot, oldRoot, newRoot)
	waitBundles(t, hubs, []*pki.CA{oldRoot, newRoot}, nil)
	waitRootFiles(t, dirs, []*pki.CA{oldRoot, newRoot}, converge)
	t.Logf("step 1: new root trusted; %s", traffic)

	// Step 2 at once: the files hold the new root, but the workloads read
	// them only within a refresh. The hub stages the new CA until the root
	// has been trusted for --root-spread (3 s here), so no workload gets a
	// leaf its peers cannot verify yet. The agents renew at half-life.
	putCACerts(t, f.Config(), newRoot, newRoot, oldRoot)
	waitLeafIssuer(t, dirs, newRoot, 3*leafTTL)
	t.Logf("step 2: both workloads hold leaves of the new root; %s", traffic)
	if err := callWith(ctx, serverAddr, straggler); err != nil {
		t.Fatalf("a leaf of the old root was refused while the old root is still configured: %v", err)
	}

	// Step 3: drop the old root. It retires once the last leaf signed
	// under it has expired, not at once.
	putCACerts(t, f.Config(), newRoot, newRoot)
	waitBundles(t, hubs, []*pki.CA{oldRoot, newRoot}, oldRoot)
	out, err := framework.Meshfedctl(t, "trust-bundle", "--monitoring", strings.TrimPrefix(hub1.MonitoringURL(), "http://"))
	if err != nil {
		t.Fatalf("meshfedctl trust-bundle: %v\n%s", err, out)
	}
	if line := lineWith(out, ca.Fingerprint(oldRoot.Cert)[:16]); line == "" || strings.HasSuffix(strings.TrimSpace(line), "-") {
		t.Fatalf("meshfedctl trust-bundle does not show the old root retiring:\n%s", out)
	}
	if err := callWith(ctx, serverAddr, straggler); err != nil {
		t.Fatalf("a leaf of the old root was refused before the root retired: %v", err)
	}
	waitBundles(t, hubs, []*pki.CA{newRoot}, nil)
	waitRootFiles(t, dirs, []*pki.CA{newRoot}, converge)
	testutil.Eventually(t, 10*time.Second, poll, func() error {
		if err := callWith(ctx, serverAddr, straggler); err == nil {
			return errors.New("a leaf of the retired root is still accepted")
		}
		return nil
	})
	t.Logf("step 3: old root retired; %s", traffic)

	ok, failed, errs := traffic.stop()
	if failed > 0 || ok == 0 {
		t.Fatalf("calls during the rotation: %d answered, %d failed; first errors: %q", ok, failed, errs)
	}
	issuers := w.PeerIssuers()
	if issuers[oldRoot.Cert.Subject.CommonName] == 0 || issuers[newRoot.Cert.Subject.CommonName] == 0 {
		t.Fatalf("the server answered calls by client certificate issuer %v, want both roots", issuers)
	}
	t.Logf("%d calls answered, none failed; client certificates seen by issuer: %v", ok, issuers)
}

// describeCerts tells, for failure messages, which roots and which leaf
// issuer each agent directory holds now.
func describeCerts(dirs map[string]string) string {
	out := ""
	for who, dir := range dirs {
		roots, _ := readCerts(filepath.Join(dir, agent.RootCertFile))
		leaf, _ := readCerts(filepath.Join(dir, agent.CertChainFile))
		out += who + ": roots"
		for _, r := range roots {
			out += " " + r.Subject.CommonName
		}
		if len(leaf) > 0 {
			out += " leaf by " + leaf[0].Issuer.CommonName + " until " + leaf[0].NotAfter.Format(time.TimeOnly)
		}
		out += "; "
	}
	return out + time.Now().Format(time.TimeOnly)
}

// lineWith returns the first line of out that contains s.
func lineWith(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// putCACerts writes the plug-in Secret cacerts: signer signs, roots are
// trusted (root-cert.pem).
func putCACerts(t *testing.T, cfg *framework.ConfigCluster, signer *pki.CA, roots ...*pki.CA) {
	t.Helper()
	if err := cfg.PutCACerts(t.Context(), signer, roots...); err != nil {
		t.Fatal(err)
	}
}

// waitBundles waits until every hub's /debug/trustz holds exactly the
// roots want, with retiring (if set) marked as retiring.
func waitBundles(t *testing.T, hubs []*framework.Hub, want []*pki.CA, retiring *pki.CA) {
	t.Helper()
	var wantFPs []string
	for _, r := range want {
		wantFPs = append(wantFPs, ca.Fingerprint(r.Cert))
	}
	slices.Sort(wantFPs)
	testutil.Eventually(t, converge, poll, func() error {
		for _, h := range hubs {
			tz, err := h.Trustz(t.Context())
			if err != nil {
				return err
			}
			var got []string
			for _, r := range tz.Roots {
				got = append(got, r.Fingerprint)
				if retiring != nil && r.Fingerprint == ca.Fingerprint(retiring.Cert) && r.RetireAt == "" {
					return fmt.Errorf("%s: root %q is not retiring", h.ReplicaID(), retiring.Cert.Subject.CommonName)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, wantFPs) {
				return fmt.Errorf("%s: bundle %v, want %v", h.ReplicaID(), got, wantFPs)
			}
		}
		return nil
	})
}

// waitRootFiles waits until the root-cert.pem of every agent directory
// holds exactly the roots want.
func waitRootFiles(t *testing.T, dirs map[string]string, want []*pki.CA, within time.Duration) {
	t.Helper()
	testutil.Eventually(t, within, poll, func() error {
		for who, dir := range dirs {
			certs, err := readCerts(filepath.Join(dir, agent.RootCertFile))
			if err != nil {
				return err
			}
			if len(certs) != len(want) {
				return fmt.Errorf("%s trusts %d roots, want %d", who, len(certs), len(want))
			}
			for _, r := range want {
				if !slices.ContainsFunc(certs, r.Cert.Equal) {
					return fmt.Errorf("%s does not trust %q", who, r.Cert.Subject.CommonName)
				}
			}
		}
		return nil
	})
}

// waitLeafIssuer waits until the leaf of every agent directory is issued by
// issuer.
func waitLeafIssuer(t *testing.T, dirs map[string]string, issuer *pki.CA, within time.Duration) {
	t.Helper()
	testutil.Eventually(t, within, poll, func() error {
		for who, dir := range dirs {
			certs, err := readCerts(filepath.Join(dir, agent.CertChainFile))
			if err != nil {
				return err
			}
			if len(certs) == 0 || certs[0].CheckSignatureFrom(issuer.Cert) != nil {
				return fmt.Errorf("%s's leaf is not issued by %q yet", who, issuer.Cert.Subject.CommonName)
			}
		}
		return nil
	})
}

func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out, nil
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, c)
	}
}

// straggler is a client leaf of the client's identity signed by root,
// valid for an hour.
func straggler(t *testing.T, root *pki.CA) tls.Certificate {
	t.Helper()
	id, _ := url.Parse("spiffe://cluster.local/ns/demo/sa/client")
	certPEM, keyPEM, err := root.Issue(pki.IssueOptions{URIs: []*url.URL{id}, Validity: time.Hour, Client: true, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// callWith makes one echo call to addr (a Pod address) over a new TLS
// connection presenting cert. The server's certificate is not checked:
// what is tested is whether the server accepts the client's.
func callWith(ctx context.Context, addr string, cert tls.Certificate) error {
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // the client side is not under test
	})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithContextDialer(framework.DialPod))
	if err != nil {
		return err
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = framework.CallEcho(cctx, cc)
	return err
}

// traffic calls a connection without pause and counts the answers.
type traffic struct {
	ok, failed atomic.Int64
	slowest    atomic.Int64 // nanoseconds
	mu         sync.Mutex
	errs       []string
	cancel     context.CancelFunc
	done       chan struct{}
}

// startTraffic calls conn until stop; describe adds context to the
// errors it keeps.
func startTraffic(ctx context.Context, conn *framework.XDSConn, describe func() string) *traffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &traffic{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for ctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			start := time.Now()
			_, err := conn.Call(cctx)
			ccancel()
			if d := int64(time.Since(start)); d > tr.slowest.Load() {
				tr.slowest.Store(d)
			}
			switch {
			case err == nil:
				tr.ok.Add(1)
			case ctx.Err() != nil:
			default:
				tr.failed.Add(1)
				tr.mu.Lock()
				if len(tr.errs) < 5 {
					tr.errs = append(tr.errs, err.Error()+" ["+describe()+"]")
				}
				tr.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return tr
}

func (tr *traffic) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := fmt.Sprintf("%d calls answered, %d failed so far, slowest %v", tr.ok.Load(), tr.failed.Load(), time.Duration(tr.slowest.Load()))
	if len(tr.errs) > 0 {
		s += fmt.Sprintf(" (first error: %s)", tr.errs[0])
	}
	return s
}

func (tr *traffic) stop() (ok, failed int64, errs []string) {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ok.Load(), tr.failed.Load(), slices.Clone(tr.errs)
}

// TestRetiringRootSurvivesFleetRestart: a root retiring after a rotation is
// kept in the config cluster, so a fleet that restarts as a whole before
// the root is due (no replica left to warm up from) still trusts it, until
// the same time.
func TestRetiringRootSurvivesFleetRestart(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: framework.Remotes(1)})
	ctx := t.Context()
	now := time.Now()
	oldRoot, err := pki.NewCA("restart old root", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	newRoot, err := pki.NewCA("restart new root", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	putCACerts(t, f.Config(), oldRoot, oldRoot)
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	args := []string{"--max-workload-cert-ttl=1h", "--workload-cert-ttl=1h", "--root-spread=-1s"}
	first := framework.StartTestHub(t, f, framework.HubOptions{Args: args})
	waitBundles(t, []*framework.Hub{first}, []*pki.CA{oldRoot}, nil)
	putCACerts(t, f.Config(), newRoot, newRoot) // replaced in one edit: the old root retires in an hour
	waitBundles(t, []*framework.Hub{first}, []*pki.CA{oldRoot, newRoot}, oldRoot)
	retireAt := func(h *framework.Hub) string {
		tz, err := h.Trustz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tz.Roots {
			if r.Fingerprint == ca.Fingerprint(oldRoot.Cert) {
				return r.RetireAt
			}
		}
		return ""
	}
	want := retireAt(first)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second := framework.StartTestHub(t, f, framework.HubOptions{Args: args})
	waitBundles(t, []*framework.Hub{second}, []*pki.CA{oldRoot, newRoot}, oldRoot)
	if got := retireAt(second); got != want {
		t.Fatalf("after the restart the old root retires at %q, want %q as before", got, want)
	}
}
