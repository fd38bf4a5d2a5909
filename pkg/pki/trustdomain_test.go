package pki

import (
	"errors"
	"flag"
	"io"
	"testing"
)

func TestTrustDomain(t *testing.T) {
	for _, td := range []TrustDomain{"cluster.local", "a", "mesh_1-prod.example"} {
		if err := td.Validate(); err != nil {
			t.Errorf("%q: %v", td, err)
		}
	}
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	for _, td := range []TrustDomain{"", "Cluster.local", "a/b", "a:1", "spiffe://a", TrustDomain(long)} {
		if err := td.Validate(); !errors.Is(err, ErrInvalidTrustDomain) {
			t.Errorf("%q: %v, want ErrInvalidTrustDomain", td, err)
		}
	}
	if got := TrustDomain("example.org").WorkloadID("ns1", "sa1").String(); got != "spiffe://example.org/ns/ns1/sa/sa1" {
		t.Errorf("WorkloadID = %s", got)
	}
	if DefaultTrustDomain.String() != "cluster.local" {
		t.Errorf("DefaultTrustDomain = %s", DefaultTrustDomain)
	}
}

// A TrustDomain is a flag value: Set validates and keeps the old value on
// error.
func TestTrustDomainFlag(t *testing.T) {
	td := DefaultTrustDomain
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&td, "trust-domain", "")
	if err := fs.Parse([]string{"-trust-domain", "Bad/Domain"}); err == nil || td != DefaultTrustDomain {
		t.Fatalf("bad value: err %v, value %q", err, td)
	}
	if err := fs.Parse([]string{"-trust-domain", "example.org"}); err != nil || td != "example.org" {
		t.Fatalf("good value: err %v, value %q", err, td)
	}
}
