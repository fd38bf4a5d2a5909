package agent_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	pb "istio.io/api/security/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/testutil"
	"github.com/meshfed/meshfed/pkg/trustapi"
)

// fakeCA is a tiny IstioCertificateService: it signs every CSR with
// pkg/pki for a fixed SPIFFE ID at the fake clock's time, and can be told
// to fail or to misbehave. It serves a trust bundle (TrustBundle/Watch)
// too, unless started without.
type fakeCA struct {
	pb.UnimplementedIstioCertificateServiceServer
	ca    *pki.CA
	clock *testingclock.FakeClock

	serving atomic.Pointer[tls.Certificate] // the TLS certificate served
	lis     *trackingListener
	creds   *countingCreds

	mu       sync.Mutex // guards the fields below
	calls    int
	failNext int  // calls still to fail with Unavailable
	wrongKey bool // sign a key other than the CSR's
	md       metadata.MD

	bundle      *trustapi.Bundle // nil: Watch sends nothing yet
	bundleSeq   int              // incremented by every setBundle
	bundleWake  chan struct{}    // closed and replaced by every setBundle
	watches     int              // Watch calls
	watching    int              // open Watch streams
	watchMD     metadata.MD      // of the latest Watch
	sentSeq     int              // latest bundleSeq sent on any stream
	unknownCall int              // calls of unregistered services
}

const workloadID = "spiffe://cluster.local/ns/demo/sa/echo"

func (f *fakeCA) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.md, _ = metadata.FromIncomingContext(ctx)
	if f.failNext > 0 {
		f.failNext--
		return nil, status.Error(codes.Unavailable, "CA is down")
	}
	csr, err := pki.ParseCSR([]byte(req.Csr))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	u, _ := url.Parse(workloadID)
	opts := pki.IssueOptions{URIs: []*url.URL{u}, Validity: time.Duration(req.ValidityDuration) * time.Second,
		Client: true, Server: true, Now: f.clock.Now()}
	var leaf []byte
	if f.wrongKey {
		leaf, _, err = f.ca.Issue(opts)
	} else {
		leaf, err = f.ca.SignCSR(csr, opts)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.IstioCertificateResponse{CertChain: []string{string(leaf), string(f.ca.CertPEM)}}, nil
}

// Watch sends every bundle set with setBundle, once per stream, the current
// one first.
func (f *fakeCA) Watch(_ *wrapperspb.BytesValue, st grpc.ServerStreamingServer[wrapperspb.BytesValue]) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	f.mu.Lock()
	f.watches++
	f.watching++
	f.watchMD = md
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.watching--
		f.mu.Unlock()
	}()
	sent := 0
	for {
		f.mu.Lock()
		b, seq, wake := f.bundle, f.bundleSeq, f.bundleWake
		f.mu.Unlock()
		if b != nil && seq != sent {
			m, err := trustapi.Encode(*b)
			if err != nil {
				return status.Error(codes.Internal, err.Error())
			}
			if err := st.Send(m); err != nil {
				return err
			}
			sent = seq
			f.mu.Lock()
			f.sentSeq = max(f.sentSeq, seq)
			f.mu.Unlock()
		}
		select {
		case <-st.Context().Done():
			return nil
		case <-wake:
		}
	}
}

// setBundle makes b the bundle of every Watch stream.
func (f *fakeCA) setBundle(b trustapi.Bundle) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bundle = &b
	f.bundleSeq++
	close(f.bundleWake)
	f.bundleWake = make(chan struct{})
	return f.bundleSeq
}

// bundleOf is the bundle of roots.
func bundleOf(roots ...*x509.Certificate) trustapi.Bundle {
	var rs []trustapi.Root
	for _, r := range roots {
		sum := sha256.Sum256(r.Raw)
		rs = append(rs, trustapi.Root{TrustDomain: "cluster.local", Fingerprint: hex.EncodeToString(sum[:]),
			PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw}))})
	}
	return trustapi.NewBundle(rs)
}

// serve makes the CA serve a TLS certificate issued by root for opts (by
// default: for 127.0.0.1, serverAuth) on new connections.
func (f *fakeCA) serve(t *testing.T, root *pki.CA, mod func(*pki.IssueOptions)) {
	t.Helper()
	opts := pki.IssueOptions{CommonName: "fake-ca", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Validity: 2 * time.Hour, Server: true, Now: time.Now()}
	if mod != nil {
		mod(&opts)
	}
	certPEM, keyPEM, err := root.Issue(opts)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f.serving.Store(&cert)
}

func (f *fakeCA) watchState() (watches, watching int, md metadata.MD) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches, f.watching, f.watchMD
}

func (f *fakeCA) state() (calls int, md metadata.MD) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.md
}

// trackingListener remembers the connections it accepted, to break them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex // guards conns
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// dropAll closes every connection accepted so far, so that clients
// reconnect (and handshake again).
func (l *trackingListener) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// countingCreds counts the server handshakes that failed: the client
// refused the certificate.
type countingCreds struct {
	credentials.TransportCredentials
	failed atomic.Int64
}

