package ca_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/ca"
)

const echoID = "spiffe://cluster.local/ns/demo/sa/echo"

// wantCode fails unless err is a gRPC status with code and a message
// containing every one of parts.
func wantCode(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
	for _, p := range parts {
		if !strings.Contains(st.Message(), p) {
			t.Errorf("message %q does not name %q", st.Message(), p)
		}
	}
	t.Logf("%v: %s", st.Code(), st.Message())
}

func csrCount(s *caServer, result string) float64 {
	return counter(s, "meshfed_ca_csr_total", result)
}

func counter(s *caServer, name, result string) float64 {
	mfs, err := s.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestCreateCertificate runs the certificate API against real remote
// apiservers: real tokens from TokenRequest, reviewed by their own cluster.
func TestCreateCertificate(t *testing.T) {
	f := startFleet(t)
	c1, c2 := f.cluster("cluster-1"), f.cluster("cluster-2")
	now := time.Now().Truncate(time.Second)
	clk := testingclock.NewFakeClock(now)
	s := startCA(t, f, caConfig{
		authn:  ca.AuthenticatorOptions{CacheTTL: -1}, // every request reviewed
		server: ca.ServerOptions{Clock: clk},
	})
	ctx := t.Context()
	token := c1.token(t, "demo", "echo", []string{"istio-ca"}, nil)

	t.Run("signs the token's identity", func(t *testing.T) {
		csr, key := newCSR(t, nil, nil)
		resp, err := s.request(ctx, "cluster-1", token, csr, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.CertChain) != 2 {
			t.Errorf("chain of %d elements, want [leaf, root] for a self-signed root", len(resp.CertChain))
		}
		leaf, mid, roots := parseChain(t, resp.CertChain)
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != echoID {
			t.Errorf("URI SANs %v, want [%s]", leaf.URIs, echoID)
		}
		if !key.PublicKey.Equal(leaf.PublicKey) {
			t.Error("leaf is not for the CSR's key")
		}
		if resp.CertChain[len(resp.CertChain)-1] != string(s.keys.RootsPEM()) {
			t.Error("last element is not the roots")
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.keys.Roots(), Intermediates: mid,
				CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("leaf does not chain to the CA's root for %v: %v", usage, err)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mid, CurrentTime: now}); err != nil {
			t.Errorf("leaf does not chain to the root it came with: %v", err)
		}
		if got := leaf.NotAfter.Sub(now); got != time.Hour {
			t.Errorf("lifetime %v, want the requested 1h", got)
		}
	})

	t.Run("lifetime defaults and cap", func(t *testing.T) {
		for _, tc := range []struct {
			ask, want time.Duration
		}{{0, 24 * time.Hour}, {100 * time.Hour, 24 * time.Hour}, {10 * time.Minute, 10 * time.Minute}} {
			csr, _ := newCSR(t, nil, nil)
			resp, err := s.request(ctx, "cluster-1", token, csr, tc.ask)
			if err != nil {
				t.Fatal(err)
			}
			leaf, _, _ := parseChain(t, resp.CertChain)
			if got := leaf.NotAfter.Sub(now); got != tc.want {
				t.Errorf("asked %v: lifetime %v, want %v", tc.ask, got, tc.want)
			}
		}
	})

	t.Run("CSR asking for another identity gets the token's", func(t *testing.T) {
		csr, _ := newCSR(t, []string{"spiffe://cluster.local/ns/kube-system/sa/admin"}, []string{"kubernetes.default"})
		resp, err := s.request(ctx, "cluster-1", token, csr, 0)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _, _ := parseChain(t, resp.CertChain)
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != echoID || len(leaf.DNSNames) != 0 {
			t.Errorf("SANs URIs=%v DNS=%v, want only %s", leaf.URIs, leaf.DNSNames, echoID)
		}
	})

	t.Run("token of another cluster", func(t *testing.T) {
		csr, _ := newCSR(t, nil, nil)
		_, err := s.request(ctx, "cluster-2", token, csr, 0)
		wantCode(t, err, codes.Unauthenticated, "token rejected", "cluster-2")
	})

	t.Run("each cluster's own tokens", func(t *testing.T) {
		csr, _ := newCSR(t, nil, nil)
		resp, err := s.request(ctx, "cluster-2", c2.token(t, "demo", "echo", []string{"istio-ca"}, nil), csr, 0)
		if err != nil {
			t.Fatal(err)
		}
		if leaf, _, _ := parseChain(t, resp.CertChain); leaf.URIs[0].String() != echoID {
			t.Errorf("URI %v, want %s", leaf.URIs[0], echoID)
		}
	})

	t.Run("wrong audience", func(t *testing.T) {
		csr, _ := newCSR(t, nil, nil)
		_, err := s.request(ctx, "cluster-1", c1.token(t, "demo", "echo", []string{"something-else"}, nil), csr, 0)
		wantCode(t, err, codes.Unauthenticated, "audience", "something-else")
	})

	t.Run("forged token", func(t *testing.T) {
		csr, _ := newCSR(t, nil, nil)
		_, err := s.request(ctx, "cluster-1", forgedJWT(t, now), csr, 0)
		wantCode(t, err, codes.Unauthenticated, "token rejected", "cluster-1")
	})

	// An expired token cannot be made here: the apiserver issues tokens for
	// ten minutes at least and decides expiry by its own clock. A token
	// bound to a Secret that is then deleted is what the apiserver
	// invalidates instead, by the same path (claims validation).
	t.Run("revoked token: bound Secret deleted", func(t *testing.T) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "echo-binding", Namespace: "demo"}}
		if err := c1.ctrl.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		bound := c1.token(t, "demo", "echo", []string{"istio-ca"}, &authenticationv1.BoundObjectReference{
			Kind: "Secret", APIVersion: "v1", Name: sec.Name, UID: sec.UID})
		if err := c1.ctrl.Delete(ctx, sec); err != nil {
			t.Fatal(err)
		}
		// The apiserver learns of the deletion from its own informer, a
		// moment later; until then it still vouches for the token (CI once
		// caught it in that moment). Wait for its own TokenReview to refuse
		// the token, so that the CA is asked only once it must refuse too:
		// asked earlier, it would rightly sign and cache the review.
		waitRevoked(t, c1, bound)
		csr, _ := newCSR(t, nil, nil)
		_, err := s.request(ctx, "cluster-1", bound, csr, 0)
		wantCode(t, err, codes.Unauthenticated, "cluster-1")
	})

	t.Run("missing credentials and unknown cluster", func(t *testing.T) {
		csr, _ := newCSR(t, nil, nil)
		_, err := s.request(ctx, "", token, csr, 0)
		wantCode(t, err, codes.Unauthenticated, "ClusterID")
		_, err = s.request(ctx, "cluster-1", "", csr, 0)
		wantCode(t, err, codes.Unauthenticated, "authorization")
		_, err = s.request(ctx, "cluster-9", token, csr, 0)
		wantCode(t, err, codes.Unauthenticated, `unknown cluster "cluster-9"`)
	})

	t.Run("bad CSR", func(t *testing.T) {
		_, err := s.request(ctx, "cluster-1", token, []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), 0)
		wantCode(t, err, codes.InvalidArgument, "certificate signing request")
	})

	t.Run("metrics", func(t *testing.T) {
		for result, want := range map[string]float64{"signed": 6, "unauthenticated": 7, "invalid": 1, "error": 0} {
			if got := csrCount(s, result); got != want {
				t.Errorf("meshfed_ca_csr_total{result=%q} = %v, want %v", result, got, want)
			}
		}
		if n := testutil.CollectAndCount(s.reg, "meshfed_ca_sign_duration_seconds"); n != 1 {
			t.Errorf("sign duration histogram: %d series", n)
		}
	})
}

