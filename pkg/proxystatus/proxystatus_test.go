package proxystatus

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/testutil"
)

func TestCompute(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   TypeStatus
		want Status
	}{
		{"nothing sent", TypeStatus{}, StatusNotSent},
		{"requested only", TypeStatus{TypeURL: ClusterTypeURL}, StatusNotSent},
		{"sent, no answer", TypeStatus{Sent: "1", SentNonce: "1"}, StatusStale},
		{"acked", TypeStatus{Sent: "1", SentNonce: "1", Acked: "1", AckedNonce: "1"}, StatusSynced},
		{"newer sent", TypeStatus{Sent: "2", SentNonce: "2", Acked: "1", AckedNonce: "1"}, StatusStale},
		{"nacked", TypeStatus{Sent: "2", SentNonce: "2", Acked: "1", AckedNonce: "1", Nack: "bad", NackVersion: "2"}, StatusError},
		{"nacked, newer sent", TypeStatus{Sent: "3", SentNonce: "3", Acked: "1", AckedNonce: "1", Nack: "bad", NackVersion: "2"}, StatusError},
		{"nacked first response", TypeStatus{Sent: "1", SentNonce: "1", Nack: "bad"}, StatusError},
	} {
		if got := tc.ts.Compute(); got != tc.want {
			t.Errorf("%s: Compute() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStatusStrings(t *testing.T) {
	// Istio's spelling, which tooling and habits depend on.
	for s, want := range map[Status]string{
		StatusSynced: "SYNCED", StatusNotSent: "NOT SENT", StatusStale: "STALE", StatusError: "ERROR",
	} {
		if string(s) != want {
			t.Errorf("%q, want %q", s, want)
		}
	}
}

func TestShortType(t *testing.T) {
	for _, short := range append(TableTypes(), TypeSDS) {
		if got := ShortType(TypeURL(short)); got != short {
			t.Errorf("ShortType(TypeURL(%q)) = %q", short, got)
		}
	}
	const other = "type.googleapis.com/example.Thing"
	if ShortType(other) != other || TypeURL(other) != other {
		t.Errorf("unknown type URL not kept as is")
	}
}

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// fixture is a small fleet: every state, a proxy with no Istio node ID, one
// name in two clusters, and an extra type.
func fixture() []Record {
	synced := func(url, v, n string, sent, acked float64) TypeStatus {
		return TypeStatus{TypeURL: url, Sent: v, SentNonce: n, Acked: v, AckedNonce: n,
			Status: StatusSynced, SentAt: at(sent), AckedAt: at(acked)}
	}
	return []Record{
		{
			Proxy: "sidecar~10.1.0.7~client-5f6d.demo~demo.svc.cluster.local", Name: "client-5f6d.demo",
			Cluster: "cluster-1", Replica: "hub-0", Version: "1.85.0", Connected: at(0), LastChange: at(2.5),
			Types: map[string]TypeStatus{
				TypeCDS: synced(ClusterTypeURL, "3", "7", 1, 1.002),
				TypeLDS: synced(ListenerTypeURL, "2", "5", 1, 1.003),
				TypeRDS: synced(RouteTypeURL, "2", "6", 1, 1.004),
				TypeEDS: {TypeURL: EndpointTypeURL, Sent: "9", SentNonce: "12", Acked: "8", AckedNonce: "10",
					Nack:        "cluster outbound|8080||echo.demo.svc.cluster.local: duplicate endpoint 10.2.0.4:9000",
					NackVersion: "9", Status: StatusError, SentAt: at(2.5), AckedAt: at(2)},
			},
		},
		{
			Proxy: "sidecar~10.2.0.9~client-5f6d.demo~demo.svc.cluster.local", Name: "client-5f6d.demo",
			Cluster: "cluster-2", Replica: "hub-1", Version: "1.85.0", Connected: at(0.5), LastChange: at(3),
			Types: map[string]TypeStatus{
				TypeCDS: synced(ClusterTypeURL, "3", "4", 1, 1.01),
				TypeLDS: synced(ListenerTypeURL, "2", "2", 1, 1.01),
				TypeEDS: {TypeURL: EndpointTypeURL, Sent: "10", SentNonce: "9", Acked: "9", AckedNonce: "8",
					Status: StatusStale, SentAt: at(3), AckedAt: at(2)},
			},
		},
		{
			Proxy: "sidecar~10.1.0.3~api-0.shop~shop.svc.cluster.local", Name: "api-0.shop",
			Cluster: "cluster-1", Replica: "hub-1", Version: "1.28.1", Connected: at(1), LastChange: at(1.5),
			Types: map[string]TypeStatus{
				TypeCDS:  synced(ClusterTypeURL, "3", "1", 1, 1.1),
				TypeLDS:  synced(ListenerTypeURL, "2", "2", 1, 1.1),
				TypeRDS:  synced(RouteTypeURL, "2", "3", 1, 1.2),
				TypeEDS:  synced(EndpointTypeURL, "8", "4", 1, 1.3),
				TypeECDS: {TypeURL: ExtensionConfigTypeURL, Status: StatusNotSent},
				TypeSDS:  synced(SecretTypeURL, "1", "5", 1.4, 1.5),
			},
		},
		{
			Proxy: "my-grpc-client", Name: "my-grpc-client", Replica: "hub-0", Connected: at(1),
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got)
}

func TestWriteTableGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, fixture()); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.golden", buf.Bytes())

	buf.Reset()
	if err := WriteTable(&buf, nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "table_empty.golden", buf.Bytes())
}

func TestWriteDetailGolden(t *testing.T) {
	for name, r := range map[string]Record{
		"detail_error.golden": fixture()[0],
		"detail_extra.golden": fixture()[2],
		"detail_bare.golden":  fixture()[3],
	} {
		var buf bytes.Buffer
		if err := WriteDetail(&buf, r); err != nil {
			t.Fatal(err)
		}
		golden(t, name, buf.Bytes())
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	recs := fixture()
	// A status left empty is filled in.
	ts := recs[1].Types[TypeEDS]
	ts.Status = ""
	recs[1].Types[TypeEDS] = ts
	if err := WriteJSON(&buf, recs); err != nil {
		t.Fatal(err)
	}
	golden(t, "proxies.json", buf.Bytes())
	if recs[1].Types[TypeEDS].Status != "" {
		t.Fatal("WriteJSON modified its input")
	}

	var doc JSONDocument
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := fixture()
	Sort(want)
	if !reflect.DeepEqual(doc.Proxies, want) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v", doc.Proxies, want)
	}
}

func TestSize(t *testing.T) {
	small := Record{Proxy: "p"}
	big := fixture()[0]
	if small.Size() <= 0 || big.Size() <= small.Size() {
		t.Fatalf("Size: small %d, big %d", small.Size(), big.Size())
	}
	js, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	// An approximation, but of the right order.
	if s := big.Size(); s < len(js)/3 || s > len(js)*3 {
		t.Errorf("Size %d, JSON %d bytes", s, len(js))
	}
}