func (c *countingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.failed.Add(1)
	}
	return out, info, err
}

// caConfig varies startFakeCA.
type caConfig struct {
	// noTrust serves no TrustBundle service: its calls end Unimplemented,
	// as from istiod.
	noTrust bool
}

// startFakeCA serves a fakeCA over TLS on a loopback port, with the trust
// bundle service sending a bundle of its root.
func startFakeCA(t *testing.T, clk *testingclock.FakeClock) (*fakeCA, string, *x509.CertPool) {
	t.Helper()
	return startFakeCAWith(t, clk, caConfig{})
}

func startFakeCAWith(t *testing.T, clk *testingclock.FakeClock, cfg caConfig) (*fakeCA, string, *x509.CertPool) {
	t.Helper()
	root, err := pki.NewCA("fake CA", 365*24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCA{ca: root, clock: clk, lis: &trackingListener{Listener: l}, bundleWake: make(chan struct{})}
	f.serve(t, root, nil)
	f.creds = &countingCreds{TransportCredentials: credentials.NewTLS(&tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.serving.Load(), nil },
	})}
	srv := grpc.NewServer(grpc.Creds(f.creds), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		f.mu.Lock()
		f.unknownCall++
		f.mu.Unlock()
		return status.Error(codes.Unimplemented, "unknown service")
	}))
	pb.RegisterIstioCertificateServiceServer(srv, f)
	if !cfg.noTrust {
		trustapi.RegisterTrustBundleServer(srv, f)
		f.setBundle(bundleOf(root.Cert))
	}
	go func() { _ = srv.Serve(f.lis) }()
	t.Cleanup(srv.Stop)
	pool := x509.NewCertPool()
	pool.AddCert(root.Cert)
	return f, l.Addr().String(), pool
}

// running is an agent running until the end of the test.
type running struct {
	*agent.Agent
	dir string
}

func runAgent(t *testing.T, addr string, roots *x509.CertPool, clk *testingclock.FakeClock, mod func(*agent.Options)) running {
	t.Helper()
	opts := agent.Options{
		CAAddr: addr, CARoots: roots, ClusterID: "cluster-1",
		TokenFunc: func(context.Context) (string, error) { return "the-token", nil },
		Identity:  workloadID,
		Dir:       t.TempDir(),
		TTL:       time.Hour,
		Clock:     clk,
		Log:       testr.New(t),
	}
	if mod != nil {
		mod(&opts)
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return running{Agent: a, dir: opts.Dir}
}

// eventually polls cond until it holds, failing the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Polling, not timing: the condition decides.
	testutil.Eventually(t, 10*time.Second, 2*time.Millisecond, func() error {
		if !cond() {
			return errors.New("still waiting for " + what)
		}
		return nil
	})
}

// stepUntil steps clk by d whenever something waits on it, until cond
// holds: for retries whose number depends on gRPC's own reconnection.
func stepUntil(t *testing.T, clk *testingclock.FakeClock, d time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually(t, what, func() bool {
		if cond() {
			return true
		}
		if clk.HasWaiters() {
			clk.Step(d)
		}
		return false
	})
}

// fastReconnect makes gRPC reconnect at once after a broken connection,
// instead of after its default backoff of a second and more.
func fastReconnect(o *agent.Options) {
	o.DialOptions = append(o.DialOptions, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1, MaxDelay: 5 * time.Millisecond},
		MinConnectTimeout: 5 * time.Second,
	}))
}

