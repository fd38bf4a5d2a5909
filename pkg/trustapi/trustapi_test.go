package trustapi

import "testing"

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
