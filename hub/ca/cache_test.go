package ca

import (
	"errors"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/pkg/pki"
)

func TestReviewCacheLRU(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := newReviewCache(2)
	a, b, d := newReviewKey("c1", "a"), newReviewKey("c1", "b"), newReviewKey("c1", "d")
	idA := Identity{Cluster: "c1", Namespace: "ns", ServiceAccount: "a"}
	c.put(a, idA, now.Add(time.Minute))
	c.put(b, Identity{Cluster: "c1", Namespace: "ns", ServiceAccount: "b"}, now.Add(time.Minute))
	if _, ok := c.get(a, now); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	c.put(d, Identity{Cluster: "c1", Namespace: "ns", ServiceAccount: "d"}, now.Add(time.Minute))
	if _, ok := c.get(b, now); ok {
		t.Error("b, the least recently used, was not evicted")
	}
	if id, ok := c.get(a, now); !ok || id != idA {
		t.Errorf("a = %v %v", id, ok)
	}
	if c.len() != 2 {
		t.Errorf("len %d, want 2", c.len())
	}
	if _, ok := c.get(a, now.Add(time.Minute)); ok {
		t.Error("a served at its expiry")
	}
	if c.len() != 1 {
		t.Errorf("expired entry kept: len %d", c.len())
	}
}

func TestReviewKeyPerCluster(t *testing.T) {
	c := newReviewCache(10)
	now := time.Unix(1_700_000_000, 0)
	c.put(newReviewKey("c1", "tok"), Identity{Cluster: "c1"}, now.Add(time.Minute))
	if _, ok := c.get(newReviewKey("c2", "tok"), now); ok {
		t.Error("a review by cluster c1 answered for c2")
	}
}

func TestDisabledCache(t *testing.T) {
	c := newReviewCache(0)
	now := time.Unix(1_700_000_000, 0)
	c.put(newReviewKey("c1", "tok"), Identity{}, now.Add(time.Minute))
	if c.len() != 0 {
		t.Error("a disabled cache stored an entry")
	}
}

func TestTokenExpiry(t *testing.T) {
	for _, tc := range []struct {
		token string
		want  int64
		ok    bool
	}{
		{"eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjE3MDAwMDAwMDB9.c2ln", 1_700_000_000, true},
		{"eyJhbGciOiJSUzI1NiJ9.eyJleHAiOiJzb29uIn0.c2ln", 0, false}, // "exp":"soon"
		{"eyJhbGciOiJSUzI1NiJ9.e30.c2ln", 0, false},                 // {}
		{"not-a-jwt", 0, false},
		{"a.!!!.c", 0, false},
	} {
		got, ok := tokenExpiry(tc.token)
		if ok != tc.ok || (ok && got.Unix() != tc.want) {
			t.Errorf("tokenExpiry(%q) = %v %v, want %v %v", tc.token, got.Unix(), ok, tc.want, tc.ok)
		}
	}
}

func TestIdentityFromUser(t *testing.T) {
	for user, want := range map[string]string{
		"system:serviceaccount:demo:echo":      "c/demo/echo",
		"system:serviceaccount:demo":           "",
		"system:serviceaccount:demo:echo:x":    "",
		"system:serviceaccount::echo":          "",
		"system:serviceaccount:demo:Echo":      "",
		"system:serviceaccount:de/mo:echo":     "",
		"kubernetes-admin":                     "",
		"system:serviceaccounts:demo:echo":     "",
		"system:serviceaccount:demo:echo/../x": "",
	} {
		id, ok := identityFromUser("c", user)
		if got := map[bool]string{true: id.String()}[ok]; got != want {
			t.Errorf("%q: %q, want %q", user, got, want)
		}
	}
}

func TestRejectionCause(t *testing.T) {
	for reason, want := range map[string]error{
		"[invalid bearer token, service account token has expired]":                ErrTokenExpired,
		`token audiences ["x"] is invalid for the target audiences ["istio-ca"]`:   ErrWrongAudience,
		"[invalid bearer token, square/go-jose: error in cryptographic primitive]": ErrTokenRejected,
		"": ErrTokenRejected,
	} {
		if err := rejection("c1", reason); !errors.Is(err, want) || !IsUnauthenticated(err) {
			t.Errorf("%q: %v, want %v", reason, err, want)
		}
	}
}

func TestServingCertRotation(t *testing.T) {
	start := time.Unix(1_750_000_000, 0)
	root, err := pki.NewCA("root", 365*24*time.Hour, start)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := root.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := KeysFromPEM(root.CertPEM, keyPEM, nil, nil, start)
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakePassiveClock(start)
	c := &servingCert{source: keys, clock: clk, ttl: time.Hour, dns: []string{"meshfed-hub.istio-system.svc"}}
	first, err := c.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Leaf.DNSNames[0] != "meshfed-hub.istio-system.svc" {
		t.Errorf("DNS names %v", first.Leaf.DNSNames)
	}
	clk.SetTime(start.Add(29 * time.Minute))
	if again, _ := c.get(nil); again != first {
		t.Error("re-issued before half-life")
	}
	clk.SetTime(start.Add(30 * time.Minute))
	if next, _ := c.get(nil); next == first {
		t.Error("not re-issued at half-life")
	}
}
