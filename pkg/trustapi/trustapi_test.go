package trustapi

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestBundle(t *testing.T) {
	a := Root{TrustDomain: "a", Fingerprint: "bb", PEM: "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----"}
	b := Root{TrustDomain: "b", Fingerprint: "aa", PEM: "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"}
	x, y := NewBundle([]Root{a, b, a}), NewBundle([]Root{b, a})
	if x.Version != y.Version || len(x.Roots) != 2 || x.Roots[0].Fingerprint != "aa" {
		t.Fatalf("bundles differ: %+v %+v", x, y)
	}
	if NewBundle([]Root{a}).Version == x.Version {
		t.Error("different root sets share a version")
	}
	want := "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n"
	if got := string(x.PEM()); got != want {
		t.Errorf("PEM = %q", got)
	}
	m, err := Encode(x)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(m)
	if err != nil || got.Version != x.Version || len(got.Roots) != 2 || got.Roots[1] != a {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if len(NewBundle(nil).Roots) != 0 || NewBundle(nil).Roots == nil {
		t.Error("empty bundle must have an empty, non-nil root list")
	}
}

// FuzzDecode: whatever the hub's trust stream carries, decoding it never
// panics, and what decodes encodes and decodes to the same bundle.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"roots":"-----BEGIN CERTIFICATE-----"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(wrapperspb.Bytes(data))
		if err != nil {
			return
		}
		m, err := Encode(b)
		if err != nil {
			t.Fatalf("a decoded bundle does not encode: %v", err)
		}
		again, err := Decode(m)
		if err != nil || !reflect.DeepEqual(again, b) {
			t.Fatalf("bundle %+v decodes again as %+v (%v)", b, again, err)
		}
	})
}