// readCerts parses the certificates of a file in dir.
func readCerts(t *testing.T, dir, name string) []*x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// sameSet reports whether got holds the certificates of want, in any order.
func sameSet(got []*x509.Certificate, want ...*x509.Certificate) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, w.Equal) {
			return false
		}
	}
	return true
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitTimer waits until the agent is blocked on its clock (renewal or
// retry timer), so that stepping the clock reaches it.
func waitTimer(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	eventually(t, "the agent to wait on its clock", clk.HasWaiters)
}

func calls(f *fakeCA) int { n, _ := f.state(); return n }

func TestObtainsAndWrites(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	f, addr, roots := startFakeCA(t, clk)
	a := runAgent(t, addr, roots, clk, nil)
	<-a.Ready()

	_, md := f.state()
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer the-token" {
		t.Errorf("authorization %q", got)
	}
	if got := md.Get("clusterid"); len(got) != 1 || got[0] != "cluster-1" {
		t.Errorf("ClusterID %q", got)
	}
	// What grpc-go's file_watcher provider does with the three files.
	cert, err := tls.LoadX509KeyPair(filepath.Join(a.dir, agent.CertChainFile), filepath.Join(a.dir, agent.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	rootPEM, err := os.ReadFile(filepath.Join(a.dir, agent.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rootPEM) {
		t.Fatal("root-cert.pem holds no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: clk.Now()}); err != nil {
		t.Errorf("written leaf does not chain to the written root: %v", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != workloadID {
		t.Errorf("URIs %v", leaf.URIs)
	}
	if !leaf.Equal(a.Current().Leaf) {
		t.Error("Current is not what was written")
	}
	if st, err := os.Stat(filepath.Join(a.dir, agent.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key.pem mode %v, %v", st.Mode(), err)
	}
}

// The certificate is renewed, with a new key, once RenewAt of the lifetime
// it had on arrival has passed, and not before. The CA backdates NotBefore
// by 5 minutes; that does not count, or a short-lived certificate would be
// renewed at once, again and again.
func TestRenewsAtFractionOfLifetime(t *testing.T) {
	for _, tc := range []struct {
		renewAt float64
		due     time.Duration // after issue, of a 1h certificate
	}{{0, 30 * time.Minute}, {0.8, 48 * time.Minute}} {
		t.Run("", func(t *testing.T) {
			start := time.Now()
			clk := testingclock.NewFakeClock(start)
			f, addr, roots := startFakeCA(t, clk)
			a := runAgent(t, addr, roots, clk, func(o *agent.Options) { o.RenewAt = tc.renewAt })
			<-a.Ready()
			first := a.Current()
			waitTimer(t, clk)

			clk.SetTime(start.Add(tc.due - time.Second))
			if n := calls(f); n != 1 || !clk.HasWaiters() {
				t.Fatalf("renewed early: %d calls", n)
			}
			clk.SetTime(start.Add(tc.due))
			eventually(t, "renewal", func() bool { return a.Issued() == 2 })
			second := a.Current()
			if second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 || string(second.KeyPEM) == string(first.KeyPEM) {
				t.Error("renewal reused the certificate or the key")
			}
			written, err := os.ReadFile(filepath.Join(a.dir, agent.CertChainFile))
			if err != nil {
				t.Fatal(err)
			}
			if string(written) != string(second.CertChainPEM) {
				t.Error("renewed certificate not written")
			}
		})
	}
}

// Failures are retried after 1s, 2s, 4s (and so on up to RetryMax).
func TestBackoff(t *testing.T) {
	start := time.Now()
	clk := testingclock.NewFakeClock(start)
	f, addr, roots := startFakeCA(t, clk)
	f.mu.Lock()
	f.failNext = 3
	f.mu.Unlock()
	a := runAgent(t, addr, roots, clk, nil)
	elapsed := time.Duration(0)
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		eventually(t, "a failed call", func() bool { return calls(f) == i+1 })
		waitTimer(t, clk)
		elapsed += backoff
		clk.SetTime(start.Add(elapsed - time.Millisecond))
		if n := calls(f); n != i+1 {
			t.Fatalf("retried before %v: %d calls", backoff, n)
		}
		clk.SetTime(start.Add(elapsed))
	}
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("no certificate after the CA recovered")
	}
	if n := calls(f); n != 4 {
		t.Errorf("%d calls, want 4", n)
	}
}

// A chain that is not for the agent's key is refused and retried; nothing
// is written.
func TestRefusesCertificateForAnotherKey(t *testing.T) {
	start := time.Now()
	clk := testingclock.NewFakeClock(start)
	f, addr, roots := startFakeCA(t, clk)
	f.mu.Lock()
	f.wrongKey = true
	f.mu.Unlock()
	a := runAgent(t, addr, roots, clk, nil)
	eventually(t, "a call", func() bool { return calls(f) == 1 })
	waitTimer(t, clk)
	if a.Current() != nil {
		t.Fatal("accepted a certificate for another key")
	}
	if _, err := os.Stat(filepath.Join(a.dir, agent.CertChainFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cert-chain.pem written: %v", err)
	}
	f.mu.Lock()
	f.wrongKey = false
	f.mu.Unlock()
	clk.SetTime(start.Add(time.Second))
	<-a.Ready()
}

// The agent refuses a CA whose TLS certificate its roots do not verify.
func TestVerifiesTheCA(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	f, addr, _ := startFakeCA(t, clk)
	other, err := pki.NewCA("other", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(other.Cert)
	a := runAgent(t, addr, pool, clk, nil)
	waitTimer(t, clk)
	if a.Current() != nil || calls(f) != 0 {
		t.Error("talked to a CA it could not verify")
	}
}

func TestOptions(t *testing.T) {
	ok := agent.Options{CAAddr: "ca:15012", CARoots: x509.NewCertPool(), ClusterID: "c",
		TokenFunc: func(context.Context) (string, error) { return "t", nil }}
	if _, err := agent.New(ok); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*agent.Options){
		"no address":  func(o *agent.Options) { o.CAAddr = "" },
		"no roots":    func(o *agent.Options) { o.CARoots = nil },
		"no cluster":  func(o *agent.Options) { o.ClusterID = "" },
		"no token":    func(o *agent.Options) { o.TokenFunc = nil },
		"renew at 1":  func(o *agent.Options) { o.RenewAt = 1 },
		"backoff max": func(o *agent.Options) { o.RetryInitial, o.RetryMax = time.Minute, time.Second },
	} {
		o := ok
		mod(&o)
		if _, err := agent.New(o); !errors.Is(err, agent.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := agent.TokenFile(path)(t.Context())
	if err != nil || got != "abc" {
		t.Errorf("%q %v", got, err)
	}
}