// TestReviewCache checks that a successful review is answered from the
// cache until it expires by the injected clock, and never past the token's
// own expiry.
func TestReviewCache(t *testing.T) {
	f := startFleet(t)
	c1 := f.cluster("cluster-1")
	start := time.Now()

	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		stillHit time.Duration // elapsed time at which the entry is still fresh
		expired  time.Duration // elapsed time at which it is gone
		recached bool          // whether the new review is cached again
	}{
		{"expires after CacheTTL", time.Minute, 59 * time.Second, time.Minute, true},
		// The token is valid 600s from its issue: a longer CacheTTL is cut
		// to the token's expiry, and a review of a token that has expired
		// by the hub's clock (though not yet by the apiserver's) is not
		// cached at all.
		{"never past the token's expiry", time.Hour, 590 * time.Second, 601 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(start)
			s := startCA(t, f, caConfig{authn: ca.AuthenticatorOptions{CacheTTL: tc.ttl, Clock: clk}})
			token := c1.token(t, "demo", "echo", []string{"istio-ca"}, nil)
			ask := func(wantHits, wantMisses float64) {
				t.Helper()
				csr, _ := newCSR(t, nil, nil)
				if _, err := s.request(t.Context(), "cluster-1", token, csr, 0); err != nil {
					t.Fatal(err)
				}
				hits, misses := counter(s, "meshfed_ca_token_review_cache_total", "hit"), counter(s, "meshfed_ca_token_review_cache_total", "miss")
				if hits != wantHits || misses != wantMisses {
					t.Errorf("at +%v: cache hits %v misses %v, want %v and %v", clk.Since(start), hits, misses, wantHits, wantMisses)
				}
			}
			ask(0, 1)
			ask(1, 1)
			clk.SetTime(start.Add(tc.stillHit))
			ask(2, 1)
			clk.SetTime(start.Add(tc.expired))
			ask(2, 2)
			if tc.recached {
				ask(3, 2)
			} else {
				ask(2, 3)
			}
		})
	}

	t.Run("failures are not cached", func(t *testing.T) {
		s := startCA(t, f, caConfig{})
		bad := forgedJWT(t, start)
		for range 2 {
			csr, _ := newCSR(t, nil, nil)
			_, err := s.request(t.Context(), "cluster-1", bad, csr, 0)
			wantCode(t, err, codes.Unauthenticated)
		}
		if h, m := counter(s, "meshfed_ca_token_review_cache_total", "hit"), counter(s, "meshfed_ca_token_review_cache_total", "miss"); h != 0 || m != 2 {
			t.Errorf("hits %v misses %v, want 0 and 2", h, m)
		}
	})
}

