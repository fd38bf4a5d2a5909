package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/pkg/agent"
	"github.com/meshfed/meshfed/pkg/pki"
	"github.com/meshfed/meshfed/pkg/trustapi"
)

func newRoot(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, 365*24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// A roots change on the trust bundle stream is written to root-cert.pem at
// once, beside the same certificate and key; so is a bundle that retires
// the root of the current certificate. Bundles without roots or with a
// root that does not parse are refused.
func TestRootsFollowTheBundle(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	f, addr, roots := startFakeCA(t, clk)
	a := runAgent(t, addr, roots, clk, nil)
	<-a.Ready()
	chain, key := readFile(t, a.dir, agent.CertChainFile), readFile(t, a.dir, agent.KeyFile)
	first := a.Current()
	if got := readCerts(t, a.dir, agent.RootCertFile); !sameSet(got, f.ca.Cert) {
		t.Fatalf("root-cert.pem holds %d certificates, want the CA's root", len(got))
	}

	unchanged := func(step string) {
		t.Helper()
		if readFile(t, a.dir, agent.CertChainFile) != chain || readFile(t, a.dir, agent.KeyFile) != key {
			t.Errorf("%s: cert-chain.pem or key.pem changed", step)
		}
		cur := a.Current()
		if !cur.Leaf.Equal(first.Leaf) || string(cur.KeyPEM) != string(first.KeyPEM) {
			t.Errorf("%s: Current has another certificate or key", step)
		}
		if string(cur.RootsPEM) != readFile(t, a.dir, agent.RootCertFile) {
			t.Errorf("%s: Current().RootsPEM is not root-cert.pem", step)
		}
		if _, err := tls.LoadX509KeyPair(a.dir+"/"+agent.CertChainFile, a.dir+"/"+agent.KeyFile); err != nil {
			t.Errorf("%s: %v", step, err)
		}
	}

	next := newRoot(t, "next CA")
	f.setBundle(bundleOf(f.ca.Cert, next.Cert))
	// The files are written before Current and RootsUpdated change: wait
	// for both.
	eventually(t, "the new root on disk", func() bool {
		return a.RootsUpdated() == 1 && sameSet(readCerts(t, a.dir, agent.RootCertFile), f.ca.Cert, next.Cert)
	})
	unchanged("root added")
	if n, m := a.RootsUpdated(), a.Issued(); n != 1 || m != 1 {
		t.Errorf("RootsUpdated %d, Issued %d after a root was added; want 1, 1", n, m)
	}

	// The current certificate no longer verifies under the bundle: written
	// all the same, as the hub means it.
	f.setBundle(bundleOf(next.Cert))
	eventually(t, "the old root retired", func() bool {
		return a.RootsUpdated() == 2 && sameSet(readCerts(t, a.dir, agent.RootCertFile), next.Cert)
	})
	unchanged("root retired")

	// Refused bundles are skipped; the stream goes on. The stream is in
	// order, so once the valid bundle after them is written they have been
	// read, and would have been counted.
	f.setBundle(trustapi.NewBundle(nil))
	bad := bundleOf(f.ca.Cert)
	bad.Roots[0].PEM = strings.Replace(bad.Roots[0].PEM, "MII", "XYZ", 1)
	seq := f.setBundle(bad)
	eventually(t, "the refused bundles sent", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.sentSeq >= seq
	})
	f.setBundle(bundleOf(f.ca.Cert, next.Cert))
	eventually(t, "a valid bundle after refused ones", func() bool {
		return a.RootsUpdated() >= 3 && sameSet(readCerts(t, a.dir, agent.RootCertFile), f.ca.Cert, next.Cert)
	})
	unchanged("refused bundles")
	if n := a.RootsUpdated(); n != 3 {
		t.Errorf("RootsUpdated %d, want 3: a refused bundle was written", n)
	}
	if _, open, _ := f.watchState(); open != 1 {
		t.Errorf("%d Watch streams open, want 1: a refused bundle broke the stream", open)
	}
}

