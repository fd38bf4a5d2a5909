package trust

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// The bundle's roots as /debug/trustz shows them: RFC 3339 in UTC, a
// retirement only when one is due, and an empty bundle as an empty list.
func TestTrustz(t *testing.T) {
	east := time.FixedZone("east", 3*3600)
	got := Trustz([]federation.Root{
		{TrustDomain: "cluster.local", Fingerprint: "ab", Source: "hub-0", PEM: []byte("pem"),
			NotAfter: time.Date(2030, 1, 1, 3, 0, 0, 0, east), RetireAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{TrustDomain: "other.local", Fingerprint: "cd", Source: "hub-1", PEM: []byte("pem2"),
			NotAfter: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)},
	})
	want := debugdoc.Trustz{Roots: []debugdoc.TrustzRoot{
		{TrustDomain: "cluster.local", Fingerprint: "ab", Source: "hub-0",
			NotAfter: "2030-01-01T00:00:00Z", RetireAt: "2027-01-01T00:00:00Z", PEM: "pem"},
		{TrustDomain: "other.local", Fingerprint: "cd", Source: "hub-1", NotAfter: "2031-01-01T00:00:00Z", PEM: "pem2"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Trustz = %+v, want %+v", got, want)
	}
	raw, err := json.Marshal(Trustz(nil))
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"roots":[]}` {
		t.Errorf("empty bundle: %s", raw)
	}
}