// forgedJWT is a well-formed service account JWT for demo/echo with the
// right audience and a random signature.
func forgedJWT(t testing.TB, now time.Time) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	sig := make([]byte, 256)
	if _, err := rand.Read(sig); err != nil {
		t.Fatal(err)
	}
	claims := `{"aud":["istio-ca"],"exp":` + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + `,"iat":` + strconv.FormatInt(now.Unix(), 10) +
		`,"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:demo:echo",` +
		`"kubernetes.io":{"namespace":"demo","serviceaccount":{"name":"echo","uid":"00000000-0000-0000-0000-000000000000"}}}`
	return enc([]byte(`{"alg":"RS256","kid":"forged"}`)) + "." + enc([]byte(claims)) + "." + enc(sig)
}

// The context of a request bounds the review; a caller that gives up gets
// an error at once.
func TestAuthenticateCanceled(t *testing.T) {
	f := startFleet(t)
	a, err := ca.NewAuthenticator(ca.AuthenticatorOptions{Clusters: f})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := a.Authenticate(ctx, "cluster-1", forgedJWT(t, time.Now())); err == nil || ca.IsUnauthenticated(err) {
		t.Errorf("canceled: %v, want a review failure", err)
	}
}

// waitRevoked polls c's own TokenReview until it no longer authenticates
// token.
func waitRevoked(t *testing.T, c *remoteCluster, token string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr, err := c.kube.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{"istio-ca"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token review: %v", err)
		}
		if !tr.Status.Authenticated {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the apiserver still authenticates a token whose bound Secret was deleted 30s ago")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