// The CA moves its TLS certificate to a new root. An agent that knows the
// root only from its static CARoots refuses it; once the trust bundle has
// announced the root, the agent verifies the CA with it and renews.
func TestVerifiesTheCAWithBundleRoots(t *testing.T) {
	start := time.Now()
	clk := testingclock.NewFakeClock(start)
	f, addr, roots := startFakeCA(t, clk)
	a := runAgent(t, addr, roots, clk, func(o *agent.Options) {
		o.RetryMax = 2 * time.Second
		fastReconnect(o)
	})
	<-a.Ready()
	eventually(t, "the trust bundle stream", func() bool { _, open, _ := f.watchState(); return open == 1 })
	next := newRoot(t, "next CA")

	// Too early: the new root is not in the bundle yet.
	f.serve(t, next, nil)
	f.lis.dropAll()
	stepUntil(t, clk, time.Second, "the agent to refuse the new certificate", func() bool { return f.creds.failed.Load() > 0 })
	if n := calls(f); n != 1 {
		t.Fatalf("%d CreateCertificate calls with an unverified CA, want 1", n)
	}
	// What crypto/tls makes of it with CARoots alone, as the agent did
	// before it followed the bundle.
	static, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	var unknown x509.UnknownAuthorityError
	if err == nil {
		static.Close()
		t.Fatal("CARoots alone verified a certificate of the new root")
	} else if !errors.As(err, &unknown) {
		t.Fatalf("static handshake: %v, want an unknown authority", err)
	}

	// The hub announces the root first, then moves its certificate.
	f.serve(t, f.ca, nil)
	f.setBundle(bundleOf(f.ca.Cert, next.Cert))
	stepUntil(t, clk, 2*time.Second, "the announced root on disk", func() bool {
		return sameSet(readCerts(t, a.dir, agent.RootCertFile), f.ca.Cert, next.Cert)
	})
	f.serve(t, next, nil)
	f.lis.dropAll()
	failed := f.creds.failed.Load()
	stepUntil(t, clk, time.Minute, "renewal from the CA with the new certificate", func() bool { return a.Issued() == 2 })

	// The renewal's response names only the old root (the fake CA still
	// signs with it), and its roots are the newest on disk now; the CA is
	// still trusted through the bundle's roots on the next connection.
	f.lis.dropAll()
	stepUntil(t, clk, time.Minute, "another renewal", func() bool { return a.Issued() == 3 })
	if got := f.creds.failed.Load(); got != failed {
		t.Errorf("%d more failed handshakes after the root was announced", got-failed)
	}
}

// The agent checks the name and the extended key usage of the CA's
// certificate, as crypto/tls would: its own verification must not be
// weaker.
func TestVerifiesTheCAsNameAndUsage(t *testing.T) {
	for name, mod := range map[string]func(*pki.IssueOptions){
		"other name":  func(o *pki.IssueOptions) { o.IPs, o.DNSNames = nil, []string{"ca.example"} },
		"client only": func(o *pki.IssueOptions) { o.Server, o.Client = false, true },
	} {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Now())
			f, addr, roots := startFakeCA(t, clk)
			f.serve(t, f.ca, mod)
			a := runAgent(t, addr, roots, clk, nil)
			stepUntil(t, clk, time.Second, "a refused handshake", func() bool { return f.creds.failed.Load() > 0 })
			if a.Current() != nil || calls(f) != 0 {
				t.Error("talked to a CA whose certificate is not for it")
			}
		})
	}
	t.Run("ServerName", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		f, addr, roots := startFakeCA(t, clk)
		f.serve(t, f.ca, func(o *pki.IssueOptions) { o.IPs, o.DNSNames = nil, []string{"ca.example"} })
		a := runAgent(t, addr, roots, clk, func(o *agent.Options) { o.ServerName = "ca.example" })
		<-a.Ready()
	})
}

// A CA without the trust bundle service (istiod) answers Unimplemented:
// the agent stops watching and takes its roots from its certificates.
func TestWithoutTrustBundleService(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	f, addr, roots := startFakeCAWith(t, clk, caConfig{noTrust: true})
	a := runAgent(t, addr, roots, clk, nil)
	<-a.Ready()
	eventually(t, "the Watch call", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.unknownCall == 1 })
	stepUntil(t, clk, time.Minute, "two renewals", func() bool { return a.Issued() == 3 })
	f.mu.Lock()
	n := f.unknownCall
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("%d Watch calls, want 1: the agent kept asking an Unimplemented service", n)
	}
	if got := readCerts(t, a.dir, agent.RootCertFile); !sameSet(got, f.ca.Cert) || a.RootsUpdated() != 0 {
		t.Errorf("root-cert.pem has %d certificates, RootsUpdated %d", len(got), a.RootsUpdated())
	}
}

// The Watch stream says it is an agent's, and authenticates like a CSR,
// with a token asked for anew on every stream.
func TestWatchMetadata(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	f, addr, roots := startFakeCA(t, clk)
	var tokens atomic.Int64
	a := runAgent(t, addr, roots, clk, func(o *agent.Options) {
		o.TokenFunc = func(context.Context) (string, error) { return fmt.Sprintf("token-%d", tokens.Add(1)), nil }
		fastReconnect(o)
	})
	<-a.Ready()
	eventually(t, "the trust bundle stream", func() bool { _, open, _ := f.watchState(); return open == 1 })
	_, _, md := f.watchState()
	for k, want := range map[string]string{
		trustapi.MetadataClient:        trustapi.ClientAgent,
		trustapi.MetadataClusterID:     "cluster-1",
		trustapi.MetadataAuthorization: "Bearer token-",
	} {
		if got := md.Get(k); len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	before := md.Get(trustapi.MetadataAuthorization)[0]
	f.lis.dropAll()
	stepUntil(t, clk, time.Second, "a new stream", func() bool { w, open, _ := f.watchState(); return w == 2 && open == 1 })
	if _, _, md := f.watchState(); md.Get(trustapi.MetadataAuthorization)[0] == before {
		t.Errorf("the new stream reused the token %q", before)
	}
}

// The address's host is the name checked in the CA's certificate.
func TestServerNameFromAddress(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	f, addr, roots := startFakeCA(t, clk)
	f.serve(t, f.ca, func(o *pki.IssueOptions) { o.IPs, o.DNSNames = nil, []string{"localhost"} })
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	a := runAgent(t, "dns:///localhost:"+port, roots, clk, nil)
	<-a.Ready()
}
